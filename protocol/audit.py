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
messages; that the curator's and the modeler's transcripts of one session agree (see
`protocol.audit_pair`); and, given the curator's data, that no row of X and (in an LDP
session) no raw objective value appears in anything sent.

Where the checks live: this module audits one transcript (`audit_transcript`: the policy
replay, the refusals, the signatures) and a session (`audit_session`); the report and the
reading of a transcript are in `protocol.audit_records`, the ledger and budget checks in
`protocol.audit_ledger`, the data check in `protocol.audit_data`, the comparison of two
transcripts in `protocol.audit_pair`. This module stays the public entry: the names
others use are importable from here.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np

from pobo.protocol.audit_data import _check_data, numeric_fields
from pobo.protocol.audit_ledger import (
    RELEASE_COST, budget_changes, budget_of, charged_floors, checkpoints, recompute_ledger,
    session_charges, unannounced_charges, undercharged,
)
from pobo.protocol.audit_pair import C2M, M2C, Comparison, _unheld_receipts, compare
from pobo.protocol.audit_records import (
    AuditReport, _decoded, chain, decoded_messages, readable_records, role_of_messages,
)
from pobo.protocol.checkpoint import forks, inconsistencies
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import PROCESS_ONLY, PROCESS_SCOPE
from pobo.protocol.messages import PROTOCOL_VERSION, Dataset, End, Error, Hello, Query, Welcome
from pobo.protocol.signing import ZERO, key_id, open_frame, verify, verify_key
from pobo.protocol.policy import (
    CURATOR, IDENTITY, MODELER, NON_PRIVATE, POLICIES, WITHDRAWING, Boundary,
)
from pobo.protocol.transcript import REFUSED, REFUSED_SUMMARY, Record, blob_dirs

__all__ = [
    "AUDITED_VERSIONS", "C2M", "M2C", "RELEASE_COST", "AuditReport", "Comparison",
    "audit_session", "audit_transcript", "budget_changes", "budget_of", "chain",
    "charged_floors", "check_signatures", "checkpoints", "compare", "dataset_is_dp",
    "decoded_messages", "numeric_fields", "readable_records", "recompute_ledger",
    "role_of_messages", "session_charges", "signed_claims", "unannounced_charges",
    "undercharged",
]

# transcripts of these protocol versions are audited (version 4 only added rules a
# version-3 session never needed, PROTOCOL.md: a transcript kept from before still audits)
AUDITED_VERSIONS = frozenset(range(3, PROTOCOL_VERSION + 1))


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
