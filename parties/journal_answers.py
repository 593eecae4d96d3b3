"""The journal's answers: committed before a reward is sent, in the table or (at
--durability normal, with no charge) in the session's append-only answer log; the
reservations and values of evaluations measured on demand."""
from __future__ import annotations

import contextlib
import errno
import math
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from pobo.parties import answer_log
from pobo.parties.answer_log import LogDamaged, LogWriter, NoLocks
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.filelock import LockBusy, unlock
from pobo.protocol.ledger import Budget, Entry
from pobo.parties.journal_core import (
    FINISHED, JournalError, JournalFault, PendingEvaluation, RESUMABLE, Superseded,
    _Held, _INSERT_ANSWER, _LOG_KEY, _duplicate, _storable, _unlink_quietly, log,
)


class AnswerTables:
    """The answers and pending evaluations a journal holds (a part of `parties.journal.Journal`)."""


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
