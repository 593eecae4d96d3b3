"""The curator's side of the signed ledger checkpoints (protocol.checkpoint).

`LedgerChain` follows the journal's ledger and keeps its hash-chain head, extending it
with the entries appended since (also by another process sharing the journal). The
`HeadFile` keeps the last head the curator committed to outside the journal (beside its
keys or its journal: a small JSON file, replaced atomically and fsynced), and
`check_not_behind` refuses a journal whose chain does not hold that head: one restored
from an older copy, replaced or edited. Once a head was written the journal notes where
(`Journal.note_head_file`), and `check_head_kept` refuses a journal whose head file is
then missing (an older copy put back and the file deleted). An operator who replaces
the journal with one from before any head, or edits both, is not stopped here; only an
audit of the modelers' transcripts shows that fork (README, privacy_unit's
not_covered).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from pobo.parties.journal import HEAD_FILE_KEY, Journal, JournalError
from pobo.protocol.checkpoint import (
    GENESIS_HEAD, chain_head, check_head, entry_record, next_digest,
)
from pobo.protocol.errors import ProtocolError
from pobo.protocol.messages import LedgerHead


class LedgerBehind(JournalError):
    """A journal whose ledger does not hold the head the curator last committed to."""


class LedgerChain:
    """The hash-chain head of a journal's ledger, extended incrementally (read in chunks
    of CHUNK entries: a journal of millions of LDP reports is never held in memory)."""

    CHUNK = 10_000

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.entries, self.head, self._last_n = 0, GENESIS_HEAD, 0

    def current(self) -> tuple[int, str]:
        """(entries, head) of the whole ledger now."""
        self._extend(None)
        return self.entries, self.head

    def head_at(self, entries: int) -> str | None:
        """The head after the first `entries` entries, or None when the ledger holds fewer
        (from the start again if the chain went past them already)."""
        if entries < self.entries:
            self.entries, self.head, self._last_n = 0, GENESIS_HEAD, 0
        self._extend(entries)
        return self.head if self.entries == entries else None

    def _extend(self, stop: int | None) -> None:
        """Hash the entries appended since, up to `stop` entries in all (None: every one)."""
        while stop is None or self.entries < stop:
            limit = self.CHUNK if stop is None else min(self.CHUNK, stop - self.entries)
            rows = self.journal.ledger_rows(self._last_n, limit)
            if rows:
                self.head = chain_head((entry_record(*row[1:]) for row in rows), self.head)
                self.entries, self._last_n = self.entries + len(rows), rows[-1][0]
            if len(rows) < limit:
                return


@dataclass(frozen=True)
class HeadFile:
    """The last ledger head a curator committed to, kept in `path`, for the dataset of
    digest `dataset`."""

    path: Path
    dataset: str

    def read(self) -> LedgerHead | None:
        """The stored head, or None when there is no file yet; JournalError (one line) for
        a file that is not a head, or is another dataset's."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise JournalError(f"ledger head file {self.path} is unreadable ({exc})") from None
        try:
            head = LedgerHead(**data["head"])
            check_head(head, "curator")
            dataset = data["dataset"]
        except (KeyError, TypeError, ProtocolError) as exc:
            raise JournalError(f"ledger head file {self.path} is not a ledger head "
                               f"({type(exc).__name__}: {exc})") from None
        if dataset != self.dataset:
            raise JournalError(f"ledger head file {self.path} is the head of another dataset "
                               f"(digest {str(dataset)[:16]}..., this curator's is "
                               f"{self.dataset[:16]}...)")
        return head

    def write(self, head: LedgerHead) -> None:
        """Replace the stored head with `head`: written to a temporary file beside it,
        fsynced, renamed over it, and the folder fsynced (a crash leaves the old or the
        new head, never half of one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w") as f:
                json.dump({"dataset": self.dataset, "head": asdict(head)}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def check_head_kept(journal: Journal, missing: Path) -> None:
    """Raise LedgerBehind (one line) when the head file `missing` is not there but this
    journal's curator has kept its ledger heads in a file (Journal.note_head_file): a
    journal copied back from before and its head file deleted look like this, and
    without the file nothing would tell (a review)."""
    kept = journal.meta(HEAD_FILE_KEY)
    if kept is not None:
        raise LedgerBehind(
            f"the ledger head file {missing} is missing, but the curator of the journal "
            f"{journal.path} has kept its ledger heads in {kept}: without it a rolled-back "
            "journal cannot be told from this one; restore the file (or give its path: "
            "--ledger-head); refusing to start on it")


def check_not_behind(chain: LedgerChain, stored: LedgerHead, where: Path) -> None:
    """Raise LedgerBehind (one line) unless the journal's chain holds `stored`."""
    if chain.head_at(stored.entries) == stored.chain:
        return
    held, _ = chain.current()
    raise LedgerBehind(
        f"the journal {chain.journal.path} is behind the ledger head in {where}: the curator "
        f"committed to {stored.entries} entries (head {stored.chain[:16]}...), the journal "
        + (f"holds only {held}" if held < stored.entries else
           f"holds {held} whose chain differs")
        + ": it was rolled back, replaced or edited; refusing to start on it")


def unheld_heads(journal: Journal, heads: list[tuple[str, LedgerHead]],
                 limit: int = 10) -> list[str]:
    """Why each of `heads` (where it was found, the head) is not what the journal's ledger
    was after that head's number of entries, one line each (at most `limit`; empty: the
    journal holds every one): a hash chain that differs (entries edited, removed,
    reordered or rolled back), too few entries, or totals (central epsilon and delta, the
    worst-off row's epsilon and delta: the plain sums a head carries) other than that
    prefix's. One pass over the entries, in chunks, however many heads: what an auditor
    runs over the heads the curator signed (`pobo ledger JOURNAL TRANSCRIPT...`)."""
    from pobo.protocol.accounting import ExactSum
    from pobo.protocol.ledger import LOCAL

    from pobo.protocol.merkle import MerkleTree, leaf_hash

    pending = sorted(heads, key=lambda item: item[1].entries)
    # the Merkle tree of the same records, when a head carries a root (protocol version 6):
    # its root at the current size needs no leaf read back (the open block is in memory)
    tree = (MerkleTree(8, _no_read_back) if any(h.root for _, h in heads) else None)
    out: list[str] = []
    count, head, last_n = 0, bytes.fromhex(GENESIS_HEAD), 0  # the head kept raw
    central = (ExactSum(), ExactSum())
    rows: dict[int, tuple[ExactSum, ExactSum]] = {}
    worst = [0.0, 0.0]  # the worst-off row's (epsilon, delta) so far: the largest pair

    def check(where: str, want: LedgerHead) -> None:
        if count < want.entries:
            out.append(f"{where}: commits to {want.entries} ledger entries, the journal holds "
                       f"only {count}: it was rolled back or entries were removed")
            return
        if head.hex() != want.chain:
            out.append(f"{where}: the journal's chain after {want.entries} entries is "
                       f"{head.hex()[:16]}..., the signed head {want.chain[:16]}...: entries "
                       "were edited, removed or reordered")
            return
        if want.root and tree is not None and tree.root(count).hex() != want.root:
            out.append(f"{where}: the journal's Merkle root after {want.entries} entries is "
                       f"{tree.root(count).hex()[:16]}..., the signed head's "
                       f"{want.root[:16]}...: entries were edited, removed or reordered")
            return
        held = (float(central[0]), float(central[1]), *worst)
        signed = (want.central_epsilon, want.central_delta, want.max_row_epsilon,
                  want.max_row_delta)
        names = ("central epsilon", "central delta", "worst-off row epsilon",
                 "worst-off row delta")
        for name, a, b in zip(names, held, signed):
            if abs(a - b) > 1e-9 * max(1.0, abs(a)):  # a running row total's drift, no more
                out.append(f"{where}: the signed head's {name} is {b:.12g}, the journal's "
                           f"first {want.entries} entries sum to {a:.12g}")
                return

    while pending:
        while pending and pending[0][1].entries == count:
            check(*pending.pop(0))
        if not pending:
            break
        rows_read = journal.ledger_rows(last_n, LedgerChain.CHUNK)
        if not rows_read:
            for where, want in pending:
                check(where, want)
            break
        for n, session, mechanism, epsilon, delta, scope, row, time in rows_read:
            while pending and pending[0][1].entries == count:
                check(*pending.pop(0))
            record = entry_record(session, mechanism, epsilon, delta, scope, row, time)
            head = next_digest(head, record)
            if tree is not None:
                tree.append(leaf_hash(record))
            count, last_n = count + 1, n
            if scope == LOCAL:
                acc = rows.setdefault(row, (ExactSum(), ExactSum()))
                acc[0].add(epsilon)
                acc[1].add(delta)
                worst[:] = max(worst, [float(acc[0]), float(acc[1])])  # as the journal
            else:
                central[0].add(epsilon)
                central[1].add(delta)
    return out[:limit]


def _no_read_back(start: int, stop: int) -> list[bytes]:
    """(unheld_heads' tree keeps its open block: a root at its own size reads nothing)"""
    raise AssertionError(f"leaves [{start}, {stop}) read back during an audit pass")
