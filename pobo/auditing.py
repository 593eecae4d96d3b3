"""`pobo audit`: find the anchors and the curator's data for protocol.audit."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pobo.parties.dataset import arrays_digest
from pobo.protocol.audit import (
    AuditReport, audit_session, audit_transcript, budget_changes, readable_records,
)
from pobo.parties.journal import Journal
from pobo.protocol.checkpoint import forks, inconsistencies
from pobo.protocol.codec import decode
from pobo.protocol.errors import PoboError, ProtocolError
from pobo.protocol.messages import Hello, LedgerHead
from pobo.protocol.policy import CURATOR, MODELER
from pobo.protocol.signing import body_of, key_id, load_verify_key
from pobo.transport.keyfiles import STORE_TRUSTED, pobo_home, trusted_signing_keys


def records_beside(transcript: Path, *names: str) -> list[Path]:
    """The records `names` (curator.json, result.json, ...) made with `transcript`: for a
    transcript kept aside as ROLE.transcript.N by a later session in its folder, the
    records kept aside with it (NAME.N, pobo.session.keep_previous_record)."""
    _, sep, suffix = transcript.name.partition(".transcript")
    suffix = suffix if sep and (not suffix or suffix[1:].isdigit()) else ""
    return [transcript.parent / f"{name}{suffix}" for name in names]


def anchor_for(transcript: Path, role: str) -> dict | None:
    """The transcript head the party recorded in its result beside the transcript."""
    for path in records_beside(transcript, f"{role}.json", "result.json"):
        name = path.name
        if path.exists():
            try:
                data = json.loads(path.read_text())
            except ValueError:
                continue
            head = (data.get("transcript_head") if not name.startswith("result.json")
                    else None)
            if head:
                return head
    return None


def load_data(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(X, f or None) from .npz (arrays X, f) or .npy (X)."""
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False), None
    with np.load(path, allow_pickle=False) as data:
        return data["X"], (data["f"] if "f" in data else None)


def check_recorded_ledger(report: AuditReport, transcript: Path) -> None:
    """Compare what the party's records beside the transcript (its own, curator.json, and
    a run's result.json) claim with what the signed transcript shows; each difference is
    a violation, so that a record edited after the run (a report drawn from it: `pobo
    report`, `pobo runs`) cannot show a claim the session never made: its randomness,
    policy, DP verdict and release (`AuditReport.claims`, also under privacy_unit's
    dataset), the session's own ledger (recomputed from the messages), and dataset
    totals no lower than the last ledger head the curator signed in it."""
    names = (["curator.json"] if report.role == CURATOR else []) + ["result.json"]
    for path in records_beside(transcript, *names):
        if not path.exists():
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            report.violations.append(f"{path} is unreadable ({type(exc).__name__}), so what "
                                     "it claims cannot be checked")
            continue
        if not isinstance(record, dict) or record.get("session") not in (None, report.session):
            continue  # another session's record: not this transcript's claims
        report.violations += [f"{path}: {why}" for why in _claims_differ(report, record)]


def _claims_differ(report: AuditReport, record: dict) -> list[str]:
    """How `record` (a party's result) differs from what the audited transcript shows."""
    out = []
    close = lambda a, b: (isinstance(a, (int, float)) and not isinstance(a, bool)  # noqa: E731
                          and abs(a - b) <= 1e-12 + 1e-9 * abs(b))
    unit = record.get("privacy_unit")
    dataset = unit.get("dataset") if isinstance(unit, dict) else None
    for key, signed in report.claims.items():
        for where, held in ((key, record), (f"privacy_unit.dataset.{key}", dataset)):
            if not isinstance(held, dict) or key not in held or (
                    where != key and key in ("randomness", "policy")):
                continue
            value = held[key]
            same = close(value, signed) if isinstance(signed, float) else value == signed
            if not same:
                out.append(f"{where} is {value!r}; the signed transcript says {signed!r}")
    ledger = record.get("ledger")
    if isinstance(ledger, dict) and report.ledger is not None:
        b, a = ledger.get("session", ledger), report.ledger
        try:
            same = (close(b["central"]["epsilon"], a["central"]["epsilon"])
                    and close(b["central"]["delta"], a["central"]["delta"])
                    and b["local"]["reports"] == a["local"]["reports"])
        except (KeyError, TypeError):
            same = False
        if not same:
            out.append(f"the recorded ledger of this session ({_ledger_line(b)}) is not what "
                       f"the messages imply ({_ledger_line(a)})")
        ends = [c.head for c in report.checkpoints if c.kind == "end"]
        if ends and "session" in ledger:
            out += _below_head(ledger, ends[-1])
        if "session" in ledger:
            out += _miscomposed(ledger)
    return out


def _miscomposed(ledger: dict) -> list[str]:
    """The dataset's central totals a record shows other than its own central entries
    give: their basic sums, and the accountant's epsilon at the stated delta
    (protocol.ledger.ledger_dict, the one computation of both)."""
    from pobo.protocol.ledger import Budget, ledger_dict

    try:
        central = ledger["central"]
        limits = {**central, **ledger.get("local", {})}
        again = ledger_dict(list(ledger["entries"]), {}, Budget.from_dict(limits))["central"]
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        return [f"its dataset ledger cannot be recomputed from its entries ({exc})"]
    return [f"ledger.central.{key} is {central.get(key)!r}; its own entries give "
            f"{again[key]!r}" for key in ("epsilon", "delta", "epsilon_basic", "delta_basic")
            if not (isinstance(central.get(key), (int, float))
                    and abs(central[key] - again[key]) <= 1e-12 + 1e-9 * abs(again[key]))]


def _ledger_line(ledger: dict) -> str:
    """'central eps E, delta D, R LDP reports' of a ledger dict, whatever it holds."""
    try:
        return (f"central eps {ledger['central']['epsilon']:.6g}, delta "
                f"{ledger['central']['delta']:.6g}, {ledger['local']['reports']} LDP reports")
    except (KeyError, TypeError, ValueError):
        return "unreadable"


def _below_head(ledger: dict, head: LedgerHead) -> list[str]:
    """The dataset totals a record shows below the ledger head the curator signed at the
    session's end (the dataset's ledger only grows)."""
    pairs = (("central", "epsilon_basic", head.central_epsilon),
             ("central", "delta_basic", head.central_delta),
             ("local", "max_row_epsilon_basic", head.max_row_epsilon))
    out = []
    for part, key, signed in pairs:
        value = (ledger.get(part) or {}).get(key)
        if not isinstance(value, (int, float)) or value < signed - 1e-9 * abs(signed):
            out.append(f"ledger.{part}.{key} is {value!r}, below the {signed:.12g} the "
                       "curator signed at the session's end")
    return out


def signing_keys(curator_key: Path | None = None, modeler_key: Path | None = None,
                 keys_dir: Path | None = None) -> dict[str, str] | None:
    """The parties' public signing keys (hex, by role) from sign_public files, or from a
    `pobo keys` folder (DIR/curator.sign_public, DIR/modeler.sign_public); None if none
    are given. Both are needed: ValueError for one alone."""
    if keys_dir is not None:
        curator_key = curator_key or keys_dir / "curator.sign_public"
        modeler_key = modeler_key or keys_dir / "modeler.sign_public"
    if curator_key is None and modeler_key is None:
        return None
    if curator_key is None or modeler_key is None:
        raise ValueError("verifying signatures needs both --curator-key and --modeler-key "
                         "(or --keys DIR)")
    return {CURATOR: load_verify_key(curator_key), MODELER: load_verify_key(modeler_key)}


@dataclass(frozen=True)
class Trust:
    """The keys an audit verifies with, and where each came from (named in the output):
    `keys` by role for protocol.audit, or None when some party's key is not trusted
    (`missing` says which and why)."""

    keys: dict[str, str] | None
    sources: dict[str, str]
    missing: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        """What the audit says about the keys it trusted (or could not)."""
        out = [f"trusted {role} key {key_id(key)} ({self.sources[role]})"
               for role, key in sorted((self.keys or {}).items())]
        return out + [f"not verified: {why}" for why in self.missing]


def announced_keys(paths: list[Path]) -> dict[str, str]:
    """role -> the signing key the transcripts' handshake announces (the Hello the
    modeler's, the Welcome the curator's): what to look up, never what to trust."""
    found: dict[str, str] = {}
    for path in paths:
        for record in readable_records(path):
            if record.kind in ("hello", "welcome") and record.frame:
                try:
                    message = decode(body_of(record.frame))
                except PoboError:
                    continue
                role = MODELER if isinstance(message, Hello) else CURATOR
                if getattr(message, "sign_key", "") and role not in found:
                    found[role] = message.sign_key
    return found


def trusted_keys(paths: list[Path], curator_key: Path | None = None,
                 modeler_key: Path | None = None, keys_dir: Path | None = None,
                 home: Path | None = None) -> Trust:
    """The keys to verify `paths` with: the flags' (--curator-key/--modeler-key/--keys),
    else the user's key store (transport.keyfiles.trusted_signing_keys: their own keys
    and HOME/trusted/) -- never a keys/ folder beside the transcripts, which whoever
    re-signed a run would have replaced too."""
    given = signing_keys(curator_key, modeler_key, keys_dir)
    if given is not None:
        where = {CURATOR: str(curator_key or keys_dir), MODELER: str(modeler_key or keys_dir)}
        return Trust(given, where)
    trusted = trusted_signing_keys(home)
    announced = announced_keys(paths)
    keys, sources, missing = {}, {}, []
    for role in (CURATOR, MODELER):
        key = announced.get(role)
        if not key:
            missing.append(f"the {role} did not sign (no signing key in the handshake)")
        elif key not in trusted:
            base = pobo_home() if home is None else home
            missing.append(f"the {role} signed with {key_id(key)}, which is not one of your "
                           f"keys ({base / 'keys'}) nor trusted ({base / STORE_TRUSTED}/), "
                           f"nor given with --keys/--{role}-key")
        else:
            keys[role], sources[role] = key, str(trusted[key])
    if missing:
        return Trust(None, sources, tuple(missing))
    return Trust(keys, sources)


def check_data_digest(report: AuditReport, transcript: Path, X: np.ndarray,
                      f: np.ndarray | None) -> None:
    """That the data given are the session's: their digest is the one the curator recorded
    (curator.json or result.json beside the transcript); anything else is a violation."""
    recorded = None
    for path in records_beside(transcript, "curator.json", "result.json"):
        if path.exists():
            try:
                recorded = json.loads(path.read_text()).get("dataset_digest")
            except ValueError:
                continue
            if recorded:
                break
    if not recorded:
        report.violations.append("the data given cannot be tied to this session: no curator "
                                 "record (curator.json) with its dataset_digest beside the "
                                 "transcript")
        return
    if f is None:
        report.violations.append("the data given hold X only: the curator's digest covers X "
                                 "and f, so they cannot be tied to this session (give the "
                                 "export-data .npz)")
        return
    actual = arrays_digest(np.asarray(X, float), np.asarray(f, float))
    if actual != recorded:
        report.violations.append(f"the data given are not this session's: X {tuple(X.shape)} "
                                 f"and f hash to {actual[:16]}..., the curator recorded "
                                 f"{recorded[:16]}...")


KeysFor = Callable[[list[Path]], "dict[str, str] | None"]  # a session's transcripts -> keys


def audit_files(paths: list[Path], data: Path | None = None, blobs: Path | None = None,
                keys: dict[str, str] | KeysFor | None = None) -> list[AuditReport]:
    """Audit one transcript, a curator's and a modeler's of one session (any order), or
    the transcripts of several sessions of one dataset (their ledger heads one chain);
    blob references are read from `blobs`, or beside each transcript (./blobs, ../blobs);
    signatures are verified against `keys` (see signing_keys), or against what
    `keys(the session's transcripts)` returns for each session (sessions of one curator
    with different modelers: each its own modeler's key); `data` must be the session's
    (its digest the curator's record)."""
    X, f = load_data(data) if data is not None else (None, None)
    reports = _audit(paths, X, f, blobs, keys)
    for report in reports:
        check_recorded_ledger(report, Path(report.path))
    if X is not None:
        check_data_digest(reports[0], Path(reports[0].path), X, f)
    return reports


def _audit(paths: list[Path], X, f, blobs: Path | None,
           keys: dict[str, str] | KeysFor | None) -> list[AuditReport]:
    """One report per transcript: a curator's and a modeler's transcript of the same
    session are audited as a pair; with several sessions, their ledger heads must form
    one chain (`check_ledger_chain`)."""
    keys_for = keys if callable(keys) else (lambda _: keys)
    if len(paths) == 1:
        role = CURATOR if paths[0].name.startswith(CURATOR) else MODELER
        anchor = anchor_for(paths[0], role)
        return _note_unanchored([audit_transcript(paths[0], anchor, X, f, blobs,
                                                  keys_for(paths))], {paths[0]: anchor})
    reports: list[AuditReport] = []
    anchors: dict[Path, dict | None] = {}
    for by_role in session_groups(paths):
        group = list(by_role.values())
        for role, p in by_role.items():
            anchors[p] = anchor_for(p, role)
        if len(by_role) == 2:
            reports += audit_session(by_role[CURATOR], by_role[MODELER],
                                     {role: anchors[p] for role, p in by_role.items()},
                                     X, f, blobs, keys_for(group))
        else:
            (role, path), = by_role.items()
            reports.append(audit_transcript(path, anchors[path], X, f, blobs,
                                            keys_for(group)))
    check_ledger_chain(reports)
    return _note_unanchored(reports, anchors)


def _note_unanchored(reports: list[AuditReport],
                     anchors: dict[Path, dict | None]) -> list[AuditReport]:
    """Note each transcript audited with no head its party anchored (no record beside it):
    whole records cut from its end cannot be seen then, only a torn one."""
    for report in reports:
        if anchors.get(Path(report.path)) is None:
            report.notes.append(
                "no anchored head: no record of its party (curator.json, modeler.json or "
                "result.json with a transcript_head) beside it, so whole records cut from "
                "its end cannot be detected (the peer's transcript may show them)")
    return reports


def session_groups(paths: list[Path]) -> list[dict[str, Path]]:
    """The transcripts grouped by session, each group role -> path (a curator's and a
    modeler's transcript of one session pair up; two of one role and session stand
    alone); one group per path when only one is given."""
    if len(paths) == 1:
        return [{_role_of(paths[0]): paths[0]}]
    sessions: dict[str, dict[str, Path]] = {}
    for path in paths:
        by_role = sessions.setdefault(_session_of(path) or str(path), {})
        role = _role_of(path)
        if role in by_role:  # two transcripts of one role and session: each on its own
            by_role = sessions.setdefault(str(path), {})
        by_role[role] = path
    return list(sessions.values())


def check_ledger_chain(reports: list[AuditReport]) -> None:
    """That the ledger heads of every transcript given form one chain (the dataset's
    ledger only appended to); a fork is a violation on the report that holds it."""
    if len({r.session for r in reports}) < 2:
        return  # one session: its own transcripts were checked one by one
    by_path = {r.path: r for r in reports}
    for point, why in forks([c for r in reports for c in r.checkpoints],
                            floors=[f for r in reports for f in r.floors]):
        report = by_path[point.path]
        if why not in report.violations:
            report.violations.append(why)
    found, notes = inconsistencies([c for r in reports for c in r.checkpoints])
    for point, why in found:  # the Merkle log's: one head that does not extend another
        report = by_path[point.path]
        if why not in report.violations:
            report.violations.append(why)
    for note in [*notes, *budget_changes(reports)]:
        reports[0].notes.append(note)


def _session_of(path: Path) -> str | None:
    """The session id a transcript's first Welcome names (None if it holds none)."""
    for record in readable_records(path):
        if record.kind == "welcome" and record.frame:
            try:
                return decode(body_of(record.frame)).session
            except ProtocolError:
                return None
    return None


def _role_of(path: Path) -> str:
    """Which party wrote a transcript, from its records alone (without reading any blob):
    the curator receives the Hello, the modeler sends it."""
    for record in readable_records(path):
        if record.kind == "hello":
            return CURATOR if record.dir == "recv" else MODELER
    return CURATOR if path.name.startswith(CURATOR) else MODELER


def uncharged_projections(journal: Journal) -> list[str]:
    """Why the journal's stored projections are not each charged (empty: they are): a DP
    projection is stored with its own central entry, at its (epsilon, delta), in one
    transaction, so there are at least as many entries of a release mechanism at each
    (epsilon, delta) as projections prepared at it (X itself, the identity, is charged
    nothing). A review's attack: a projection stored without its charge passed `pobo
    ledger` and the audit wherever an earlier charge covered the heads' totals."""
    from collections import Counter

    from pobo.protocol.ledger import CENTRAL
    from pobo.protocol.policy import DP_RELEASES

    need: Counter = Counter()
    for key in journal.projection_keys():
        try:
            spec = json.loads(key)
            if spec.get("mechanism") == "identity":
                continue
            need[(float(spec["epsilon"]), float(spec["delta"]))] += 1
        except (ValueError, KeyError, TypeError, AttributeError):
            return [f"{journal.path}: a stored projection's key is unreadable ({key[:60]!r}): "
                    "the journal was edited"]
    have = Counter((e.epsilon, e.delta) for e in journal.entries(session="", scope=CENTRAL)
                   if e.mechanism in DP_RELEASES)
    return [f"{journal.path}: {n} projection(s) prepared at epsilon {eps:g}, delta {dlt:g} "
            f"and {have[(eps, dlt)]} charge(s) for them in the ledger: a release was stored "
            "without its charge" for (eps, dlt), n in sorted(need.items())
            if have[(eps, dlt)] < n]


def uncharged_in_journal(journal: Journal, messages: list, path: Path) -> list[str]:
    """Why the journal does not hold the charges a session's transcript proves were
    released (empty: it does): each LDP report (a Reward with noise, each seq once) as a
    local entry of that session on that row, at no less than the mechanism's epsilon,
    and its release as an entry of that session (protocol.audit_ledger.session_charges). A
    review's attacks: entries removed after a crash (no head had been kept past them),
    and reports booked on another row, which left the answered rows' budgets whole."""
    from pobo.protocol.audit import session_charges
    from pobo.protocol.messages import Welcome

    welcome = next((m for _, m in messages if isinstance(m, Welcome)), None)
    if welcome is None:
        return []
    held = [e for e in journal.entries(session=welcome.session)  # (bad ones named apart)
            if isinstance(e.epsilon, (int, float)) and not isinstance(e.epsilon, bool)]
    return missing_charges(session_charges(messages, welcome), held,
                           f"{path}: session {welcome.session[:12]}")


def missing_charges(proved: list, held: list, where: str) -> list[str]:
    """Why the entries `held` (a session's, in the journal) do not cover those `proved`
    (its transcript's, `protocol.audit_ledger.session_charges`): per row, fewer local entries at
    no less than the report's epsilon than reports (at most three named), and a release
    with no entry of its mechanism at no less than its (epsilon, delta). One pass over
    each list: linear in the reports (benchmarks/ledger.py times it)."""
    from collections import Counter

    from pobo.protocol.ledger import LOCAL

    out = []
    local = Counter(e.row for e in proved if e.scope == LOCAL)
    eps = {e.row: e.epsilon for e in proved if e.scope == LOCAL}  # (one mechanism's epsilon)
    kept = Counter(e.row for e in held if e.scope == LOCAL and e.row in eps
                   and e.epsilon >= eps[e.row] * (1 - 1e-9))
    for row, count in sorted(local.items()):
        if kept[row] < count:
            out.append(f"{where} sent {count} LDP report(s) on row {row}; the journal holds "
                       f"{kept[row]} charged to it: reports were left out of the ledger or "
                       "booked on other rows")
            if len(out) >= 3:
                return out
    for e in (e for e in proved if e.scope != LOCAL):
        if not any(h.mechanism == e.mechanism and h.epsilon >= e.epsilon * (1 - 1e-9)
                   and isinstance(h.delta, (int, float)) and h.delta >= e.delta * (1 - 1e-9)
                   for h in held):
            out.append(f"{where} was sent a {e.mechanism} release of ({e.epsilon:g}, "
                       f"{e.delta:g}); the journal holds no such charge")
    return out


def head_file_of(journal: Journal, given: Path | None) -> Path | None:
    """The ledger head file to check a journal against: the one `given`, else the one
    its curator noted it keeps its heads in (Journal.note_head_file), if it is there."""
    from pobo.parties.journal import HEAD_FILE_KEY

    kept = journal.meta(HEAD_FILE_KEY) if given is None else None
    return Path(kept) if kept is not None and Path(kept).is_file() else given


def journal_findings(journal: Journal, head_file: Path | None, transcripts: list[Path] = (),
                     bad: list[str] | None = None) -> tuple[list[str], int]:
    """(what is wrong, how many signed heads were checked) of a curator's journal as an
    auditor checks it (`pobo ledger`): entries no mechanism charges (`Journal.bad_entries`),
    and every ledger head the curator committed to -- the one kept in `head_file` (None:
    none) and every head its Welcomes and Ends carry in `transcripts` -- that the journal
    does not hold with the same chain and totals (parties.checkpoints.unheld_heads). The
    transcripts' signatures are `pobo audit`'s to check. `bad`: `journal.bad_entries()`,
    if the caller has it already (a pass over every entry)."""
    from pobo.parties.checkpoints import HeadFile, unheld_heads
    from pobo.parties.journal import HEAD_FILE_KEY, JournalError
    from pobo.protocol.audit import checkpoints, decoded_messages, role_of_messages

    problems = ((journal.bad_entries() if bad is None else bad) + uncharged_projections(journal)
                + journal.uncharged_answers())
    heads: list[tuple[str, LedgerHead]] = []
    head_file = head_file_of(journal, head_file)
    kept = journal.meta(HEAD_FILE_KEY)
    if head_file is None and kept is not None:
        problems.append(f"the journal's curator kept its ledger heads in {kept}, and no head "
                        "file was given or found there: a journal copied back from before "
                        "cannot be told from this one")
    if head_file is not None:  # read as the curator reads it (one line if it is not one)
        try:
            head = HeadFile(head_file, str(journal.meta("dataset"))).read()
        except JournalError as exc:
            problems.append(str(exc))
        else:
            if head is not None:
                heads.append((f"ledger head file {head_file}", head))
    for path in transcripts:
        messages = decoded_messages(path)
        heads += [(f"{path} record {c.record} ({c.kind})", c.head)
                  for c in checkpoints(messages, role_of_messages(messages), str(path))]
        problems += uncharged_in_journal(journal, messages, path)
    try:
        problems += unheld_heads(journal, heads)
    except (ValueError, TypeError) as exc:  # an entry that is no number: named above
        problems.append(f"the ledger's hash chain cannot be computed ({exc})")
    return problems, len(heads)
