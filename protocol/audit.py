"""Audit of a party's transcript, from the transcript alone (and the peer's, if given).

First the signatures and links of protocol version 2 (`check_signatures`): given the
parties' public signing keys (never the keys the transcript itself announces), every
frame the party sent must carry its valid signature and every frame it received the
peer's, and the Hello and Welcome must announce those keys. With or without keys: each
frame the party sent is signed as its own record (seq and the hash of the record before:
so rehashing an edited chain contradicts the party's own signatures) and acknowledges the
last frame it had received; each frame it received names the session, acknowledges only
frames this transcript records sending on that connection, never going back, and the
peer's record numbers never go back. So one transcript holds the peer's signed receipts
for what the party sent: an edit to a frame sent, or its removal, shows against them.
The result is `signatures`: verified, unsigned, unverified (signed, no keys given) or
FAILED at record N (why). With both transcripts, a frame one party acknowledged must be
in its transcript (it cannot pass for a frame lost in flight).

Checks, in order: the hash chain (each record's `prev` is the SHA-256 of the exact
bytes of the record before; sequence numbers count from 0; no torn tail; the head
matches the count and hash the party anchored in its result, when given); that every
frame decodes with the protocol codec (a frame kept in the blob store is read back and
must hash to the digest its record carries); that every message the party sent is
allowed by the boundary policy for its direction, replayed in order through a fresh
`Boundary`, and that every forbidden message it received was refused (answered with an
Error; a `refused` record, which holds the frame's digest only, counts as such a message
without being decoded); the privacy ledger recomputed from the handshake and the
messages; that the curator's and the modeler's transcripts of one session agree (below);
and, given the curator's data, that no row of X and (in an LDP session) no raw objective
value appears in anything sent.

The two transcripts agree when, comparing frames by their SHA-256 (so a refused record
and a blob reference compare with the frame they stand for):

1. each transcript is cut into connections, the modeler's at every Hello it sent and the
   curator's at every Hello it accepted (a resume adds one to each side);
2. the connections pair up in order; a modeler connection may stay unpaired only if it
   received nothing (its Hello never reached the session);
3. within a pair, in each direction, the frames the receiver recorded are the frames the
   sender recorded, in the same order and with the same bytes, except that a tail of
   the sender's frames may be missing: sent but never received, in flight when that
   connection ended (a kill -9, a retry the dead peer never saw). These are reported as
   *unacknowledged* (a note, with counts per direction), not as a disagreement. Frames
   a party only counted past its cap of refused frames (and the Errors answering them)
   are matched against its `refused-summary` record: their number and the SHA-256 over
   their digests in order must agree (greedily: a frame that matches the next recorded
   one is taken as that one). The Errors the modeler received last on a connection from
   a curator connection with no session (their link names none: the `session_lost` a
   restarted curator answers a retry on the old connection with) are in no curator
   transcript: they are noted, not compared.

Anything else is a violation: a frame received that the other side never recorded
sending, frames in another order or with other bytes, a frame missing from the middle
of a connection, a curator connection the modeler's transcript does not hold.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pobo.protocol.chunks import with_body
from pobo.protocol.codec import decode
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import CENTRAL, LOCAL, PROCESS_ONLY, PROCESS_SCOPE, Entry, Ledger
from pobo.protocol.checkpoint import Checkpoint, charged_floor, forks, inconsistencies
from pobo.protocol.messages import (
    NO_LEDGER_HEAD, PROTOCOL_VERSION, Dataset, End, Error, Hello, Query, Release, Reward,
    Welcome,
)
from pobo.protocol.signing import ZERO, body_of, key_id, open_frame, verify, verify_key
from pobo.protocol.policy import (
    CURATOR, IDENTITY, LDP_REWARD, MODELER, NON_PRIVATE, POLICIES, WITHDRAWING, Boundary,
)
from pobo.protocol.transcript import (
    GENESIS, REFUSED, REFUSED_SUMMARY, Record, TranscriptError, blob_dirs, linked_records,
    raw_records, resolve,
)

RELEASE_COST = {"noisy": 2, "noise-free": 1, "lipschitz": 1}
# transcripts of these protocol versions are audited (version 4 only added rules a
# version-3 session never needed, PROTOCOL.md: a transcript kept from before still audits)
AUDITED_VERSIONS = frozenset(range(3, PROTOCOL_VERSION + 1))


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


def budget_of(params) -> dict:
    """The dataset's budget a Welcome announces, and the ledger's size then (its head's
    entries): what `pobo audit` compares across sessions to show a raise."""
    return {"central": (params.budget_epsilon, params.budget_delta),
            "row": (params.row_budget_epsilon, params.row_budget_delta),
            "releases": params.budget_releases}


def budget_changes(reports: list) -> list[str]:
    """One note per change of the dataset's budget between the sessions of `reports`, in
    the order of their Welcome's ledger head, then its time (a raise is --raise-budget,
    recorded in the curator's journal: `pobo ledger` shows its history)."""
    seen = sorted(((r.checkpoints[0].head.entries if r.checkpoints else 0,
                    r.checkpoints[0].time if r.checkpoints else 0.0, r.session or "",
                    r.budget) for r in reports if r.budget is not None), key=lambda t: t[:2])
    out, last = [], None
    for entries, _, session, budget in seen:
        if last is not None and budget != last[2]:
            raised = any(b > a for a, b in zip((*last[2]["central"], *last[2]["row"]),
                                               (*budget["central"], *budget["row"]))) or (
                budget["releases"] == -1 and last[2]["releases"] != -1) or (
                last[2]["releases"] != -1 and budget["releases"] > last[2]["releases"])
            out.append(f"the dataset's budget {'was RAISED' if raised else 'changed'} between "
                       f"session {last[1][:12]} (ledger of {last[0]} entries) and session "
                       f"{session[:12]} ({entries}): {_budget_text(last[2])} -> "
                       f"{_budget_text(budget)} (a raise needs --raise-budget; `pobo ledger` "
                       "shows the journal's budget history)")
        last = (entries, session, budget)
    return out


def _budget_text(budget: dict) -> str:
    (eps, dlt), (row, _), releases = budget["central"], budget["row"], budget["releases"]
    return (f"central ({eps:g}, {dlt:g})" + (f", row {row:g}" if row else "")
            + ("" if releases < 0 else f", {releases} release(s)"))


def dataset_is_dp(messages: list, welcome: Welcome) -> bool | None:
    """What the session's Dataset says of its release (`dp`), False for the
    non-private policy or seeded randomness whatever it says; None without a Dataset."""
    data = next((m for _, m in messages if isinstance(m, Dataset)), None)
    if data is None:
        return None
    return bool(data.release.dp and welcome.params.policy != NON_PRIVATE.name
                and welcome.params.randomness != "seeded")


def signed_claims(messages: list, welcome: Welcome, dp: bool | None) -> dict:
    """What the session's signed Welcome and Dataset say of its privacy, under the names
    a party's record (result.json) uses: randomness, policy and, with a Dataset, the
    release's mechanism, epsilon and delta, and whether it is DP (`dataset_is_dp`)."""
    claims = {"randomness": welcome.params.randomness, "policy": welcome.params.policy}
    data = next((m for _, m in messages if isinstance(m, Dataset)), None)
    if data is not None:
        private = data.release.mechanism != IDENTITY  # X itself: no (epsilon, delta) at all
        claims.update(mechanism=data.release.mechanism,
                      epsilon=float(data.release.epsilon) if private else None,
                      delta=float(data.release.delta) if private else None, dp=dp)
    return claims


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


def audit_transcript(path: str | Path, anchor: dict | None = None,
                     X: np.ndarray | None = None, f: np.ndarray | None = None,
                     blobs: str | Path | None = None,
                     keys: dict[str, str] | None = None) -> AuditReport:
    """Audit one party's transcript (its blob references read from `blobs`, or the
    defaults of `protocol.transcript.blob_dirs`); see the module docstring. `keys` are
    the parties' public signing keys (hex, by role) as the auditor knows them: every
    signature and link is checked against them (never against the keys the transcript
    itself announces)."""
    report = AuditReport(str(path))
    records = chain(path, report, anchor)
    messages = _decoded(records, blob_dirs(path, blobs), report)
    role = role_of_messages(messages)
    report.role = role
    check_signatures(messages, role, keys, report)
    _count_refused(messages, report)
    welcome = next((m for _, m in messages if isinstance(m, Welcome)), None)
    if welcome is None:
        report.violations.append("no welcome: no session parameters to audit against")
        return report
    report.session = welcome.session
    report.dp = dataset_is_dp(messages, welcome)
    report.claims = signed_claims(messages, welcome, report.dp)
    policy = POLICIES.get(welcome.params.policy)
    if policy is None:
        report.violations.append(f"unknown policy {welcome.params.policy!r} in the welcome")
        return report
    _replay(messages, Boundary(policy, role, versions=AUDITED_VERSIONS), report)
    if not any(isinstance(m, End) and r.dir == "recv" for r, m in messages):
        # the peer's End acknowledges the last frame this party sent before it (whose link
        # chains every record before): without it nothing the peer signed pins the tail
        last = messages[-1][0] if messages else None
        peer = MODELER if role == CURATOR else CURATOR
        report.notes.append(f"session incomplete: no End from the {peer} in this transcript"
                            + (f" (it stops at record {last.seq}, {last.kind})"
                               if last is not None else "")
                            + "; alone it cannot vouch for its tail: records cut from its "
                            "end (a later release, say) cannot be seen (PROTOCOL.md 12.3)")
        report.complete = False
    report.budget = budget_of(welcome.params)
    if welcome.params.ledger_scope == PROCESS_SCOPE:
        report.notes.append(f"{PROCESS_ONLY}: the curator kept its ledger in memory "
                            "(ledger_scope 'process'); a restart of it started a new budget")
    report.ledger = recompute_ledger(messages, welcome).to_dict()
    report.checkpoints = checkpoints(messages, role, str(path))
    report.floors = charged_floors(messages, role, report.checkpoints)
    report.violations += undercharged(messages, welcome, report.checkpoints)
    report.violations += [why for _, why in forks(report.checkpoints)]
    report.violations += [why for _, why in inconsistencies(report.checkpoints)[0]]
    if X is not None:
        _check_data(messages, welcome, np.asarray(X, float), f, report)
    return report


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


def checkpoints(messages: list, role: str, path: str) -> list[Checkpoint]:
    """The ledger heads the curator's Welcomes and Ends carry in a transcript, in order."""
    by_curator = "sent" if role == CURATOR else "recv"
    session, opened, out = "", 0.0, []
    hello, welcomed = None, NO_LEDGER_HEAD  # the connection's Hello and Welcome's head
    for r, m in messages:
        if r.kind == "hello":  # a connection opens: the heads it carries are computed later
            opened, hello, welcomed = r.time, m, NO_LEDGER_HEAD
        if isinstance(m, Welcome):
            session = m.session
        if (isinstance(m, (Welcome, End)) and r.dir == by_curator
                and m.ledger != NO_LEDGER_HEAD):
            start = _proof_start(m, hello, welcomed)  # version 6: where its proof starts
            out.append(Checkpoint(session, r.kind, r.time, m.ledger, path, r.seq, opened,
                                  start, m.consistency))
            if isinstance(m, Welcome):
                welcomed = m.ledger
    return out


def _proof_start(message: Welcome | End, hello, welcomed) -> int:
    """The ledger size a Welcome's or End's consistency proof starts from: the head its
    connection's Hello named, or its Welcome's (-1: none of this log)."""
    if isinstance(message, Welcome):
        named = isinstance(hello, Hello) and hello.ledger_log == message.ledger.log
        return hello.ledger_seen if named and hello.ledger_seen else -1
    return welcomed.entries if welcomed.log and welcomed.log == message.ledger.log else -1


def charged_floors(messages: list, role: str, heads: list[Checkpoint]) -> list[Checkpoint]:
    """For a fresh session (its Hello resumes nothing), what its transcript proves the
    curator's ledger held: its Welcome's head count plus one entry per LDP report
    (a Reward with noise, each seq once) the curator sent, by the last of them
    (protocol.checkpoint.charged_floor). A resumed connection proves nothing this way:
    its rewards may be resends of answers charged before."""
    welcome = next((c for c in heads if c.kind == "welcome"), None)
    hello = next((m for _, m in messages if isinstance(m, Hello)), None)
    if welcome is None or hello is None or hello.resume:
        return []
    by_curator = "sent" if role == CURATOR else "recv"
    seqs, last = set(), None
    for r, m in messages:
        if isinstance(m, Reward) and r.dir == by_curator and m.noise and m.seq not in seqs:
            seqs.add(m.seq)
            last = Checkpoint(welcome.session, "reward", r.time, welcome.head,
                              welcome.path, r.seq, welcome.opened)
    return [] if last is None else [charged_floor(welcome, len(seqs), last)]


def role_of_messages(messages: list) -> str:
    """The role of the party whose transcript holds `messages`."""
    for r, m in messages:
        if isinstance(m, Welcome):
            return CURATOR if r.dir == "sent" else MODELER
    return CURATOR if any(r.dir == "recv" and r.kind == "hello" for r, _ in messages) else MODELER


def _count_refused(messages: list, report: AuditReport) -> None:
    """Report the refused frames: recorded one by one (per error code), and counted past the
    transcript's cap in its refused-summary records."""
    codes: Counter = Counter()
    counted = replies = summaries = 0
    for r, _ in messages:
        if r.kind == REFUSED:
            codes[r.code] += 1
        elif r.kind == REFUSED_SUMMARY:
            summaries += 1
            counted += r.count
            replies += r.replies
            if r.replies > r.count or len(r.sha256) != 64 or len(r.replies_sha256) != 64:
                report.violations.append(f"record {r.seq}: a refused-summary of {r.count} "
                                         f"frames with {r.replies} replies is malformed")
    if not codes and not summaries:
        return
    report.refused = {"recorded": sum(codes.values()), "codes": dict(codes),
                      "counted": counted, "replies": replies, "summaries": summaries}
    text = ", ".join(f"{code} {n}" for code, n in codes.most_common())
    note = f"refused {sum(codes.values())} received frames recorded by digest ({text})"
    if summaries:
        note += (f"; {counted} more past the cap, counted in {summaries} refused-summary "
                 f"record(s), with {replies} Error replies")
    report.notes.append(note)


def _answered(messages: list, i: int) -> tuple[Record, object] | bool:
    """The first message the party sent after record i on the same connection; False when
    the connection ended (a Hello either way opens the next) before it sent anything."""
    for rr, mm in messages[i + 1:]:
        if isinstance(mm, Hello):
            return False
        if rr.dir == "sent" and rr.kind != REFUSED_SUMMARY:
            return rr, mm
    return False


def _check_refusal(messages: list, i: int, what: str, report: AuditReport) -> None:
    """That the frame at record i, which the party refused, was answered with an Error (or
    the connection ended before the party sent anything: it did not act on the frame)."""
    r = messages[i][0]
    reply = _answered(messages, i)
    if reply is False:
        report.notes.append(f"record {r.seq}: refused {what}; the connection ended before "
                            "any answer")
    elif not isinstance(reply[1], Error):
        report.violations.append(f"record {r.seq}: received {what} and did not refuse it "
                                 f"(record {reply[0].seq} answers with {reply[0].kind})")


def _refused_late(messages: list, i: int) -> int | None:
    """The seq of the received frame the refusal at record i names, when that frame was
    recorded as received before it (a signature checked after the frame was accepted,
    protocol.channel.LateSignature); None for a refusal on receipt."""
    r = messages[i][0]
    if r.code != ErrorCode.BAD_SIGNATURE.value:
        return None
    for rr, _ in reversed(messages[:i]):
        if isinstance(rr.dir, str) and rr.dir == "recv" and rr.frame \
                and hashlib.sha256(rr.frame).hexdigest() == r.sha256:
            return rr.seq
    return None


def _check_ending(messages: list, i: int, report: AuditReport) -> None:
    """After a late refusal the session must end: the party's next message, if any, is an
    Error or an End (a query or a reward after it is a violation)."""
    reply = _answered(messages, i)
    if reply is not False and not isinstance(reply[1], (Error, End)):
        report.violations.append(f"record {messages[i][0].seq}: went on after a frame it "
                                 f"found forged (record {reply[0].seq} sends {reply[0].kind})")


def _replay(messages: list, boundary: Boundary, report: AuditReport) -> None:
    carried: dict[int, int] | None = None
    for i, (r, m) in enumerate(messages):
        if r.kind == REFUSED:
            # refused by the party on receipt: never handed to it, so not replayed; a late
            # duplicate reward is dropped by design, anything else is answered with an Error
            late = _refused_late(messages, i)
            if late is not None:  # accepted first over CURVE, found forged at the next recv
                report.notes.append(f"record {r.seq}: the peer's frame of record {late} did "
                                    "not verify, found after it was accepted (CURVE): the "
                                    "session ended there")
                _check_ending(messages, i, report)
            elif r.code != ErrorCode.DUPLICATE.value:
                _check_refusal(messages, i, f"a frame it refused ({r.code}: {r.error})", report)
            continue
        if m is None:
            continue
        if isinstance(m, Hello) and m.resume and boundary.hello_seen:
            # a resumed connection: a fresh handshake, then the queries asked before count
            report.notes.append(f"record {r.seq}: session resumed")
            # (a resume refused before its Dataset carries nothing new: keep what was)
            carried = {**(carried or {}), **boundary.asked}
            boundary = Boundary(boundary.policy, boundary.role, versions=AUDITED_VERSIONS)
        try:
            (boundary.outgoing if r.dir == "sent" else boundary.incoming)(m)
        except ProtocolError as exc:
            if r.dir == "sent":
                if (isinstance(m, Query) and boundary.role == MODELER
                        and exc.code.value in WITHDRAWING):
                    # a query the curator must refuse, and so never asks (PROTOCOL.md 7.1:
                    # a pipelined bad row, refused, then asked again with a good one)
                    report.notes.append(f"record {r.seq}: sent query {m.seq} (row {m.index}) "
                                        f"that the curator refuses ({exc.code.value}: "
                                        f"{exc}): a refused query is not asked")
                    continue
                report.violations.append(f"record {r.seq}: sent {r.kind} that the policy "
                                         f"forbids: {exc}")
                continue
            if exc.code is ErrorCode.DUPLICATE:
                report.notes.append(f"record {r.seq}: dropped a duplicate {r.kind} ({exc})")
            else:
                _check_refusal(messages, i, f"a forbidden {r.kind} ({exc})", report)
            continue
        if isinstance(m, Dataset) and carried is not None:
            boundary.restore_queries(carried)
            carried = None


def recompute_ledger(messages: list, welcome: Welcome) -> Ledger:
    """The ledger implied by the handshake's mechanisms and the messages that crossed."""
    ledger = Ledger()
    for mech in welcome.params.mechanisms:
        if mech.name != LDP_REWARD:
            ledger.charge(Entry(mech.name, mech.epsilon, mech.delta, CENTRAL))
    for entry in session_charges(messages, welcome):
        ledger.charge(entry)
    return ledger


def session_charges(messages: list, welcome: Welcome) -> list[Entry]:
    """The entries the session's own messages prove the curator charged, in order: one
    LDP report per Reward with noise it sent (each seq once: an idempotent resend of a
    reward is not a new report) and its Release (once: a session is granted one)."""
    ldp = next((m for m in welcome.params.mechanisms if m.name == LDP_REWARD), None)
    by_curator = "sent" if role_of_messages(messages) == CURATOR else "recv"
    seen: set[int] = set()
    released: set[tuple] = set()
    out = []
    for r, m in messages:
        if r.dir != by_curator:
            continue
        if isinstance(m, Reward) and ldp is not None and m.seq not in seen:
            seen.add(m.seq)
            out.append(Entry(LDP_REWARD, ldp.epsilon, ldp.delta, LOCAL, m.index))
        elif isinstance(m, Release) and (m.algorithm, m.epsilon, m.delta) not in released:
            released.add((m.algorithm, m.epsilon, m.delta))
            k = RELEASE_COST.get(m.algorithm, 1)
            out.append(Entry(f"release:{m.algorithm}", k * m.epsilon, k * m.delta))
    return out


def unannounced_charges(welcome: Welcome, heads: list[Checkpoint]) -> list[str]:
    """Why a ledger head the curator signed does not hold the central mechanisms its
    Welcome announces as in force (the dataset's release, a lift test): fewer entries
    than there are of them, or central totals below their sums (a review's attack: a
    curator that never charged the projection signed heads of 0 entries, and passed)."""
    central = [m for m in welcome.params.mechanisms if m.name != LDP_REWARD]
    if not central:
        return []
    need = {"entries": len(central),
            "central epsilon": math.fsum(m.epsilon for m in central),
            "central delta": math.fsum(m.delta for m in central)}
    out = []
    for c in heads:
        held = {"entries": c.head.entries, "central epsilon": c.head.central_epsilon,
                "central delta": c.head.central_delta}
        short = [what for what, v in need.items() if held[what] < v - 1e-9 * abs(v)]
        if short:
            out.append(f"record {c.record}: the curator's ledger head in its {c.kind} commits "
                       f"to {short[0]} {held[short[0]]:.12g}, less than the "
                       f"{need[short[0]]:.12g} of the mechanisms its Welcome announces "
                       f"({', '.join(m.name for m in central)}): the release was not "
                       "charged to the curator's ledger")
            break
    return out


def undercharged(messages: list, welcome: Welcome, heads: list[Checkpoint]) -> list[str]:
    """Why the curator's closing ledger head commits to less than the session's own
    messages prove it charged since its first Welcome (empty: it does not): fewer
    entries than that Welcome's count plus the session's charges (`session_charges`),
    central totals below that Welcome's plus its releases', or a worst-off row's totals
    below the worst of the rows its LDP reports went to. A signed End under-charging is
    a curator that did not journal what it released. Only for a transcript that starts
    the session (its first Hello resumes nothing), whose first Welcome carries a head.
    Every head, in any transcript, must also hold the central mechanisms the Welcome
    announces (the dataset's release, charged once before any session sees it):
    `unannounced_charges`."""
    out = unannounced_charges(welcome, heads)
    hello = next((m for _, m in messages if isinstance(m, Hello)), None)
    first = next((c for c in heads if c.kind == "welcome"), None)
    if hello is None or hello.resume or first is None:
        return out
    charges = session_charges(messages, welcome)
    central = [e for e in charges if e.scope == CENTRAL]
    rows: dict[int, list[Entry]] = {}
    for e in charges:
        if e.scope == LOCAL:
            rows.setdefault(e.row, []).append(e)
    w = first.head
    # the worst-off row of a head is the row of the largest (epsilon, delta) pair: at
    # least the Welcome's, and at least each row this session reported on
    worst = max([(w.max_row_epsilon, w.max_row_delta), *(
        (math.fsum(e.epsilon for e in es), math.fsum(e.delta for e in es))
        for es in rows.values())])
    floor = {  # what the head must reach; plain sums, compared with a relative 1e-9 slack
        "entries": w.entries + len(charges),
        "central epsilon": math.fsum([w.central_epsilon, *(e.epsilon for e in central)]),
        "central delta": math.fsum([w.central_delta, *(e.delta for e in central)]),
        "worst-off row epsilon": worst[0],
        "worst-off row delta": worst[1],
    }
    for end in (c for c in heads if c.kind == "end"):
        h = end.head
        held = {"entries": h.entries, "central epsilon": h.central_epsilon,
                "central delta": h.central_delta, "worst-off row epsilon": h.max_row_epsilon,
                "worst-off row delta": h.max_row_delta}
        for what, need in floor.items():
            if what == "worst-off row delta" and h.max_row_epsilon > worst[0] * (1 + 1e-9):
                continue  # a row with more epsilon is the worst off: its delta may be less
            if held[what] < need - 1e-9 * abs(need):
                out.append(f"record {end.record}: the curator's closing ledger head commits "
                           f"to {what} {held[what]:.12g}, less than the {need:.12g} its "
                           f"first Welcome's head (record {first.record}) and this "
                           f"session's {len(charges)} charges prove: charges were left out "
                           "of the curator's ledger")
                break
    return out


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


_EXACT = 1e6  # from here on a float64 is coarser than 1e-12: rounding would not change it


def _round12(values) -> np.ndarray:
    """`values` rounded to 12 decimals, where that changes them (numpy's rounding, which
    would overflow on magnitudes past ~1e296, is not applied to |x| >= 1e6)."""
    a = np.asarray(values, dtype=float)
    return np.where(np.abs(a) < _EXACT, np.round(np.clip(a, -_EXACT, _EXACT), 12), a)


def _row_keys(A: np.ndarray) -> np.ndarray:
    """Each row of A rounded to 12 decimals as one opaque value (its bytes; -0 as 0), so
    that rows are compared all at once by numpy, not as n Python tuples."""
    rounded = np.ascontiguousarray(_round12(A) + 0.0)
    return rounded.view(np.dtype((np.void, rounded.itemsize * rounded.shape[1]))).ravel()


def _rounded_abs(values) -> np.ndarray:
    """|values| rounded to 12 decimals, sorted: a multiset that `_held` counts in."""
    return np.sort(_round12(np.abs(np.asarray(values, dtype=float))).ravel())


def _scalar_keys(v: float) -> set[float]:
    """|v| at 12 decimals by numpy's rounding (the data's) and by Python's (correctly
    rounded decimal): a value one ulp from a tie is looked up both ways."""
    return {float(_round12(abs(v))), round(abs(v), 12)}


def _held(multiset: np.ndarray, value: float) -> int:
    """How many times `value` occurs in a sorted multiset (binary search, O(log n))."""
    return int(np.searchsorted(multiset, value, "right") - np.searchsorted(multiset, value))


def _check_data(messages: list, welcome: Welcome, X: np.ndarray, f: np.ndarray | None,
                report: AuditReport) -> None:
    """No row of X in a private release, no raw f in an LDP reward, and no public number
    that is one individual's value: a scalar field of any message sent that equals a
    value of f (or its negation) held by exactly one row, or (under the private policy)
    an entry of X held by exactly one row, crossed outside any mechanism. A value many rows share (a clip
    bound, a binary outcome) is reported as a note: a declared constant may equal it.
    Values compare at 12 decimals; X and f are searched with numpy (sorted copies, one
    binary search per scalar sent), so that data of 1e7 rows are checked in seconds."""
    ldp = any(m.name == LDP_REWARD for m in welcome.params.mechanisms)
    private = welcome.params.policy == "private"
    # |value| -> how many rows hold it (a sign hides nothing)
    raw = _rounded_abs(f if f is not None else [])
    entries = _rounded_abs(X if private else [])
    rows = None  # X's rows as keys, made when a release has X's width
    noted: set[str] = set()
    for r, m in messages:
        if r.dir != "sent" and report.role == CURATOR:
            continue
        if isinstance(m, Dataset):
            Z = m.release.Z
            if Z.ndim == 2 and Z.shape[1] == X.shape[1] and Z.shape[0]:
                rows = _row_keys(X) if rows is None else rows
                leaked = int(np.isin(_row_keys(Z), rows).sum())
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
            keys = _scalar_keys(v)
            if name in _STRUCTURAL or not any(keys):
                continue
            in_f, in_x = max(((_held(raw, key), _held(entries, key)) for key in keys), key=sum)
            if not (in_f or in_x):
                continue
            if isinstance(m, (Reward, Release)) and name == "value":
                text = f"record {r.seq}: {r.kind} carries a raw objective value {v:.6g}"
                (report.violations if ldp else report.notes).append(
                    text + ("" if ldp else " (allowed: this session has no LDP rewards)"))
                continue
            what = "a value of f" if in_f else "an entry of X"
            held = in_f + in_x
            text = f"record {r.seq}: {r.kind} field {name} = {v:.6g} equals {what}"
            if held == 1:
                report.violations.append(text + " held by exactly one row: one individual's "
                                         "value crossed outside any mechanism")
            elif name not in noted:
                noted.add(name)
                report.notes.append(text + f" shared by {held} rows (a declared constant "
                                    "such as a clip bound may coincide with it)")


@dataclass
class Comparison:
    """The paired audit's findings: disagreements fail it; unacknowledged frames do not."""

    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unacknowledged: dict[str, int] = field(default_factory=dict)  # direction -> frames


@dataclass
class _Connection:
    """One connection's share of a transcript: what it sent and received, as digests."""

    number: int
    start: int  # seq of its first record
    sent: list[tuple[int, str]] = field(default_factory=list)  # (seq, frame digest)
    recv: list[tuple[int, str]] = field(default_factory=list)
    counted: list[tuple[int, str]] = field(default_factory=list)  # refused, past the cap
    replies: list[tuple[int, str]] = field(default_factory=list)  # Errors answering them
    sessionless: list[int] = field(default_factory=list)  # seqs of Errors with no session


@dataclass
class _Aligned:
    """One direction of one pair of connections."""

    problem: str | None = None
    lost: list[int] = field(default_factory=list)  # seqs of the sender's unacknowledged tail


def _connections(records: list[Record], role: str) -> list[_Connection]:
    """A transcript cut at each Hello its party sent (modeler) or accepted (curator). The
    Errors the modeler received last on a connection from a curator connection with no
    session (their link names none: a refusal before any session, or the `session_lost`
    a restarted curator answers a retry on the old connection with, PROTOCOL.md 3) are
    in no curator transcript: they are kept apart (`sessionless`), not matched. One with
    a frame of the session after it on that connection is matched like any other."""
    opening = "recv" if role == CURATOR else "sent"
    out: list[_Connection] = []
    for r in records:
        if not out or (r.kind == "hello" and r.dir == opening):
            out.append(_Connection(len(out) + 1, r.seq))
        c = out[-1]
        if r.kind == REFUSED_SUMMARY:
            c.counted.append((r.count, r.sha256))
            c.replies.append((r.replies, r.replies_sha256))
        elif r.dir == "sent":
            c.sent.append((r.seq, r.digest))
        else:
            c.recv.append((r.seq, r.digest))
            if role == MODELER and _sessionless_error(r):
                c.sessionless.append(r.seq)
            else:
                c.sessionless.clear()  # a frame of the session came after them
    for c in out:
        if c.sessionless:
            c.recv = [(seq, digest) for seq, digest in c.recv if seq not in c.sessionless]
    return out


def _sessionless_error(record: Record) -> bool:
    """Whether `record` holds an Error whose envelope names no session."""
    if record.kind != "error" or not record.frame:
        return False
    try:
        envelope = open_frame(record.frame)
    except ProtocolError:  # a malformed envelope: compared like any frame (and reported)
        return False
    return envelope.link is not None and envelope.link.session == ""


def _chunks_match(digests: list[str], summaries: list[tuple[int, str]]) -> bool:
    """Whether the digests, cut by the summaries' counts in order, hash to theirs."""
    at = 0
    for n, expected in summaries:
        h = hashlib.sha256()
        for d in digests[at:at + n]:
            h.update(bytes.fromhex(d))
        if h.hexdigest() != expected:
            return False
        at += n
    return at == len(digests)


def _align(sent: list[tuple[int, str]], recv: list[tuple[int, str]],
           sender_counted: list[tuple[int, str]], receiver_counted: list[tuple[int, str]],
           label: str, sender: str, receiver: str) -> _Aligned:
    """Match one direction: the receiver's frames are the sender's, in order, but for a
    lost tail and the frames either side only counted (see the module docstring)."""
    budget_r = sum(n for n, _ in receiver_counted)  # received, only counted by the receiver
    budget_s = sum(n for n, _ in sender_counted)  # sent, only counted by the sender
    only_r: list[str] = []
    only_s: list[str] = []
    i = j = 0
    while i < len(sent) or j < len(recv):
        if i < len(sent) and j < len(recv) and sent[i][1] == recv[j][1]:
            i, j = i + 1, j + 1
        elif i < len(sent) and len(only_r) < budget_r:
            only_r.append(sent[i][1])
            i += 1
        elif j < len(recv) and len(only_s) < budget_s:
            only_s.append(recv[j][1])
            j += 1
        else:
            break
    out = _Aligned()
    if j < len(recv):
        out.problem = (f"{label}: {receiver} record {recv[j][0]} "
                       + (f"differs from {sender} record {sent[i][0]}" if i < len(sent) else
                          f"holds a frame the {sender} never recorded sending")
                       + f" (after {i} of {len(sent)} frames sent, {j} of {len(recv)} received)")
        return out
    if not _chunks_match(only_r, receiver_counted):
        out.problem = (f"{label}: the {receiver}'s refused-summary counts {budget_r} frames; "
                       f"{len(only_r)} unrecorded frames found do not hash to it")
    elif not _chunks_match(only_s, sender_counted):
        out.problem = (f"{label}: the {sender}'s refused-summary counts {budget_s} Error "
                       f"replies; {len(only_s)} unrecorded frames found do not hash to it")
    out.lost = [seq for seq, _ in sent[i:]]
    return out


_C2M, _M2C = "curator sent / modeler received", "modeler sent / curator received"
C2M, M2C = "curator->modeler", "modeler->curator"  # keys of Comparison.unacknowledged


def _pair(c: _Connection, m: _Connection) -> tuple[_Aligned, _Aligned]:
    """Both directions of a curator connection and the modeler connection it pairs with."""
    where = f"curator connection {c.number} / modeler connection {m.number}"
    return (_align(c.sent, m.recv, c.replies, m.counted, f"{_C2M} ({where})", CURATOR, MODELER),
            _align(m.sent, c.recv, m.replies, c.counted, f"{_M2C} ({where})", MODELER, CURATOR))


def _pairing(cs: list[_Connection], ms: list[_Connection]) -> list | None:
    """Pair connections in order, leaving unpaired only modeler connections that received
    nothing: a consistent pairing (found forward over the reachable (modeler, curator)
    positions, pairs tried first), or None."""
    back: dict[tuple[int, int], tuple[int, int, tuple] | None] = {(0, 0): None}
    frontier = [0]
    for a, m in enumerate(ms):
        reached: list[int] = []
        for b in frontier:
            if b < len(cs) and (a + 1, b + 1) not in back:
                c2m, m2c = _pair(cs[b], m)
                if c2m.problem is None and m2c.problem is None:
                    back[(a + 1, b + 1)] = (a, b, ("pair", cs[b], m, c2m, m2c))
                    reached.append(b + 1)
            if not m.recv and (a + 1, b) not in back:
                back[(a + 1, b)] = (a, b, ("unseen", m))
                reached.append(b)
        frontier = sorted(set(reached))
    state = (len(ms), len(cs))
    if state not in back:
        return None
    items = []
    while (step := back[state]) is not None:
        items.append(step[2])
        state = step[:2]
    return items[::-1]


def compare(curator: list[Record], modeler: list[Record]) -> Comparison:
    """Whether the two parties' transcripts of one session agree; see the module docstring."""
    cs, ms = _connections(curator, CURATOR), _connections(modeler, MODELER)
    out = Comparison(unacknowledged={C2M: 0, M2C: 0})
    pairing = _pairing(cs, ms)
    if pairing is None:  # no consistent pairing: report the differences in plain order
        for k in range(max(len(cs), len(ms))):
            if k >= len(ms):
                out.violations.append(f"curator connection {cs[k].number} (record "
                                      f"{cs[k].start}) has no counterpart in the modeler's "
                                      "transcript")
            elif k >= len(cs):
                if ms[k].recv:
                    out.violations.append(f"modeler connection {ms[k].number} (record "
                                          f"{ms[k].start}) received {len(ms[k].recv)} frames "
                                          "the curator's transcript does not hold")
            else:
                out.violations += [a.problem for a in _pair(cs[k], ms[k]) if a.problem]
        if not out.violations:
            out.violations.append("the connections of the two transcripts do not pair up")
        return out
    lost: dict[str, list[str]] = {C2M: [], M2C: []}
    for item in pairing:
        if item[0] == "unseen":
            m = item[1]
            out.notes.append(f"modeler connection {m.number} (record {m.start}) never reached "
                             f"the session: its {len(m.sent)} frames are unacknowledged")
            out.unacknowledged[M2C] += len(m.sent)
            lost[M2C] += [f"modeler record {seq}" for seq, _ in m.sent]
            continue
        _, c, m, c2m, m2c = item
        if m.sessionless:
            out.notes.append(f"modeler connection {m.number}: {len(m.sessionless)} Error(s) "
                             f"from a curator connection with no session (record "
                             f"{m.sessionless[0]}{', ...' if len(m.sessionless) > 1 else ''}"
                             "), in no curator transcript: not compared")
        out.unacknowledged[C2M] += len(c2m.lost)
        out.unacknowledged[M2C] += len(m2c.lost)
        lost[C2M] += [f"curator record {seq}" for seq in c2m.lost]
        lost[M2C] += [f"modeler record {seq}" for seq in m2c.lost]
    if len(cs) > 1:
        out.notes.append(f"the session ran over {len(cs)} connections of the curator and "
                         f"{len(ms)} of the modeler")
    for direction, where in lost.items():
        if where:
            shown = ", ".join(where[:5]) + (", ..." if len(where) > 5 else "")
            out.notes.append(f"unacknowledged, {direction}: {len(where)} frames sent and never "
                             f"received, in flight when a connection ended ({shown})")
    return out


def _link_of(record: Record):
    """The link of the envelope a record holds (a split envelope keeps it in the record),
    or None."""
    if record.link is not None:
        peer = record.link.get("peer")
        return peer if isinstance(peer, bytes) and len(peer) == 32 else None
    if not record.frame:
        return None
    try:
        env = open_frame(record.frame)
    except ProtocolError:
        return None
    return None if env.link is None else env.link.peer


def _unheld_receipts(receiver: str, rrecords: list[Record], sender: str,
                     srecords: list[Record]) -> list[str]:
    """Frames the `receiver` acknowledged (the receipts in its frames, as the sender's
    transcript holds them) that the receiver's own transcript does not record receiving:
    a frame acknowledged was received, so it cannot pass for one lost in flight."""
    held = {r.digest for r in rrecords if r.dir == "recv" and r.kind != REFUSED_SUMMARY}
    sent = {r.digest: r.seq for r in srecords if r.dir == "sent" and r.kind != REFUSED_SUMMARY}
    out = []
    for r in srecords:
        if r.dir != "recv" or r.kind in (REFUSED, REFUSED_SUMMARY):
            continue
        peer = _link_of(r)
        if peer is None or peer == ZERO:
            continue
        digest = peer.hex()
        if digest in sent and digest not in held:
            out.append(f"the {receiver} acknowledged receiving {sender} record {sent[digest]} "
                       f"(in the frame at {sender} record {r.seq}), which the {receiver}'s "
                       "transcript does not hold (cut or edited)")
    return out[:20]


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
                  anchors: dict | None = None, X=None, f=None,
                  blobs: str | Path | None = None,
                  keys: dict[str, str] | None = None) -> list[AuditReport]:
    """Audit both transcripts of one session and check that they agree (unacknowledged
    frames are a note on both reports, with their counts per direction)."""
    anchors = anchors or {}
    reports = [audit_transcript(curator_path, anchors.get(CURATOR), X, f, blobs, keys),
               audit_transcript(modeler_path, anchors.get(MODELER), blobs=blobs, keys=keys)]
    comparison = compare(readable_records(curator_path), readable_records(modeler_path))
    for problem in comparison.violations:
        reports[0].violations.append(f"transcripts disagree: {problem}")
    for report in reports:
        report.notes += comparison.notes
        report.unacknowledged = comparison.unacknowledged
        report.paired = True
    curator, modeler = readable_records(curator_path), readable_records(modeler_path)
    for receiver, rrecords, sender, srecords, report in (
            (MODELER, modeler, CURATOR, curator, reports[1]),  # on the cut transcript's report
            (CURATOR, curator, MODELER, modeler, reports[0])):
        for problem in _unheld_receipts(receiver, rrecords, sender, srecords):
            report.violations.append(f"transcripts disagree: {problem}")
    if reports[0].session != reports[1].session:
        reports[0].violations.append(f"the transcripts are of different sessions "
                                     f"({reports[0].session} vs {reports[1].session})")
    return reports


def check_signatures(messages: list, role: str, keys: dict[str, str] | None,
                     report: AuditReport) -> None:
    """Verify the envelopes of every frame recorded (protocol.signing): with `keys`, the
    signature of each frame the party sent (its key) and received (the peer's key), and
    that the handshake announced those keys; with or without them, the links: each frame
    the party sent names its own record (seq and previous hash: the chain the party
    signed) and the last frame it had accepted on that connection; each frame it received
    names its session, acknowledges only a frame this transcript records sending on that
    connection (never going back), and the peer's record numbers never go back (one
    number, one previous hash). Sets `report.signatures`; every failure is a violation,
    the first one named in `signatures`."""
    peer_role = MODELER if role == CURATOR else CURATOR
    vks = {}
    if keys is not None:
        try:
            vks = {r: verify_key(keys[r]) for r in (CURATOR, MODELER)}
        except (KeyError, ProtocolError) as exc:
            report.violations.append(f"signing keys: {exc}")
            report.signatures = f"FAILED ({exc})"
            return
    failures: list[tuple[int, str]] = []
    opening = "recv" if role == CURATOR else "sent"
    counted_replies = any(r.kind == REFUSED_SUMMARY and r.replies for r, _ in messages)
    sent: dict[str, int] = {}  # this connection: frame digest -> order sent
    acked, last_recv = -1, ZERO
    peer_prev: dict[int, bytes] = {}
    peer_seq = -1
    session = ""
    signed = bare = 0
    for r, m in messages:
        if r.kind in (REFUSED, REFUSED_SUMMARY) or not r.frame:
            continue
        if r.kind == "hello" and r.dir == opening:  # a new connection
            sent, acked, last_recv, peer_seq = {}, -1, ZERO, -1
        try:
            env = open_frame(r.frame)
        except ProtocolError as exc:
            failures.append((r.seq, f"its envelope is malformed ({exc})"))
            continue
        if isinstance(m, Hello):
            session = m.resume
        elif isinstance(m, Welcome):
            session = m.session
        who = role if r.dir == "sent" else peer_role
        if env.bare:
            bare += 1
            if vks:
                failures.append((r.seq, f"the {r.kind} {r.dir} is not signed"))
            if r.dir == "recv":
                last_recv = hashlib.sha256(r.frame).digest()
            continue
        link = env.link
        signed += bool(env.sig)
        if vks:
            if isinstance(m, (Hello, Welcome)):
                owner = MODELER if isinstance(m, Hello) else CURATOR
                if m.sign_key != keys[owner]:
                    failures.append((r.seq, f"the {r.kind} announces the {owner} signing key "
                                     f"{key_id(m.sign_key)}, the auditor's is "
                                     f"{key_id(keys[owner])}"))
            if not verify(env, vks[who]):
                failures.append((r.seq, f"the {who}'s signature on the {r.kind} {r.dir} "
                                 "does not verify with its key"))
        # an Error received from a peer connection with no session (PROTOCOL.md 3): its
        # link names no session and counts from 0 on that connection
        sessionless = (r.dir == "recv" and isinstance(m, Error) and link.session == ""
                       and (m.code == ErrorCode.SESSION_LOST.value or peer_seq < 0))
        if link.session != session and not sessionless:
            failures.append((r.seq, f"the {r.kind} {r.dir} is linked to session "
                             f"{link.session[:40]!r}, not {session[:40]!r}"))
        if r.dir == "sent":
            if link.seq != r.seq or link.prev.hex() != r.prev:
                failures.append((r.seq, f"the {role} signed this {r.kind} as its record "
                                 f"{link.seq} after {link.prev.hex()[:16]}...; the transcript "
                                 f"has it as record {r.seq} after {r.prev[:16]}... (records "
                                 "edited, removed or inserted before it)"))
            if link.peer != last_recv:
                failures.append((r.seq, f"the {r.kind} sent acknowledges another frame than "
                                 "the last one this transcript records receiving"))
            sent[hashlib.sha256(r.frame).hexdigest()] = len(sent)
            continue
        if sessionless:
            pass  # another connection's numbering: neither going back nor a second prev
        elif link.seq < peer_seq or peer_prev.get(link.seq, link.prev) != link.prev:
            failures.append((r.seq, f"the {peer_role}'s signed record number {link.seq} "
                             f"goes back (after {peer_seq}) or names two previous records"))
        else:
            peer_seq = max(peer_seq, link.seq)
            peer_prev[link.seq] = link.prev
        if link.peer != ZERO:
            at = sent.get(link.peer.hex())
            if at is None:
                if counted_replies:
                    report.notes.append(f"record {r.seq}: acknowledges a frame not recorded "
                                        "(an Error reply counted past the refused cap?)")
                else:
                    failures.append((r.seq, f"the {peer_role} acknowledges a frame this "
                                     "transcript never recorded sending (frames sent were "
                                     "removed or edited)"))
            elif at < acked:
                failures.append((r.seq, f"the {peer_role} acknowledges an older frame than "
                                 "before"))
            else:
                acked = at
        elif acked >= 0 and not sessionless:
            failures.append((r.seq, f"the {peer_role} acknowledges nothing after it "
                             "acknowledged a frame"))
        last_recv = hashlib.sha256(r.frame).digest()
    for seq, text in failures:
        report.violations.append(f"record {seq}: signatures: {text}")
    if failures:
        seq, text = failures[0]
        report.signatures = f"FAILED at record {seq} ({text})"
    elif vks:
        report.signatures = "verified"
    elif signed:
        report.signatures = "unverified (signed, but no public keys were given to check them)"
    else:
        report.signatures = "unsigned"
