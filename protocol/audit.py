"""Audit of a party's transcript, from the transcript alone (and the peer's, if given).

Checks, in order: the hash chain (each record's `prev` is the SHA-256 of the exact
bytes of the record before; sequence numbers count from 0; no torn tail; the head
matches the count and hash the party anchored in its result, when given); that every
frame decodes with the protocol codec; that every message the party sent is allowed
by the boundary policy for its direction, replayed in order through a fresh
`Boundary`, and that every forbidden message it received was refused (answered with
an Error); the privacy ledger recomputed from the handshake and the messages; that
the curator's and the modeler's transcripts of one session agree frame for frame; and,
given the curator's data, that no row of X and (in an LDP session) no raw objective
value appears in anything sent.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from protocol.codec import decode
from protocol.errors import ProtocolError
from protocol.ledger import CENTRAL, LOCAL, Entry, Ledger
from protocol.messages import Dataset, Error, Hello, Release, Reward, Welcome
from protocol.policy import CURATOR, LDP_REWARD, MODELER, POLICIES, Boundary
from protocol.transcript import GENESIS, Record, TranscriptError, raw_records

RELEASE_COST = {"noisy": 2, "noise-free": 1, "lipschitz": 1}


@dataclass
class AuditReport:
    """Findings of an audit: violations fail it, notes do not."""

    path: str
    role: str = "?"
    records: int = 0
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ledger: dict | None = None
    session: str | None = None

    @property
    def ok(self) -> bool:
        """True when nothing was violated."""
        return not self.violations

    def to_dict(self) -> dict:
        """The report as JSON-ready data."""
        return {"path": self.path, "role": self.role, "records": self.records, "ok": self.ok,
                "session": self.session, "violations": self.violations, "notes": self.notes,
                "ledger": self.ledger}

    def text(self) -> str:
        """The human report."""
        lines = [f"{self.path}: {self.role} transcript, {self.records} records, session "
                 f"{self.session}: {'OK' if self.ok else 'VIOLATIONS'}"]
        lines += [f"  violation: {v}" for v in self.violations]
        lines += [f"  note: {n}" for n in self.notes]
        if self.ledger is not None:
            c = self.ledger["central"]
            loc = self.ledger["local"]
            lines.append(f"  recomputed ledger: central eps = {c['epsilon']:.6g}, delta = "
                         f"{c['delta']:.3g}; local reports {loc['reports']} on {loc['rows']} rows,"
                         f" worst-off row eps = {loc['max_row_epsilon']:.6g}")
        return "\n".join(lines)


def chain(path: str | Path, report: AuditReport, anchor: dict | None = None) -> list[Record]:
    """Verify the hash chain and return the records (as far as they could be read)."""
    records: list[Record] = []
    prev = GENESIS
    try:
        for i, (raw, record) in enumerate(raw_records(Path(path).read_bytes())):
            if record.seq != i:
                report.violations.append(f"record {i}: sequence number {record.seq} "
                                         "(records reordered, removed or inserted)")
            if record.prev != prev:
                report.violations.append(f"record {i}: hash chain broken (record {i - 1} "
                                         "edited, or records reordered or removed)")
            prev = hashlib.sha256(raw).hexdigest()
            records.append(record)
    except TranscriptError as exc:
        report.violations.append(f"after record {len(records) - 1}: {exc}")
    if anchor is not None:
        if anchor.get("records") != len(records) or anchor.get("last") != prev:
            report.violations.append(
                f"head mismatch: the party anchored {anchor.get('records')} records ending "
                f"{str(anchor.get('last'))[:16]}..., the file has {len(records)} ending "
                f"{prev[:16]}... (records removed from or added to the tail)")
    report.records = len(records)
    return records


def audit_transcript(path: str | Path, anchor: dict | None = None,
                     X: np.ndarray | None = None, f: np.ndarray | None = None) -> AuditReport:
    """Audit one party's transcript; see the module docstring."""
    report = AuditReport(str(path))
    records = chain(path, report, anchor)
    messages: list[tuple[Record, object | None]] = []
    for r in records:
        try:
            messages.append((r, decode(r.frame)))
        except ProtocolError as exc:
            if r.dir == "sent":
                report.violations.append(f"record {r.seq}: the party sent an undecodable "
                                         f"frame ({exc})")
            else:
                report.notes.append(f"record {r.seq}: received an undecodable frame ({exc})")
            messages.append((r, None))
    role = _role(messages)
    report.role = role
    welcome = next((m for _, m in messages if isinstance(m, Welcome)), None)
    if welcome is None:
        report.violations.append("no welcome: no session parameters to audit against")
        return report
    report.session = welcome.session
    policy = POLICIES.get(welcome.params.policy)
    if policy is None:
        report.violations.append(f"unknown policy {welcome.params.policy!r} in the welcome")
        return report
    _replay(messages, Boundary(policy, role), report)
    report.ledger = recompute_ledger(messages, welcome).to_dict()
    if X is not None:
        _check_data(messages, welcome, np.asarray(X, float), f, report)
    return report


def _role(messages: list) -> str:
    for r, m in messages:
        if isinstance(m, Welcome):
            return CURATOR if r.dir == "sent" else MODELER
    return CURATOR if any(r.dir == "recv" and r.kind == "hello" for r, _ in messages) else MODELER


def _replay(messages: list, boundary: Boundary, report: AuditReport) -> None:
    carried: dict[int, int] | None = None
    for i, (r, m) in enumerate(messages):
        if m is None:
            continue
        if isinstance(m, Hello) and m.resume and boundary.hello_seen:
            # a resumed connection: a fresh handshake, then the queries asked before count
            report.notes.append(f"record {r.seq}: session resumed")
            carried = dict(boundary.asked)
            boundary = Boundary(boundary.policy, boundary.role)
        try:
            (boundary.outgoing if r.dir == "sent" else boundary.incoming)(m)
        except ProtocolError as exc:
            if r.dir == "sent":
                report.violations.append(f"record {r.seq}: sent {r.kind} that the policy "
                                         f"forbids: {exc}")
                continue
            reply = next(((rr, mm) for rr, mm in messages[i + 1:] if rr.dir == "sent"), None)
            if reply is None or not isinstance(reply[1], Error):
                report.violations.append(f"record {r.seq}: received a forbidden {r.kind} "
                                         f"({exc}) and did not refuse it")
            else:
                report.notes.append(f"record {r.seq}: refused a forbidden {r.kind} ({exc})")
            continue
        if isinstance(m, Dataset) and carried is not None:
            boundary.restore_queries(carried)
            carried = None


def recompute_ledger(messages: list, welcome: Welcome) -> Ledger:
    """The ledger implied by the handshake's mechanisms and the messages that crossed."""
    ledger = Ledger()
    mechanisms = {m.name: m for m in welcome.params.mechanisms}
    for name, mech in mechanisms.items():
        if name != LDP_REWARD:
            ledger.charge(Entry(name, mech.epsilon, mech.delta, CENTRAL))
    ldp = mechanisms.get(LDP_REWARD)
    seen: set[int] = set()
    for r, m in messages:
        if r.dir != ("sent" if _role(messages) == CURATOR else "recv"):
            continue
        if isinstance(m, Reward) and ldp is not None and m.seq not in seen:
            seen.add(m.seq)  # an idempotent resend of a reward is not a new report
            ledger.charge(Entry(LDP_REWARD, ldp.epsilon, ldp.delta, LOCAL, m.index))
        elif isinstance(m, Release):
            k = RELEASE_COST.get(m.algorithm, 1)
            ledger.charge(Entry(f"release:{m.algorithm}", k * m.epsilon, k * m.delta))
    return ledger


def numeric_fields(message: object, path: str = "") -> list[tuple[str, float]]:
    """Every scalar number a message carries, with its field path (arrays excluded: the
    released dataset is checked row by row)."""
    out: list[tuple[str, float]] = []
    if dataclasses.is_dataclass(message):
        for f in dataclasses.fields(message):
            out += numeric_fields(getattr(message, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(message, (tuple, list)):
        for i, item in enumerate(message):
            out += numeric_fields(item, f"{path}[{i}]")
    elif isinstance(message, (int, float)) and not isinstance(message, bool):
        out.append((path, float(message)))
    return out


# fields whose value is a count or an index, not a measurement: they may equal a value
# of f or an entry of X by coincidence (a row index 1 where f is binary, say)
_STRUCTURAL = {"version", "seq", "index", "params.n", "params.r", "params.T"}


def _check_data(messages: list, welcome: Welcome, X: np.ndarray, f: np.ndarray | None,
                report: AuditReport) -> None:
    """No row of X in a private release, no raw f in an LDP reward, and no public number
    that is one individual's value: a scalar field of any message sent that equals a
    value of f (or its negation) held by exactly one row, or (under the private policy)
    an entry of X held by exactly one row, crossed outside any mechanism. A value many rows share (a clip
    bound, a binary outcome) is reported as a note: a declared constant may equal it."""
    rows = {tuple(np.round(row, 12)) for row in X}
    ldp = any(m.name == LDP_REWARD for m in welcome.params.mechanisms)
    private = welcome.params.policy == "private"
    raw, entries = Counter(), Counter()  # |value| -> rows holding it (a sign hides nothing)
    if f is not None:
        raw.update(np.round(np.abs(np.asarray(f, float)), 12).tolist())
    if private:
        entries.update(np.round(np.abs(X), 12).ravel().tolist())
    noted: set[str] = set()
    for r, m in messages:
        if r.dir != "sent" and report.role == CURATOR:
            continue
        if isinstance(m, Dataset):
            Z = m.release.Z
            if Z.shape[1] == X.shape[1]:
                leaked = sum(tuple(np.round(z, 12)) in rows for z in Z)
                if leaked:
                    text = (f"record {r.seq}: {leaked} rows of X appear verbatim in the released "
                            f"dataset ({m.release.mechanism})")
                    if private:
                        report.violations.append(text)
                    else:
                        report.notes.append(text + " under the declared non-private policy")
        if m is None or isinstance(m, Dataset):
            continue
        for name, v in numeric_fields(m):
            value = round(abs(v), 12)
            if name in _STRUCTURAL or value == 0 or not (value in raw or value in entries):
                continue
            if isinstance(m, (Reward, Release)) and name == "value":
                text = f"record {r.seq}: {r.kind} carries a raw objective value {v:.6g}"
                (report.violations if ldp else report.notes).append(
                    text + ("" if ldp else " (allowed: this session has no LDP rewards)"))
                continue
            what = "a value of f" if value in raw else "an entry of X"
            held = raw[value] + entries[value]
            text = f"record {r.seq}: {r.kind} field {name} = {v:.6g} equals {what}"
            if held == 1:
                report.violations.append(text + " held by exactly one row: one individual's "
                                         "value crossed outside any mechanism")
            elif name not in noted:
                noted.add(name)
                report.notes.append(text + f" shared by {held} rows (a declared constant "
                                    "such as a clip bound may coincide with it)")


def compare(curator: list[Record], modeler: list[Record]) -> list[str]:
    """Disagreements between the two parties' transcripts of one session."""
    problems = []
    for label, a, b in (("curator sent / modeler received", curator, modeler),
                        ("modeler sent / curator received", modeler, curator)):
        sent = [r.frame for r in a if r.dir == "sent"]
        got = [r.frame for r in b if r.dir == "recv"]
        if sent != got:
            k = next((i for i, (x, y) in enumerate(zip(sent, got)) if x != y), min(len(sent), len(got)))
            problems.append(f"{label}: {len(sent)} vs {len(got)} frames, first difference at "
                            f"frame {k}")
    return problems


def readable_records(path: str | Path) -> list[Record]:
    """The records of a transcript up to the first unreadable byte."""
    out = []
    try:
        for _, record in raw_records(Path(path).read_bytes()):
            out.append(record)
    except TranscriptError:
        pass
    return out


def audit_session(curator_path: str | Path, modeler_path: str | Path,
                  anchors: dict | None = None, X=None, f=None) -> list[AuditReport]:
    """Audit both transcripts of one session and check that they agree."""
    anchors = anchors or {}
    reports = [audit_transcript(curator_path, anchors.get(CURATOR), X, f),
               audit_transcript(modeler_path, anchors.get(MODELER))]
    for problem in compare(readable_records(curator_path), readable_records(modeler_path)):
        reports[0].violations.append(f"transcripts disagree: {problem}")
    if reports[0].session != reports[1].session:
        reports[0].violations.append(f"the transcripts are of different sessions "
                                     f"({reports[0].session} vs {reports[1].session})")
    return reports
