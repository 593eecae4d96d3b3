"""The curator's side of the signed ledger checkpoints (protocol.checkpoint).

`LedgerChain` follows the journal's ledger and keeps its hash-chain head, extending it
with the entries appended since (also by another process sharing the journal). The
`HeadFile` keeps the last head the curator committed to outside the journal (beside its
keys or its journal: a small JSON file, replaced atomically and fsynced), and
`check_not_behind` refuses a journal whose chain does not hold that head: one restored
from an older copy, replaced or edited. An operator who restores or deletes both files
is not stopped here; only an audit of the modelers' transcripts shows that fork
(README, privacy_unit's not_covered).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from pobo.parties.journal import Journal, JournalError
from pobo.protocol.checkpoint import GENESIS_HEAD, check_head, entry_record, next_head
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
            for n, *fields in rows:
                self.head = next_head(self.head, entry_record(*fields))
                self.entries, self._last_n = self.entries + 1, n
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
