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

The journal is one class put together from one module per thing it keeps:
`journal_core` (the connection, schema, transactions, group commit, the typed errors),
`journal_sessions` (sessions, owners, generations, status), `journal_answers` (answers,
answer logs, evaluations reserved and supplied), `journal_ledger` (the privacy ledger:
charges, totals, checks) and `journal_projections` (the releases and their `.npy` files).
"""
from __future__ import annotations

from pobo.parties.journal_answers import AnswerTables
from pobo.parties.journal_core import (  # noqa: F401  (the journal's public names)
    DURABILITY, FINISHED, HEAD_FILE_KEY, NPY_REF, RESUMABLE, SCHEMA, SCHEMA_VERSION,
    JournalCore, JournaledSession, JournalError, JournalFault, PendingEvaluation,
    ReleaseAlreadyGranted, Superseded, entry_fault,
)
from pobo.parties.journal_ledger import LedgerTables
from pobo.parties.journal_projections import ProjectionStore, read_npy  # noqa: F401
from pobo.parties.journal_sessions import SessionTables


class Journal(SessionTables, AnswerTables, LedgerTables, ProjectionStore, JournalCore):
    """A curator's journal; one per curator process, shared by all of its sessions."""
