"""The journal's sessions: their rows, owners, generations (fencing) and status."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pobo.parties import answer_log
from pobo.parties.answer_log import LogDamaged, NoLocks
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.filelock import LockBusy
from pobo.parties.journal_core import (
    FINISHED, JournaledSession, RESUMABLE, Superseded, _LOG_KEY, _unlink_quietly,
)


class SessionTables:
    """The sessions a journal holds (a part of `parties.journal.Journal`)."""


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
