"""The curator's journal: a SQLite database (WAL) that a restarted curator resumes from.

One row per session (its run configuration, the encoded welcome and dataset frames,
a digest of the objective, status), one per answered query (committed in its own
transaction before the reward is sent, so an answer the modeler saw is never lost and
never evaluated twice), one per privacy-ledger entry, and the release if any.
sqlite3 from the standard library: no hand-rolled file format for state that must
survive a crash.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from protocol.ledger import Entry

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, config TEXT NOT NULL, welcome BLOB NOT NULL, dataset BLOB NOT NULL,
    f_digest TEXT NOT NULL, status TEXT NOT NULL, release TEXT);
CREATE TABLE IF NOT EXISTS answers (
    session TEXT NOT NULL, seq INTEGER NOT NULL, row INTEGER NOT NULL, measured REAL NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (session, seq));
CREATE TABLE IF NOT EXISTS ledger (
    session TEXT NOT NULL, n INTEGER NOT NULL, mechanism TEXT NOT NULL, epsilon REAL NOT NULL,
    delta REAL NOT NULL, scope TEXT NOT NULL, row INTEGER NOT NULL, PRIMARY KEY (session, n));
"""


@dataclass(frozen=True)
class JournaledSession:
    """Everything a restarted curator needs to resume one session."""

    session: str
    config: dict
    welcome: bytes
    dataset: bytes
    f_digest: str
    status: str
    answers: list[tuple[int, int, float, float]]  # (seq, row, measured, value)
    ledger: list[Entry]
    release: dict | None


class Journal:
    """A curator's journal file; safe to share between the sessions of one process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def _transaction(self, statements: list[tuple[str, tuple]]) -> None:
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for sql, args in statements:
                cur.execute(sql, args)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def _entry_rows(self, session: str, entries: list[Entry]) -> list[tuple[str, tuple]]:
        (n,) = self._db.execute("SELECT COUNT(*) FROM ledger WHERE session = ?", (session,)).fetchone()
        return [("INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (session, n + k, e.mechanism, e.epsilon, e.delta, e.scope, e.row))
                for k, e in enumerate(entries)]

    def open_session(self, session: str, config: dict, welcome: bytes, dataset: bytes,
                     f_digest: str, entries: list[Entry]) -> None:
        """Record a new session and its setup-time ledger entries, atomically."""
        self._transaction([("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, 'open', NULL)",
                            (session, json.dumps(config), welcome, dataset, f_digest)),
                           *self._entry_rows(session, entries)])

    def record_answer(self, session: str, seq: int, row: int, measured: float, value: float,
                      entries: list[Entry]) -> None:
        """One answered query and its ledger entries, in one committed transaction."""
        self._transaction([("INSERT INTO answers VALUES (?, ?, ?, ?, ?)",
                            (session, seq, row, measured, value)),
                           *self._entry_rows(session, entries)])

    def record_release(self, session: str, release: dict, entries: list[Entry]) -> None:
        """The release and its ledger entries, in one transaction."""
        self._transaction([("UPDATE sessions SET release = ? WHERE id = ?",
                            (json.dumps(release), session)),
                           *self._entry_rows(session, entries)])

    def set_status(self, session: str, status: str) -> None:
        """Mark a session 'ok', 'error' or 'open'."""
        self._transaction([("UPDATE sessions SET status = ? WHERE id = ?", (status, session))])

    def load(self, session: str) -> JournaledSession | None:
        """A journaled session, or None."""
        row = self._db.execute("SELECT config, welcome, dataset, f_digest, status, release "
                               "FROM sessions WHERE id = ?", (session,)).fetchone()
        if row is None:
            return None
        answers = self._db.execute("SELECT seq, row, measured, value FROM answers WHERE "
                                   "session = ? ORDER BY seq", (session,)).fetchall()
        entries = [Entry(m, e, d, s, r) for m, e, d, s, r in self._db.execute(
            "SELECT mechanism, epsilon, delta, scope, row FROM ledger WHERE session = ? "
            "ORDER BY n", (session,)).fetchall()]
        return JournaledSession(session, json.loads(row[0]), row[1], row[2], row[3], row[4],
                                [tuple(a) for a in answers], entries,
                                json.loads(row[5]) if row[5] else None)

    def sessions(self) -> list[tuple[str, str]]:
        """(id, status) of every journaled session."""
        return [tuple(r) for r in self._db.execute("SELECT id, status FROM sessions")]

    def close(self) -> None:
        """Close the database."""
        self._db.close()


def entry_dict(entry: Entry) -> dict:
    """An entry as plain data."""
    return asdict(entry)
