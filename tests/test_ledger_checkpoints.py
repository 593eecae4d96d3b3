"""Signed ledger checkpoints: a rolled-back journal is refused at start, and shows as a fork.

The attack (issue 21): the operator copies the curator's journal, lets a session spend a
row's whole LDP budget (3 rewards on row 0, row budget 3), restores the copy and restarts
the curator, which would serve row 0 three more times. Every Welcome and End now carries
the ledger's head, signed with the frame; the curator keeps its last head outside the
journal and refuses the restored journal; with that file deleted too, `pobo audit` over
the modelers' transcripts of the sessions before and after finds the fork.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import shutil
from dataclasses import asdict
from pathlib import Path

import msgpack
import pytest

from pobo.parties.checkpoints import HeadFile, LedgerBehind
from pobo.parties.journal import Journal, JournalError
from pobo.protocol.channel import Channel
from pobo.protocol.checkpoint import GENESIS_HEAD, Checkpoint, forks
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import PeerError, PolicyViolation, ProtocolError
from pobo.protocol.messages import NO_LEDGER_HEAD, End, LedgerHead, Welcome
from pobo.protocol.ledger import LOCAL, Budget, Entry, PrivacyBudgetExceeded
from pobo.protocol.policy import CURATOR, LDP_REWARD, MODELER, PRIVATE, Boundary
from pobo.protocol.signing import ZERO, Link, open_frame, seal
from pobo.protocol.transcript import read_transcript
from pobo.cli import main as pobo_main
from pobo.session import (
    RunConfig, Signing, curate, open_channel, optimise, prepare_service,
)
from pobo.transport.inproc import pipe_pair

CONFIG = RunConfig(T=3, seed=0, timeout=10.0, options={"grid": 8}, ldp_epsilon=1.0,
                   ldp_row_budget=3.0)
CLI = ["synthetic", "--grid", "8", "--seed", "0", "--T", "3", "--ldp-eps", "1",
       "--ldp-row-budget", "3"]
SIGNING = Signing.throwaway()


class OneRow:
    """A modeler strategy that asks the same row every time (the attacker's)."""

    name = "one-row"

    def __init__(self, row: int) -> None:
        self.row = row

    def select(self, gp, t, rng) -> int:
        return self.row


def _channels(out: Path, curator_timeout: float = 10.0, modeler_out: Path | None = None):
    """(the curator's channel, the modeler's), signed, over in-process queues."""
    cpipe, mpipe = pipe_pair()
    return (open_channel(cpipe, CURATOR, False, out, curator_timeout, signer=SIGNING.curator,
                         peer_key=SIGNING.modeler_keys),
            open_channel(mpipe, MODELER, False, modeler_out, 10.0, signer=SIGNING.modeler,
                         peer_key=SIGNING.curator_key))


async def _session(service, out: Path):
    session = service.new_session()
    cchan, mchan = _channels(out, modeler_out=out)
    try:
        return await asyncio.gather(curate(cchan, session, out, verbose=False),
                                    optimise(mchan, 1, out=out))
    finally:
        cchan.close()
        mchan.close()


def _serve(journal: Path, out: Path, row: int, monkeypatch) -> dict:
    """Start a curator on `journal` (a restart), run one session asking `row` T times,
    stop it; the modeler's result."""
    import pobo.session as session_module

    monkeypatch.setattr(session_module, "make_strategy", lambda name, scale=None: OneRow(row))
    j = Journal(journal)
    try:
        _, modeler = asyncio.run(_session(prepare_service(CONFIG, journal=j), out))
    finally:
        j.close()
    return modeler


def _restore(copy: Path, journal: Path) -> None:
    """Put the copied journal back in place, as the operator would."""
    for suffix in ("-wal", "-shm"):
        Path(f"{journal}{suffix}").unlink(missing_ok=True)
    shutil.copy(copy, journal)


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = pobo_main(args)
    return status, out.getvalue(), err.getvalue()


def _keys(folder: Path) -> Path:
    keys = folder / "keys"
    keys.mkdir(exist_ok=True)
    (keys / "curator.sign_public").write_text(SIGNING.curator.public_hex + "\n")
    (keys / "modeler.sign_public").write_text(SIGNING.modeler.public_hex + "\n")
    return keys


def _heads(transcript: Path) -> list[tuple[str, LedgerHead]]:
    """(kind, head) of every Welcome and End the curator sent, from a modeler transcript."""
    out = []
    for record in read_transcript(transcript):
        if record.kind in ("welcome", "end") and record.dir == "recv":
            out.append((record.kind, decode(open_frame(record.frame).body).ledger))
    return out


def test_a_rolled_back_journal_is_refused_at_start_and_else_shows_as_a_fork(tmp_path,
                                                                           monkeypatch):
    journal, copy = tmp_path / "curator.journal", tmp_path / "copy.journal"
    before = _serve(journal, tmp_path / "before", 5, monkeypatch)
    assert before["status"] == "ok"
    shutil.copy(journal, copy)  # the operator's copy (the curator is stopped: no WAL left)
    spent = _serve(journal, tmp_path / "spent", 0, monkeypatch)
    assert spent["status"] == "ok" and spent["queries"] == [0, 0, 0]
    with pytest.raises(PeerError) as refused:  # row 0's budget is spent: the guarantee
        _serve(journal, tmp_path / "refused", 0, monkeypatch)
    assert refused.value.code == "privacy_budget"

    _restore(copy, journal)
    rows = Journal(copy).ledger_rows()
    with pytest.raises(LedgerBehind) as behind:
        prepare_service(CONFIG, journal=Journal(journal))
    text = str(behind.value)
    assert "\n" not in text and "behind the ledger head" in text and "holds only 4" in text
    assert Journal(journal).ledger_rows() == rows  # refused before anything was charged
    status, _, err = _cli(["curator", *CLI, "--bind", "tcp://127.0.0.1:0", "--journal", str(journal),
                           "--out", str(tmp_path / "cli")])
    errors = [line for line in err.splitlines() if "error" in line]
    assert status == 1 and len(errors) == 1 and "LedgerBehind" in errors[0], err

    Path(f"{journal}.head").unlink()  # the operator deletes the head file too: the
    with pytest.raises(LedgerBehind, match="head file .* is missing"):  # journal noted it
        prepare_service(CONFIG, journal=Journal(journal))
    status, out, _ = _cli(["ledger", "--journal", str(journal)])
    assert status == 2 and "no head file was given or found" in out, out
    import sqlite3
    db = sqlite3.connect(journal, isolation_level=None)  # ... and edits the journal's note
    db.execute("DELETE FROM meta WHERE key = 'ledger_head_file'")
    db.close()
    again = _serve(journal, tmp_path / "again", 0, monkeypatch)
    assert again["status"] == "ok" and again["queries"] == [0, 0, 0]  # served: unseen here
    transcripts = [tmp_path / name / "modeler.transcript" for name in ("before", "spent")]
    status, out, _ = _cli(["audit", *map(str, transcripts), "--keys", str(_keys(tmp_path))])
    assert status == 0, out  # the sessions before the rollback are one chain
    status, out, _ = _cli(["audit", *map(str, transcripts),
                           str(tmp_path / "again" / "modeler.transcript"),
                           "--keys", str(_keys(tmp_path))])
    forked = [line for line in out.splitlines() if "ledger fork" in line]
    assert status == 2 and forked, out
    assert all("again" in line for line in forked), forked  # on the session after it
    assert out.count("signatures: verified") == 3  # the commitments are the curator's


def test_a_sequence_of_sessions_across_restarts_audits_clean_and_commits_to_its_spending(
        tmp_path, monkeypatch):
    journal = tmp_path / "curator.journal"
    paths = []
    for i, row in enumerate((1, 2, 3)):
        out = tmp_path / f"s{i}"
        assert _serve(journal, out, row, monkeypatch)["status"] == "ok"
        paths += [out / "curator.transcript", out / "modeler.transcript"]
        heads = _heads(out / "modeler.transcript")
        # the projection, then 3 LDP rewards per session: each End commits to them
        assert [(k, h.entries) for k, h in heads] == [("welcome", 1 + 3 * i),
                                                      ("end", 4 + 3 * i)]
        assert heads[1][1].max_row_epsilon == pytest.approx(3.0)
    status, out, _ = _cli(["audit", *map(str, paths), "--keys", str(_keys(tmp_path)), "--json"])
    reports = json.loads(out)
    assert status == 0 and all(r["ok"] for r in reports), out
    assert [len(r["ledger_heads"]) for r in reports] == [2] * 6
    # `pobo ledger` names the head the last End committed to
    status, out, _ = _cli(["ledger", "--journal", str(journal), "--json"])
    assert status == 0 and json.loads(out)["chain"] == {"entries": heads[1][1].entries,
                                                        "head": heads[1][1].chain}


@pytest.mark.parametrize("journalled", ["none", "a thousandth"])
def test_a_curator_that_journals_less_than_its_rewards_prove_fails_the_audit(
        journalled, tmp_path, monkeypatch):
    """A dishonest curator (a review's attack): it sends LDP rewards but journals no charge
    for them, or each at a thousandth of its epsilon, and signs an End whose head commits
    to that. Each transcript alone proves more was charged (its Welcome's head plus one
    report per reward): both fail the audit, whatever the curator's own record says."""
    from pobo.parties.curator import Curator

    admit = Curator._admit

    def cheap(self, index, reserved=0):
        entries = admit(self, index, reserved)
        return [] if journalled == "none" else [
            Entry(e.mechanism, e.epsilon / 1000, e.delta, e.scope, e.row) for e in entries]
    monkeypatch.setattr(Curator, "_admit", cheap)
    out = tmp_path / "s"
    assert _serve(tmp_path / "curator.journal", out, 1, monkeypatch)["status"] == "ok"
    paths = [out / "curator.transcript", out / "modeler.transcript"]
    heads = _heads(out / "modeler.transcript")
    assert heads[-1][1].max_row_epsilon < 1.0  # what the dishonest End signed
    status, text, _ = _cli(["audit", *map(str, paths), "--keys", str(_keys(tmp_path)),
                            "--json"])
    reports = json.loads(text)
    assert status != 0
    for report in reports[:2]:
        assert any("charges were left out of the curator's ledger" in v
                   for v in report["violations"]), report["violations"]


def test_a_curator_that_never_charges_the_release_it_announces_fails_the_audit(
        tmp_path, monkeypatch):
    """A review's attack: a curator stored its projection without its charge, so every
    head it signed committed to 0 entries, central epsilon 0, while its Welcome announced
    the projection's (epsilon, delta) and its Dataset released Z: both transcripts
    audited OK. Every head must hold the mechanisms the Welcome announces."""
    store = Journal.store_projection

    def free(self, key, release, report, entries, budget):
        return store(self, key, release, report, [], budget)
    monkeypatch.setattr(Journal, "store_projection", free)
    out = tmp_path / "s"
    assert _serve(tmp_path / "curator.journal", out, 1, monkeypatch)["status"] == "ok"
    paths = [out / "curator.transcript", out / "modeler.transcript"]
    status, text, _ = _cli(["audit", *map(str, paths), "--keys", str(_keys(tmp_path)),
                            "--json"])
    assert status != 0
    for report in json.loads(text)[:2]:
        assert any("the release was not charged to the curator's ledger" in v
                   for v in report["violations"]), report["violations"]


def test_a_projection_stored_without_its_charge_is_named_by_pobo_ledger(tmp_path,
                                                                          monkeypatch):
    """A review's attack: after an honest session charged a projection at epsilon 3, a
    dishonest curator prepared another at epsilon 2 and charged nothing; the heads'
    totals were covered by the first charge, so the audit and `pobo ledger` passed. Each
    stored projection must have its own charge."""
    from dataclasses import replace

    from pobo.auditing import journal_findings

    journal = tmp_path / "curator.journal"
    j = Journal(journal)
    try:
        prepare_service(CONFIG, journal=j)  # honest: charged
        assert journal_findings(j, None, [])[0] == []
        store = Journal.store_projection

        def free(self, key, release, report, entries, budget):
            return store(self, key, release, report, [], budget)
        monkeypatch.setattr(Journal, "store_projection", free)
        prepare_service(replace(CONFIG, epsilon=2.0, new_release=True),
                        journal=j)  # a second Z, uncharged
        found, _ = journal_findings(j, None, [])
    finally:
        j.close()
    assert len(found) == 1 and "prepared at epsilon 2, delta" in found[0] \
        and "stored without its charge" in found[0], found


def _charged_session(release_epsilon: float, end: LedgerHead, resume: str = ""):
    """A curator transcript's messages (a Hello, a Welcome committing to the projection
    only, one noisy Release of (`release_epsilon`, 1e-3), an End) and their heads."""
    from types import SimpleNamespace

    from pobo.protocol.messages import Hello, Release
    from pobo.protocol.transcript import Record

    welcome = SimpleNamespace(params=SimpleNamespace(mechanisms=()))
    start = LedgerHead(1, "a" * 64, 3.0, 1e-5, 0.0, 0.0)
    messages = [(Record(0, 0.0, "hello", "", "recv"), Hello(4, "m", resume)),
                (Record(1, 1.0, "welcome", "", "sent"), welcome),
                (Record(2, 2.0, "release", "", "sent"),
                 Release("noisy", release_epsilon, 1e-3, 3, 0.1, 1.0)),
                (Record(3, 3.0, "end", "", "sent"), End("closed", end))]
    heads = [Checkpoint("s", "welcome", 1.0, start, "t", 1),
             Checkpoint("s", "end", 3.0, end, "t", 3)]
    return messages, welcome, heads


@pytest.mark.parametrize("end, left_out", [
    (LedgerHead(2, "b" * 64, 4.0, 1e-5 + 2e-3, 0.0, 0.0), None),  # a noisy release: 2 eps
    (LedgerHead(2, "b" * 64, 3.5, 1e-5 + 2e-3, 0.0, 0.0), "central epsilon"),
    (LedgerHead(2, "b" * 64, 4.0, 1e-5 + 1e-3, 0.0, 0.0), "central delta"),
    (LedgerHead(1, "b" * 64, 4.0, 1e-5 + 2e-3, 0.0, 0.0), "entries"),
])
def test_a_closing_head_below_the_welcome_plus_the_release_is_named(end, left_out):
    from pobo.protocol.audit import undercharged

    messages, welcome, heads = _charged_session(0.5, end)
    found = undercharged(messages, welcome, heads)
    if left_out is None:
        assert found == []
    else:
        assert len(found) == 1 and f"commits to {left_out} " in found[0], found
    # a transcript that starts with a resume proves nothing this way: its rewards may be
    # resends of answers charged on an earlier connection
    messages, welcome, heads = _charged_session(0.5, end, resume="s")
    assert undercharged(messages, welcome, heads) == []


def _tampered(tmp_path: Path, journal: Path, sql: str) -> Path:
    """A copy of `journal` (and its head file) with `sql` run on it."""
    import sqlite3

    folder = tmp_path / f"tampered{len(list(tmp_path.glob('tampered*')))}"
    folder.mkdir()
    copy = folder / journal.name
    with contextlib.closing(sqlite3.connect(journal)) as db:  # the WAL folded in first
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(journal, copy)
    shutil.copy(f"{journal}.head", f"{copy}.head")
    if Path(f"{journal}.projections").is_dir():  # Z's files, for a curator to start on it
        shutil.copytree(f"{journal}.projections", f"{copy}.projections")
    with contextlib.closing(sqlite3.connect(copy)) as db:
        db.execute(sql)
        db.commit()
    return copy


@pytest.fixture(scope="module")
def two_sessions(tmp_path_factory):
    """A journal of two LDP sessions (rows 1 and 2) and their four transcripts."""
    tmp = tmp_path_factory.mktemp("two")
    journal, paths = tmp / "curator.journal", []
    with pytest.MonkeyPatch.context() as monkeypatch:
        for i, row in enumerate((1, 2)):
            out = tmp / f"s{i}"
            assert _serve(journal, out, row, monkeypatch)["status"] == "ok"
            paths += [out / "curator.transcript", out / "modeler.transcript"]
    return journal, paths


@pytest.mark.parametrize("sql, found", [
    ("UPDATE ledger SET epsilon = 0.5 WHERE n = 2", "entries were edited, removed or reordered"),
    ("DELETE FROM ledger WHERE n = (SELECT max(n) FROM ledger)", "the journal holds only 6"),
    ("UPDATE ledger SET time = time + 1 WHERE n = 3", "entries were edited, removed or"),
    ("INSERT INTO ledger (session, mechanism, epsilon, delta, scope, row, time) VALUES "
     "('', 'ctl-laplace', -8.0, 0.0, 'local', 1, 0.0)", "n=8 has epsilon -8.0"),
    ("UPDATE ledger SET epsilon = 'abc' WHERE n = 3", "n=3 has epsilon 'abc'"),
    ("UPDATE ledger SET delta = 1.5 WHERE n = 3", "n=3 has delta 1.5"),
    ("UPDATE ledger SET scope = 'nowhere' WHERE n = 3", "n=3 has scope 'nowhere'"),
])
def test_pobo_ledger_checks_the_journal_against_every_head_the_curator_committed_to(
        two_sessions, tmp_path, sql, found):
    """A review's attack: an edited journal passed `pobo ledger` (it printed the edited
    ledger, exit 0); only a restarted curator noticed. Now `pobo ledger` checks every
    entry and that the journal holds each head the curator committed to (its head file
    and every Welcome's and End's in the transcripts given), chain and totals: exit 2,
    naming what differs. The untouched journal passes."""
    journal, paths = two_sessions
    status, out, _ = _cli(["ledger", "--journal", str(journal), *map(str, paths)])
    assert status == 0 and "the journal holds all 9 ledger head(s)" in out, out
    copy = _tampered(tmp_path, journal, sql)
    status, out, err = _cli(["ledger", "--journal", str(copy), *map(str, paths)])
    assert status == 2 and found in out, out + err
    status, out, _ = _cli(["ledger", "--journal", str(copy)])  # the head file alone
    assert status == 2 and "NOT as the curator committed to" in out, out
    status, out, _ = _cli(["ledger", "--journal", str(copy), "--json", *map(str, paths)])
    assert status == 2 and json.loads(out)["checked"]["problems"]


def test_pobo_ledger_holds_the_journal_to_the_reports_the_transcripts_prove(
        two_sessions, tmp_path, monkeypatch):
    """A review's attacks on `pobo ledger`: LDP reports booked on another row (the
    answered rows kept their whole budget), and reports removed after a crash, past the
    last head kept, passed. Each report a transcript proves must be a local entry of its
    session on its row."""
    from pobo.auditing import uncharged_in_journal
    from pobo.parties.curator import Curator
    from pobo.protocol.audit import decoded_messages

    journal, paths = two_sessions
    copy = _tampered(tmp_path, journal, "DELETE FROM ledger WHERE n = (SELECT max(n) FROM "
                                        "ledger WHERE scope = 'local')")
    j = Journal(copy)
    try:  # (the heads would name this one too; the proof needs none)
        found = uncharged_in_journal(j, decoded_messages(paths[3]), paths[3])
    finally:
        j.close()
    assert len(found) == 1 and "sent 3 LDP report(s) on row 2; the journal holds 2" in \
        found[0], found
    admit = Curator._admit

    def elsewhere(self, index, reserved=0):
        return [Entry(e.mechanism, e.epsilon, e.delta, e.scope, 0)
                for e in admit(self, index, reserved)]
    monkeypatch.setattr(Curator, "_admit", elsewhere)
    out = tmp_path / "s"
    assert _serve(tmp_path / "dishonest.journal", out, 1, monkeypatch)["status"] == "ok"
    status, text, _ = _cli(["ledger", "--journal", str(tmp_path / "dishonest.journal"),
                            str(out / "modeler.transcript")])
    assert status == 2 and "booked on other rows" in text, text


def test_a_head_is_read_from_one_state_of_a_journal_another_process_writes(
        two_sessions, tmp_path, monkeypatch):
    """A review's race: a head's count and chain were read, then its totals, in two reads;
    another curator process sharing the journal could commit a charge in between, and the
    head's totals then included an entry past its count (which `pobo ledger` now names).
    The head is read in one read transaction."""
    import sqlite3

    from pobo.parties.checkpoints import LedgerChain, unheld_heads

    journal, _ = two_sessions
    copy = _tampered(tmp_path, journal, "SELECT 1")
    j = Journal(copy)
    try:
        service = prepare_service(CONFIG, journal=j)
        current = LedgerChain.current

        def and_another_writes(self):
            counted = current(self)
            with contextlib.closing(sqlite3.connect(copy, timeout=5)) as other:
                other.execute("INSERT INTO ledger (session, mechanism, epsilon, delta, scope, "
                              "row, time) VALUES ('x', 'release:noisy', 2.0, 0.002, "
                              "'central', -1, 0.0)")
                other.commit()
            return counted
        monkeypatch.setattr(LedgerChain, "current", and_another_writes)
        head = service.checkpoint()
        monkeypatch.setattr(LedgerChain, "current", current)
        assert unheld_heads(j, [("head", head)]) == []  # its totals are its entries'
        assert service.checkpoint().entries == head.entries + 1
    finally:
        j.close()


def test_a_signed_head_whose_totals_differ_from_the_journal_is_named(two_sessions):
    """The chain matches but the totals a head carries do not (a curator that signed
    smaller totals than it charged): named, not passed."""
    from dataclasses import replace

    from pobo.auditing import journal_findings
    from pobo.protocol.audit import checkpoints, decoded_messages, role_of_messages

    journal, paths = two_sessions
    messages = decoded_messages(paths[3])
    end = [c for c in checkpoints(messages, role_of_messages(messages), "m") if c.kind == "end"]
    j = Journal(journal)
    try:
        from pobo.parties.checkpoints import unheld_heads
        assert unheld_heads(j, [("end", end[0].head)]) == []
        less = replace(end[0].head, max_row_epsilon=end[0].head.max_row_epsilon / 2)
        found = unheld_heads(j, [("end", less)])
        assert len(found) == 1 and "worst-off row epsilon" in found[0], found
        assert journal_findings(j, None, [])[0] == []
    finally:
        j.close()


def test_a_curator_refuses_to_start_on_a_journal_with_an_entry_no_mechanism_charges(
        two_sessions, tmp_path):
    """A negative epsilon refunds a row's budget; a curator started on it granted reports
    past the row budget, then died with an accountant's traceback. Refused at start, in
    one line naming the entry, before anything is charged (and before the head file's
    chain is hashed: a text in a number's place)."""
    journal, _ = two_sessions
    for sql, found in [
            ("INSERT INTO ledger (session, mechanism, epsilon, delta, scope, row, time) "
             "VALUES ('', 'ctl-laplace', -8.0, 0.0, 'local', 1, 0.0)", "n=8 has epsilon -8.0"),
            ("UPDATE ledger SET epsilon = 'abc' WHERE n = 3", "n=3 has epsilon 'abc'")]:
        copy = _tampered(tmp_path, journal, sql)
        j = Journal(copy)
        try:
            with pytest.raises(JournalError, match=found + ".*refusing to start"):
                prepare_service(CONFIG, journal=j)
        finally:
            j.close()


def test_the_head_is_the_documented_hash_chain_over_the_journal(tmp_path, monkeypatch):
    """PROTOCOL.md: head_0 = SHA-256('pobo ledger chain v1'), head_k = SHA-256(head_(k-1)
    || JSON [session, mechanism, eps.hex(), delta.hex(), scope, row, time.hex()]),
    recomputed here from the journal's rows by hand."""
    journal = tmp_path / "curator.journal"
    _serve(journal, tmp_path / "s", 4, monkeypatch)
    (_, end), = [(k, h) for k, h in _heads(tmp_path / "s" / "modeler.transcript") if k == "end"]
    j = Journal(journal)
    head = hashlib.sha256(b"pobo ledger chain v1").digest()
    assert head.hex() == GENESIS_HEAD
    rows = j._db.execute("SELECT session, mechanism, epsilon, delta, scope, row, time FROM "
                         "ledger ORDER BY n").fetchall()
    for session, mechanism, eps, delta, scope, row, time in rows:
        record = json.dumps([session, mechanism, eps.hex(), delta.hex(), scope, row,
                             time.hex()], separators=(",", ":")).encode()
        head = hashlib.sha256(head + record).digest()
    assert end.entries == len(rows) == 4 and end.chain == head.hex()
    assert (end.central_epsilon, end.max_row_epsilon) == (rows[0][2], 3.0)
    stored = json.loads(Path(f"{journal}.head").read_text())["head"]
    assert stored == {f: getattr(end, f) for f in stored}  # the file holds what was signed
    j.close()


@pytest.mark.parametrize("ledger, code", [
    ({"chain": "zz" * 32}, "malformed"),
    ({"chain": "AB" * 32}, "malformed"),
    ({"chain": "ab" * 31}, "malformed"),
    ({"chain": ""}, "malformed"),  # counts without a chain
    ({"entries": -1}, "malformed"),
    ({"central_epsilon": -1.0}, "malformed"),
    ({"chain": 7}, "malformed"),
    ({"extra": 1}, "malformed"),
    ("not a head", "malformed"),
])
async def test_a_garbled_head_in_a_welcome_is_a_typed_error(ledger, code):
    good = {"entries": 3, "chain": "ab" * 32, "central_epsilon": 1.0, "central_delta": 1e-5,
            "max_row_epsilon": 0.0, "max_row_delta": 0.0}
    cpipe, mpipe = pipe_pair()
    curator = Channel(cpipe, Boundary(PRIVATE, CURATOR), timeout=5)
    modeler = open_channel(mpipe, MODELER, False, None, 5.0)

    async def hostile_curator() -> None:
        await curator.recv()  # the Hello
        params = prepare_service(CONFIG).params
        body = msgpack.unpackb(encode(Welcome(3, "s" * 32, params)), raw=False)
        body["ledger"] = {**good, **ledger} if isinstance(ledger, dict) else ledger
        await cpipe.send(seal(msgpack.packb(body, use_bin_type=True),
                              Link("s" * 32, 0, ZERO, ZERO), None))

    with pytest.raises(ProtocolError) as refused:
        await asyncio.gather(optimise(modeler, 1), hostile_curator())
    assert refused.value.code.value == code, refused.value
    modeler.close()
    curator.close()


def test_a_modeler_end_carrying_a_head_is_refused_by_the_policy():
    boundary = Boundary(PRIVATE, CURATOR)
    with pytest.raises(PolicyViolation):
        boundary.incoming(End("done", LedgerHead(1, "ab" * 32, 0.0, 0.0, 0.0, 0.0)))
    boundary.incoming(End("done"))  # no head: fine
    assert End("done").ledger == NO_LEDGER_HEAD


def _point(session: str, kind: str, time: float, entries: int, chain: str,
           opened: float, record: int = 0) -> Checkpoint:
    return Checkpoint(session, kind, time, LedgerHead(entries, chain, 0.0, 0.0, 0.0, 0.0),
                      f"{session}.transcript", record, opened)


def test_forks_name_a_same_count_fork_and_a_count_that_goes_back_but_not_concurrency():
    a, b, c = "a" * 64, "b" * 64, "c" * 64
    chain = [_point("s1", "welcome", 1, 1, a, 0.5, 1), _point("s1", "end", 2, 4, b, 0.5, 9),
             _point("s2", "welcome", 3, 4, b, 2.5, 1), _point("s2", "end", 4, 7, c, 2.5, 9)]
    assert forks(chain) == []
    # the same number of entries, another head
    assert len(forks(chain + [_point("s3", "end", 9, 7, "d" * 64, 8)])) == 1
    # a connection opened after s2's End was recorded, committing to fewer entries
    late = forks(chain + [_point("s3", "welcome", 5, 4, b, 4.5)])
    assert len(late) == 1 and "committed to 7" in late[0][1] and late[0][0].session == "s3"
    # a session that overlaps s2 (opened before s2's End) may hold an older head, even
    # one that arrives after s2's End (its Welcome was in flight)
    assert forks(chain + [_point("s3", "welcome", 3.5, 4, b, 3.2),
                          _point("s3", "end", 5, 8, "e" * 64, 3.2)]) == []
    assert forks(chain + [_point("s3", "welcome", 4.2, 4, b, 3.9)]) == []
    # within one transcript the count never goes back (an End below its own Welcome)
    assert len(forks([_point("s1", "welcome", 1, 5, a, 0.5, 1),
                      _point("s1", "end", 2, 3, b, 0.5, 9)])) == 1


def test_the_head_file_is_checked_typed_and_a_journal_ahead_of_it_starts(tmp_path):
    journal = tmp_path / "curator.journal"
    service = prepare_service(CONFIG, journal=Journal(journal))
    service.checkpoint()  # a Welcome's: the file now holds 1 entry
    session = service.new_session()
    session.curator().respond(1, 2)  # charged after the last checkpoint (then killed)
    service.journal.close()
    again = prepare_service(CONFIG, journal=Journal(journal))  # ahead of the file: fine
    latest = again.checkpoint()
    assert latest.entries == 2
    again.journal.close()
    head = Path(f"{journal}.head")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp
    for content, says in (("{not json", "unreadable"),
                          (json.dumps({"dataset": again.digest, "head": {"entries": 1}}),
                           "not a ledger head"),
                          (json.dumps({"dataset": "ff" * 32, "head": asdict(latest)}),
                           "another dataset")):
        head.write_text(content)
        with pytest.raises(JournalError) as bad:
            prepare_service(CONFIG, journal=Journal(journal))
        assert says in str(bad.value) and "\n" not in str(bad.value)
    status, _, err = _cli(["curator", *CLI, "--bind", "tcp://127.0.0.1:0", "--ledger-head", str(head),
                           "--out", str(tmp_path / "cli")])
    assert status == 1 and "--ledger-head needs --journal" in err



def test_the_chain_read_in_chunks_finds_every_prefix_and_follows_appends(tmp_path,
                                                                         monkeypatch):
    from pobo.parties.checkpoints import LedgerChain
    from pobo.protocol.checkpoint import chain_head, entry_record
    from pobo.protocol.ledger import LOCAL, Budget, Entry

    journal = Journal(tmp_path / "j.db")
    for row in range(7):
        journal.charge("s", [Entry("ctl-laplace", 1.0, 0.0, LOCAL, row)], Budget())
    records = [entry_record(*fields) for _, *fields in journal.ledger_rows()]
    prefixes = [chain_head(records[:k]) for k in range(8)]
    monkeypatch.setattr(LedgerChain, "CHUNK", 2)
    chain = LedgerChain(journal)
    assert chain.current() == (7, prefixes[7])
    assert [chain.head_at(k) for k in (3, 0, 7, 5)] == [prefixes[k] for k in (3, 0, 7, 5)]
    assert chain.head_at(8) is None
    journal.charge("t", [Entry("ctl-laplace", 1.0, 0.0, LOCAL, 0)], Budget())
    more = entry_record(*journal.ledger_rows(after=journal.ledger_rows()[-2][0])[0][1:])
    assert chain.current() == (8, chain_head([*records, more]))
    journal.close()


def test_a_head_file_that_cannot_be_written_refuses_the_session_typed_and_spends_nothing(
        tmp_path, monkeypatch):
    journal = tmp_path / "curator.journal"

    def full_disk(self, head):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(HeadFile, "write", full_disk)  # the first Welcome's head: 1 entry
    j = Journal(journal)
    service = prepare_service(CONFIG, journal=j)
    session, out = service.new_session(), tmp_path / "first"
    cpipe, mpipe = pipe_pair()
    cchan = open_channel(cpipe, CURATOR, False, out, 10.0)
    mchan = open_channel(mpipe, MODELER, False, out, 10.0)


    async def both():
        return await asyncio.gather(curate(cchan, session, out, verbose=False,
                                           raise_errors=False), optimise(mchan, 1),
                                    return_exceptions=True)

    curator, refused = asyncio.run(asyncio.wait_for(both(), 30))
    cchan.close(), mchan.close(), j.close()
    assert isinstance(refused, PeerError) and refused.code == "internal", refused
    assert "ledger head" in refused.peer_message
    assert curator["status"] == "failed" and "No space left" in curator["error"]
    assert [r[2] for r in Journal(journal).ledger_rows()] == ["gaussian-rows"]
    assert not Path(f"{journal}.head").exists()  # no query was answered, nothing else spent


def test_a_head_that_cannot_be_kept_at_the_end_is_not_sent(tmp_path, monkeypatch):
    journal = tmp_path / "curator.journal"
    writes = []

    def fail_second(self, head):
        writes.append(head)
        if len(writes) > 1:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(HeadFile, "write", fail_second)
    modeler = _serve(journal, tmp_path / "s", 1, monkeypatch)
    assert modeler["status"] == "ok" and modeler["ledger_head"] is None  # End came, no head
    kinds = [(k, h.entries) for k, h in _heads(tmp_path / "s" / "modeler.transcript")]
    assert kinds == [("welcome", 1), ("end", 0)]  # the End carries no head it could not keep


async def _vanishing_modeler(service, out: Path, rows: list[int]) -> dict:
    """A modeler that asks `rows` then goes silent (no End): the curator's session ends
    on its timeout, interrupted. The curator's result."""
    from pobo.protocol.messages import PROTOCOL_VERSION, Hello, Query
    session = service.new_session()
    cchan, mchan = _channels(out, curator_timeout=0.5)
    served = asyncio.ensure_future(curate(cchan, session, out, verbose=False,
                                          raise_errors=False))
    try:
        await mchan.send(Hello(PROTOCOL_VERSION, "vanish", sign_key=mchan.sign_key))
        await mchan.recv()  # Welcome
        await mchan.recv()  # Dataset
        for seq, row in enumerate(rows, 1):
            await mchan.send(Query(seq, row))
            await mchan.recv()
        return await asyncio.wait_for(served, 20)
    finally:
        served.cancel()
        cchan.close()
        mchan.close()


def _erase_entries(journal: Path, keep: int) -> None:
    """The operator's edit: every ledger entry past the first `keep` deleted, the per-row
    totals made to agree with what is left (so that only the head can tell)."""
    import sqlite3
    db = sqlite3.connect(journal, isolation_level=None)
    db.execute("DELETE FROM ledger WHERE n > ?", (keep,))
    db.execute("DELETE FROM row_ledger")
    db.execute("INSERT INTO row_ledger SELECT row, SUM(epsilon), SUM(delta), COUNT(*) "
               "FROM ledger WHERE scope = 'local' GROUP BY row")
    db.close()


def test_entries_charged_by_a_session_that_ends_without_an_end_cannot_be_erased_unseen(
        tmp_path):
    """The head file was written at a session's Welcome and at its End only: a modeler
    that vanished after two LDP rewards left them committed to by no head, and the
    operator could delete them and serve the row past its budget. Every session's end
    now keeps the head: the erased journal is LedgerBehind at the next start."""
    journal = tmp_path / "curator.journal"
    j = Journal(journal)
    service = prepare_service(CONFIG, journal=j)
    before = len(j.ledger_rows())
    result = asyncio.run(_vanishing_modeler(service, tmp_path / "s1", [0, 0]))
    assert result["status"] == "interrupted" and len(result["queries"]) == 2
    assert len(j.ledger_rows()) == before + 2
    assert HeadFile(Path(f"{journal}.head"), service.digest).read().entries == before + 2
    j.close()
    _erase_entries(journal, before)
    with pytest.raises(LedgerBehind):
        prepare_service(CONFIG, journal=Journal(journal))


def test_per_row_totals_edited_on_disk_are_refused_at_start_and_never_spend(tmp_path,
                                                                           monkeypatch):
    """The budget check read a row's spend from its running total (`row_ledger`), which
    no head covers: setting it to 0 let row 0 be served three more times past its budget
    of 3. The budget is now checked against the entries themselves, and a curator refuses
    to start on totals that disagree with them."""
    import sqlite3
    journal = tmp_path / "curator.journal"
    spent = _serve(journal, tmp_path / "spent", 0, monkeypatch)
    assert spent["queries"] == [0, 0, 0]  # row 0's budget of 3 is spent
    db = sqlite3.connect(journal, isolation_level=None)
    db.execute("UPDATE row_ledger SET epsilon = 0 WHERE row = 0")
    db.close()
    with pytest.raises(JournalError, match="row 0's running totals"):
        prepare_service(CONFIG, journal=Journal(journal))
    j = Journal(journal)  # a curator already running when the total was edited
    assert j.row_spent(0) == (3.0, 0.0)
    with pytest.raises(PrivacyBudgetExceeded):
        j.charge("s", [Entry(LDP_REWARD, 1.0, 0.0, LOCAL, 0)], Budget(row_epsilon=3.0))
    j.close()


def test_erased_charges_of_a_session_whose_curator_died_show_in_the_audit(tmp_path,
                                                                        monkeypatch):
    """A curator killed mid-session keeps no head at its end: the entries that session
    charged after its Welcome could be deleted and the next start would not see it. The
    journal's own answers now show it (a start refuses, pobo ledger names it); with the
    answers taken out too, the session's own transcript proves them (its Welcome's count
    plus one entry per LDP report), so the audit of it beside a later session whose
    Welcome commits to fewer entries names the erasure."""
    from pobo.parties.service import CuratorService
    journal = tmp_path / "curator.journal"
    j = Journal(journal)
    service = prepare_service(CONFIG, journal=j)
    before = len(j.ledger_rows())
    monkeypatch.setattr(CuratorService, "keep_head", lambda self, sid: None)  # killed -9
    result = asyncio.run(_vanishing_modeler(service, tmp_path / "s1", [0, 0]))
    assert result["status"] == "interrupted"
    j.close()
    _erase_entries(journal, before)
    # the journal shows it itself: two LDP answers on row 0, no charge left for them
    with pytest.raises(LedgerBehind, match="answered row 0 2 time.* holds 0 charge"):
        prepare_service(CONFIG, journal=Journal(journal))
    status, out, _ = _cli(["ledger", "--journal", str(journal)])
    assert status == 2 and "answered row 0 2 time(s)" in out, out
    import sqlite3
    db = sqlite3.connect(journal, isolation_level=None)  # the answers taken out as well
    db.execute("DELETE FROM answers WHERE session = ?", (result["session"],))
    db.close()
    j = Journal(journal)
    asyncio.run(_session(prepare_service(CONFIG, journal=j), tmp_path / "s2"))  # it starts
    j.close()
    transcripts = [str(tmp_path / name / "curator.transcript") for name in ("s1", "s2")]
    status, out, _ = _cli(["audit", *transcripts, "--keys", str(_keys(tmp_path))])
    erased = [line for line in out.splitlines() if "taken out" in line]
    assert status == 2 and erased, out
    assert f"showed {before + 2} charged" in erased[0]


def test_pobo_ledger_reads_a_head_file_as_the_curator_does(two_sessions, tmp_path):
    """A head file that is no head, or another dataset's, is named (exit 2) in the words a
    curator refusing to start on it would use (parties.checkpoints.HeadFile)."""
    journal, _ = two_sessions
    garbage = tmp_path / "garbage.head"
    garbage.write_text('{"x": 1}')
    status, out, _ = _cli(["ledger", "--journal", str(journal), "--ledger-head", str(garbage)])
    assert status == 2 and f"ledger head file {garbage} is not a ledger head" in out, out
    other = tmp_path / "other.head"
    data = json.loads(Path(f"{journal}.head").read_text())
    other.write_text(json.dumps({**data, "dataset": "0" * 64}))
    status, out, _ = _cli(["ledger", "--journal", str(journal), "--ledger-head", str(other)])
    assert status == 2 and "is the head of another dataset" in out, out


def test_a_head_file_moved_with_ledger_head_is_the_one_pobo_ledger_reads(tmp_path,
                                                                         monkeypatch):
    """The journal notes the head file of every head written, not only the first: a
    head file moved (and given with --ledger-head) is the one `pobo ledger` then reads
    without being told (a review: the note kept the first path, and pobo ledger called
    the moved file missing)."""
    import pobo.session as session_module

    journal, first, moved = tmp_path / "curator.journal", tmp_path / "a" / "H", tmp_path / "b" / "H"
    for row, (where, out) in enumerate(((first, "s1"), (moved, "s2")), start=1):
        monkeypatch.setattr(session_module, "make_strategy",
                            lambda name, scale=None, row=row: OneRow(row))
        if where == moved:
            moved.parent.mkdir()
            first.rename(moved)
        j = Journal(journal)
        try:
            asyncio.run(_session(prepare_service(CONFIG, journal=j, head_file=where),
                                 tmp_path / out))
        finally:
            j.close()
    status, out, _ = _cli(["ledger", "--journal", str(journal)])
    assert status == 0 and f"head file: {moved}" in out, out
