"""The curator's journal: one SQLite database, and the projections' `.npy` files beside
it (`<journal>.projections/`), holding all of its durable state.

The prepared dataset's digest (a journal serves one dataset), the projections served
(each stored once, keyed by its parameters, and referenced by every session that uses
it; on disk Z itself is a content-addressed `.npy` file, named by its SHA-256 in the
row, read into memory and hashed as it is read on load), every session (its
configuration, welcome frame, projection key, status and release), every answered query
(committed in the same transaction as its ledger entry, before the reward is sent: an
answer the modeler saw is never lost and never evaluated twice), and the dataset's
privacy ledger across all sessions and restarts (central entries, and per-row local
totals for the LDP row budget). Every write that charges the ledger checks the budget
against the entries inside its transaction (BEGIN IMMEDIATE), so not even two processes
sharing one journal can overspend it.

`Journal(":memory:")` keeps the same state for the life of the process only.

Durability (`Journal(path, durability=...)`, `--durability`): the database is in WAL mode;
"full" (the default, `PRAGMA synchronous=FULL`) fsyncs the log at every commit, so a
committed answer survives a power loss or an OS crash; "normal" (`synchronous=NORMAL`)
leaves the fsync to checkpoints, so a committed answer survives the curator process being
killed (the log is written to the OS before the commit returns) but the last commits may
be lost with the machine, and with them ledger charges of rewards the modeler already saw.
Answers and reservations made from a running event loop are group-committed (on disk;
in memory, where a COMMIT has no fsync to share, each commits at once): each in a
savepoint of the loop turn's one transaction, committed once at the end of the turn
(`committed()` waits for it; a reward is sent only after). sqlite3 from the standard
library for all of this state, with one exception: at "normal", an answer with no
ledger entry (no charge) is a 48-byte record appended to its session's answer log
(`<journal>.answers/`, `parties.answer_log`) instead of a SQLite transaction (4 against
44 us: the largest piece of a round trip), fenced by the log's lock and length as the
transaction is by the session's generation, and folded into the table when the session
is claimed again or ends; every reader merges the two.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pobo.parties import answer_log
from pobo.parties.answer_log import LogDamaged, LogWriter, NoLocks
from pobo.protocol.errors import ErrorCode, PoboError, ProtocolError
from pobo.protocol.filelock import LockBusy, unlock
from pobo.protocol.accounting import part_of, parts_counter
from pobo.protocol.ledger import (
    CENTRAL, LOCAL, Budget, Entry, ExactSum, PrivacyBudgetExceeded, local_summary,
)
from pobo.protocol.transcript import file_digest, read_hashing

log = logging.getLogger("pobo.journal")
SCHEMA_VERSION = 3  # 3: evaluations pending (schema 2 journals gain the table on open)
MIGRATABLE = (2,)
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projections (
    key TEXT PRIMARY KEY, frame BLOB NOT NULL, report TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, ordinal INTEGER NOT NULL, config TEXT NOT NULL, welcome BLOB NOT NULL,
    projection TEXT NOT NULL REFERENCES projections(key), f_digest TEXT NOT NULL,
    status TEXT NOT NULL, release TEXT, created REAL NOT NULL, owner TEXT NOT NULL,
    generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
    session TEXT NOT NULL, seq INTEGER NOT NULL, row INTEGER NOT NULL, measured REAL NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (session, seq));
CREATE TABLE IF NOT EXISTS ledger (
    n INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL, mechanism TEXT NOT NULL,
    epsilon REAL NOT NULL, delta REAL NOT NULL, scope TEXT NOT NULL, row INTEGER NOT NULL,
    time REAL NOT NULL);
CREATE INDEX IF NOT EXISTS ledger_scope ON ledger (scope, session);
CREATE INDEX IF NOT EXISTS ledger_row ON ledger (row, scope);
CREATE TABLE IF NOT EXISTS row_ledger (
    row INTEGER PRIMARY KEY, epsilon REAL NOT NULL, delta REAL NOT NULL, reports INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS row_ledger_eps ON row_ledger (epsilon);
CREATE TABLE IF NOT EXISTS pending (
    session TEXT NOT NULL, seq INTEGER NOT NULL, row INTEGER NOT NULL, requested REAL NOT NULL,
    measured REAL, supplied REAL, failures INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session, seq));
"""


from pobo.parties.choices import DEFAULT_DURABILITY, DURABILITY  # noqa: E402,F401
NPY_REF = b"pobo-npy-ref\x00"  # a projections.frame naming a .npy file (then JSON) instead of Z
_DIGEST = re.compile(r"[0-9a-f]{64}")  # a projection file's name: the SHA-256 of its bytes
HEAD_FILE_KEY = "ledger_head_file"  # meta: where the curator keeps this journal's heads
_LOG_KEY = "answer_log:"  # meta, + a session id: that session keeps an answer log
RESUMABLE = ("open", "interrupted")  # a live or crashed session, or one whose peer vanished
FINISHED = ("ok", "failed")


class JournalError(PoboError):
    """A journal that cannot serve this curator (another dataset, an older schema)."""


class JournalFault(ProtocolError):
    """A journal write that failed (disk full, I/O error): nothing was recorded, the
    query is not answered, and the curator accepts no new work."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"the curator's journal failed ({cause}): nothing was recorded; "
                         "it accepts no new work", ErrorCode.INTERNAL)


class _Held(Exception):
    """Internal: the query is already reserved (rolls the reservation's transaction back)."""

    def __init__(self, row: int, requested: float) -> None:
        super().__init__(row)
        self.row, self.requested = row, requested


class Superseded(ProtocolError):
    """A write by a connection that no longer owns its session (a resume took it over)."""

    def __init__(self, session: str) -> None:
        super().__init__(f"session {session[:12]}... was taken over by a newer connection",
                         ErrorCode.SUPERSEDED)


class ReleaseAlreadyGranted(ProtocolError):
    """A release asked of a session that was already granted one (one per session, for
    ever: across connections, resumes and restarts)."""

    def __init__(self, session: str) -> None:
        super().__init__(f"session {session[:12]}... was already granted its release: one "
                         "release per session, and a resume grants no other", ErrorCode.POLICY)


@dataclass(frozen=True)
class JournaledSession:
    """Everything a restarted curator needs to resume one session."""

    session: str
    ordinal: int
    config: dict
    welcome: bytes
    projection: str
    f_digest: str
    status: str
    owner: str
    generation: int
    answers: list[tuple[int, int, float, float]]  # (seq, row, measured, value), as answered
    ledger: list[Entry]  # this session's own entries
    release: dict | None
    pending: dict[int, tuple[int, float]] = field(default_factory=dict)  # seq -> (row, reserved at)


@dataclass(frozen=True)
class PendingEvaluation:
    """A query whose evaluation was reserved (and charged) but not yet answered."""

    session: str
    seq: int
    row: int
    requested: float  # time.time() when it was reserved
    measured: float | None  # a value supplied (`pobo answer`), not yet released


_INSERT_ANSWER = "INSERT INTO answers VALUES (?, ?, ?, ?, ?)"


def _duplicate() -> sqlite3.IntegrityError:
    """What the answers table raises for a second answer of one (session, seq): raised
    as it is where an answer log, not the table, holds the first."""
    return sqlite3.IntegrityError("UNIQUE constraint failed: answers.session, answers.seq")


_INT64 = 1 << 63


def _storable(answer: tuple) -> bool:
    """Whether the answers table takes `answer` (session, seq, row, measured, value) as it
    is: integers within SQLite's 64 bits, values that are numbers and not NaN (a NaN is
    stored as NULL, which the table refuses)."""
    _, seq, row, measured, value = answer
    return (isinstance(seq, int) and isinstance(row, int)
            and -_INT64 <= seq < _INT64 and -_INT64 <= row < _INT64
            and all(isinstance(v, float) and v == v
                    or isinstance(v, int) and -_INT64 <= v < _INT64
                    for v in (measured, value)))


class Journal:
    """A curator's journal; one per curator process, shared by all of its sessions."""

    def __init__(self, path: str | Path = ":memory:", busy_timeout: float = 5.0,
                 durability: str = DEFAULT_DURABILITY, group_commit: bool | None = None) -> None:
        if durability not in DURABILITY:
            raise ValueError(f"durability {durability!r}: expected one of {', '.join(DURABILITY)}")
        self.path = str(path)
        self._real_path = self.path if self.path == ":memory:" else os.path.realpath(self.path)
        self.durability = durability
        self.busy_timeout = busy_timeout  # how long a write waits for another process
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._arrays: dict[str, object] = {}  # ":memory:": each projection's Z, by key
        # ":memory:": each session's generation as this object last committed it (no other
        # connection can see the database, so it is the database's own: record_answer's
        # fast path checks it without a SELECT)
        self._generations: dict[str, int] | None = {} if self.path == ":memory:" else None
        # ":memory:": answers recorded by that fast path and not yet in the table (written
        # the first time anything touches the database: `_db`), and every (session, seq)
        # answered, so that a duplicate is refused when it is recorded, as the table would
        self._unwritten: list[tuple] = []
        self._cut_short = False  # a write of them was interrupted: check which went in
        self._answer_keys: set[tuple[str, int]] = set()
        self.fault: str | None = None  # the cause of the first failed write, if any
        # None: grouped where a COMMIT is an fsync worth sharing (a file at durability
        # full); in memory or at normal a COMMIT is a write (to the WAL, or nothing),
        # cheaper than waiting for the loop turn's end: each answer commits at once
        self.group_commit = (self.path != ":memory:" and durability == "full"
                             if group_commit is None else group_commit)
        self._group: asyncio.Future | None = None  # the open group transaction's commit
        # a file at durability normal: the answers with no charge go to an append-only log
        # per session (parties.answer_log) instead of a SQLite transaction each; the
        # sessions this object appends to, by id (a session opened or claimed here)
        self.logging = self.path != ":memory:" and durability == "normal" \
            and not self.group_commit
        self._logs: dict[str, LogWriter] = {}
        self._folded: dict[str, tuple[int, int]] = {}  # a log folded by `_fold_unwritten`:
        # its (inode, length) then, so that the next table write of it costs a stat only
        self.commits = 0  # transactions committed (COMMITs: fsyncs at durability full)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=False,
                                       timeout=busy_timeout)  # how long to wait for a writer
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open the journal {self.path}: {exc}") from exc
        if self.path != ":memory:":  # (a new in-memory database holds nothing yet)
            try:
                self._open_file(durability, busy_timeout)
            except sqlite3.Error as exc:  # not a database, damaged, or no room: typed
                self._db.close()
                raise JournalError(f"cannot open the journal {self.path}: "
                                   f"{type(exc).__name__}: {exc}") from exc
            except BaseException:
                self._db.close()
                raise
        elif hasattr(self._db, "deserialize"):
            self._db.deserialize(_empty_schema())  # a copy of the empty schema: no DDL per journal
            self._db.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        else:
            self._db.executescript(SCHEMA)

    def _open_file(self, durability: str, busy_timeout: float) -> None:
        """Check an on-disk journal's schema, switch it to WAL and create (or migrate) its
        tables, safely beside another process opening the same new journal: the check
        reads one snapshot, the switch is retried while the other holds the lock, and
        the tables and their version are one transaction (never tables without it)."""
        db = self._db
        db.execute("BEGIN")  # one snapshot: the version and the tables together
        try:
            (version,) = db.execute("PRAGMA user_version").fetchone()
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
        finally:
            db.execute("COMMIT")
        if version != SCHEMA_VERSION and version not in MIGRATABLE and tables:
            raise JournalError(f"{self.path} is a journal of schema {version}, this pobo "
                               f"writes schema {SCHEMA_VERSION}: start a new journal")
        deadline = time.monotonic() + busy_timeout
        while True:  # the switch to WAL takes no busy handler: a second opener retries
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise JournalError(f"cannot open the journal {self.path}: {exc}") from exc
                time.sleep(0.005)
        db.execute(f"PRAGMA synchronous={DURABILITY[durability]}")
        db.executescript(f"BEGIN IMMEDIATE; {SCHEMA}; "
                         f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")

    # -- transactions -------------------------------------------------------------------

    def _transaction(self, statements: list[tuple[str, tuple]] | Callable[[], list],
                     session: str = "", entries: list[Entry] = (),
                     budget: Budget | None = None, generation: int | None = None,
                     grouped: bool = False) -> None:
        """Run `statements` and charge `entries` in one transaction; with a `budget`,
        check every entry against what is spent inside the transaction first; with a
        `generation`, refuse (Superseded) unless it is still the session's current one.
        `statements` may be a callable, called only once every check has passed.

        `grouped` (an answer's write, called from a running event loop): the write joins
        the group transaction of this loop turn, in a SAVEPOINT of its own (a refused
        write is rolled back alone, and each one's checks see the writes before it), and
        the group is committed once, by a callback at the end of the turn: one COMMIT,
        one fsync at durability full, for every answer staged meanwhile (group commit).
        The caller awaits `committed()` before it sends what it wrote."""
        loop = _running_loop() if grouped and self.group_commit else None
        with self._lock:
            if loop is None and self._group is not None:
                self._commit_group()  # an immediate write never overtakes a staged one
            if self.fault is not None:  # staged answers were lost: nothing is written (a
                raise JournalFault(self.fault)  # release, a status 'ok') as if they were not
            joining = loop is not None and self._group is not None  # in a SAVEPOINT
            cur = self._db.cursor()
            try:
                if loop is None:
                    cur.execute("BEGIN IMMEDIATE")  # waits up to busy_timeout for another writer
                elif joining:
                    cur.execute("SAVEPOINT answer")
                else:  # the group's first write: the transaction is its own
                    self._open_group(cur, loop)
                try:
                    self._apply(cur, statements, session, entries, budget, generation)
                except BaseException:
                    if joining:
                        cur.execute("ROLLBACK TO answer")
                        cur.execute("RELEASE answer")
                    raise
                if loop is None:
                    cur.execute("COMMIT")
                    self.commits += 1
                elif joining:
                    cur.execute("RELEASE answer")
            except sqlite3.Error as exc:
                if not joining:
                    self._abandon(cur)
                self._raise_failed(exc)
            except BaseException:
                if not joining:
                    self._abandon(cur)
                raise

    def _abandon(self, cur: sqlite3.Cursor) -> None:
        """Roll back a failed transaction of one write (its own, or a group it opened:
        nothing else is in that group yet, and the group is dropped)."""
        self._rollback(cur)
        group, self._group = self._group, None
        if group is not None and not group.done():
            group.set_result(None)

    def _apply(self, cur: sqlite3.Cursor, statements, session: str, entries: list[Entry],
               budget: Budget | None, generation: int | None) -> None:
        """The checks and writes of one transaction (see `_transaction`)."""
        if generation is not None and self._generation(cur, session) != generation:
            raise Superseded(session)
        now = time.time() if entries else 0.0
        for e in entries:
            why = entry_fault(e.epsilon, e.delta, e.scope, e.row)
            if why is not None:  # (a budget without bound would take it; every later
                raise ValueError(f"not a ledger charge: {why}")  # start would refuse it)
            if budget is not None:
                why = budget.refusal(e, self._spent(cur, e),
                                     lambda e=e: self._parts(cur, e.scope, e.row))
                if why is not None:
                    raise PrivacyBudgetExceeded(why)
            cur.execute("INSERT INTO ledger (session, mechanism, epsilon, delta, scope, "
                        "row, time) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (session, e.mechanism, e.epsilon, e.delta, e.scope, e.row, now))
            if e.scope == LOCAL:
                cur.execute("INSERT INTO row_ledger VALUES (?, ?, ?, 1) ON CONFLICT(row) "
                            "DO UPDATE SET epsilon = epsilon + excluded.epsilon, "
                            "delta = delta + excluded.delta, reports = reports + 1",
                            (e.row, e.epsilon, e.delta))
        for sql, args in (statements() if callable(statements) else statements):
            cur.execute(sql, args)

    def _raise_failed(self, exc: sqlite3.Error):
        """Raise what a failed SQLite statement means: the IntegrityError itself, BUSY
        for another process holding the lock, else a JournalFault (sticky)."""
        if isinstance(exc, sqlite3.IntegrityError):
            raise exc
        if "locked" in str(exc) or "busy" in str(exc):  # another process writes
            raise ProtocolError(f"the curator's journal is busy ({exc}): try again",
                                ErrorCode.BUSY) from exc
        self.fault = self.fault or f"{type(exc).__name__}: {exc}"
        log.error("journal %s: write failed: %s", self.path, self.fault)
        raise JournalFault(self.fault) from exc

    def _open_group(self, cur: sqlite3.Cursor, loop: asyncio.AbstractEventLoop) -> None:
        """Begin this loop turn's group transaction unless it is open; its COMMIT is
        scheduled for the end of the turn."""
        if self._group is not None:
            return
        cur.execute("BEGIN IMMEDIATE")
        self._group = loop.create_future()
        loop.call_soon(self._commit_group)

    def _commit_group(self) -> None:
        """Commit the open group transaction (if any) and wake everyone waiting for it;
        a failed COMMIT sets the journal's fault: a JournalFault for all of them."""
        with self._lock:
            group, self._group = self._group, None
            if group is None:
                return
            try:
                self._db.execute("COMMIT")
                self.commits += 1
            except sqlite3.Error as exc:  # whatever it was, the staged answers are gone:
                self._rollback(self._db.cursor())  # the sticky fault `committed` raises
                self.fault = self.fault or f"{type(exc).__name__}: {exc}"
                log.error("journal %s: group commit failed: %s", self.path, self.fault)
            finally:
                if not group.done():
                    group.set_result(None)

    @contextlib.contextmanager
    def snapshot(self):
        """Reads inside see one state of the journal (a read transaction: another process
        sharing it may commit meanwhile, unseen), as a ledger head must: its entry count,
        chain and totals of the same entries. Commits the staged group first."""
        with self._lock:
            self._commit_group()
            begun = not self._db.in_transaction
            if begun:
                self._db.execute("BEGIN")
            try:
                yield self
            finally:
                if begun and self._db.in_transaction:
                    self._db.execute("COMMIT")

    def flush(self) -> None:
        """Commit the staged group now, so that what this connection reads next (a ledger
        head, signed and sent) is what is durable; JournalFault once a write has failed."""
        with self._lock:
            self._commit_group()
            if self.fault is not None:
                raise JournalFault(self.fault)

    async def committed(self) -> None:
        """Return once every write staged so far is committed; JournalFault once any
        write has failed (no reward is sent after that, not even a recorded one)."""
        group = self._group
        if group is not None:
            await asyncio.shield(group)
        if self.fault is not None:
            raise JournalFault(self.fault)

    @staticmethod
    def _rollback(cur: sqlite3.Cursor) -> None:
        try:
            cur.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the failed statement already ended the transaction

    @staticmethod
    def _generation(cur: sqlite3.Cursor, session: str) -> int | None:
        row = cur.execute("SELECT generation FROM sessions WHERE id = ?", (session,)).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def _spent(cur: sqlite3.Cursor, entry: Entry) -> tuple[float, float]:
        """(eps, delta) spent so far in `entry`'s scope (central, or its row's reports):
        the exactly rounded sums of the hash-chained entries themselves (`ledger`, by
        index), never a running total a writer could have edited or let drift."""
        if entry.scope == CENTRAL:
            rows = cur.execute("SELECT epsilon, delta FROM ledger WHERE scope = ?", (CENTRAL,))
        else:
            rows = cur.execute("SELECT epsilon, delta FROM ledger WHERE row = ? AND scope = ?",
                               (entry.row, LOCAL))
        eps, dlt = ExactSum(), ExactSum()
        for e, d in rows:
            eps.add(e)
            dlt.add(d)
        return float(eps), float(dlt)

    @staticmethod
    def _parts(cur: sqlite3.Cursor, scope: str, row: int = -1) -> Counter:
        """The composition so far of the central entries, or of one row's reports, for
        the accountant: (kind, eps, delta) -> count (read only when the basic sums no
        longer fit the budget)."""
        sql = ("SELECT mechanism, epsilon, delta, COUNT(*) FROM ledger WHERE scope = ?"
               + ("" if scope == CENTRAL else " AND row = ?")
               + " GROUP BY mechanism, epsilon, delta")
        return parts_counter(cur.execute(sql, (scope,) if scope == CENTRAL else (scope, row)))

    # -- the dataset --------------------------------------------------------------------

    def bind(self, key: str, value: str) -> str:
        """Record meta `key` = `value` unless set; return the value the journal holds."""
        with self._lock:
            self._commit_group()  # an autocommit write: never inside a staged group
            self._db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (key, value))
            return self.meta(key)

    def meta(self, key: str) -> str | None:
        """A meta value, or None."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def note_head_file(self, path: Path) -> None:
        """Note the file the curator keeps this journal's ledger heads in (at every head
        written: a file moved is noted anew; a write only when it changed): from then on
        a start or `pobo ledger` that finds no head file refuses to take the journal as it
        stands (checkpoints.check_head_kept)."""
        where = str(Path(path).absolute())
        if self.meta(HEAD_FILE_KEY) != where:
            self.set_meta(HEAD_FILE_KEY, where)

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta value (e.g. the budget last configured)."""
        with self._lock:
            self._commit_group()  # an autocommit write: never inside a staged group
            try:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))
            except sqlite3.Error as exc:  # a full disk, say: typed, naming the journal
                raise JournalError(f"cannot write to the journal {self.path}: "
                                   f"{type(exc).__name__}: {exc}") from exc

    def projection_keys(self) -> list[str]:
        """The key of every projection stored, oldest first (what each was prepared with:
        its mechanism, epsilon, delta, lift, r and randomness, as JSON)."""
        return [k for k, in self._db.execute("SELECT key FROM projections ORDER BY rowid")]

    def projection(self, key: str):
        """(the stored ProjectedDataset, curator-private report), or None. A projection
        kept in a .npy file is read into memory and checked against the digest the
        journal holds as it is read (JournalError if it is missing or altered)."""
        row = self._db.execute("SELECT frame, report FROM projections WHERE key = ?",
                               (key,)).fetchone()
        if row is None:
            return None
        frame, report = row
        from pobo.protocol.codec import decode

        if not frame.startswith(NPY_REF):  # Z in memory, or in the row itself (older)
            return decode(frame).release, json.loads(report)
        ref = json.loads(frame[len(NPY_REF):])
        Z = (self._arrays[ref["memory"]] if "memory" in ref
             else read_npy(self.projection_dir / f"{ref['npy']}.npy", ref["npy"],
                           tuple(ref["shape"])))
        head = decode(bytes.fromhex(ref["dataset"])).release
        from dataclasses import replace

        return replace(head, Z=Z), json.loads(report)

    def store_projection(self, key: str, release, report: dict, entries: list[Entry],
                         budget: Budget) -> None:
        """Store a projection and charge its entries atomically (refused past the budget).
        On disk Z goes to a content-addressed .npy file (`projection_dir`), written and
        fsynced before the row that names it by SHA-256 (no SQLite blob: those stop at
        1 GB); an in-memory journal, which lives as long as the process, keeps Z itself
        (the release's own array, not a copy) and a reference to it in the row."""
        from dataclasses import replace

        import numpy as np

        from pobo.protocol.codec import encode
        from pobo.protocol.messages import Dataset

        if release.Z.ndim != 2 or release.Z.dtype != np.dtype("<f8"):  # all it reads back
            raise JournalError(f"a journal stores float64 projections (n x r), not "
                               f"{release.Z.dtype} of shape {release.Z.shape}")
        Z = release.Z if self.path == ":memory:" else np.ascontiguousarray(release.Z)
        head = encode(Dataset(replace(release, Z=np.empty((0, Z.shape[1]), Z.dtype))))
        tmp = None
        if self.path == ":memory:":
            where: dict = {"memory": key}
        else:
            digest, tmp = self._save_npy(Z)
            where = {"npy": digest}
        frame = NPY_REF + json.dumps({**where, "shape": list(Z.shape),
                                      "dataset": head.hex()}).encode()

        def insert() -> list[tuple[str, tuple]]:
            if tmp is not None:  # in place under the write lock, with the row naming it
                self._place_npy(tmp, where["npy"])
            return [("INSERT INTO projections VALUES (?, ?, ?, ?)",
                     (key, frame, json.dumps(report), time.time()))]

        try:
            self._transaction(insert, "", entries, budget)
        except BaseException:  # refused, raced or failed: no row names the file
            if "npy" in where:
                self._discard_npy(where["npy"])
            raise
        finally:
            if tmp is not None:
                _unlink_quietly(tmp)
        if "memory" in where:  # stored and charged: only now does the key name Z
            self._arrays[key] = Z

    def _discard_npy(self, digest: str) -> None:
        """Remove `<digest>.npy` unless a projection row names it (a file this process
        put in place for a store that did not commit), under the write lock: no other
        process can be between putting the same file in place and committing its row.
        Left for `sweep_projections` if the journal cannot be locked now."""
        try:
            self._unnamed_npy_removed({digest})
        except (sqlite3.Error, OSError) as exc:  # never over the store's own error
            log.warning("journal %s: projection file %s.npy left behind: %s", self.path,
                        digest, exc)

    def sweep_projections(self) -> int:
        """Remove the projection files no row names, under the write lock; the number
        removed. A curator killed between putting its Z's file in place and committing
        the row that names it leaves one, as large as Z, that no later store would
        reuse (an unseeded projection is drawn anew). No other process's store can be
        in between: a file goes in place only inside the transaction that names it
        (`store_projection`). A journal another process keeps locked past the busy
        timeout is swept at a later start (a warning)."""
        if self.path == ":memory:" or not self.projection_dir.is_dir():
            return 0
        try:
            removed = self._unnamed_npy_removed(None)
        except (sqlite3.Error, OSError) as exc:
            log.warning("journal %s: projection files not swept: %s", self.path, exc)
            return 0
        if removed:
            log.warning("journal %s: removed %d projection file(s) that no stored "
                        "projection names (left by a curator stopped while storing one)",
                        self.path, removed)
        return removed

    def sweep_answer_logs(self) -> int:
        """Remove the answer logs that no live session will read; the number removed: a
        finished session's (a curator killed between its end, which folded the log into
        the table, and the file's removal) and a session's that was never recorded (a
        curator killed, or its INSERT refused, while it opened the session). Each is
        checked again under the log's lock, taken without waiting: a log another
        connection holds is left for a later start."""
        if self.path == ":memory:" or not self.answer_dir.is_dir():
            return 0

        def gone(session: str) -> bool:
            row = self._db.execute("SELECT status FROM sessions WHERE id = ?",
                                   (session,)).fetchone()
            return row is None or row[0] in FINISHED

        removed = 0
        for entry in os.scandir(self.answer_dir):
            session = entry.name.removesuffix(".log")
            if session == entry.name or not answer_log.loggable(session) or not gone(session):
                continue
            try:
                opened = answer_log.open_locked(Path(entry.path), False, 0.0)
            except (OSError, LogDamaged, LockBusy, NoLocks):
                continue
            if opened is not None:
                try:
                    if gone(session):  # (again, under the lock: an opener holds it until
                        _unlink_quietly(Path(entry.path))  # its row is committed)
                        removed += 1
                finally:
                    os.close(opened[0])
        return removed

    def _unnamed_npy_removed(self, digests: set[str] | None) -> int:
        """Under the write lock, remove the `<digest>.npy` files of `digests` (None: every
        one in the folder) that no projection row names; the number removed."""
        with self._lock:
            if self._group is not None:
                self._commit_group()  # a staged group first: its own transaction
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                named = set()
                for (frame,) in cur.execute("SELECT frame FROM projections"):
                    if bytes(frame[:len(NPY_REF)]) == NPY_REF:
                        named.add(json.loads(bytes(frame[len(NPY_REF):])).get("npy"))
                candidates = ({p.stem for p in self.projection_dir.glob("*.npy")}
                              if digests is None else digests)
                removed = 0
                for digest in candidates - named:
                    if _DIGEST.fullmatch(digest or ""):
                        path = self.projection_dir / f"{digest}.npy"
                        if path.is_file():
                            path.unlink()
                            removed += 1
                return removed
            finally:
                cur.execute("ROLLBACK")  # nothing written: the lock is all it took

    @property
    def projection_dir(self) -> Path:
        """Where an on-disk journal keeps its projections: `<journal>.projections/`, beside
        the journal's real file (the same folder whatever link or relative path opened
        it)."""
        return Path(self._real_path + ".projections")

    def _save_npy(self, Z) -> tuple[str, Path]:
        """Write Z to a temporary file in `projection_dir`, fsynced; (the SHA-256 of its
        bytes, the file), for `_place_npy` to put in place as `<digest>.npy` inside the
        transaction whose row names it. JournalError (one line) when the file cannot be
        written (a full disk); nothing is left behind then."""
        import secrets

        import numpy as np

        folder = self.projection_dir
        tmp = folder / f".{os.getpid()}.{secrets.token_hex(4)}.npy.tmp"
        try:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                _fsync_dir(folder.parent)  # the folder's own entry, before a row names it
            _sweep_stale_tmp(folder)
            with open(tmp, "wb") as f:
                np.save(f, Z, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            return file_digest(tmp), tmp
        except OSError as exc:
            _unlink_quietly(tmp)
            raise JournalError(f"cannot write the projection file in {folder}: "
                               f"{exc.strerror or exc}") from exc

    def _place_npy(self, tmp: Path, digest: str) -> None:
        """Rename the written file to `<digest>.npy` (a copy already there has the same
        bytes, or is damaged: replaced either way) and fsync the folder, so that the
        rename is durable before the row that names it commits."""
        folder = self.projection_dir
        try:
            os.replace(tmp, folder / f"{digest}.npy")
            _fsync_dir(folder)
        except OSError as exc:
            raise JournalError(f"cannot write the projection file in {folder}: "
                               f"{exc.strerror or exc}") from exc

    # -- sessions -----------------------------------------------------------------------

    def open_session(self, session: str, config: dict, welcome: bytes, projection: str,
                     f_digest: str, owner: str) -> int:
        """Record a new session of `owner` at generation 1; returns its ordinal. At
        durability normal its answer log is made first and held locked until the row is
        committed (no claim finds the row without its log); removed if the row is not."""
        with self._lock:
            self._commit_group()  # (SQLite's lock is never held while the log's is taken)
            fd = self._open_log(session, create=True, quiet=True) if self.logging and \
                not self._recorded(session) else None  # (a recorded id: its INSERT fails)
            try:
                (ordinal,) = self._db.execute("SELECT COUNT(*) FROM sessions").fetchone()
                self._transaction(
                    [("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, 'open', NULL, ?, ?, 1)",
                      (session, ordinal, json.dumps(config), welcome, projection, f_digest,
                       time.time(), owner))]
                    + ([self._log_noted(session, fd)] if fd is not None else []))
                if self._generations is not None:
                    self._generations[session] = 1
                if fd is not None:
                    self._start_log(session, 1, set(), fd)
                    fd = None
            finally:
                if fd is not None:  # the row is not there: nor is its log (unless another
                    if not self._recorded(session):  # opener's row took the id meanwhile)
                        _unlink_quietly(self._log_path(session))
                    os.close(fd)
            return ordinal

    def _recorded(self, session: str) -> bool:
        """Whether the sessions table holds `session` (its log is then its own)."""
        return self._db.execute("SELECT 1 FROM sessions WHERE id = ?",
                                (session,)).fetchone() is not None

    # -- answer logs (a file journal at durability normal: parties.answer_log) -------------

    @property
    def answer_dir(self) -> Path:
        """Where a file journal keeps its sessions' answer logs: `<journal>.answers/`."""
        return Path(self._real_path + ".answers")

    def _log_path(self, session: str) -> Path | None:
        """A session's log file; None where it can have none (in memory, an id that is
        not a plain name)."""
        if self.path == ":memory:" or not answer_log.loggable(session):
            return None
        return answer_log.log_path(self.answer_dir, session)

    @staticmethod
    def _log_noted(session: str, fd: int) -> tuple[str, tuple]:
        """The statement noting that a session keeps a log at least as long as `fd`'s is
        now (a copy of the journal without its `.answers/` folder, or with an older or
        cut log, is then refused, not read as holding fewer answers)."""
        return ("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (_LOG_KEY + session, str(os.lseek(fd, 0, os.SEEK_END))))

    def _noted_length(self, session: str) -> int | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?",
                               (_LOG_KEY + session,)).fetchone()
        return None if row is None else int(row[0])

    def _busy(self, what: str = "another connection holds this session's answer log"
              ) -> ProtocolError:
        """The typed BUSY a caller may retry: a log's lock held past the wait."""
        return ProtocolError(f"the curator's journal is busy ({what}): try again",
                             ErrorCode.BUSY)

    def _open_log(self, session: str, create: bool, quiet: bool = False,
                  deadline: float | None = None) -> int | None:
        """The session's log, open and locked exclusively (made, with `create`, if
        missing), or None: none possible here, none there, or (`quiet`: a new session,
        which then answers through SQLite) one that cannot be made. JournalError for a
        log the journal noted that is missing, shorter than noted or damaged; BUSY past
        `deadline` (default: `busy_timeout` from now)."""
        path = self._log_path(session)
        if path is None:
            return None
        wait = self.busy_timeout if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            if create:
                self.answer_dir.mkdir(exist_ok=True)
            opened = answer_log.open_locked(path, create, wait)
        except NoLocks:
            return None
        except LockBusy:
            raise self._busy() from None
        except (OSError, LogDamaged) as exc:
            if quiet:
                return self._no_log(session, exc)
            raise self._log_error(session, exc) from None
        if opened is None:
            if self._noted_length(session) is not None:
                raise JournalError(self._missing(session))
            return None
        fd, size = opened
        try:
            try:
                noted = self._noted_length(session)  # (under the lock: every note is so)
            except sqlite3.Error as exc:
                self._raise_failed(exc)
            if noted is not None and size < noted:
                if size == 0:
                    _unlink_quietly(path)  # (made by this call)
                    raise JournalError(self._missing(session))
                raise JournalError(self._shorter(session, size, noted))
            if size < answer_log.HEADER_SIZE:  # being made, or its making cut short
                answer_log.make_header(fd, session)
            return fd
        except (OSError, LogDamaged) as exc:
            os.close(fd)
            if quiet:
                return self._no_log(session, exc)
            raise self._log_error(session, exc) from None
        except BaseException:
            os.close(fd)
            raise

    def _no_log(self, session: str, exc: Exception) -> None:
        log.warning("journal %s: session %s answers through SQLite: no answer log (%s)",
                    self.path, session[:12], getattr(exc, "strerror", None) or exc)
        return None  # (a header it could not write is cut to nothing: swept at a start)

    def _log_error(self, session: str, exc: Exception) -> JournalError:
        return JournalError(f"cannot open the answer log of session {session[:12]}... in "
                            f"{self.answer_dir}: {getattr(exc, 'strerror', None) or exc}")

    @staticmethod
    def _shorter(session: str, size: int, noted: int) -> str:
        return (f"the answer log of session {session[:12]}... holds {size} bytes, the "
                f"journal noted {noted}: cut, or an older copy")

    def _missing(self, session: str) -> str:
        return (f"the answer log of session {session[:12]}... is missing from "
                f"{self.answer_dir} (a journal copied without its .answers folder?)")

    def _start_log(self, session: str, generation: int, seqs: set[int], fd: int) -> None:
        """Append this session's answers to the log `fd` (open and locked) from now on."""
        self._drop_writer(session)
        size = os.lseek(fd, 0, os.SEEK_END)
        unlock(fd)
        self._logs[session] = LogWriter(fd, size, generation, seqs)

    def _drop_writer(self, session: str, generation: int | None = None) -> None:
        """Close this object's log of a session (of `generation` only, if given): its
        connection ended or was superseded. A service keeps no open file per session
        that ended."""
        self._folded.pop(session, None)
        writer = self._logs.get(session)
        if writer is not None and generation in (None, writer.generation):
            del self._logs[session]
            os.close(writer.fd)

    def _logged_answers(self, session: str) -> tuple[list[tuple], int] | None:
        """(the answers in a session's log, its length), read without a lock; None: no
        log file, or one not made yet. JournalError for a damaged log."""
        path = self._log_path(session)
        if path is None:
            return None
        try:
            return answer_log.read_log(path, session, min(self.busy_timeout, 0.1))
        except answer_log.LogUnmade:
            return None  # (the journal notes a log only once it is made: see `load`)
        except LogDamaged as exc:
            raise JournalError(str(exc)) from None

    def _session_answers(self, session: str) -> tuple[tuple, list[tuple]] | None:
        """(the session's row, its answers: the table's, then its log's not in the
        table), or None: no such session. The row and the log's noted length are read
        first, then the log, then the table: a claim appends to the log before it
        commits a longer note, and an end folds the log into the table before it removes
        it, so nothing moves out of sight in between. JournalError when the log is
        missing or shorter than noted while the session lives."""
        statement = ("SELECT ordinal, config, welcome, projection, f_digest, status, owner, "
                     "generation, release FROM sessions WHERE id = ?")
        row = self._db.execute(statement, (session,)).fetchone()
        if row is None:
            return None
        noted = self._noted_length(session) if row[5] not in FINISHED else None
        logged = self._logged_answers(session)
        if noted is not None and (logged is None or logged[1] < noted):
            row = self._db.execute(statement, (session,)).fetchone()
            if row[5] not in FINISHED:  # (not an end that removed it meanwhile)
                if logged is None:
                    raise JournalError(self._missing(session))
                raise JournalError(self._shorter(session, logged[1], noted))
        answers = self._db.execute("SELECT seq, row, measured, value FROM answers WHERE "
                                   "session = ? ORDER BY rowid", (session,)).fetchall()
        held = {a[0] for a in answers}
        return row, answers + [a for a in (logged[0] if logged else ()) if a[0] not in held]

    def _fold(self, session: str, fd: int) -> list[tuple[str, tuple]]:
        """The statements that put a locked log's answers in the table, those not there
        already (a log is read again after a crash between its fold and its removal); a
        last record cut short (a crash of the machine in its write: a killed process
        never leaves one, and no reward went out for it) is cut off, with a warning.
        JournalError for any other damage, and where the log and the table disagree."""
        data = answer_log.read_from(fd)
        try:
            logged = answer_log.answers_in(data, session)
        except answer_log.LogTorn as exc:
            if not exc.partial:
                raise JournalError(str(exc)) from None
            log.warning("journal %s: session %s: %s, cut off", self.path, session[:12], exc)
            os.ftruncate(fd, exc.whole)
            logged = answer_log.answers_in(data[:exc.whole], session)
        except LogDamaged as exc:
            raise JournalError(str(exc)) from None
        if not logged:
            return []
        held = {seq: rest for seq, *rest in self._db.execute(
            "SELECT seq, row, measured, value FROM answers WHERE session = ?", (session,))}
        statements = []
        for seq, *rest in logged:
            if seq not in held:
                statements.append((_INSERT_ANSWER, (session, seq, *rest)))
            elif held[seq] != rest:
                raise JournalError(f"session {session[:12]}...: query {seq} has one answer "
                                   "in the journal and another in its answer log")
        return statements

    def _mark_claimed(self, fd: int, generation: int) -> None:
        """Append a CLAIM record under the log's lock: every older writer's next check
        fails. Called inside the transaction it fences, before its COMMIT: a failed
        append rolls it back (JournalFault, sticky: the disk refused a write)."""
        self._append(fd, answer_log.record(answer_log.CLAIM, generation, -1, -1, 0.0, 0.0),
                     os.lseek(fd, 0, os.SEEK_END))

    def _append(self, fd: int, data: bytes, size: int) -> None:
        """Append a record to a log `size` long; a failed write (cut back to `size`) is
        the journal's fault (sticky), as a failed COMMIT is."""
        try:
            answer_log.append(fd, data, size)
        except OSError as exc:
            self._log_failed(exc)

    @contextlib.contextmanager
    def _waiting_until(self, deadline: float | None):
        """SQLite's busy wait cut to what is left until `deadline` (a claim waited for
        the log's lock already: one busy_timeout in all, not two); None: as it is."""
        if deadline is None:
            yield
            return
        left = max(0.0, deadline - time.monotonic())
        self._db.execute(f"PRAGMA busy_timeout = {int(left * 1000)}")
        try:
            yield
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

    def _fold_unwritten(self, session: str) -> float | None:
        """Before a table write of a session this object keeps no log of (a writer
        dropped, another process's log): fold its log in first, so that the table
        refuses a seq answered there and keeps the order of answering."""
        path = self._log_path(session)
        try:
            seen = os.stat(path, follow_symlinks=False) if path is not None else None
        except FileNotFoundError:
            seen = None
        if seen is None or self._folded.get(session) == (seen.st_ino, seen.st_size):
            return None  # no log, or none changed since this object folded it: O(1)
        with self._lock:
            self._commit_group()
            deadline = time.monotonic() + self.busy_timeout
            fd = self._open_log(session, create=False, deadline=deadline)
            if fd is None:
                return deadline
            try:
                statements = self._fold(session, fd)
                if statements:
                    with self._waiting_until(deadline):
                        self._transaction(statements, session)
                self._note_folded(session, fd)
            finally:
                os.close(fd)
        return deadline

    def _note_folded(self, session: str, fd: int) -> None:
        """Keep what the log `fd` was when this object folded it (`_fold_unwritten`)."""
        held = os.fstat(fd)
        self._folded[session] = (held.st_ino, held.st_size)

    def claimable(self, session: str, owner: str) -> int:
        """The generation of a session `owner` may take over now (changing nothing); the
        typed ProtocolError `claim` raises otherwise: an unknown session, another owner's,
        or a finished one."""
        row = self._db.execute("SELECT owner, status, generation FROM sessions WHERE id = ?",
                               (session,)).fetchone()
        if row is None:
            raise ProtocolError(f"no session {session[:40]!r} in this curator's journal",
                                ErrorCode.SEQUENCE)
        held_by, status, generation = row
        if held_by != owner:
            raise ProtocolError("this session belongs to another peer key", ErrorCode.NOT_OWNER)
        if status not in RESUMABLE:
            raise ProtocolError(f"session {session[:12]}... is {status}: a finished session "
                                "cannot be resumed", ErrorCode.SESSION_CLOSED)
        return generation

    def claim(self, session: str, owner: str) -> int:
        """Take a resumable session over for a new connection of its owner: its generation
        goes up by one, so that every write of an older connection is refused. Raises a
        typed ProtocolError for an unknown session, another owner or a finished one. The
        check and the increment are one transaction: two processes sharing the journal
        cannot both claim the same generation. Every claim of a file journal holds the
        session's answer log locked (made if missing: the lock serializes claims and
        appends), folds it into the table and appends its CLAIM record before it commits;
        one busy_timeout bounds the wait for both locks."""
        claimed: list[int] = []

        def take() -> list[tuple[str, tuple]]:  # (inside the transaction, its checks passed)
            generation = self.claimable(session, owner)
            claimed.append(generation + 1)
            statements = [("UPDATE sessions SET generation = ?, status = 'open' WHERE id = ?",
                           (generation + 1, session))]
            if fd is not None:
                statements += self._fold(session, fd)
                self._mark_claimed(fd, generation + 1)
                statements.append(self._log_noted(session, fd))
            return statements

        with self._lock:  # no answer between the commit and the kept generation
            self.claimable(session, owner)  # (a refused claim touches no log)
            self._commit_group()  # (SQLite's lock is never held while the log's is taken)
            deadline = time.monotonic() + self.busy_timeout
            fd = self._open_log(session, create=True, deadline=deadline)
            try:
                try:
                    with self._waiting_until(deadline):
                        self._transaction(take)
                except ProtocolError as exc:
                    if fd is not None and exc.code == ErrorCode.SESSION_CLOSED:
                        _unlink_quietly(self._log_path(session))  # finished meanwhile: folded
                    raise
                if self._generations is not None:
                    self._generations[session] = claimed[0]
                if fd is not None and self.logging:
                    seqs = {r[0] for r in self._db.execute(
                        "SELECT seq FROM answers WHERE session = ?", (session,))}
                    self._start_log(session, claimed[0], seqs, fd)
                    fd = None  # (kept, unlocked)
                elif fd is not None:  # (folded: its table writes need not read it again)
                    self._note_folded(session, fd)
            finally:
                if fd is not None:
                    os.close(fd)
        return claimed[0]

    def current(self, session: str, generation: int) -> bool:
        """Whether `generation` still owns the session (a fencing check before work); a
        superseded connection's log is closed."""
        if self._generation(self._db.cursor(), session) == generation:
            return True
        self._drop_writer(session, generation)
        return False

    def record_answer(self, session: str, generation: int | None, seq: int, row: int,
                      entries: list[Entry], budget: Budget,
                      evaluate: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        """Evaluate one query and commit it with its ledger entries in one transaction,
        by the session's current connection only: `evaluate` (the measurement and the
        released value) runs inside the write lock, after the generation and the budget
        were checked, so neither a superseded connection (even in another process sharing
        the journal) nor a row past its budget ever evaluates f or draws noise. Without
        entries, in memory it waits for the next read (`_answer_in_memory`) and on disk at
        normal it is appended to the session's answer log (`_answer_logged`), fenced alike."""
        if not entries and not self.group_commit and self._generations is not None \
                and session in self._generations:
            return self._answer_in_memory(session, generation, seq, row, evaluate)
        writer = self._logs.get(session)
        if writer is not None and not entries and (
                generation is None or generation <= writer.generation):
            return self._answer_logged(writer, session, generation, seq, row, evaluate)
        deadline = self._before_table(session, seq)  # (a newer generation than this
        done: list[tuple[float, float]] = []  # object's writer: SQLite fences it)

        def insert() -> list[tuple[str, tuple]]:
            done.append(evaluate())
            return [(_INSERT_ANSWER, (session, seq, row, *done[0]))]

        if deadline is None:  # (no context manager on an LDP answer's path)
            self._transaction(insert, session, entries, budget, generation, grouped=True)
        else:
            with self._waiting_until(deadline):
                self._transaction(insert, session, entries, budget, generation, grouped=True)
        self._answered(session, seq)
        return done[0]

    def _answered(self, session: str, seq: int) -> None:
        """Note an answer committed to the table, as a duplicate's refusal needs it."""
        if self._generations is not None:
            self._answer_keys.add((session, seq))
        writer = self._logs.get(session)
        if writer is not None:
            writer.seqs.add(seq)

    def _before_table(self, session: str, seq: int) -> float | None:
        """Before query `seq` of a session goes to the table (an answer with a charge, a
        reservation, a deferred answer): refused as a duplicate if its log answered it,
        and the log's answers folded in first, so that the table keeps the order of
        answering; a log this object does not write (its writer dropped, another
        process's) is folded in first too. The deadline of the wait it began (the table
        write waits what is left of one busy_timeout), or None."""
        writer = self._logs.get(session)
        if writer is None:
            return self._fold_unwritten(session) if self.path != ":memory:" else None
        if seq in writer.seqs:
            raise _duplicate()
        if not writer.unfolded:
            return None
        deadline = time.monotonic() + self.busy_timeout
        with self._lock:
            self._hold(session, writer, deadline)
            try:
                with self._waiting_until(deadline):
                    self._transaction(self._fold(session, writer.fd), session,
                                      generation=writer.generation)
                writer.unfolded = 0
            finally:
                unlock(writer.fd)
        return deadline

    def _hold(self, session: str, writer: LogWriter, deadline: float) -> None:
        """Lock the session's log for `writer`, as it was left (the caller unlocks):
        BUSY past `deadline` (a claim holds it), Superseded (the writer closed) once
        another connection's record follows this writer's last, JournalFault once the
        file was removed from under it (what it appends would be read by nobody). On
        any of these the lock is not held."""
        fd = writer.fd
        try:
            answer_log.flock(fd, timeout=max(0.0, deadline - time.monotonic()))
        except LockBusy:
            raise self._busy("another connection claims this session") from None
        except (OSError, NoLocks) as exc:
            self._log_failed(exc)
        size, linked = os.lseek(fd, 0, os.SEEK_END), os.fstat(fd).st_nlink
        if size == writer.size and linked:  # as left: no claim appended
            return
        owned = self._db.execute("SELECT 1 FROM sessions WHERE id = ? AND generation = ? AND "
                                 "status IN (?, ?)", (session, writer.generation, *RESUMABLE)
                                 ).fetchone() is not None
        if owned and size > writer.size and linked:
            writer.size = size  # a claim that appended its record, then failed: go on
            return
        unlock(fd)
        if owned:  # nobody took it over, yet the file changed under its writer
            self._log_failed(FileNotFoundError(errno.ENOENT, "the answer log of session "
                                               f"{session[:12]}... was cut or removed while "
                                               "its connection answered"))
        self._drop_writer(session)
        raise Superseded(session)

    def _answer_logged(self, writer: LogWriter, session: str, generation: int | None,
                       seq: int, row: int,
                       evaluate: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        """`record_answer` of a file journal at durability normal with no ledger entry to
        charge: one record appended to the session's log (`parties.answer_log`) instead of
        a SQLite transaction, as durable against a killed process. Under the log's lock,
        before f is evaluated: the generation (this process's newer connection) and the
        log's length (another process's claim appended to it) fence a superseded
        connection, and a seq answered already is refused as the table refuses it. An
        answer the table would refuse or convert (a NaN, an integer value) goes to the
        table, which raises or keeps it as the transaction would."""
        with self._lock:
            if self.fault is not None:
                raise JournalFault(self.fault)
            if generation is not None and generation != writer.generation \
                    or self._logs.get(session) is not writer:
                raise Superseded(session)
            if seq in writer.seqs:
                raise _duplicate()
            deadline = time.monotonic() + self.busy_timeout
            self._hold(session, writer, deadline)
            try:
                done = evaluate()
                data = answer_log.answer_record(writer.generation, seq, row, *done)
                if data is not None:
                    self._append(writer.fd, data, writer.size)
                    writer.size += len(data)
                    writer.unfolded += 1
                else:  # the table raises what it raised, or stores it converted
                    with self._waiting_until(deadline):
                        if writer.unfolded:  # (after the log's answers, in order)
                            self._transaction(self._fold(session, writer.fd), session)
                            writer.unfolded = 0
                        try:
                            self._db.execute(_INSERT_ANSWER, (session, seq, row, *done))
                        except sqlite3.Error as exc:
                            self._raise_failed(exc)
            finally:
                unlock(writer.fd)
            writer.seqs.add(seq)
            self.commits += 1
        return done

    def _log_failed(self, exc: Exception):
        """A failed write of a log is the journal's fault (sticky), as a failed COMMIT is."""
        self.fault = self.fault or f"answer log: {getattr(exc, 'strerror', None) or exc}"
        log.error("journal %s: write failed: %s", self.path, self.fault)
        raise JournalFault(self.fault) from exc

    def _answer_in_memory(self, session: str, generation: int | None, seq: int, row: int,
                          evaluate: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        """`record_answer` of an in-memory journal with no ledger entry to charge (a
        sweep's every answer): no other connection can see the database, so the session's
        generation is the one kept here (checked under the lock before f is evaluated,
        as in the transaction, and after the journal's fault, as there), and the answer is
        kept in memory until anything next touches the database (`_db`): no statement per
        answer. Only an answer the table is sure to take waits: one it would refuse (a seq
        answered already, a NaN, an integer past 64 bits, a value of another type) goes
        to the table now, which raises what the transaction's INSERT raises."""
        with self._lock:
            if self.fault is not None:
                raise JournalFault(self.fault)
            if generation is not None and self._generations[session] != generation:
                raise Superseded(session)
            done = evaluate()
            answer = (session, seq, row, *done)
            if (session, seq) in self._answer_keys or not _storable(answer):
                try:
                    self._db.execute(_INSERT_ANSWER, answer)
                except sqlite3.Error as exc:
                    self._raise_failed(exc)
                self._answer_keys.add((session, seq))
            else:  # the key first: cut short between the two (Ctrl-C), a second record of
                self._answer_keys.add((session, seq))  # it goes to the table, once
                self._unwritten.append(answer)
            self.commits += 1
        return done

    @property
    def _db(self) -> sqlite3.Connection:
        """The database, with the answers an in-memory journal has only recorded so far
        (`_answer_in_memory`) written to it first: whatever reads or writes it sees them,
        in order. (They wait in memory, as the database itself does: nothing of an
        in-memory journal outlives the process; between two GP steps of a sweep one
        INSERT took ~40 us, ten times what the same statements take together.)"""
        if self._unwritten:
            self._write_unwritten()
        return self._conn

    @_db.setter
    def _db(self, connection: sqlite3.Connection) -> None:
        self._conn = connection

    def _write_unwritten(self) -> None:
        """Write the answers recorded in memory to the table, in order: in one transaction
        (half the time of one autocommit per row) unless one is open already; if that
        fails, row by row up to the first the table refuses. An answer leaves the queue
        only once it is in the table: their rewards were sent, so one that cannot go in
        stays queued with every answer after it and the journal's fault is set
        (JournalFault: nothing more is answered). An interruption (Ctrl-C) loses none and
        writes none twice: the next write first drops those the table holds already (a
        prefix of the queue, as they go in in order)."""
        with self._lock:
            rows, conn = self._unwritten, self._conn
            if self._cut_short:
                del rows[:self._held_already(rows)]
                if not rows:
                    self._cut_short = False
                    return
            self._cut_short = True  # until what the table holds is known again
            own = not conn.in_transaction
            try:
                if own:
                    try:
                        conn.execute("BEGIN")
                        conn.executemany(_INSERT_ANSWER, rows)
                        conn.execute("COMMIT")
                        rows.clear()
                    except sqlite3.Error:
                        self._rollback(conn.cursor())
                while rows:  # (inside a transaction open already, or the batch failed)
                    conn.execute(_INSERT_ANSWER, rows[0])
                    del rows[0]
            except sqlite3.Error as exc:  # the rows it could not write stay queued
                self._cut_short = False
                self.fault = self.fault or (f"answers recorded in memory cannot be written: "
                                            f"{type(exc).__name__}: {exc}")
                log.error("journal %s: %s", self.path, self.fault)
                raise JournalFault(self.fault) from exc
            except BaseException:  # Ctrl-C, MemoryError...: every row kept or in the table
                if own and conn.in_transaction:
                    self._rollback(conn.cursor())  # never left open for every later write
                raise
            self._cut_short = False

    def _held_already(self, rows: list[tuple]) -> int:
        """How many of `rows`, from the first, the table holds already (a write of them
        cut short after it went in)."""
        held = 0
        for session, seq, *_ in rows:
            if self._conn.execute("SELECT 1 FROM answers WHERE session = ? AND seq = ?",
                                  (session, seq)).fetchone() is None:
                break
            held += 1
        return held

    def reserve(self, session: str, generation: int | None, seq: int, row: int,
                entries: list[Entry], budget: Budget) -> float:
        """Reserve the evaluation of query `seq` at `row` for an objective evaluated on
        demand, charging its ledger entries now (before f is evaluated or noise drawn),
        by the session's current connection only; returns when it was first reserved.
        Idempotent: a query already reserved is neither charged again nor moved."""
        when: list[float] = []
        held = self._db.execute("SELECT row, requested FROM pending WHERE session = ? AND seq = ?",
                                (session, seq)).fetchone()
        if held is not None:  # checked first: a reservation already charged is not refused
            if generation is not None and not self.current(session, generation):
                raise Superseded(session)
            return self._held(seq, row, *held)
        deadline = self._before_table(session, seq)  # (never charged for a logged answer)

        def insert() -> list[tuple[str, tuple]]:
            held = self._db.execute("SELECT row, requested FROM pending WHERE session = ? AND "
                                    "seq = ?", (session, seq)).fetchone()
            if held is not None:
                raise _Held(*held)
            if self._db.execute("SELECT 1 FROM answers WHERE session = ? AND seq = ?",
                                (session, seq)).fetchone() is not None:
                raise _duplicate()  # (answered: nothing charged)
            when.append(time.time())
            return [("INSERT INTO pending VALUES (?, ?, ?, ?, NULL, NULL, 0)",
                     (session, seq, row, when[0]))]

        try:
            with self._waiting_until(deadline):
                self._transaction(insert, session, entries, budget, generation, grouped=True)
        except _Held as found:  # reserved by a racing connection in between
            return self._held(seq, row, found.row, found.requested)
        return when[0]

    @staticmethod
    def _held(seq: int, row: int, held_row: int, requested: float) -> float:
        if held_row != row:
            raise ProtocolError(f"query {seq} was for row {held_row}, not {row}",
                                ErrorCode.SEQUENCE)
        return requested

    def supply(self, session: str, seq: int, value: float) -> PendingEvaluation:
        """Enter the measured value of a pending evaluation (`pobo answer`, a results
        file): typed errors for an unknown or answered query or a non-finite value. The
        value is only kept here; the curator releases it (with its mechanism) later."""
        if not math.isfinite(value):
            raise ProtocolError(f"the value {value} is not a finite number")
        found: list[PendingEvaluation] = []

        def update() -> list[tuple[str, tuple]]:
            row = self._db.execute("SELECT row, requested, measured FROM pending WHERE "
                                   "session = ? AND seq = ?", (session, seq)).fetchone()
            if row is None:
                answered = any(a[0] == seq  # (the table's answers and its log's)
                               for a in (self._session_answers(session) or ((), ()))[1])
                raise ProtocolError(f"query {seq} of session {session[:12]}... is "
                                    + ("already answered" if answered else "not pending"),
                                    ErrorCode.SEQUENCE)
            if row[2] is not None:
                raise ProtocolError(f"query {seq} of session {session[:12]}... already has "
                                    f"the value {row[2]}", ErrorCode.DUPLICATE)
            status = self._db.execute("SELECT status FROM sessions WHERE id = ?",
                                      (session,)).fetchone()
            if status is not None and status[0] in FINISHED:
                raise ProtocolError(f"session {session[:12]}... is {status[0]}: its pending "
                                    "queries will not be answered", ErrorCode.SESSION_CLOSED)
            found.append(PendingEvaluation(session, seq, row[0], row[1], float(value)))
            return [("UPDATE pending SET measured = ?, supplied = ? WHERE session = ? AND "
                     "seq = ?", (float(value), time.time(), session, seq))]

        self._transaction(update)
        return found[0]

    def record_failure(self, session: str, seq: int) -> int:
        """Count one failed evaluation of a pending query (over every connection and
        restart); returns the count."""
        self._transaction([("UPDATE pending SET failures = failures + 1 WHERE session = ? "
                            "AND seq = ?", (session, seq))])
        return self.failures(session, seq)

    def failures(self, session: str, seq: int) -> int:
        """How many evaluations of a pending query failed so far."""
        row = self._db.execute("SELECT failures FROM pending WHERE session = ? AND seq = ?",
                               (session, seq)).fetchone()
        return 0 if row is None else int(row[0])

    def supplied(self, session: str, seq: int) -> float | None:
        """The value entered for a pending evaluation, or None (not yet, or not pending)."""
        row = self._db.execute("SELECT measured FROM pending WHERE session = ? AND seq = ?",
                               (session, seq)).fetchone()
        return None if row is None else row[0]

    def complete(self, session: str, generation: int | None, seq: int, row: int,
                 measured: float, value: float) -> None:
        """Answer a reserved evaluation: the answer is committed and the reservation
        dropped in one transaction, by the session's current connection only (its
        ledger entries were charged when it was reserved)."""
        with self._waiting_until(self._before_table(session, seq)):
            self._transaction([(_INSERT_ANSWER, (session, seq, row, measured, value)),
                               ("DELETE FROM pending WHERE session = ? AND seq = ?",
                                (session, seq))], session, generation=generation, grouped=True)
        self._answered(session, seq)

    def pending(self, session: str | None = None, live: bool = False) -> list[PendingEvaluation]:
        """Pending evaluations, oldest first: all, or one session's; with `live`, only
        those of sessions not finished (a session ended with queries still pending
        keeps them, charged, but they will not be answered)."""
        sql = "SELECT session, seq, row, requested, measured FROM pending"
        where, args = [], []
        if session is not None:
            where, args = ["session = ?"], [session]
        if live:
            where.append("session NOT IN (SELECT id FROM sessions WHERE status IN (?, ?))")
            args += list(FINISHED)
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [PendingEvaluation(*r) for r in self._db.execute(sql + " ORDER BY requested, seq",
                                                                tuple(args))]

    def charge(self, session: str, entries: list[Entry], budget: Budget,
               generation: int | None = None) -> None:
        """Charge entries on their own (a release, before its noise is drawn)."""
        self._transaction([], session, entries, budget, generation)

    def charge_release(self, session: str, generation: int | None, entries: list[Entry],
                       budget: Budget, algorithm: str) -> None:
        """Charge a release and mark the session as released, in one transaction, before
        its noise is drawn: refused (ReleaseAlreadyGranted, nothing charged) when the
        session was already granted one -- by this connection, an earlier one, or before
        a restart -- and past the budget like any charge."""
        def mark() -> list[tuple[str, tuple]]:
            row = self._db.execute("SELECT release FROM sessions WHERE id = ?",
                                   (session,)).fetchone()
            if row is not None and row[0] is not None:
                raise ReleaseAlreadyGranted(session)
            if math.isfinite(budget.releases):
                (granted,) = self._db.execute(
                    "SELECT COUNT(*) FROM sessions WHERE release IS NOT NULL").fetchone()
                if granted >= budget.releases:
                    raise PrivacyBudgetExceeded(
                        f"the dataset's budget admits {int(budget.releases)} release(s) of a "
                        f"result, and {granted} was granted already (over every session and "
                        "restart): refused at any (eps, delta)")
            return [("UPDATE sessions SET release = ? WHERE id = ?",
                     (json.dumps({"algorithm": algorithm, "state": "charged"}), session))]

        mark()  # said first, before the budget's refusal; checked again in the transaction
        self._transaction(mark, session, entries, budget, generation)

    def record_release(self, session: str, generation: int, release: dict) -> None:
        """The release a session was granted."""
        self._transaction([("UPDATE sessions SET release = ? WHERE id = ?",
                            (json.dumps(release), session))], session, generation=generation)

    def set_status(self, session: str, generation: int, status: str) -> None:
        """Mark a session 'ok', 'failed', 'interrupted' or 'open' (its current connection
        only). Its log is closed once its connection ends or is superseded. A finished
        session's answer log is folded into the table in the same transaction (a CLAIM
        record appended first, so that no older writer goes on; the COMMIT made durable
        even at normal), then removed."""
        update = [("UPDATE sessions SET status = ? WHERE id = ?", (status, session))]
        with self._lock:
            if status not in FINISHED:
                try:
                    self._transaction(update, session, generation=generation)
                except Superseded:
                    self._drop_writer(session, generation)
                    raise
                if status != "open":  # (its connection ends: a resume opens the log again)
                    self._drop_writer(session, generation)
                return
            self._commit_group()  # (SQLite's lock is never held while the log's is taken)
            deadline = time.monotonic() + self.busy_timeout
            fd = self._open_log(session, create=False, deadline=deadline)

            def finish() -> list[tuple[str, tuple]]:
                statements = update + [("DELETE FROM meta WHERE key = ?", (_LOG_KEY + session,))]
                if fd is not None:
                    statements += self._fold(session, fd)
                    self._mark_claimed(fd, generation)
                return statements

            try:
                try:
                    with self._waiting_until(deadline), self._durable(fd is not None):
                        self._transaction(finish, session, generation=generation)
                except Superseded:
                    self._drop_writer(session, generation)
                    raise
                self._drop_writer(session, generation)
                if fd is not None:  # (the fold is durable: the log may go)
                    _unlink_quietly(self._log_path(session))
            finally:
                if fd is not None:
                    os.close(fd)

    @contextlib.contextmanager
    def _durable(self, needed: bool):
        """Commit with an fsync even at durability normal (a finished session's fold, before
        its log is removed: a power loss must not keep the removal and lose the fold)."""
        if not needed or self.durability == "full":
            yield
            return
        self._db.execute("PRAGMA synchronous=FULL")
        try:
            yield
        finally:
            self._db.execute(f"PRAGMA synchronous={DURABILITY[self.durability]}")

    def load(self, session: str) -> JournaledSession | None:
        """A journaled session, or None; its answers are the table's and its answer log's
        (`_session_answers`, which orders the reads so that a fold in between hides none)."""
        found = self._session_answers(session)
        if found is None:
            return None
        row, answers = found
        entries, pending = self.entries(session), self.pending(session)
        return JournaledSession(session, row[0], json.loads(row[1]), row[2], row[3], row[4],
                                row[5], row[6], row[7], [tuple(a) for a in answers],
                                entries, json.loads(row[8]) if row[8] else None,
                                {p.seq: (p.row, p.requested) for p in pending})

    def sessions(self) -> list[tuple[str, str]]:
        """(id, status) of every journaled session, oldest first."""
        return [tuple(r) for r in self._db.execute("SELECT id, status FROM sessions "
                                                   "ORDER BY ordinal")]

    # -- the ledger ---------------------------------------------------------------------

    def entries(self, session: str | None = None, scope: str | None = None) -> list[Entry]:
        """Ledger entries, oldest first: all, or one session's, or one scope's."""
        sql, args = "SELECT mechanism, epsilon, delta, scope, row FROM ledger", []
        where = [(c, v) for c, v in (("session", session), ("scope", scope)) if v is not None]
        if where:
            sql += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
            args = [v for _, v in where]
        return [Entry(*r) for r in self._db.execute(sql + " ORDER BY n", args)]

    def ledger_rows(self, after: int = 0, limit: int = -1) -> list[tuple]:
        """The ledger entries numbered past `after` (at most `limit`; -1: all), in journal
        order, as (n, session, mechanism, epsilon, delta, scope, row, time): what the
        ledger's hash chain covers."""
        return self._db.execute(
            "SELECT n, session, mechanism, epsilon, delta, scope, row, time FROM ledger "
            "WHERE n > ? ORDER BY n LIMIT ?", (after, limit)).fetchall()

    def bad_entries(self, limit: int = 3) -> list[str]:
        """Why ledger entries are not charges any mechanism makes, one line each (at most
        `limit`; empty: none): epsilon not a finite number >= 0, delta not in [0, 1), a
        scope other than central or local, a local entry with no row. Such an entry (an
        edit, say a negative epsilon that refunds a row's budget) would let the budget
        check pass what it must refuse. O(the entries): once when a curator starts, and in
        `pobo ledger`."""
        out = []
        for n, e, d, scope, row in self._db.execute(
                "SELECT n, epsilon, delta, scope, row FROM ledger ORDER BY n"):
            why = entry_fault(e, d, scope, row)
            if why is not None:
                out.append(f"{self.path}: ledger entry n={n} has {why}: the journal was "
                           "edited")
                if len(out) >= limit:
                    break
        return out

    def uncharged_answers(self, limit: int = 3) -> list[str]:
        """Why the ledger does not hold a local charge for every answer (and every charged
        reservation) of a session whose Welcome announced LDP rewards, one line per row
        short of them (at most `limit`; empty: it does): entries taken out after the last
        head kept (a curator killed before its session's end keeps none) leave answers
        with no charge, which the journal itself shows (a review). O(the answers), once
        when a curator starts, and in `pobo ledger`."""
        from pobo.protocol.codec import decode
        from pobo.protocol.policy import LDP_REWARD

        out: list[str] = []
        for session, welcome in self._db.execute("SELECT id, welcome FROM sessions "
                                                 "ORDER BY ordinal").fetchall():
            if isinstance(welcome, bytes) and LDP_REWARD.encode() not in welcome:
                continue  # no LDP mechanism named in it: not decoded (a service's many)
            try:
                ldp = any(m.name == LDP_REWARD for m in decode(welcome).params.mechanisms)
            except (ProtocolError, AttributeError, ValueError) as exc:
                out.append(f"{self.path}: session {session[:12]}'s welcome cannot be read "
                           f"({exc}): the journal was edited")
                continue
            if not ldp:
                continue
            for row, asked, charged in self._db.execute(
                    "SELECT a.row, a.n, COALESCE(c.n, 0) FROM (SELECT row, COUNT(*) AS n "
                    "FROM (SELECT row FROM answers WHERE session = ? UNION ALL SELECT row "
                    "FROM pending WHERE session = ?) GROUP BY row) AS a LEFT JOIN (SELECT "
                    "row, COUNT(*) AS n FROM ledger WHERE scope = ? AND session = ? GROUP BY "
                    "row) AS c ON a.row = c.row WHERE COALESCE(c.n, 0) < a.n ORDER BY a.row",
                    (session, session, LOCAL, session)):
                out.append(f"{self.path}: session {session[:12]} answered row {row} {asked} "
                           f"time(s) with LDP rewards; its ledger holds {charged} charge(s) "
                           "on that row: entries were taken out")
                if len(out) >= limit:
                    return out
        return out

    def check_row_totals(self) -> None:
        """Raise JournalError unless the per-row running totals (`row_ledger`, which picks
        the worst-off row for a ledger head) agree with the hash-chained entries: a total
        edited down on disk would let that row's reports past its budget unnoticed. O(the
        local entries), once when a curator starts. (The budget itself is always checked
        against the entries: `_spent`.) A journal in memory has no other writer."""
        if self.path == ":memory:":
            return
        held = {r: (e, d, n) for r, e, d, n in self._db.execute(
            "SELECT row, epsilon, delta, reports FROM row_ledger")}
        sums: dict[int, list] = {}
        for r, e, d in self._db.execute("SELECT row, epsilon, delta FROM ledger "
                                        "WHERE scope = ?", (LOCAL,)):
            acc = sums.get(r)
            if acc is None:
                acc = sums[r] = [ExactSum(), ExactSum(), 0]
            acc[0].add(e)
            acc[1].add(d)
            acc[2] += 1
        for r in held.keys() | sums.keys():
            e, d, n = held.get(r, (0.0, 0.0, 0))
            acc = sums.get(r, (ExactSum(), ExactSum(), 0))
            exact = (float(acc[0]), float(acc[1]))
            if n != acc[2] or any(abs(a - b) > 1e-9 * max(1.0, abs(b))  # a running float
                                  for a, b in zip((e, d), exact)):  # sum's drift, no more
                raise JournalError(
                    f"{self.path}: row {r}'s running totals ({n} reports, eps {e:g}, delta "
                    f"{d:g}) disagree with its ledger entries ({acc[2]} reports, eps "
                    f"{exact[0]:g}, delta {exact[1]:g}): the journal was edited; refusing "
                    "to start on it")

    def basic_totals(self) -> dict:
        """The ledger's basic-composition totals (no accountant), exactly summed from the
        entries: central (epsilon, delta) and the worst-off row's local (epsilon, delta),
        in the layout a ledger head commits to (protocol.checkpoint.ledger_head)."""
        eps, dlt = self.central_spent()
        top = self._db.execute("SELECT row FROM row_ledger ORDER BY epsilon DESC, delta DESC "
                               "LIMIT 1").fetchone()  # the worst-off row (checked at start)
        row = (0.0, 0.0) if top is None else self.row_spent(top[0])
        return {"central": {"epsilon_basic": eps, "delta_basic": dlt},
                "local": {"max_row_epsilon_basic": row[0], "max_row_delta_basic": row[1]}}

    def central_entries(self) -> list[dict]:
        """Every central entry with its session and time, oldest first."""
        return [{"mechanism": m, "epsilon": e, "delta": d, "scope": CENTRAL, "session": s,
                 "time": t} for m, e, d, s, t in self._db.execute(
                    "SELECT mechanism, epsilon, delta, session, time FROM ledger WHERE scope = ? "
                    "ORDER BY n", (CENTRAL,))]

    def central_parts(self) -> Counter:
        """The central entries so far, (kind, eps, delta) -> count."""
        return self._parts(self._db.cursor(), CENTRAL)

    def central_spent(self) -> tuple[float, float]:
        """(eps, delta) of the central entries so far, over all sessions (exact sums)."""
        return self._spent(self._db.cursor(), Entry("", 0.0, 0.0, CENTRAL))

    def row_spent(self, row: int) -> tuple[float, float]:
        """(eps, delta) of the LDP reports on one row so far, over all sessions."""
        return self._spent(self._db.cursor(), Entry("", 0.0, 0.0, LOCAL, row))

    def row_parts(self, row: int) -> Counter:
        """One row's reports so far, (kind, eps, delta) -> count, over all sessions."""
        return self._parts(self._db.cursor(), LOCAL, row)

    def local_summary(self, budget: Budget = Budget()) -> dict:
        """Reports, rows with any, and the worst-off row over all sessions (one pass over
        the local entries: each row's composition for the accountant)."""
        rows: dict[int, Counter] = defaultdict(Counter)
        counts: dict[int, int] = defaultdict(int)
        for row, mechanism, eps, dlt, count in self._db.execute(
                "SELECT row, mechanism, epsilon, delta, COUNT(*) FROM ledger WHERE scope = ? "
                "GROUP BY row, mechanism, epsilon, delta", (LOCAL,)):
            rows[row][part_of(mechanism, eps, dlt)] += int(count)
            counts[row] += int(count)
        return local_summary(sum(counts.values()), rows, budget, counts)

    def close(self) -> None:
        """Commit what is staged and close the database."""
        with self._lock:
            self._commit_group()
            self._db.close()
            for writer in self._logs.values():
                os.close(writer.fd)
            self._logs.clear()


@functools.lru_cache(maxsize=1)
def _empty_schema() -> bytes:
    """The serialized image of an empty in-memory journal (SCHEMA at SCHEMA_VERSION): a
    new in-memory journal deserializes a private copy of it instead of running the DDL."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db.executescript(SCHEMA)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return db.serialize()
    finally:
        db.close()


def _fsync_dir(folder: Path) -> None:
    """fsync a folder: the entries made in it (a file renamed in, a folder made) are
    durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    """Remove `path` if it is there; an error leaves it (for `_sweep_stale_tmp`)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _sweep_stale_tmp(folder: Path) -> None:
    """Remove the temporary files of projection writes whose process is gone (a curator
    killed while writing leaves one, as large as Z); another live writer's are kept."""
    for tmp in folder.glob(".*.npy.tmp"):
        try:
            pid = int(tmp.name.split(".")[1])
            os.kill(pid, 0)  # raises ProcessLookupError when no such process is running
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, IndexError, PermissionError):
            continue  # not one of ours, or another user's live process


def read_npy(path: Path, digest: str, shape: tuple[int, ...]):
    """The float64 array of `shape` in the .npy file `path`, read into memory through one
    descriptor and hashed as it is read, so that what was checked is what is served (a
    memory map checked first could change under a file rewritten in place, and a file
    truncated under it kills the process). Read-only. JournalError unless the file is a
    .npy of float64 in C order of `shape` whose bytes hash (SHA-256) to `digest`; it
    never unpickles anything."""
    import numpy as np
    from numpy.lib import format as npy

    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise JournalError(f"the journal's projection file {path} is missing") from None
    with f:
        try:
            version = npy.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version}")
            read_header = (npy.read_array_header_1_0 if version == (1, 0)
                           else npy.read_array_header_2_0)
            held, fortran, dtype = read_header(f)
        except ValueError as exc:
            raise JournalError(f"the journal's projection file {path} is not a .npy "
                               f"array: {exc}") from None
        if tuple(held) != tuple(shape) or fortran or dtype != np.dtype("<f8"):
            raise JournalError(f"the journal's projection file {path} holds {dtype} of shape "
                               f"{tuple(held)}{' (Fortran order)' if fortran else ''}, not "
                               f"float64 of shape {tuple(shape)}")
        header = f.tell()
        f.seek(0)
        hasher = hashlib.sha256(f.read(header))
        Z = np.empty(shape, dtype="<f8")
        if not read_hashing(f, memoryview(Z.reshape(-1)).cast("B"), hasher):
            raise JournalError(f"the journal's projection file {path} is truncated")
    if hasher.hexdigest() != digest:
        raise JournalError(f"the journal's projection file {path} is corrupt: it hashes to "
                           f"{hasher.hexdigest()}, the journal holds {digest}")
    Z.flags.writeable = False
    return Z


def entry_fault(epsilon, delta, scope, row) -> str | None:
    """Why a ledger entry is not a charge any mechanism makes (None: it is one): epsilon
    not a finite number >= 0, delta not in [0, 1), a scope other than central or local,
    a local entry with no row. Refused when charged, reported when found in a journal."""
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
        return f"epsilon {epsilon!r} (a charge is a finite number >= 0)"
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        return f"delta {delta!r} (a charge's delta lies in [0, 1))"
    if scope not in (CENTRAL, LOCAL):
        return f"scope {scope!r} (central or local)"
    if scope == LOCAL and not (isinstance(row, int) and row >= 0):
        return f"row {row!r} for a local report (a row number >= 0)"
    return None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None (a synchronous caller)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None

