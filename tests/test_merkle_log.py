"""The dataset ledger as an append-only Merkle log (RFC 9162): a rewritten history is refused.

Two attacks a linear hash chain let through (issue 45, item 5):
- the curator's folder (journal and head file together) restored from a backup: the
  curator starts silently and a row spends its budget twice. A modeler that has seen a
  later head now refuses the session with a typed error, and its transcript says why.
- the journal rolled back and padded past the old entry count with a session of the
  operator's own: the later heads commit to more entries, so `forks` saw nothing. Now
  the Welcome's consistency proof from the head the modeler saw fails, and `pobo audit`
  over the earlier and later transcripts exits 2 naming the inconsistency.
"""
from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

import pytest

from pobo.parties.journal import Journal
from pobo.parties.ledger_log import LedgerLog, SeenHeads
from pobo.protocol.checkpoint import Checkpoint, entry_record, extends, inconsistencies
from pobo.protocol.codec import decode
from pobo.protocol.errors import LedgerInconsistent, PolicyViolation, ProtocolError
from pobo.protocol.merkle import (
    EMPTY_ROOT, MerkleTree, consistency_proof, inclusion_proof, leaf_hash, root_of,
    verify_consistency, verify_inclusion,
)
from pobo.protocol.messages import PROTOCOL_VERSION, End, Hello, LedgerHead, Welcome
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
from pobo.protocol.signing import open_frame
from pobo.protocol.transcript import read_transcript
from pobo.session import curate, optimise, prepare_service
from tests.test_ledger_checkpoints import CONFIG, OneRow, _channels, _cli, _keys

# RFC 6962 / 9162 reference data (certificate-transparency's merkle tree tests): the leaves,
# the root of every prefix, and published proofs
CT_LEAVES = [bytes.fromhex(x) for x in ("", "00", "10", "2021", "3031", "40414243",
                                       "5051525354555657",
                                       "606162636465666768696a6b6c6d6e6f")]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_CONSISTENCY = {
    (1, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (6, 8): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
    (2, 5): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"],
}
CT_INCLUSION = {  # (0-based leaf, size) -> path
    (0, 8): CT_CONSISTENCY[(1, 8)],
    (5, 8): ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}


def test_the_rfc_reference_roots_and_proofs():
    leaves = [leaf_hash(x) for x in CT_LEAVES]
    tree = MerkleTree()
    assert tree.root() == EMPTY_ROOT
    for leaf in leaves:
        tree.append(leaf)
    assert [tree.root(n).hex() for n in range(9)] == CT_ROOTS
    roots = [bytes.fromhex(r) for r in CT_ROOTS]
    for (m, n), proof in CT_CONSISTENCY.items():
        assert [p.hex() for p in tree.consistency(m, n)] == proof
        assert verify_consistency(m, n, [bytes.fromhex(p) for p in proof], roots[m], roots[n])
    for (i, n), path in CT_INCLUSION.items():
        assert [p.hex() for p in tree.inclusion(i, n)] == path
        assert verify_inclusion(i, n, leaves[i], [bytes.fromhex(p) for p in path], roots[n])


@pytest.mark.parametrize("floor", [0, 1, 3])
def test_every_proof_verifies_and_every_tampering_fails(floor):
    """Every size pair 0 <= m <= n <= 40 and every leaf, with the tree keeping its leaves
    or reading them back (floor > 0); a proof against a wrong root, a wrong size, a
    changed node or a dropped node fails (the adversary's edits)."""
    rng = random.Random(9162)
    leaves = [leaf_hash(rng.randbytes(rng.randint(0, 12))) for _ in range(40)]
    reads = []
    tree = MerkleTree(floor, lambda a, b: reads.append((a, b)) or leaves[a:b])
    for n in range(1, 41):
        tree.append(leaves[n - 1])
        root = root_of(leaves[:n])
        assert tree.root() == root and tree.root(n - 1) == root_of(leaves[:n - 1])
        for m in range(0, n + 1):
            proof = tree.consistency(m, n)
            assert proof == consistency_proof(m, n, lambda a, b: root_of(leaves[a:b]))
            assert verify_consistency(m, n, proof, root_of(leaves[:m]), root)
            if 0 < m < n:
                assert not verify_consistency(m, n, proof, root_of(leaves[1:m + 1]), root)
                assert not verify_consistency(m, n, proof, root_of(leaves[:m]), leaves[0])
                if m + 1 < n:  # the same proof claimed from another size
                    assert not verify_consistency(m + 1, n, proof, root_of(leaves[:m + 1]),
                                                  root)
                assert not verify_consistency(m, n, proof[:-1], root_of(leaves[:m]), root)
                bad = [bytes(32)] + proof[1:]
                assert not verify_consistency(m, n, bad, root_of(leaves[:m]), root)
        for i in range(n):
            path = tree.inclusion(i, n)
            assert verify_inclusion(i, n, leaves[i], path, root)
            assert not verify_inclusion(i, n, leaves[(i + 1) % 40], path, root) or n == 1
    if floor:  # a block read back holds at most 2^floor leaves, aligned
        assert reads and all(b - a == 1 << floor and a % (1 << floor) == 0 for a, b in reads)
    with pytest.raises(ValueError):
        inclusion_proof(5, 5, tree.hash_range)


def _records(journal: Journal) -> list[bytes]:
    return [leaf_hash(entry_record(*row[1:])) for row in journal.ledger_rows()]


def test_ledger_log_over_a_journal(tmp_path, monkeypatch):
    """The curator's log over a real journal: its root is MTH of the entry records, its
    proofs verify from every earlier size, it follows entries another process appended,
    reads back at most one block of 2^floor entries per proof, and its log id is the
    journal's (a copy of the journal keeps it; a new journal has another)."""
    from pobo.parties import ledger_log

    monkeypatch.setattr(LedgerLog, "CHUNK", 7)
    path = tmp_path / "j.journal"
    journal = Journal(path)
    prepare_service(CONFIG, journal=journal)  # the projection's charge: one entry
    log = LedgerLog(journal, floor=2)
    other = Journal(path)  # another process sharing the journal
    sizes = []
    for i in range(5):
        _serve_in(journal, tmp_path / f"s{i}", i, monkeypatch)  # 3 LDP entries each
        entries, _ = log.current()
        sizes.append(entries)
        leaves = _records(other)
        assert entries == len(leaves) and log.root() == root_of(leaves).hex()
        for m in range(entries + 1):
            proof = [bytes.fromhex(p) for p in log.consistency(m, entries)]
            assert verify_consistency(m, entries, proof, root_of(leaves[:m]),
                                      root_of(leaves))
    assert sizes == [4, 7, 10, 13, 16]
    assert ledger_log.log_id(other) == log.log and len(log.log) == 32
    other.close()
    journal.close()
    shutil.copy(path, tmp_path / "copy.journal")
    assert LedgerLog(Journal(tmp_path / "copy.journal")).log == log.log
    assert LedgerLog(Journal(tmp_path / "new.journal")).log != log.log


def _serve_in(journal: Journal, out: Path, row: int, monkeypatch, heads=None,
              modeler_out: Path | None = None):
    """One session on `journal` asking `row` T times; (curator result, modeler result or
    the exception it raised)."""
    import pobo.session as session_module

    monkeypatch.setattr(session_module, "make_strategy", lambda name, scale=None: OneRow(row))
    service = prepare_service(CONFIG, journal=journal)

    async def run():
        session = service.new_session()
        cchan, mchan = _channels(out, modeler_out=modeler_out or out)
        try:
            return await asyncio.gather(curate(cchan, session, out, verbose=False),
                                        optimise(mchan, 1, out=modeler_out or out,
                                                 heads=heads),
                                        return_exceptions=True)
        finally:
            cchan.close()
            mchan.close()
    return asyncio.run(run())


def _restart(journal_path: Path, out: Path, row: int, monkeypatch, heads=None):
    """Start the curator on `journal_path` (a restart), run one session, stop it."""
    journal = Journal(journal_path)
    try:
        return _serve_in(journal, out, row, monkeypatch, heads)
    finally:
        journal.close()


def _backup(journal: Path, to: Path) -> None:
    """Copy the curator's folder (its journal and the head file beside it), stopped."""
    to.mkdir()
    for name in (journal.name, f"{journal.name}.head"):
        shutil.copy(journal.parent / name, to / name)


def _restore(backup: Path, journal: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{journal}{suffix}").unlink(missing_ok=True)
    for name in (journal.name, f"{journal.name}.head"):
        shutil.copy(backup / name, journal.parent / name)


def _sent_errors(transcript: Path) -> list:
    return [decode(open_frame(r.frame).body) for r in read_transcript(transcript)
            if r.kind == "error" and r.dir == "sent"]


def test_a_folder_restored_from_a_backup_is_refused_by_a_modeler_that_saw_later(
        tmp_path, monkeypatch):
    """Target (a): journal and head file restored together. The curator starts (its head
    file agrees with its journal); the modeler that saw the later head refuses with
    LedgerInconsistent before any query, and its transcript records the typed Error."""
    folder = tmp_path / "curator"
    folder.mkdir()
    journal = folder / "curator.journal"
    heads = SeenHeads(tmp_path / "home" / "ledger_heads.json")
    _, before = _restart(journal, tmp_path / "before", 5, monkeypatch, heads)
    assert before["status"] == "ok"
    _backup(journal, tmp_path / "backup")
    _, spent = _restart(journal, tmp_path / "spent", 0, monkeypatch, heads)
    assert spent["status"] == "ok" and spent["queries"] == [0, 0, 0]
    seen = spent["ledger_head"]
    assert seen["entries"] == 7 and len(seen["root"]) == 64

    _restore(tmp_path / "backup", journal)  # the operator restores the whole folder
    curator, refused = _restart(journal, tmp_path / "after", 0, monkeypatch, heads)
    assert isinstance(refused, LedgerInconsistent), refused
    text = str(refused)
    assert "\n" not in text and "commits to 4 entries, fewer than the 7" in text
    assert "rolled back" in text
    errors = _sent_errors(tmp_path / "after" / "modeler.transcript")
    assert [e.code for e in errors] == ["ledger_inconsistent"] and "fewer than the 7" in \
        errors[0].message  # the transcript says why
    records = list(read_transcript(tmp_path / "after" / "modeler.transcript"))
    assert not any(r.kind == "query" for r in records)  # nothing was asked: nothing spent
    kept = Journal(journal)
    assert len(kept.ledger_rows()) == 4  # the restored 4 entries, nothing charged after
    kept.close()
    # the store kept the later head: it never goes back
    assert heads.get(spent["sign_keys"]["curator"], seen["log"]).entries == 7


def test_a_rollback_padded_past_the_old_size_is_refused_and_fails_the_audit(
        tmp_path, monkeypatch):
    """Target (b): the journal rolled back (with its head file) and padded past the old
    entry count by the operator's own sessions. The victim's next Welcome commits to
    more entries than it saw, but no consistency proof links them: the modeler refuses,
    and `pobo audit` over the earlier and later transcripts exits 2 naming it."""
    folder = tmp_path / "curator"
    folder.mkdir()
    journal = folder / "curator.journal"
    victim = SeenHeads(tmp_path / "victim" / "ledger_heads.json")
    _, first = _restart(journal, tmp_path / "first", 5, monkeypatch, victim)
    assert first["status"] == "ok"
    _backup(journal, tmp_path / "backup")
    _, earlier = _restart(journal, tmp_path / "earlier", 0, monkeypatch, victim)
    assert earlier["status"] == "ok" and earlier["ledger_head"]["entries"] == 7
    _restore(tmp_path / "backup", journal)
    for i, row in enumerate((6, 7)):  # the operator pads: 4 -> 7 -> 10 entries
        _, pad = _restart(journal, tmp_path / f"pad{i}", row, monkeypatch)
        assert pad["status"] == "ok"
    _, later = _restart(journal, tmp_path / "later", 0, monkeypatch, victim)
    assert isinstance(later, LedgerInconsistent), later
    assert "does not extend the head of 7 entries" in str(later)
    assert "consistency proof fails" in _sent_errors(
        tmp_path / "later" / "modeler.transcript")[0].message

    keys = str(_keys(tmp_path))
    paths = [str(tmp_path / name / "modeler.transcript") for name in ("earlier", "later")]
    status, out, _ = _cli(["audit", *paths, "--keys", keys])
    lines = [line for line in out.splitlines() if "ledger inconsistent" in line]
    assert status == 2 and lines, out
    assert any("does not extend the head of 7 entries" in line for line in lines), lines
    # the honest history before the rollback audits clean
    status, out, _ = _cli(["audit", str(tmp_path / "first" / "modeler.transcript"),
                           paths[0], "--keys", keys])
    assert status == 0, out


def test_honest_sessions_across_restarts_link_by_proofs_and_audit_clean(tmp_path,
                                                                      monkeypatch):
    """Everything honest passes: each Welcome proves it extends the last head the modeler
    saw (another modeler's session charged entries in between), each End the Welcome's;
    the audit links every head and exits 0."""
    journal = tmp_path / "curator.journal"
    heads = SeenHeads(tmp_path / "heads.json")
    paths = []
    for i in range(3):
        out = tmp_path / f"s{i}"
        curator, modeler = _restart(journal, out, i + 1, monkeypatch, heads)
        assert modeler["status"] == "ok", modeler
        paths += [out / "curator.transcript", out / "modeler.transcript"]
        _, other = _restart(journal, tmp_path / f"o{i}", 9 + i, monkeypatch)  # no heads kept
        assert other["status"] == "ok"
        frames = {r.kind: decode(open_frame(r.frame).body)
                  for r in read_transcript(out / "modeler.transcript")
                  if r.kind in ("hello", "welcome", "end") and r.dir == "recv" or r.kind == "hello"}
        hello, welcome, end = frames["hello"], frames["welcome"], frames["end"]
        # the Hello names the last End's head; the other modeler charged 3 entries since
        assert hello.ledger_seen == (0 if i == 0 else 6 * i - 2)
        assert welcome.ledger.entries == 1 + 6 * i
        assert (len(welcome.consistency) > 0) == (i > 0)
        assert end.ledger.entries == 4 + 6 * i and len(end.consistency) > 0
    status, out, _ = _cli(["audit", *map(str, paths), "--keys", str(_keys(tmp_path))])
    assert status == 0 and "ledger inconsistent" not in out and "not all linked" not in out, out
    # `pobo ledger` names the root the last End committed to, and checks every head's
    import json
    status, out, _ = _cli(["ledger", "--journal", str(journal), *map(str, paths), "--json"])
    last = other["ledger_head"]  # the other modeler's last session's closing head
    assert status == 0 and json.loads(out)["merkle"] == {
        "entries": last["entries"], "root": last["root"], "log": end.ledger.log}
    assert last["entries"] == end.ledger.entries + 3
    assert _restart(journal, tmp_path / "last", 20, monkeypatch, heads)[1]["status"] == "ok"


def _head(n: int, leaves: list[bytes], log: str = "ab" * 16) -> LedgerHead:
    return LedgerHead(n, "c" * 64, 0.0, 0.0, 0.0, 0.0, root_of(leaves[:n]).hex(), log)


def _point(session, kind, time, head, proof_from=-1, proof=()):
    return Checkpoint(session, kind, time, head, f"{session}.transcript", 1, time - 0.5,
                      proof_from, tuple(p.hex() for p in proof))


def test_the_audit_names_each_inconsistency_and_links_honest_heads():
    leaves = [leaf_hash(bytes([i])) for i in range(12)]
    other = [leaf_hash(bytes([i, 1])) for i in range(12)]  # a rewritten history
    tree = MerkleTree()
    for leaf in leaves:
        tree.append(leaf)
    a = _point("a", "end", 1.0, _head(5, leaves))
    b = _point("b", "welcome", 2.0, _head(9, leaves), 5, tree.consistency(5, 9))
    assert inconsistencies([a, b]) == ([], [])
    forged = _point("b", "welcome", 2.0, _head(9, other), 5, tree.consistency(5, 9))
    found, _ = inconsistencies([a, forged])
    assert len(found) == 1 and "does not extend the head of 5 entries" in found[0][1]
    assert "session a's end" in found[0][1] and "session b's welcome" in found[0][1]
    twin = _point("c", "welcome", 3.0, _head(5, other))
    found, _ = inconsistencies([a, twin])
    assert len(found) == 1 and "both commit to 5 entries" in found[0][1]
    shorter = _point("c", "welcome", 3.0, _head(3, leaves), 5, ())
    assert "fewer than the 5" in inconsistencies([a, shorter])[0][0][1]
    unlinked = _point("d", "welcome", 3.0, _head(9, leaves))  # no proof asked for
    found, notes = inconsistencies([a, unlinked])
    assert found == [] and len(notes) == 1 and "not all linked" in notes[0]
    # two logs (two datasets of one curator key) are never compared
    assert inconsistencies([a, _point("e", "welcome", 3.0, _head(5, other, "cd" * 16))]) \
        == ([], [])


def test_extends_and_the_modeler_store(tmp_path):
    leaves = [leaf_hash(bytes([i])) for i in range(8)]
    tree = MerkleTree()
    for leaf in leaves:
        tree.append(leaf)
    proof = tuple(p.hex() for p in tree.consistency(3, 6))
    assert extends(_head(3, leaves), _head(6, leaves), 3, proof) is None
    assert extends(_head(3, leaves), _head(6, leaves), None, ()) is None  # none asked
    assert "no consistency proof" in extends(_head(3, leaves), _head(6, leaves), 2, proof)
    assert "fails" in extends(_head(3, leaves), _head(6, leaves), 3, proof[1:])
    store = SeenHeads(tmp_path / "h" / "heads.json")
    key = "ee" * 32
    store.keep(key, _head(6, leaves))
    store.keep(key, _head(3, leaves))  # a store never goes back
    assert store.get(key, "ab" * 16).entries == 6 and store.last(key).entries == 6
    with pytest.raises(LedgerInconsistent, match="fewer than the 6"):
        store.check(key, _head(5, leaves), None, ())
    store.check("ff" * 32, _head(5, leaves), None, ())  # another key: first contact
    (tmp_path / "h" / "heads.json").write_text("{not json")
    with pytest.raises(LedgerInconsistent, match="unreadable"):
        store.get(key, "ab" * 16)


def test_the_policy_refuses_malformed_merkle_fields():
    leaves = [leaf_hash(b"x")]
    with pytest.raises(ProtocolError, match="ledger_log"):
        Boundary(PRIVATE, CURATOR).incoming(Hello(PROTOCOL_VERSION, "m", ledger_log="zz",
                                                  ledger_seen=1))
    with pytest.raises(ProtocolError, match="ledger_log"):
        Boundary(PRIVATE, CURATOR).incoming(Hello(PROTOCOL_VERSION, "m", ledger_seen=3))
    with pytest.raises(PolicyViolation, match="consistency proof"):
        Boundary(PRIVATE, MODELER).outgoing(End("x", consistency=("00" * 32,)))
    head = _head(1, leaves)
    from pobo.protocol.checkpoint import check_head, check_proof
    check_head(head, "curator")
    with pytest.raises(ProtocolError, match="root"):
        check_head(LedgerHead(1, "c" * 64, 0.0, 0.0, 0.0, 0.0, "Z" * 64, "ab" * 16), "curator")
    with pytest.raises(ProtocolError, match="together"):
        check_head(LedgerHead(1, "c" * 64, 0.0, 0.0, 0.0, 0.0, "a" * 64, ""), "curator")
    with pytest.raises(ProtocolError, match="node hashes"):
        check_proof(("00" * 32,) * 129, head, "curator")
    with pytest.raises(ProtocolError, match="node hashes"):
        check_proof(("xyz",), head, "curator")


def test_pobo_ledger_names_a_signed_root_the_journal_does_not_hold(tmp_path, monkeypatch):
    """`pobo ledger`'s pass (unheld_heads) recomputes the Merkle root too: a head whose
    chain and totals the journal holds but whose root it does not is named."""
    from dataclasses import replace

    from pobo.parties.checkpoints import unheld_heads

    journal = tmp_path / "curator.journal"
    _, modeler = _restart(journal, tmp_path / "s", 1, monkeypatch)
    head = LedgerHead(**modeler["ledger_head"])
    j = Journal(journal)
    try:
        assert unheld_heads(j, [("end", head)]) == []
        found = unheld_heads(j, [("end", replace(head, root="0" * 64))])
    finally:
        j.close()
    assert len(found) == 1 and "Merkle root after 4 entries" in found[0], found


def test_a_version_5_transcript_still_audits(tmp_path, params, release):
    """A transcript kept from version 5 (no root, no proofs: its heads a chain only) audits
    clean under version 6's audit."""
    from pobo.protocol.audit import audit_session
    from tests.test_audit import _session_of_version

    asyncio.run(_session_of_version(tmp_path, 5, params, release))
    reports = audit_session(tmp_path / "curator.transcript", tmp_path / "modeler.transcript")
    assert PROTOCOL_VERSION == 6 and all(r.ok for r in reports), [r.violations for r in reports]


def test_sessions_alongside_do_not_refuse_each_other_and_a_forged_end_is_refused(tmp_path,
                                                                                  params):
    """Two sessions of one modeler at once: B's Hello named 5, A's End stored 10 meanwhile,
    B's Welcome commits to 9 with the proof from 5: accepted (checked against the head B
    named), and the store keeps 10. A closing End whose proof from the Welcome's head
    fails is refused; an honest one is kept."""
    from types import SimpleNamespace

    from pobo.parties.ledger_log import check_closing_head

    leaves = [leaf_hash(bytes([i])) for i in range(16)]
    other = [leaf_hash(bytes([i, 2])) for i in range(16)]
    tree = MerkleTree()
    for leaf in leaves:
        tree.append(leaf)
    key = "ee" * 32
    store = SeenHeads(tmp_path / "heads.json")
    store.keep(key, _head(5, leaves))
    named = store.last(key)
    store.keep(key, _head(10, leaves))  # session A's End, after B's Hello left
    proof = tuple(p.hex() for p in tree.consistency(5, 9))
    store.check(key, _head(9, leaves), 5, proof, named)
    with pytest.raises(LedgerInconsistent):  # without the named head: fewer than stored
        store.check(key, _head(9, leaves), 5, proof)
    store.keep(key, _head(9, leaves))
    assert store.last(key).entries == 10
    channel = SimpleNamespace(peer_key=key)
    welcome = Welcome(PROTOCOL_VERSION, "s", params, key, _head(9, leaves))
    forged = End("closed", _head(12, other), tuple(p.hex() for p in tree.consistency(9, 12)))
    with pytest.raises(LedgerInconsistent, match="closing End.*does not extend"):
        check_closing_head(channel, store, welcome, forged)
    honest = End("closed", _head(12, leaves), tuple(p.hex() for p in tree.consistency(9, 12)))
    check_closing_head(channel, store, welcome, honest)
    assert store.last(key).entries == 12


def test_the_ask_tell_client_refuses_a_curator_folder_restored_from_a_backup(tmp_path):
    """Target (a) through `pobo curator` processes and `ModelerClient` (its default store is
    the user's pobo home; here a file given): the third start, on the restored folder,
    is refused at connect with LedgerInconsistent, and the client's transcript says why."""
    import subprocess
    import sys

    from curator_process import CuratorProcess

    from pobo.client import ModelerClient
    from pobo.protocol.signing import load_signing_key, load_verify_key
    from pobo.session import Signing

    keys = tmp_path / "keys"
    made = subprocess.run([sys.executable, "-m", "pobo", "keys", str(keys)], check=False,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "curator"
    folder.mkdir()
    journal = folder / "curator.journal"
    signing = Signing(modeler=load_signing_key(keys / "modeler.sign_secret"),
                      curator_key=load_verify_key(keys / "curator.sign_public"))
    store = tmp_path / "home" / "ledger_heads.json"

    def start(name: str) -> CuratorProcess:
        curator = CuratorProcess(tmp_path / name, 2, [
            "--journal", str(journal), "--sessions", "1", "--ldp-eps", "1", "--seed", "3",
            "--sign-secret", str(keys / "curator.sign_secret"),
            "--sign-allow", str(keys / "allowed")])
        curator.wait_listening()
        return curator

    for name in ("first", "second"):
        curator = start(name)
        try:
            with ModelerClient.connect(curator.endpoint, out=tmp_path / f"m-{name}",
                                       signing=signing, ledger_heads=store) as client:
                client.query(3), client.query(4)
            assert curator.finish()["status"] == "ok"
        finally:
            curator.kill()
        if name == "first":
            _backup(journal, tmp_path / "backup")
    _restore(tmp_path / "backup", journal)
    curator = start("third")
    try:
        with pytest.raises(LedgerInconsistent, match="commits to 3 entries, fewer than the 5"):
            ModelerClient.connect(curator.endpoint, out=tmp_path / "m-third", signing=signing,
                                  ledger_heads=store)
    finally:
        curator.kill()
    errors = _sent_errors(tmp_path / "m-third" / "modeler.transcript")
    assert [e.code for e in errors] == ["ledger_inconsistent"]


def test_a_new_log_for_a_dataset_the_key_served_before_is_warned_of(tmp_path, monkeypatch,
                                                                    caplog):
    """A curator whose journal and head file were deleted starts a new ledger (a new log):
    nothing to check it against, so the session goes on, but the modeler says in its log
    that the key serves a new log for the same scenario and n. Another dataset's log of
    the same key is no such warning."""
    heads = SeenHeads(tmp_path / "heads.json")
    folder = tmp_path / "c"
    folder.mkdir()
    journal = folder / "curator.journal"
    assert _restart(journal, tmp_path / "a", 1, monkeypatch, heads)[1]["status"] == "ok"
    shutil.rmtree(folder)  # the operator deletes the curator's folder: a new ledger
    folder.mkdir()
    with caplog.at_level("WARNING"):
        _, fresh = _restart(journal, tmp_path / "b", 1, monkeypatch, heads)
    assert fresh["status"] == "ok"  # a new ledger is not a rewritten one: not refused
    warned = [r.getMessage() for r in caplog.records if "new ledger log" in r.getMessage()]
    assert len(warned) == 1 and "scenario synthetic, n = 64" in warned[0] \
        and "4 entries seen" in warned[0], warned
    key = fresh["sign_keys"]["curator"]
    leaves = [leaf_hash(b"x")]
    assert heads.other_log(key, _head(1, leaves, "99" * 16), "scenario other, n = 5") is None
