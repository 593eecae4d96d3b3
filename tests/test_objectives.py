"""Objectives evaluated on demand (issue 14 item 3): a command, a Python function, a value
entered later with `pobo answer` -- reserved and charged in the journal first, measured
without its write lock, answered with exactly T evaluations, and surviving a curator
restart while a value is awaited."""
from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pobo.parties.journal import Journal, Superseded
from pobo.parties.objective import (
    CommandObjective, DeferredObjective, EvaluationFailed, EvaluationRequest,
    FunctionObjective, ingest_results,
)
from pobo.protocol.errors import ErrorCode, PeerError, ProtocolError
from pobo.protocol.ledger import LOCAL, Budget, Entry, PrivacyBudgetExceeded
from pobo.cli import main
from pobo.session import RunConfig, run_inproc
from tests.curator_process import ROOT, CuratorProcess, free_port

PY = sys.executable
LDP = [Entry("ctl-laplace", 0.5, 0.0, LOCAL, 7)]


def _journal_with_session(path=":memory:", durability: str = "full") -> Journal:
    journal = Journal(path, durability=durability)
    journal.open_session("s1", {}, b"w", "p", "d", "me")
    return journal


# -- the journal: reserve, supply, complete --------------------------------------------

def test_a_reservation_is_charged_once_and_answered_once():
    journal = _journal_with_session()
    first = journal.reserve("s1", 1, 1, 7, LDP, Budget())
    assert journal.reserve("s1", 1, 1, 7, LDP, Budget()) == first  # a retry: no new charge
    assert journal.row_spent(7) == (0.5, 0.0)
    with pytest.raises(ProtocolError) as moved:
        journal.reserve("s1", 1, 1, 8, LDP, Budget())
    assert moved.value.code is ErrorCode.SEQUENCE
    assert [(p.seq, p.row, p.measured) for p in journal.pending()] == [(1, 7, None)]
    journal.supply("s1", 1, 2.5)
    assert journal.supplied("s1", 1) == 2.5
    with pytest.raises(ProtocolError) as twice:
        journal.supply("s1", 1, 3.0)  # the first value entered stands
    assert twice.value.code is ErrorCode.DUPLICATE
    journal.complete("s1", 1, 1, 7, 2.5, 2.7)
    assert journal.pending() == [] and journal.load("s1").answers == [(1, 7, 2.5, 2.7)]
    with pytest.raises(ProtocolError, match="already answered"):
        journal.supply("s1", 1, 1.0)


def test_a_reservation_past_the_row_budget_is_refused_before_anything_is_reserved():
    journal = _journal_with_session()
    budget = Budget(row_epsilon=0.75)
    journal.reserve("s1", 1, 1, 7, LDP, budget)
    with pytest.raises(PrivacyBudgetExceeded):
        journal.reserve("s1", 1, 2, 7, LDP, budget)
    assert [p.seq for p in journal.pending()] == [1]
    # the query already reserved (and charged) is not refused on its retry
    assert journal.reserve("s1", 1, 1, 7, LDP, budget) > 0


def test_a_superseded_connection_neither_reserves_nor_completes():
    journal = _journal_with_session()
    journal.reserve("s1", 1, 1, 3, [], Budget())
    assert journal.claim("s1", "me") == 2
    with pytest.raises(Superseded):
        journal.reserve("s1", 1, 2, 4, [], Budget())
    with pytest.raises(Superseded):
        journal.complete("s1", 1, 1, 3, 1.0, 1.0)
    journal.complete("s1", 2, 1, 3, 1.0, 1.0)


@pytest.mark.parametrize("path", [":memory:", "file", "file-normal"])
def test_an_answer_is_fenced_by_generation_before_f_is_evaluated(tmp_path, path):
    """The in-memory journal's one-INSERT path (no ledger entry) fences like the
    transaction does, on disk at either durability: a superseded connection neither
    evaluates f nor writes, a retry of an answered seq is a typed IntegrityError that
    leaves the first answer, and the journals end holding the same rows."""
    import sqlite3

    journal = _journal_with_session(":memory:" if path == ":memory:" else tmp_path / "j.db",
                                    "normal" if path == "file-normal" else "full")
    evaluated = []

    def evaluate(value):
        return lambda: (evaluated.append(value) or (value, value + 0.5))

    assert journal.record_answer("s1", 1, 1, 3, [], Budget(), evaluate(1.0)) == (1.0, 1.5)
    assert journal.claim("s1", "me") == 2
    with pytest.raises(Superseded):
        journal.record_answer("s1", 1, 2, 4, [], Budget(), evaluate(2.0))
    assert evaluated == [1.0]  # the old connection never evaluated
    with pytest.raises(sqlite3.IntegrityError):
        journal.record_answer("s1", 2, 1, 5, [], Budget(), evaluate(3.0))
    journal.record_answer("s1", 2, 2, 4, [], Budget(), evaluate(4.0))
    assert journal.load("s1").answers == [(1, 3, 1.0, 1.5), (2, 4, 4.0, 4.5)]
    assert journal.commits >= 2


# another process's claim, stopped while it holds the session (the answer log's lock and
# SQLite's write lock) until a line comes on its stdin
HOLDING_CLAIM = """
import sys
from pobo.parties.journal import Journal
journal = Journal(sys.argv[1], durability=sys.argv[2])
apply = journal._apply  # (inside BEGIN IMMEDIATE, under the log's lock)
def held(*args, **kwargs):
    print("held", flush=True)
    sys.stdin.readline()
    return apply(*args, **kwargs)
journal._apply = held
journal.claim("s1", "me")
print("committed", flush=True)
"""


@pytest.mark.parametrize("entries", [[], LDP], ids=["answer-log", "sqlite"])
def test_an_answer_superseded_by_another_process_is_never_evaluated(tmp_path, entries):
    """At durability normal (each answer its own commit, or its own record in the
    session's answer log) another process (a resumed curator) that claims the session
    between two answers makes the old connection's next answer Superseded, with f never
    called, nothing written, and no fault; while that process's claim holds the session
    the answer waits, then is refused as BUSY (typed), f still not called; a retry once
    the claim is done is fenced the same way."""
    path = tmp_path / "j.db"
    journal = Journal(path, durability="normal", busy_timeout=0.2)
    journal.open_session("s1", {}, b"w", "p", "d", "me")
    evaluated = []

    def evaluate(value):
        return lambda: (evaluated.append(value) or (value, value))

    journal.record_answer("s1", 1, 1, 3, entries, Budget(), evaluate(1.0))
    holder = subprocess.Popen([PY, "-c", HOLDING_CLAIM, str(path), "normal"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ProtocolError) as busy:
            journal.record_answer("s1", 1, 2, 4, entries, Budget(), evaluate(2.0))
        assert busy.value.code is ErrorCode.BUSY and evaluated == [1.0]
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "committed"
    finally:
        holder.kill()
        holder.wait(10)
    with pytest.raises(Superseded):
        journal.record_answer("s1", 1, 2, 4, [], Budget(), evaluate(2.0))
    assert evaluated == [1.0] and journal.fault is None
    journal.record_answer("s1", 2, 2, 4, [], Budget(), evaluate(4.0))
    assert journal.load("s1").answers == [(1, 3, 1.0, 1.0), (2, 4, 4.0, 4.0)]


@pytest.mark.parametrize("raised", [EvaluationFailed("the instrument failed"),
                                    KeyboardInterrupt()])
def test_a_failing_evaluation_of_an_answer_is_its_own_error(tmp_path, raised):
    """f raising inside an answer's transaction (durability normal) raises its own
    exception, not SQLite's, writes nothing, faults nothing (no transaction left open),
    and the next answer of the same seq is recorded."""
    journal = _journal_with_session(tmp_path / "j.db", "normal")

    def fails():
        raise raised

    with pytest.raises(type(raised)):
        journal.record_answer("s1", 1, 1, 3, [], Budget(), fails)
    assert journal.fault is None and journal.load("s1").answers == []
    assert journal.record_answer("s1", 1, 1, 3, [], Budget(), lambda: (2.0, 2.5)) == (2.0, 2.5)
    assert journal.load("s1").answers == [(1, 3, 2.0, 2.5)]


def test_an_answer_racing_a_claim_on_another_thread_is_superseded():
    """The in-memory journal keeps the generation it committed: a claim updates it under
    the same lock as its transaction, so a superseded connection answering on another
    thread right after the claim's COMMIT waits, then is refused before evaluating f
    (the adversarial review's race: it answered when the kept value lagged)."""
    import threading

    journal = _journal_with_session()
    evaluated, outcome = [], []
    transaction = journal._transaction

    def old_connection():
        try:
            journal.record_answer("s1", 1, 1, 3, [], Budget(),
                                  lambda: evaluated.append(1) or (1.0, 1.0))
            outcome.append("answered")
        except Superseded:
            outcome.append("superseded")

    racer = threading.Thread(target=old_connection)

    def committed_then_race(statements, *args, **kwargs):
        transaction(statements, *args, **kwargs)
        if getattr(statements, "__name__", "") == "take":  # claim's: committed just now
            racer.start()
            racer.join(0.3)  # it must wait for the claim to finish, not answer now

    journal._transaction = committed_then_race
    assert journal.claim("s1", "me") == 2
    racer.join(10)
    assert outcome == ["superseded"] and evaluated == []
    assert journal.load("s1").answers == []


def test_an_in_memory_answer_is_in_the_table_before_anything_reads_it_in_order():
    """An in-memory journal's answers wait in memory between two reads (a sweep's steps
    touch nothing else of it): whatever reads or writes the database next finds every
    one of them in the table, in the order recorded, with an answer written through the
    transaction (an LDP one, charged) between them kept in its place."""
    from pobo.protocol.policy import LDP_REWARD

    journal = _journal_with_session()
    budget = Budget(row_epsilon=10.0)
    journal.record_answer("s1", 1, 1, 3, [], budget, lambda: (1.0, 1.0))
    journal.record_answer("s1", 1, 2, 4, [], budget, lambda: (2.0, 2.0))
    assert journal._unwritten  # recorded, not yet in the table
    journal.record_answer("s1", 1, 3, 5, [Entry(LDP_REWARD, 1.0, 0.0, LOCAL, 5)], budget,
                          lambda: (3.0, 3.5))
    journal.record_answer("s1", 1, 4, 6, [], budget, lambda: (4.0, 4.0))
    rows = journal._db.execute("SELECT seq FROM answers ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4] and not journal._unwritten
    assert [a[0] for a in journal.load("s1").answers] == [1, 2, 3, 4]
    with pytest.raises(Exception, match="UNIQUE"):  # the LDP answer's seq, recorded again
        journal.record_answer("s1", 1, 3, 5, [], budget, lambda: (9.0, 9.0))


def test_an_in_memory_answer_the_table_cannot_take_is_a_sticky_fault():
    """If the table cannot take the answers kept in memory, the read that writes them
    raises JournalFault and the journal's fault is set: no reward is sent after it."""
    from pobo.parties.journal import JournalFault

    journal = _journal_with_session()
    journal.record_answer("s1", 1, 1, 3, [], Budget(), lambda: (1.0, 1.0))
    journal._conn.execute("DROP TABLE answers")  # what an impossible write looks like
    with pytest.raises(JournalFault):
        journal.load("s1")
    assert journal.fault is not None
    with pytest.raises(JournalFault):
        asyncio.run(journal.committed())


def test_answers_kept_in_memory_go_in_together_and_one_that_fails_keeps_all_after_it():
    """The answers kept in memory are written in one transaction. If one of them cannot
    be written, every answer before it is in the table all the same (as one autocommit
    per row left them), it and every answer after it stay queued -- none is dropped:
    their rewards were sent -- and the journal's fault is set: nothing more is
    evaluated (a review found rows after a failing one dropped, with no fault)."""
    from pobo.parties.journal import JournalFault

    journal = _journal_with_session()
    for seq in (1, 2, 3, 4):
        journal.record_answer("s1", 1, seq, seq, [], Budget(), lambda: (1.0, 1.0))
    statements = []
    journal._conn.set_trace_callback(statements.append)
    journal._conn.execute("SELECT 1")  # through the connection itself: nothing written
    assert journal._unwritten
    journal._db.execute("SELECT 1")
    assert statements.count("BEGIN") == 1 and statements.count("COMMIT") == 1
    assert sum(s.startswith("INSERT") for s in statements) == 4
    rows = journal._conn.execute("SELECT seq FROM answers ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4]

    journal = _journal_with_session()
    journal._conn.execute("CREATE TRIGGER no_three BEFORE INSERT ON answers WHEN NEW.seq = 3 "
                          "BEGIN SELECT RAISE(ABORT, 'no room for 3'); END")
    for seq in (1, 2, 3, 4):
        journal.record_answer("s1", 1, seq, seq, [], Budget(), lambda: (1.0, 1.0))
    with pytest.raises(JournalFault, match="no room for 3"):
        journal.load("s1")
    rows = journal._conn.execute("SELECT seq FROM answers ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == [1, 2]
    assert [a[1] for a in journal._unwritten] == [3, 4] and journal.fault
    evaluated = []
    with pytest.raises(JournalFault):
        journal.record_answer("s1", 1, 5, 5, [], Budget(), lambda: evaluated.append(5))
    assert evaluated == []  # checked before f, as the transaction does
    with pytest.raises(JournalFault):
        asyncio.run(journal.committed())
    journal._conn.execute("DROP TRIGGER no_three")  # room again: the next read writes them
    assert [a[0] for a in journal.load("s1").answers] == [1, 2, 3, 4]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("bad", [(math.nan, 1.0), (1.0, math.nan), (np.float64("nan"), 1.0),
                                 (1.0, None)])
def test_an_answer_the_table_would_refuse_is_refused_when_it_is_recorded(fast, bad):
    """An answer kept in memory must be one the table takes later: one it would refuse
    (a NaN, which SQLite stores as NULL; a None) is written at once, so that
    record_answer raises before its reward is sent, on the in-memory path as in the
    transaction, and the answers after it are kept (a review found a NaN accepted in
    memory, then every answer after it dropped, with no fault, when the table refused
    it)."""
    journal = Journal(group_commit=not fast)  # group_commit: the transaction's path
    journal.open_session("s1", {}, b"w", "p", "d", "me")
    journal.record_answer("s1", 1, 1, 1, [], Budget(), lambda: (1.0, 1.0))
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        journal.record_answer("s1", 1, 2, 2, [], Budget(), lambda: bad)
    for seq in (3, 4):
        journal.record_answer("s1", 1, seq, seq, [], Budget(), lambda: (1.0, 1.0))
    assert [a[0] for a in journal.load("s1").answers] == [1, 3, 4]
    assert journal.fault is None and not journal._unwritten


def test_a_write_of_kept_answers_that_fails_outside_sqlite_leaves_no_transaction_open():
    """An integer the driver cannot bind (past int64) is refused when it is recorded, as
    the transaction refuses it; an interruption (Ctrl-C) at any statement of a write of
    the kept answers never leaves the transaction open for every later write and loses
    none of them."""
    journal = _journal_with_session()
    journal.record_answer("s1", 1, 1, 1, [], Budget(), lambda: (1.0, 1.0))
    with pytest.raises(OverflowError):  # the second cannot be bound (int64)
        journal.record_answer("s1", 1, 2 ** 63, 2, [], Budget(), lambda: (1.0, 1.0))
    journal.record_answer("s1", 1, 3, 3, [], Budget(), lambda: (1.0, 1.0))
    assert not journal._conn.in_transaction
    assert [a[0] for a in journal.load("s1").answers] == [1, 3]
    journal.open_session("s2", {}, b"w", "p", "d", "o")  # later writes go on

    class Interrupting:
        """The connection, but its executemany is interrupted once (Ctrl-C)."""

        def __init__(self, conn):
            self.conn, self.interrupted = conn, False

        def __getattr__(self, name):
            return getattr(self.conn, name)

        def executemany(self, sql, rows):
            if not self.interrupted:
                self.interrupted = True
                raise KeyboardInterrupt
            return self.conn.executemany(sql, rows)

    journal = _journal_with_session()
    for seq in (1, 2):
        journal.record_answer("s1", 1, seq, seq, [], Budget(), lambda: (1.0, 1.0))
    journal._db = Interrupting(journal._conn)
    with pytest.raises(KeyboardInterrupt):
        journal.load("s1")
    assert not journal._conn.in_transaction and len(journal._unwritten) == 2
    assert [a[0] for a in journal.load("s1").answers] == [1, 2]  # nothing lost


def test_an_answer_cut_short_as_it_is_queued_is_recorded_once():
    """Ctrl-C just as an answer is queued in memory: recorded again (a retry of the same
    seq), it is refused as the table refuses a seq answered already, and it is in the
    table once, with no fault (a review: with the key taken after the queueing, the
    second record queued it twice and the next read was a sticky UNIQUE fault)."""
    class CutShort(list):
        """The queue; its first append goes in, then Ctrl-C comes."""

        cut = False

        def append(self, item):
            super().append(item)
            if not CutShort.cut:
                CutShort.cut = True
                raise KeyboardInterrupt

    journal = _journal_with_session()
    journal._unwritten = CutShort()
    with pytest.raises(KeyboardInterrupt):
        journal.record_answer("s1", 1, 1, 3, [], Budget(), lambda: (1.0, 1.0))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        journal.record_answer("s1", 1, 1, 3, [], Budget(), lambda: (1.0, 1.0))
    journal.record_answer("s1", 1, 2, 4, [], Budget(), lambda: (2.0, 2.0))
    assert [a[0] for a in journal.load("s1").answers] == [1, 2]
    assert journal.fault is None


@pytest.mark.parametrize("after", [False, True])
def test_kept_answers_survive_ctrl_c_at_every_statement_of_their_write(after):
    """Ctrl-C at each statement of a write of the kept answers in turn, before or after
    the statement ran (after COMMIT: they are in, and the interruption comes as it
    returns): then more answers, then a read. Every answer recorded is in the table
    exactly once, in order, with no error and no fault (a review found committed rows
    queued again, then refused as duplicates, and the answers after them dropped)."""

    class CtrlC:
        """The connection; its `at`-th execute or executemany is interrupted."""

        def __init__(self, conn, at):
            self.conn, self.at, self.calls = conn, at, 0

        def __getattr__(self, name):
            return getattr(self.conn, name)

        def _call(self, method, *args):
            self.calls += 1
            if self.calls == self.at and not after:
                raise KeyboardInterrupt
            out = getattr(self.conn, method)(*args)
            if self.calls == self.at:
                raise KeyboardInterrupt
            return out

        def execute(self, *args):
            return self._call("execute", *args)

        def executemany(self, *args):
            return self._call("executemany", *args)

    for at in range(1, 6):  # BEGIN, executemany, COMMIT, then the read's own statements
        journal = _journal_with_session()
        for seq in (1, 2):
            journal.record_answer("s1", 1, seq, seq, [], Budget(), lambda: (1.0, 1.0))
        real = journal._conn
        journal._db = CtrlC(real, at)
        with contextlib.suppress(KeyboardInterrupt):
            journal.load("s1")
        journal._db = real
        assert not real.in_transaction
        for seq in (3, 4):
            journal.record_answer("s1", 1, seq, seq, [], Budget(), lambda: (1.0, 1.0))
        assert [a[0] for a in journal.load("s1").answers] == [1, 2, 3, 4], at
        assert journal.fault is None and not journal._unwritten


def test_a_session_the_journal_never_opened_still_goes_through_the_transaction():
    """Only a session this in-memory journal opened (whose generation it wrote) takes the
    one-INSERT path; any other is checked in the database (Superseded for a wrong one)."""
    journal = Journal()
    with pytest.raises(Superseded):
        journal.record_answer("ghost", 1, 1, 3, [], Budget(), lambda: (1.0, 1.0))
    assert journal.record_answer("ghost", None, 1, 3, [], Budget(), lambda: (1.0, 1.0))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_value_is_refused(bad):
    journal = _journal_with_session()
    journal.reserve("s1", 1, 1, 3, [], Budget())
    with pytest.raises(ProtocolError, match="finite"):
        journal.supply("s1", 1, bad)
    with pytest.raises(ProtocolError, match="not pending"):
        journal.supply("s1", 2, 1.0)


def test_a_schema_2_journal_gains_the_pending_table(tmp_path):
    import sqlite3
    path = tmp_path / "old.db"
    Journal(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE pending")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    journal = Journal(path)
    journal.open_session("s1", {}, b"w", "p", "d", "me")
    journal.reserve("s1", 1, 1, 0, [], Budget())
    assert len(journal.pending()) == 1


# -- the objectives ------------------------------------------------------------------

def _measure(objective, index=3, journal=None):
    request = EvaluationRequest("s1", 1, index, journal)
    return asyncio.run(asyncio.wait_for(objective.measure(request), 30))


@pytest.fixture(params=["pidfd", "asyncio"])
def runner(request, monkeypatch):
    """Each way a command is run: watched on the loop through a pidfd (Linux), or by
    asyncio's subprocess support (elsewhere); the test fails if the other one ran."""
    from pobo.parties import objective

    if request.param == "pidfd" and not objective.pidfd_usable():
        pytest.skip("no pidfd on this system: commands are run by asyncio's subprocess support")
    if request.param == "asyncio":
        monkeypatch.setattr(objective, "pidfd_usable", lambda: False)
    ran = []
    for name in ("_run_watched", "_run_asyncio"):
        real = getattr(objective, name)

        async def counted(*args, real=real, name=name):
            ran.append(name)
            return await real(*args)

        monkeypatch.setattr(objective, name, counted)
    yield request.param
    expected = "_run_watched" if request.param == "pidfd" else "_run_asyncio"
    assert ran and set(ran) == {expected}, f"ran {set(ran)}, not {expected}"


def test_a_command_prints_the_value_and_a_failure_is_typed(runner):
    assert _measure(CommandObjective(f"{PY} -c 'print({{index}} * 2.5)'")) == 7.5
    failing = CommandObjective(f"{PY} -c 'import sys; sys.exit(\"lab down {{index}}\")'")
    with pytest.raises(EvaluationFailed, match="exited with 1: lab down 3") as exc:
        _measure(failing)
    assert exc.value.code is ErrorCode.EVALUATION_FAILED and exc.value.recoverable
    with pytest.raises(EvaluationFailed, match="not a number"):
        _measure(CommandObjective(f"{PY} -c 'print(\"positive\") or {{index}}'"))
    with pytest.raises(EvaluationFailed, match="not a finite"):
        _measure(CommandObjective(f"{PY} -c 'print(\"nan\") or {{index}}'"))
    with pytest.raises(EvaluationFailed, match="could not start"):
        _measure(CommandObjective("/no/such/command {index}"))


def test_a_command_past_its_timeout_is_killed(runner):
    slow = CommandObjective(f"{PY} -c 'import time; time.sleep(30 + {{index}})'", timeout=0.5)
    started = time.monotonic()
    with pytest.raises(EvaluationFailed, match="killed"):
        _measure(slow)
    assert time.monotonic() - started < 10


def _spawning_command(tmp_path: Path) -> tuple[str, Path]:
    """A command that starts a child sharing its stdout (a script running a long tool),
    records the child's pid, then waits: it never prints a value."""
    lab, pidfile = tmp_path / "spawner.py", tmp_path / "child.pid"
    lab.write_text("import subprocess, sys, time\n"
                   "child = subprocess.Popen([sys.executable, '-c', "
                   "'import time; time.sleep(60)'])\n"
                   f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
                   "time.sleep(60)\n")
    return f"{PY} {lab} {{index}}", pidfile


def _child(pidfile: Path) -> int | None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if pidfile.exists() and pidfile.read_text():
            return int(pidfile.read_text())
        time.sleep(0.05)
    return None


@pytest.mark.parametrize("how", ["timeout", "cancelled"])
def test_a_stopped_command_is_killed_with_its_children_without_waiting_for_them(tmp_path, how,
                                                                                runner):
    """A command past its timeout, or whose evaluation is cancelled (the curator stops),
    used to be killed alone, and asyncio's wait() then waited for its pipes -- held by
    the child it started -- for as long as the child ran (here 60 s; a lab tool, for
    ever): a curator that could not stop. Its whole process group is killed now."""
    from tests.curator_process import kill_all, wait_gone

    template, pidfile = _spawning_command(tmp_path)
    objective = CommandObjective(template, timeout=1.0 if how == "timeout" else 3600.0)
    request = EvaluationRequest("s1", 1, 3, None)

    async def measure():
        task = asyncio.ensure_future(objective.measure(request))
        if how == "cancelled":  # as a stopping curator cancels the evaluation
            while not pidfile.exists():
                await asyncio.sleep(0.05)
            task.cancel()
        await asyncio.wait({task}, timeout=30)
        assert task.done(), "still waiting for the killed command's pipes"
        return task

    started = time.monotonic()
    try:
        task = asyncio.run(asyncio.wait_for(measure(), 40))
        took = time.monotonic() - started
        if how == "timeout":
            with pytest.raises(EvaluationFailed, match="killed"):
                task.result()
        else:
            assert task.cancelled()
        assert took < 15, f"stopping the command took {took:.1f} s"
        child = _child(pidfile)
        assert child is not None and not wait_gone([child], 5), "its child still runs"
    finally:
        child = _child(pidfile) if pidfile.exists() else None
        if child is not None:
            kill_all([child])


def test_a_command_printing_more_than_a_pipe_holds_is_read_whole(runner):
    """Both pipes are read while the command runs: one that fills them (64 KiB) before it
    exits neither blocks for ever nor loses a byte, and its stderr's last line is kept."""
    script = ("import sys; sys.stderr.write('x' * 300000 + chr(10) + 'last words'); "
              "sys.stdout.write(' ' * 300000 + str({index} * 2.5)); sys.exit({index} - 3)")
    assert _measure(CommandObjective(f"{PY} -c \"{script}\"")) == 7.5
    with pytest.raises(EvaluationFailed, match="exited with 1: last words$"):
        _measure(CommandObjective(f"{PY} -c \"{script}\""), index=4)


def test_a_command_is_watched_without_a_thread_of_its_own():
    """Where a pidfd can watch a command's exit, no thread is started for it (asyncio's
    subprocess support in Python 3.11 started one per command, benchmarks/batches.py)."""
    import threading

    from pobo.parties.objective import pidfd_usable

    if not pidfd_usable():
        pytest.skip("no pidfd on this system: commands are run by asyncio's subprocess support")
    objective = CommandObjective(f"{PY} -c 'import time; time.sleep(0.5); print({{index}})'")
    before = set(threading.enumerate())

    async def measure():
        task = asyncio.ensure_future(objective.measure(EvaluationRequest("s1", 1, 3, None)))
        await asyncio.sleep(0.25)  # the command runs
        during = set(threading.enumerate()) - before
        return await task, during

    value, during = asyncio.run(asyncio.wait_for(measure(), 30))
    assert value == 3 and not during, f"threads started: {[t.name for t in during]}"


def test_a_function_that_never_returns_does_not_hold_up_the_loop_shutdown():
    """asyncio.to_thread ran a scenario's `evaluate` on the loop's default executor,
    whose threads asyncio.run joins at exit without a bound (Python 3.11): a function
    stuck for ever kept a stopped curator from ever exiting."""
    import threading

    release = threading.Event()
    objective = FunctionObjective(lambda i: float(release.wait(60)))

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(objective.measure(EvaluationRequest("s1", 1, 3, None)), 0.2)

    finished = threading.Event()
    runner = threading.Thread(target=lambda: (asyncio.run(main()), finished.set()), daemon=True)
    runner.start()
    try:
        assert finished.wait(10), "asyncio.run is still waiting for the objective's thread"
    finally:
        release.set()
        runner.join(10)


@pytest.mark.parametrize("template", ["", "measure.sh", "measure.sh {row}", "m {index"])
def test_a_bad_command_template_is_refused_at_once(template):
    with pytest.raises(ValueError):
        CommandObjective(template)


def test_a_function_that_raises_is_a_failed_evaluation():
    assert _measure(FunctionObjective(lambda i: i + 0.5)) == 3.5
    with pytest.raises(EvaluationFailed, match="ZeroDivisionError"):
        _measure(FunctionObjective(lambda i: 1 / 0))


def test_a_half_written_results_line_is_not_read(tmp_path):
    """The issue (22, item 7): `s1 1 12` then `3.456` was entered as 12.0 where 123.456
    was meant. Only newline-terminated lines count."""
    journal = _journal_with_session()
    journal.reserve("s1", 1, 1, 3, [], Budget())
    results = tmp_path / "results.txt"
    results.write_text("s1 1 12")  # the writer has not finished the line
    assert ingest_results(results, journal) == 0
    with results.open("a") as f:
        f.write("3.456\n")
    assert ingest_results(results, journal) == 1
    assert journal.supplied("s1", 1) == 123.456


def test_an_unreadable_results_file_is_said_once(tmp_path, caplog):
    """A results file that became a folder was logged at every poll (once a second per
    waiting query; a review's find): once per reason now."""
    journal = _journal_with_session()
    journal.reserve("s1", 1, 1, 3, [], Budget())
    (tmp_path / "results.txt").mkdir()
    said: set[str] = set()
    with caplog.at_level("WARNING", logger="pobo"):
        for _ in range(5):
            assert ingest_results(tmp_path / "results.txt", journal, said) == 0
    assert sum("cannot be read" in r.getMessage() for r in caplog.records) == 1


def test_a_deferred_value_comes_from_the_journal_or_the_results_file(tmp_path):
    journal = _journal_with_session()
    journal.open_session("s2", {}, b"w", "p", "d", "me")
    journal.reserve("s1", 1, 1, 3, [], Budget())
    journal.reserve("s2", 1, 1, 4, [], Budget())
    results = tmp_path / "results.txt"
    results.write_text("# session seq value\nnot a line\ns2, 1, 4.25\ns9 1 1.0\n")
    assert ingest_results(results, journal) == 1
    assert ingest_results(results, journal) == 0  # entered once
    assert journal.supplied("s2", 1) == 4.25
    wait = DeferredObjective(results, poll=0.01)

    async def later() -> float:
        task = asyncio.ensure_future(wait.measure(EvaluationRequest("s1", 1, 3, journal)))
        await asyncio.sleep(0.1)
        assert not task.done()  # still waiting: nothing entered for s1
        journal.supply("s1", 1, -1.5)
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(later()) == -1.5


# -- whole sessions ------------------------------------------------------------------

def _flaky_command(tmp_path: Path) -> str:
    """A command whose first evaluation fails (the lab lost the sample), then prints f
    (a shell script: a Python start per evaluation would dominate the test's time)."""
    script = tmp_path / "lab.sh"
    script.write_text(
        'row=$1; seen="$2/first.seen"\n'
        'if [ ! -e "$seen" ]; then echo $row > "$seen"; echo "the lab lost the sample" >&2; '
        'exit 1; fi\n'
        'echo $(( -((row % 8) - 3) * ((row % 8) - 3) - ((row / 8) - 5) * ((row / 8) - 5) ))\n')
    return f"sh {script} {{index}} {tmp_path}"


def test_a_failed_evaluation_tells_the_modeler_nothing_about_the_row(tmp_path, caplog):
    """The command's stderr ('HIV positive') is about the patient: it is logged at the
    curator, and never crosses; the modeler gets a typed evaluation_failed."""
    import logging
    lab = tmp_path / "lab.sh"
    lab.write_text('echo "patient $1 is HIV positive" >&2; exit 1\n')
    config = RunConfig("synthetic", T=3, seed=1, options={"grid": 8}, timeout=5,
                       objective_cmd=f"sh {lab} {{index}}")
    with caplog.at_level(logging.WARNING, "pobo.session"):
        with pytest.raises(PeerError) as failed:
            asyncio.run(run_inproc(config, tmp_path / "out"))
    assert failed.value.code == "evaluation_failed" and "HIV" not in str(failed.value)
    assert "HIV" in caplog.text  # the curator's operator sees why
    for role in ("curator", "modeler"):
        assert b"HIV" not in (tmp_path / "out" / f"{role}.transcript").read_bytes()
    assert json.loads((tmp_path / "out" / "curator.json").read_text())["queries"] == []


@contextlib.asynccontextmanager
async def _opened(config: RunConfig):
    """A modeler channel past the Welcome and Dataset of an in-process curator serving
    `config` (stopped, and both channels closed, on the way out)."""
    from pobo.protocol.messages import PROTOCOL_VERSION, Hello
    from pobo.protocol.policy import CURATOR, MODELER
    from pobo.session import curate, open_channel, prepare_curator
    from pobo.transport.inproc import pipe_pair

    cpipe, mpipe = pipe_pair()
    cchan = open_channel(cpipe, CURATOR, False, None, 10)
    mchan = open_channel(mpipe, MODELER, False, None, 10)
    serving = asyncio.ensure_future(curate(cchan, prepare_curator(config), None,
                                           verbose=False, raise_errors=False))
    try:
        await mchan.send(Hello(PROTOCOL_VERSION, "test"))
        await mchan.recv()
        await mchan.recv()
        yield mchan
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        cchan.close()
        mchan.close()


async def _hammer(config: RunConfig, tries: int) -> Exception:
    """A modeler that retries one failing query `tries` times; the error it ends with."""
    from pobo.parties.runners import ask
    from pobo.protocol.messages import Query

    async with _opened(config) as mchan:
        try:
            await ask(mchan, Query(1, 3), tries, retry_delay=0.05)
        except PeerError as exc:
            return exc
    raise AssertionError("the query was answered")


def test_a_modeler_retrying_a_failing_query_forever_is_refused_after_5_evaluations(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    lab = tmp_path / "lab.sh"
    lab.write_text(f'mktemp -p "{runs}" > /dev/null; exit 3\n')
    config = RunConfig("synthetic", T=3, seed=1, options={"grid": 8},
                       objective_cmd=f"sh {lab} {{index}}")
    error = asyncio.run(asyncio.wait_for(_hammer(config, 9), 60))
    assert error.code == "evaluation_failed" and "failed 5 times" in str(error)
    assert len(list(runs.iterdir())) == 5  # the command ran 5 times, not 10


def test_a_command_objective_completes_a_session_with_exactly_T_evaluations(tmp_path):
    config = RunConfig("synthetic", T=6, seed=3, options={"grid": 8},
                       objective_cmd=_flaky_command(tmp_path), ldp_epsilon=None,
                       journal=str(tmp_path / "j.db"), timeout=20)
    result = asyncio.run(run_inproc(config, tmp_path / "out"))
    assert result["status"] == "ok" and result["consistent"]
    assert len(result["queries"]) == 6 and result["objective"] == "command"
    assert result["simple_regret"] is None and result["f_star"] is None  # f is not known
    rows = result["data_rows"]  # the command is asked for the data row of each query
    assert len(rows) == 6 and rows != result["queries"]  # released in a secret order
    assert result["measured"] == [-((r % 8) - 3) ** 2 - ((r // 8) - 5) ** 2 for r in rows]
    journal = Journal(tmp_path / "j.db")
    assert len(journal.load(result["session"]).answers) == 6 and journal.pending() == []
    # the first evaluation failed and was retried: the session still has T answers
    assert (tmp_path / "first.seen").read_text().strip() == str(rows[0])


def test_an_ldp_command_session_charges_each_query_once_despite_retries(tmp_path):
    config = RunConfig("synthetic", T=6, seed=1, options={"grid": 8}, ldp_epsilon=1.0,
                       reward_bound=40.0, noise_bound=0.0,
                       objective_cmd=_flaky_command(tmp_path), timeout=20)
    result = asyncio.run(run_inproc(config, tmp_path / "out"))
    assert result["status"] == "ok" and len(result["queries"]) == 6
    assert result["ledger"]["local"]["reports"] == 6  # not 12: a retry is not a new report


def test_a_script_objective_is_evaluated_on_demand(tmp_path):
    script = tmp_path / "lab.py"
    script.write_text(
        "import numpy as np\n"
        "from scenarios.problem import Problem, fitted_prior\n"
        "CALLS = []\n"
        "def build(seed):\n"
        "    X = np.random.default_rng(5).normal(size=(40, 3))\n"
        "    def measure(i):\n"
        "        CALLS.append(i)\n"
        "        return float(-np.sum((X[i] - 0.3) ** 2))\n"
        "    return Problem('lab', X, None, fitted_prior(), 2.0, 1e-3, 3, 8, evaluate=measure)\n")
    result = asyncio.run(run_inproc(RunConfig(str(script), T=8, seed=0, timeout=20),
                                    tmp_path / "out"))
    assert result["status"] == "ok" and len(result["queries"]) == 8
    assert result["objective"] == "function" and result["simple_regret"] is None


def test_pobo_answer_lists_and_enters_values(tmp_path, capsys):
    journal = _journal_with_session(tmp_path / "j.db")
    journal.reserve("s1", 1, 1, 17, [], Budget())
    journal.close()
    assert main(["answer", "--journal", str(tmp_path / "j.db")]) == 0
    assert "session s1 query 1: row 17" in capsys.readouterr().out
    assert main(["answer", "--journal", str(tmp_path / "j.db"), "s1", "1", "0.25"]) == 0
    assert main(["answer", "--journal", str(tmp_path / "j.db"), "s1", "1", "0.5"]) == 1
    assert "already has the value 0.25" in capsys.readouterr().err
    assert main(["answer", "--journal", str(tmp_path / "j.db"), "s1", "1"]) == 1
    assert main(["answer", "--journal", str(tmp_path / "nope.db"), "--list"]) == 1
    assert main(["curator", "synthetic", "--bind", "tcp://127.0.0.1:0", "--objective-wait"]) == 1  # needs --journal
    assert "--objective-wait needs --journal" in capsys.readouterr().err


def _reconnecting_modeler(endpoint: str, out: Path) -> subprocess.Popen:
    """A standalone `pobo modeler` (seed 2, 3 s timeout) that reconnects for 120 s."""
    return subprocess.Popen(
        [PY, "-m", "pobo", "modeler", "--connect", endpoint, "--out", str(out), "--seed", "2",
         "--timeout", "3", "--patience", "120"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _pending(db: Path, count: int, timeout: float = 60) -> list[dict]:
    """Wait (bounded) until `count` evaluations await a value; return them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            out = subprocess.run([PY, "-m", "pobo", "answer", "--journal", str(db),
                                  "--json"], capture_output=True, text=True, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
            if out.returncode == 0:
                waiting = [p for p in json.loads(out.stdout) if p["entered"] is None]
                if len(waiting) >= count:
                    return waiting
        time.sleep(0.2)
    raise AssertionError(f"no {count} pending evaluation(s) within {timeout} s")


def _answer(db: Path, entry: dict) -> None:
    value = -((entry["row"] % 8) - 3) ** 2 / 10
    assert main(["answer", "--journal", str(db), entry["session"], str(entry["seq"]),
                 repr(value)]) == 0


def test_a_deferred_answer_entered_after_a_curator_restart_completes_the_session(tmp_path):
    """kill -9 the curator while a value is awaited; enter the value while it is down;
    restart it on the same journal: the modeler (still running) reconnects, resumes, and
    the session ends with exactly T answers, each evaluated once."""
    T, db, out = 4, tmp_path / "curator.db", tmp_path / "out"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    extra = ["--objective-wait", "--journal", str(db), "--seed", "2", "--timeout", "3"]
    curator = CuratorProcess(out, T, extra, endpoint)
    modeler = restarted = None
    try:
        curator.wait_listening()
        modeler = _reconnecting_modeler(endpoint, tmp_path / "m")
        _answer(db, _pending(db, 1)[0])  # query 1, answered while the curator runs
        waiting = _pending(db, 1)  # query 2 now awaits a value
        assert waiting[0]["seq"] == 2
        curator.proc.kill()  # kill -9 while query 2 is pending
        curator.proc.wait(10)
        time.sleep(4)  # past the modeler's timeout: it is reconnecting
        assert modeler.poll() is None, modeler.communicate(timeout=10)[1][-2000:]
        _answer(db, waiting[0])  # entered while no curator runs
        restarted = CuratorProcess(out, T, extra, endpoint)
        restarted.wait_listening()
        for _ in range(T - 2):
            _answer(db, _pending(db, 1)[0])
        _, err = modeler.communicate(timeout=60)
        assert modeler.returncode == 0, err[-2000:]
        record = restarted.finish()
    finally:
        for p in (curator, restarted):
            if p is not None:
                p.kill()
        if modeler is not None:
            if modeler.poll() is None:
                modeler.kill()
            print("modeler:", modeler.communicate(timeout=10))
        for p in (curator, restarted):
            if p is not None:
                print("curator:", p.proc.communicate(timeout=10))
    assert record["status"] == "ok" and len(record["queries"]) == T
    journal = Journal(db)
    assert len(journal.load(record["session"]).answers) == T and journal.pending() == []
    mine = json.loads((tmp_path / "m" / "modeler.json").read_text())
    assert mine["queries"] == record["queries"] and mine["rewards"] == record["rewards"]
    assert np.allclose(record["measured"], [-((r % 8) - 3) ** 2 / 10 for r in record["data_rows"]])


@pytest.mark.full  # 26 s of waiting for the 10 s lines: pytest --full
def test_a_standalone_modeler_says_every_10_s_that_the_curator_is_unreachable(tmp_path):
    """The issue (22, item 10): a modeler whose curator died with a query pending retries
    for its --patience; it must not be silent meanwhile."""
    T, db, out = 4, tmp_path / "curator.db", tmp_path / "out"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    extra = ["--objective-wait", "--journal", str(db), "--seed", "2", "--timeout", "3"]
    curator = CuratorProcess(out, T, extra, endpoint)
    modeler = None
    try:
        curator.wait_listening()
        modeler = _reconnecting_modeler(endpoint, tmp_path / "m")
        _pending(db, 1)  # query 1 awaits a value
        curator.proc.kill()
        curator.proc.wait(10)
        time.sleep(26)
        assert modeler.poll() is None
        modeler.terminate()
        _, err = modeler.communicate(timeout=60)
    finally:
        curator.proc.kill()
        if modeler is not None and modeler.poll() is None:
            modeler.kill()
    assert err.count("curator unreachable, retrying") >= 2, err[-2000:]


def test_a_retry_that_comes_while_a_failure_is_being_answered_is_evaluated(tmp_path,
                                                                        monkeypatch):
    """A query re-sent while the curator was still sending the evaluation_failed of its
    first try found the failed evaluation still listed: it got a Pending and no
    evaluation, and the modeler had to ask again. The failed one is unlisted before its
    error goes out now: the retry is evaluated (the command's second run succeeds) and
    answered. (The error's send is slowed to 0.3 s to open the window.)"""
    import pobo.parties.runners as runners_module
    from pobo.protocol.messages import Query, Reward

    send_error = runners_module._send_error

    async def slow_error(*args, **kwargs):
        await asyncio.sleep(0.3)
        await send_error(*args, **kwargs)

    monkeypatch.setattr(runners_module, "_send_error", slow_error)
    config = RunConfig("synthetic", T=3, seed=1, options={"grid": 8}, timeout=10,
                       objective_cmd=_flaky_command(tmp_path))

    async def main():
        async with _opened(config) as mchan:
            await mchan.send(Query(1, 3))
            await asyncio.sleep(0.15)  # the first try has failed; its error is on its way
            await mchan.send(Query(1, 3))
            seen = []
            while not seen or not isinstance(seen[-1], Reward):
                try:
                    seen.append(await mchan.recv(3))
                except ProtocolError as exc:  # the first try's evaluation_failed
                    seen.append(exc)
            return seen

    seen = asyncio.run(asyncio.wait_for(main(), 30))
    assert isinstance(seen[-1], Reward) and seen[-1].seq == 1
