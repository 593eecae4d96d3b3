"""The dataset ledger as an append-only Merkle log (protocol.merkle, RFC 9162), both sides.

Curator: `LedgerLog` follows the journal's ledger as `checkpoints.LedgerChain` does (in
chunks, also entries another process appended) and keeps, besides the hash chain, the
RFC 9162 tree of the same entry records: the hashes of its aligned subtrees of 16
entries and up, in memory (4 bytes an entry: 4 MB for a million), and the open block's
leaves. A tree head and a consistency proof then cost O(log n) hashes plus at most one
block of 16 entries read back from the journal, never the whole ledger (measured:
benchmarks/merkle_log.py; blocks of 256 took 14x the chain's time per Welcome).
The log's id (`log_id`, 128 random bits) is made once per journal and kept in it: a
journal restored from a copy keeps its id, so its heads are checked against the ones a
modeler saw before.

Modeler: `SeenHeads` keeps the last head it saw of each (curator key, log) in a small JSON
file away from any journal (by default in the user's pobo home, beside its keys), and
`check` refuses a head that is not an extension of it (protocol.checkpoint.extends):
a rolled-back journal, even restored together with the curator's head file, or one
rolled back and padded past the old size. `check_welcome_head` and `check_closing_head`
are what a modeler's session runs on the curator's Welcome and closing End.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from dataclasses import asdict
from pathlib import Path

from pobo.parties.checkpoints import LedgerChain
from pobo.parties.journal import Journal, JournalError
from pobo.protocol.channel import Channel
from pobo.protocol.checkpoint import check_head, entry_record, extends
from pobo.protocol.errors import LedgerInconsistent, PeerGone, PeerTimeout, ProtocolError
from pobo.protocol.filelock import lock, unlock
from pobo.protocol.merkle import MerkleTree, leaf_hash
from pobo.protocol.messages import NO_LEDGER_HEAD, End, Error, LedgerHead, Welcome

LOG_KEY = "ledger_log"  # the journal's meta key of its log id
FLOOR = 4  # subtrees of 2^FLOOR entries and up are kept in memory; below, read back


def log_id(journal: Journal) -> str:
    """The journal's ledger log id (32 hex digits), made once from `secrets`."""
    return journal.meta(LOG_KEY) or journal.bind(LOG_KEY, secrets.token_hex(16))


class LedgerLog(LedgerChain):
    """A journal's ledger as a hash chain (the parent's) and an RFC 9162 Merkle tree."""

    def __init__(self, journal: Journal, floor: int = FLOOR) -> None:
        super().__init__(journal)
        self.floor = floor
        self.log = log_id(journal)
        self._reset()

    def _reset(self) -> None:
        self.tree = MerkleTree(self.floor, self._block_leaves)
        self._block_after: list[int] = []  # per block of 2^floor entries: the n before it

    def head_at(self, entries: int) -> str | None:
        if entries < self.entries:  # the chain starts again: so does the tree
            self._reset()
        return super().head_at(entries)

    def root(self, entries: int | None = None) -> str:
        """The tree head's root (hex) over the first `entries` entries (None: all read)."""
        return self.tree.root(entries).hex()

    def consistency(self, first: int, second: int) -> tuple[str, ...]:
        """RFC 9162's consistency proof from the head of `first` entries to `second` (hex)."""
        return tuple(p.hex() for p in self.tree.consistency(first, second))

    def _extend(self, stop: int | None) -> None:
        """Hash the entries appended since (chain and tree), up to `stop` entries in all."""
        from pobo.protocol.checkpoint import next_digest

        while stop is None or self.entries < stop:
            limit = self.CHUNK if stop is None else min(self.CHUNK, stop - self.entries)
            rows = self.journal.ledger_rows(self._last_n, limit)
            digest, last = bytes.fromhex(self.head), self._last_n
            for n, *entry in rows:
                record = entry_record(*entry)
                digest = next_digest(digest, record)
                if self.tree.size % (1 << self.floor) == 0:
                    self._block_after.append(last)
                self.tree.append(leaf_hash(record))
                last = n
            if rows:
                self.head, self.entries, self._last_n = digest.hex(), self.entries + len(rows), last
            if len(rows) < limit:
                return

    def _block_leaves(self, start: int, stop: int) -> list[bytes]:
        """The leaf hashes of entries [start, stop) of one block, read back from the journal."""
        rows = self.journal.ledger_rows(self._block_after[start >> self.floor], stop - start)
        if len(rows) != stop - start:  # entries taken out under a running curator
            raise JournalError(f"the journal {self.journal.path} no longer holds ledger "
                               f"entries {start} to {stop - 1}, which its heads committed to")
        return [leaf_hash(entry_record(*row[1:])) for row in rows]


class SeenHeads:
    """The last ledger head a modeler saw of each curator key's log, in a JSON file (kept
    away from any journal: a curator's folder restored from a backup cannot take it
    back). Written atomically under a file lock; a head replaces the stored one only when
    it holds more entries (a store never goes back)."""

    NAME = "ledger_heads.json"  # its name in the user's pobo home

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise LedgerInconsistent(f"the ledger heads file {self.path} is unreadable "
                                     f"({type(exc).__name__}: {exc}): remove it or repair "
                                     "it") from None
        return data.get("heads", {}) if isinstance(data, dict) else {}

    def get(self, key: str, log: str) -> LedgerHead | None:
        """The head stored for the curator `key`'s log `log`, or None."""
        item = self._read().get(f"{key}/{log}")
        if item is None:
            return None
        try:
            head = LedgerHead(**item["head"])
            check_head(head, "curator")
        except (KeyError, TypeError, ProtocolError) as exc:
            raise LedgerInconsistent(f"the ledger heads file {self.path} holds a bad head "
                                     f"for key {key[:12]}... ({exc})") from None
        return head

    def last(self, key: str) -> LedgerHead | None:
        """The head of the log of `key` seen most recently (what a Hello names), or None."""
        items = [(v.get("seen", 0.0), k.split("/", 1)[1]) for k, v in self._read().items()
                 if k.split("/", 1)[0] == key and "/" in k]
        return self.get(key, max(items)[1]) if items else None

    def check(self, key: str, head: LedgerHead, proof_from: int | None,
              proof: tuple[str, ...], named: LedgerHead | None = None) -> None:
        """Raise LedgerInconsistent (one line) unless `head` extends the stored head of its
        log (protocol.checkpoint.extends; nothing stored: first contact, nothing to
        check; `proof_from` None: no proof was asked, fewer entries or another root at
        the same size are still refused). With `named`, the head the Hello named, of
        this log: checked against that one (a session of this modeler running alongside
        may have stored a later head since the Hello left; the next Hello names that)."""
        if not key or head == NO_LEDGER_HEAD or not head.root:
            return
        seen = named if named is not None and named.log == head.log else self.get(key, head.log)
        why = None if seen is None else extends(seen, head, proof_from, proof)
        if why is not None:
            raise LedgerInconsistent(f"{why} (the last head of log {head.log[:12]} seen from "
                                     f"curator key {key[:12]}..., kept in {self.path}); "
                                     "refusing the session")

    def other_log(self, key: str, head: LedgerHead, about: str) -> str | None:
        """A warning (one line) when `head` is of a log this store has not seen for `key`,
        but another log of `key` was seen for the same dataset (`about`: the Welcome's
        scenario and n): the curator's journal was replaced, reset or its log id edited,
        so its earlier heads cannot be compared. Not a refusal: a curator may rightly
        begin a new ledger (a new dataset of the same shape); None otherwise."""
        if not key or not head.log:
            return None
        items = self._read()
        if f"{key}/{head.log}" in items:
            return None
        for name, item in items.items():
            if name.split("/", 1)[0] == key and item.get("about") == about:
                return (f"curator key {key[:12]}... serves a new ledger log {head.log[:12]} "
                        f"for {about}, where it kept log {name.split('/', 1)[1][:12]} "
                        f"({item['head']['entries']} entries seen): its journal was replaced "
                        "or reset, and its earlier heads cannot be checked against this one")
        return None

    def keep(self, key: str, head: LedgerHead, about: str = "") -> None:
        """Store `head` for the curator `key`'s log (with `about`, the dataset it is of),
        unless a head of as many entries or more is stored already."""
        if not key or head == NO_LEDGER_HEAD or not head.root:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "a") as guard:
            held = lock(guard.fileno(), timeout=10.0)
            try:
                heads = self._read()
                name = f"{key}/{head.log}"
                old = heads.get(name)
                if old is not None and old["head"]["entries"] >= head.entries:
                    old["seen"] = time.time()
                else:
                    heads[name] = {"head": asdict(head), "seen": time.time(),
                                   "about": about or (old or {}).get("about", "")}
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                with open(tmp, "w") as f:
                    json.dump({"version": 1, "heads": heads}, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            finally:
                if held:
                    unlock(guard.fileno())


def pinned_key(peer_keys: frozenset[str] | None) -> str:
    """The one curator key a modeler expects ('' when it takes any or several): only
    then can its Hello name the last head it saw of that key's ledger."""
    return next(iter(peer_keys)) if peer_keys is not None and len(peer_keys) == 1 else ""


def named_head(heads: SeenHeads | None, peer_keys: frozenset[str] | None) -> LedgerHead | None:
    """The head a modeler's Hello names: the last one it saw from the curator key it
    expects (None: no store, no single key expected, or nothing seen yet)."""
    key = pinned_key(peer_keys)
    return None if heads is None or not key else heads.last(key)


def proof_start(named: LedgerHead | None, head: LedgerHead) -> int | None:
    """The size a Welcome's consistency proof starts from, given the head the Hello named
    (None: it named none of this log, so no proof was asked)."""
    return named.entries if named is not None and named.log == head.log else None


async def check_welcome_head(channel: Channel, heads: SeenHeads | None, welcome: Welcome,
                             named: LedgerHead | None) -> None:
    """Refuse the session unless the Welcome's ledger head extends the last one seen of its
    log from this curator key (its consistency proof starting at `named`, the head the
    Hello named): a typed Error tells the curator why, and the transcript records it
    before LedgerInconsistent is raised. Else the head is kept as the last seen."""
    if heads is None:
        return
    key = channel.peer_key or ""
    try:
        heads.check(key, welcome.ledger, proof_start(named, welcome.ledger),
                    welcome.consistency, named)
    except LedgerInconsistent as exc:
        with contextlib.suppress(PeerGone, PeerTimeout):
            await channel.send(Error(exc.code.value, str(exc)[:1000]))
        raise
    about = dataset_of(welcome)
    warning = heads.other_log(key, welcome.ledger, about)
    if warning is not None:
        logging.getLogger("pobo.session").warning("%s", warning)
    heads.keep(key, welcome.ledger, about)


def dataset_of(welcome: Welcome) -> str:
    """What a kept head is of, as the Welcome tells: 'scenario SCENARIO, n = N'."""
    return f"scenario {welcome.params.scenario}, n = {welcome.params.n}"


def check_closing_head(channel: Channel, heads: SeenHeads | None, welcome: Welcome,
                       end: End | None) -> None:
    """The curator's closing End: its head must extend the Welcome's (by its consistency
    proof), else LedgerInconsistent (the session is over: the End is in the transcript);
    then it is kept as the last head seen (unless one of more entries is kept already:
    a session alongside)."""
    if heads is None or end is None or end.ledger == NO_LEDGER_HEAD:
        return
    key = channel.peer_key or ""
    start = welcome.ledger.entries if welcome.ledger.log == end.ledger.log else None
    why = extends(welcome.ledger, end.ledger, start, end.consistency)
    if why is not None:
        raise LedgerInconsistent(f"the curator's closing End: {why}")
    heads.keep(key, end.ledger, dataset_of(welcome))
