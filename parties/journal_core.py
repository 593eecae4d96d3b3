"""The journal's core: its SQLite connection, schema, transactions and group commit.

The typed errors, the schema and the module-level helpers that the other parts of the
journal share live here; `parties.journal.Journal` puts the parts together (see its
docstring for what the journal holds and how durable it is).
"""
from __future__ import annotations


import asyncio
import contextlib
import functools
import logging
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pobo.parties.answer_log import LogWriter
from pobo.protocol.errors import ErrorCode, PoboError, ProtocolError
from pobo.protocol.ledger import CENTRAL, LOCAL, Budget, Entry, PrivacyBudgetExceeded

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




class JournalCore:
    """The journal's connection and transactions (`parties.journal.Journal` adds the rest)."""


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
