"""Signed ledger checkpoints: a hash chain over the dataset ledger's entries, and its audit.

The chain: head_0 = SHA-256("pobo ledger chain v1"), head_k = SHA-256(head_(k-1) ||
record_k), where record_k is the canonical encoding (`entry_record`) of the k-th entry in
journal order: its session, mechanism, epsilon, delta, scope, row and time. A checkpoint
(`messages.LedgerHead`) is (k, head_k) with the totals the ledger reported at that point;
the curator puts one in every Welcome and every End it sends, and signs the frame, so
each modeler's transcript holds a signed commitment to the budget spent so far.

A ledger only appends, so an honest curator's checkpoints are one chain: two of them that
commit to the same number of entries have the same head, and a later one never commits
to fewer entries than an earlier one. `forks` checks that over the checkpoints of several
transcripts (of one dataset): a journal rolled back (restored from a copy) and spent
again breaks it. SHA-256 from hashlib; the signatures are the frames' (protocol.signing).
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii

from pobo.protocol.errors import PolicyViolation, ProtocolError
from pobo.protocol.messages import NO_LEDGER_HEAD, LedgerHead

GENESIS_HEAD = hashlib.sha256(b"pobo ledger chain v1").hexdigest()
_HEX = frozenset("0123456789abcdef")


def entry_record(session: str, mechanism: str, epsilon: float, delta: float, scope: str,
                 row: int, time: float) -> bytes:
    """The canonical bytes of one ledger entry: a compact JSON array, floats in their
    exact hexadecimal form (float.hex), so that every reader hashes the same bytes.
    (Formatted here with json's own string escaping, 3x faster than `json.dumps`, which
    builds an encoder per call: a curator's start re-hashes every entry; the same bytes,
    tests/test_checkpoint_records.py. Any other value, an edited journal's, goes through
    `json.dumps` itself.)"""
    if type(session) is str and type(mechanism) is str and type(scope) is str:
        return (f'[{_quoted(session)},{_quoted(mechanism)},"{float(epsilon).hex()}",'
                f'"{float(delta).hex()}",{_quoted(scope)},{int(row)},'
                f'"{float(time).hex()}"]').encode()
    return json.dumps([session, mechanism, float(epsilon).hex(), float(delta).hex(), scope,
                       int(row), float(time).hex()], separators=(",", ":"),
                      ensure_ascii=True).encode()


_quoted = encode_basestring_ascii  # a JSON string literal, as json.dumps(ensure_ascii) writes it


def next_digest(digest: bytes, record: bytes) -> bytes:
    """head_k from head_(k-1) and the k-th entry's record, both raw 32-byte digests (a
    loop over many entries keeps them raw: no hex per entry; `chain_head` gives hex)."""
    return hashlib.sha256(digest + record).digest()


def chain_head(records: Iterable[bytes], head: str = GENESIS_HEAD) -> str:
    """The head after `records`, starting from `head` (the genesis by default)."""
    digest = bytes.fromhex(head)
    for record in records:
        digest = next_digest(digest, record)
    return digest.hex()


def ledger_head(entries: int, chain: str, ledger: dict, root: str = "",
                log: str = "") -> LedgerHead:
    """The checkpoint of a ledger of `entries` entries whose chain ends at `chain`, with
    the basic-composition totals of `ledger` (the layout of protocol.ledger.ledger_dict:
    central epsilon and delta, the worst-off row's local epsilon and delta): plain sums
    that anyone recomputes exactly from the entries, not the accountant's tighter (and
    numerically approximate) figures. `root` and `log`: the Merkle tree head of the same
    entries and the ledger's id (protocol version 6; '' for a chain-only head)."""
    central, local = ledger["central"], ledger["local"]
    pick = lambda part, key: float(part[key + "_basic"] if key + "_basic" in part  # noqa: E731
                                   else part[key])
    return LedgerHead(int(entries), chain, pick(central, "epsilon"), pick(central, "delta"),
                      pick(local, "max_row_epsilon"), pick(local, "max_row_delta"), root, log)


def check_head(head: LedgerHead, sender: str) -> None:
    """Raise a typed ProtocolError (malformed) for a checkpoint no ledger can have: a chain
    that is not 64 lowercase hex digits, a negative count or total, or totals without a
    chain; a modeler's End carrying one is a PolicyViolation (it keeps no ledger)."""
    if head == NO_LEDGER_HEAD:
        return
    if sender != "curator":
        raise PolicyViolation(f"the {sender} sent a ledger head: only the curator keeps one")
    if len(head.chain) != 64 or not set(head.chain) <= _HEX:
        raise ProtocolError(f"a ledger head's chain must be 64 lowercase hex digits, got "
                            f"{head.chain[:70]!r}")
    if head.root and not _is_hex(head.root, 64) or head.log and not _is_hex(head.log, 32):
        raise ProtocolError("a ledger head's root is 64 lowercase hex digits and its log 32 "
                            f"(or both ''), got {head.root[:70]!r} and {head.log[:40]!r}")
    if bool(head.root) != bool(head.log):
        raise ProtocolError("a ledger head names its log and its root together, or neither")
    totals = (head.central_epsilon, head.central_delta, head.max_row_epsilon,
              head.max_row_delta)
    if head.entries < 0 or any(not (math.isfinite(v) and v >= 0) for v in totals):
        raise ProtocolError(f"a ledger head commits to {head.entries} entries and totals "
                            f"{totals}: counts and totals must be >= 0")


MAX_PROOF = 128  # nodes in a consistency proof: 2 log2(size) + 1 is 127 at 2^63 entries


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and set(text) <= _HEX


def check_seen(log: str, seen: int) -> None:
    """Raise a typed ProtocolError for a Hello's last-seen head that no log can have."""
    if seen < 0 or (log and not _is_hex(log, 32)) or (seen > 0) != bool(log):
        raise ProtocolError("a hello's ledger_log is 32 lowercase hex digits with a "
                            f"ledger_seen > 0, or '' with 0; got {log[:40]!r}, {seen}")


def check_proof(proof: tuple[str, ...], head: LedgerHead, sender: str) -> None:
    """Raise a typed ProtocolError for a Welcome's or End's consistency proof that is not
    a list of at most MAX_PROOF node hashes (64 hex each) beside a Merkle head; a
    modeler's is a PolicyViolation (it keeps no ledger)."""
    if not proof:
        return
    if sender != "curator":
        raise PolicyViolation(f"the {sender} sent a consistency proof: only the curator "
                              "keeps a ledger")
    if not head.root or len(proof) > MAX_PROOF or not all(_is_hex(p, 64) for p in proof):
        raise ProtocolError(f"a consistency proof is at most {MAX_PROOF} node hashes of 64 "
                            "lowercase hex digits, beside a ledger head with a root")


def extends(seen: LedgerHead, head: LedgerHead, proof_from: int | None,
            proof: tuple[str, ...]) -> str | None:
    """Why `head` is not the log of `seen` grown by appending only (None: it is, or the two
    are of different logs): fewer entries, another root at the same size, or a consistency
    proof (RFC 9162 section 2.1.4, from `proof_from` entries) that does not verify from
    `seen`'s root. A proof from another size than `seen`'s proves nothing about it.
    `proof_from` None: no proof was asked for (a Hello that named no head), so a larger
    head is not checked further."""
    from pobo.protocol.merkle import verify_consistency

    if not (seen.root and head.root) or seen.log != head.log:
        return None
    m, n = seen.entries, head.entries
    if n < m:
        return (f"the curator's ledger head commits to {n} entries, fewer than the {m} of "
                f"the head it signed before (root {seen.root[:16]}...): its journal was "
                "rolled back")
    if n == m:
        return None if head.root == seen.root else (
            f"the curator's ledger head of {n} entries has root {head.root[:16]}..., the "
            f"head it signed before of as many entries {seen.root[:16]}...: its journal "
            "was rolled back and written again")
    if proof_from is None:
        return None
    if proof_from != m:
        return (f"the curator's Welcome carries no consistency proof from the head of {m} "
                f"entries signed before (its proof is from {proof_from}): nothing shows that "
                f"its head of {n} entries extends it")
    if not verify_consistency(m, n, [bytes.fromhex(p) for p in proof],
                              bytes.fromhex(seen.root), bytes.fromhex(head.root)):
        return (f"the curator's ledger head of {n} entries does not extend the head of {m} "
                f"entries it signed before (root {seen.root[:16]}...): the consistency proof "
                "fails, so entries before the old size were changed (a journal rolled back "
                "and written again past it)")
    return None


@dataclass(frozen=True)
class Checkpoint:
    """A ledger head as a transcript records it: the session and message (welcome or end)
    that carried it, when the party recorded it, when the connection that carried it
    was opened (the party recorded its Hello), and where (transcript, record)."""

    session: str
    kind: str
    time: float
    head: LedgerHead
    path: str = ""
    record: int = -1
    opened: float = 0.0
    proof_from: int = -1  # version 6: the size its consistency proof starts from (-1: none)
    proof: tuple[str, ...] = ()

    def describe(self) -> str:
        """'session 0123456789ab's end (PATH record N)'."""
        return f"session {self.session[:12]}'s {self.kind} ({self.path} record {self.record})"


def charged_floor(welcome: Checkpoint, charges: int, last: Checkpoint) -> Checkpoint:
    """What a fresh session's transcript proves of the ledger: its Welcome's head plus
    one entry per LDP report it sent, held by the time of the last one (`last`: that
    record, as a Checkpoint of kind 'charged' with only its count meaningful)."""
    return Checkpoint(welcome.session, "charged", last.time,
                      LedgerHead(welcome.head.entries + charges, "", 0.0, 0.0, 0.0, 0.0),
                      last.path, last.record, welcome.opened)


def forks(points: list[Checkpoint], limit: int = 3,
          floors: list[Checkpoint] = ()) -> list[tuple[Checkpoint, str]]:
    """The checkpoints that break one chain, each with a one-line reason (at most
    `limit`): two that commit to the same number of entries with different heads; one
    that commits to fewer entries than one recorded before its connection was opened
    (the curator computed it later: the ledger went back); or, in one transcript, fewer
    than the one before it; or fewer than a `floor` (`charged_floors`: what a session's
    own transcript shows was charged by then) recorded before its connection opened.
    Connections that overlap in time are held to the first rule only: their frames may
    cross in flight."""
    unique: dict[tuple, Checkpoint] = {}
    for p in sorted(points, key=lambda p: p.time):  # both transcripts of a session: once
        unique.setdefault((p.session, p.kind, p.head.entries, p.head.chain), p)
    out: list[tuple[Checkpoint, str]] = []
    seen: dict[int, Checkpoint] = {}
    for q in sorted(points, key=lambda p: (p.time, p.record)):
        first = seen.setdefault(q.head.entries, q)
        if first.head.chain != q.head.chain:
            out.append((q, f"ledger fork: {first.describe()} and {q.describe()} both commit "
                           f"to {q.head.entries} entries, with different heads "
                           f"({first.head.chain[:12]}... vs {q.head.chain[:12]}...): the "
                           "curator's journal was rolled back or forked"))
        else:
            ahead = [p for p in unique.values() if p.head.entries > q.head.entries
                     and (p.time <= q.opened or (p.path == q.path and p.record < q.record))]
            if ahead:
                p = max(ahead, key=lambda p: p.head.entries)
                out.append((q, f"ledger fork: {q.describe()} commits to {q.head.entries} "
                               f"entries, after {p.describe()} committed to "
                               f"{p.head.entries}: the curator's journal was rolled back"))
            else:
                under = [f for f in floors if f.session != q.session and f.time <= q.opened
                         and f.head.entries > q.head.entries]
                if under:
                    f = max(under, key=lambda f: f.head.entries)
                    out.append((q, f"ledger fork: {q.describe()} commits to "
                                   f"{q.head.entries} entries, after session "
                                   f"{f.session[:12]}'s transcript ({f.path}) showed "
                                   f"{f.head.entries} charged by record {f.record}: entries "
                                   "were taken out of the curator's journal"))
        if len(out) >= limit:
            break
    return out


def inconsistencies(points: list[Checkpoint],
                    limit: int = 3) -> tuple[list[tuple[Checkpoint, str]], list[str]]:
    """The Merkle checks over the heads of several transcripts (protocol version 6): for
    each log, two heads of one size with different roots, and every consistency proof a
    Welcome or End carries verified from every head signed at the size it starts from
    (`extends`); each failure with a one-line reason naming both heads (at most
    `limit`). Second, notes: heads of one log that no verified proof links (the
    transcripts given do not show that one extends the other; the journal does:
    `pobo ledger`)."""
    merkle = [p for p in points if p.head.root]
    out: list[tuple[Checkpoint, str]] = []
    notes: list[str] = []
    for log in sorted({p.head.log for p in merkle}):
        group = sorted((p for p in merkle if p.head.log == log), key=lambda p: (p.time, p.record))
        at: dict[int, Checkpoint] = {}
        for q in group:
            first = at.setdefault(q.head.entries, q)
            if first.head.root != q.head.root:
                out.append((q, f"ledger inconsistent: {first.describe()} and {q.describe()} "
                               f"both commit to {q.head.entries} entries of log {log[:12]}, "
                               f"with different roots ({first.head.root[:12]}... vs "
                               f"{q.head.root[:12]}...): the curator's journal was rolled back"
                               " and written again"))
        parent = {n: n for n in at}  # sizes linked by verified proofs: one component each

        def find(n: int) -> int:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n
        for q in group:
            if q.proof_from <= 0 or q.proof_from == q.head.entries:
                continue
            base = at.get(q.proof_from)
            if base is None:
                continue  # the head it proves from is in no transcript given
            why = extends(base.head, q.head, q.proof_from, q.proof)
            if why is None:
                parent[find(q.head.entries)] = find(q.proof_from)
            else:
                out.append((q, f"ledger inconsistent: {q.describe()} against "
                               f"{base.describe()}: {why}"))
        if len({find(n) for n in at}) > 1 and not out:
            notes.append(f"ledger log {log[:12]}: the heads of {len(at)} sizes "
                         f"({', '.join(map(str, sorted(at)[:8]))}) are not all linked by "
                         "consistency proofs in these transcripts (a modeler that kept no "
                         "earlier head, or another's sessions): `pobo ledger` over the journal "
                         "checks them all")
        if len(out) >= limit:
            break
    return out[:limit], notes
