"""The paired audit: whether the curator's and the modeler's transcripts of one session
agree (`compare`), and whether a frame one party acknowledged is in its own transcript
(`_unheld_receipts`). `protocol.audit.audit_session` runs both.

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

import hashlib
from dataclasses import dataclass, field

from pobo.protocol.errors import ProtocolError
from pobo.protocol.policy import CURATOR, MODELER
from pobo.protocol.signing import ZERO, open_frame
from pobo.protocol.transcript import REFUSED, REFUSED_SUMMARY, Record


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
