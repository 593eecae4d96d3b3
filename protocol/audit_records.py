"""The audit's report, and a transcript's records as the audit reads them: the hash chain
verified (`chain`), every frame decoded (a blob reference read back from its store), and
the role of the party whose transcript it is. Used by `protocol.audit` and the checks it
runs (`protocol.audit_ledger`, `protocol.audit_data`)."""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pobo.protocol.checkpoint import Checkpoint
from pobo.protocol.chunks import with_body
from pobo.protocol.codec import decode
from pobo.protocol.errors import ProtocolError
from pobo.protocol.messages import Welcome
from pobo.protocol.policy import CURATOR, MODELER
from pobo.protocol.signing import body_of
from pobo.protocol.transcript import (
    GENESIS, REFUSED, REFUSED_SUMMARY, Record, TranscriptError, blob_dirs, linked_records,
    raw_records, resolve,
)


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
    refused: dict | None = None  # refused frames: recorded (by code), counted past the cap
    unacknowledged: dict | None = None  # paired audit: frames sent, never received
    signatures: str = "unsigned"  # verified | unsigned | unverified (...) | FAILED at record N (...)
    complete: bool = True  # False when it holds no End from the peer: its tail is unvouched
    paired: bool = False  # audited with the peer's transcript (which vouches for its tail)
    checkpoints: list[Checkpoint] = field(default_factory=list)  # the curator's ledger heads
    budget: dict | None = None  # the dataset's budget the Welcome announced (budget_of)
    floors: list[Checkpoint] = field(default_factory=list)  # entries it shows were charged
    dp: bool | None = None  # what the Dataset says (False: "not DP"); None without one
    # what the signed Welcome and Dataset say of the session's privacy (`signed_claims`)
    claims: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when nothing was violated."""
        return not self.violations

    def to_dict(self) -> dict:
        """The report as JSON-ready data."""
        return {"path": self.path, "role": self.role, "records": self.records, "ok": self.ok,
                "session": self.session, "violations": self.violations, "notes": self.notes,
                "ledger": self.ledger, "refused": self.refused,
                "unacknowledged": self.unacknowledged, "signatures": self.signatures,
                "complete": self.complete, "paired": self.paired, "dp": self.dp,
                "claims": self.claims,
                "ledger_heads": [{"kind": c.kind, "record": c.record, **asdict(c.head)}
                                 for c in self.checkpoints]}

    def text(self) -> str:
        """The human report."""
        lines = [f"{self.path}: {self.role} transcript, {self.records} records, session "
                 f"{self.session}: {'OK' if self.ok else 'VIOLATIONS'}"]
        lines.append(f"  signatures: {self.signatures}")
        if not self.complete and not self.paired:
            lines.append("  INCOMPLETE: no End from the peer, so this transcript cannot vouch "
                         "for its tail: records cut from its end (a release, say) do not "
                         "show without the peer's transcript")
        if self.dp is False:
            lines.append("  not DP: the release carries no differential-privacy claim "
                         "(dp: false: non-private, lift paper, seeded randomness or "
                         "data-dependent preprocessing)")
        lines += [f"  violation: {v}" for v in self.violations]
        lines += [f"  note: {n}" for n in self.notes]
        if self.checkpoints:
            last = self.checkpoints[-1].head
            lines.append(f"  ledger heads: {len(self.checkpoints)} in the curator's Welcome "
                         f"and End frames; the last commits to {last.entries} entries (head {last.chain[:16]}...)")
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
    last = None
    try:
        for raw, record, breaks in linked_records(Path(path).read_bytes()):
            report.violations += breaks
            records.append(record)
            last = raw
    except TranscriptError as exc:
        report.violations.append(f"after record {len(records) - 1}: {exc}")
    prev = GENESIS if last is None else hashlib.sha256(last).hexdigest()
    if anchor is not None:
        if anchor.get("records") != len(records) or anchor.get("last") != prev:
            report.violations.append(
                f"head mismatch: the party anchored {anchor.get('records')} records ending "
                f"{str(anchor.get('last'))[:16]}..., the file has {len(records)} ending "
                f"{prev[:16]}... (records removed from or added to the tail)")
    report.records = len(records)
    return records


def decoded_messages(path: str | Path, blobs: str | Path | None = None) -> list[tuple]:
    """(record, message or None) for each record of a transcript as it reads (its blob
    references resolved from `blobs` or the defaults), what is wrong with it unreported:
    for reading the heads it carries (`checkpoints`) where `audit_transcript` is not
    the point."""
    return _decoded(readable_records(path), blob_dirs(path, blobs), AuditReport(str(path)))


def _decoded(records: list[Record], dirs, report: AuditReport) -> list[tuple]:
    """Each record with its decoded message (None for a refused, summary or unreadable
    one), what cannot be read noted in `report`."""
    cache: dict = {}
    bodies: dict = {}  # each chunked Dataset body read once (a resumed session has several)
    messages: list[tuple[Record, object | None]] = []
    for r in records:
        if r.kind in (REFUSED, REFUSED_SUMMARY):  # digests only: nothing to decode
            messages.append((r, None))
            continue
        try:
            r = resolve(r, dirs, cache)
        except TranscriptError as exc:
            report.violations.append(f"record {r.seq}: {r.kind} frame unreadable: {exc}")
            messages.append((r, None))
            continue
        try:
            messages.append((r, with_body(decode(body_of(r.frame)), r, dirs, bodies)))
        except TranscriptError as exc:
            report.violations.append(f"record {r.seq}: {r.kind} body unreadable: {exc}")
            messages.append((r, None))
        except ProtocolError as exc:
            if r.dir == "sent":
                report.violations.append(f"record {r.seq}: the party sent an undecodable "
                                         f"frame ({exc})")
            else:
                report.notes.append(f"record {r.seq}: received an undecodable frame ({exc})")
            messages.append((r, None))
    return messages


def role_of_messages(messages: list) -> str:
    """The role of the party whose transcript holds `messages`."""
    for r, m in messages:
        if isinstance(m, Welcome):
            return CURATOR if r.dir == "sent" else MODELER
    return CURATOR if any(r.dir == "recv" and r.kind == "hello" for r, _ in messages) else MODELER


def readable_records(path: str | Path) -> list[Record]:
    """The records of a transcript up to the first unreadable byte."""
    out = []
    try:
        for _, record in raw_records(Path(path).read_bytes()):
            out.append(record)
    except TranscriptError:
        pass
    return out
