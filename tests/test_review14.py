"""Adversarial review of issue 14 items 3 and 6 (objectives evaluated on demand, batches).

Tests that FAIL on the reviewed code demonstrate a finding; tests that pass document an
attack that held. Everything runs in process (in-process pipes), bounded by wait_for."""
from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

from pobo.parties.journal import Journal
from pobo.parties.objective import CommandObjective, EvaluationRequest, ingest_results
from pobo.protocol.errors import ErrorCode, PolicyViolation, ProtocolError
from pobo.protocol.ledger import LOCAL, Budget, Entry, PrivacyBudgetExceeded
from pobo.protocol.messages import PROTOCOL_VERSION, Error, Hello, Pending, Query, Reward
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
from pobo.session import RunConfig, curate, open_channel, prepare_service
from pobo.transport.inproc import pipe_pair

PY = sys.executable


# -- helpers -----------------------------------------------------------------------------

def _marker_command(tmp_path: Path, *, fail: bool, sleep: float = 0.0) -> tuple[str, Path]:
    """A command that records each start in runs/ (one file per run), optionally sleeps,
    then fails or prints a value."""
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    lab = tmp_path / "lab.py"
    lab.write_text("import sys, pathlib, uuid, time\n"
                   f"(pathlib.Path({str(runs)!r}) / uuid.uuid4().hex).touch()\n"
                   f"time.sleep({sleep})\n"
                   + ("sys.exit('failed')\n" if fail else "print(float(sys.argv[1]) / 10)\n"))
    return f"{PY} {lab} {{index}}", runs


class _Conn:
    """One modeler connection to an in-process curator session (new or resumed)."""

    def __init__(self, session, resume: bool, timeout: float = 10.0) -> None:
        cpipe, mpipe = pipe_pair()
        self.session = session
        self.cchan = open_channel(cpipe, CURATOR, False, None, timeout)
        self.mchan = open_channel(mpipe, MODELER, False, None, timeout)
        self.resume = resume
        self.serving = asyncio.ensure_future(curate(self.cchan, session, None, verbose=False,
                                                    raise_errors=False))

    async def open(self, asked: dict[int, int] | None = None, batch: int = 1) -> None:
        sid = self.session.session_id if self.resume else ""
        await self.mchan.send(Hello(PROTOCOL_VERSION, "review", sid, batch=batch))
        await self.mchan.recv()
        await self.mchan.recv()
        if asked:
            self.mchan.boundary.restore_queries(asked)

    async def reply(self, timeout: float = 10.0):
        try:
            return await self.mchan.recv(timeout)
        except ProtocolError as exc:  # a late duplicate, say
            return exc

    async def close(self) -> None:
        self.serving.cancel()
        await asyncio.gather(self.serving, return_exceptions=True)
        self.cchan.close()
        self.mchan.close()


def _service(tmp_path: Path, **kw):
    config = RunConfig("synthetic", T=3, seed=1, options={"grid": 8}, timeout=10,
                       journal=str(tmp_path / "j.db"), **kw)
    return prepare_service(config, journal=Journal(config.journal))


# -- F1: command runs of one query are not bounded across connections -------------------

def test_takeovers_do_not_restart_an_in_flight_command_without_bound(tmp_path):
    """A hostile modeler resumes its own session over and over while the (slow, expensive)
    command for query 1 runs. Each takeover cancels the old connection, whose evaluation
    task kills the command; the new connection starts it again. 7 takeovers -> 7 starts
    of the lab test for ONE query, with no bound at all (the 5-attempt cap is only for
    failures, per connection). DESIGN: nothing a peer sends can make the curator
    evaluate f more than T times."""
    cmd, runs = _marker_command(tmp_path, fail=False, sleep=30)
    service = _service(tmp_path, objective_cmd=cmd)

    async def attack() -> int:
        session = service.new_session()
        conn = _Conn(session, resume=False)
        await conn.open()
        await conn.mchan.send(Query(1, 3))
        assert isinstance(await conn.reply(), Pending)
        for _ in range(6):
            await asyncio.sleep(0.5)  # the command has started
            await conn.close()  # what remote._connection does to a superseded connection
            conn = _Conn(service.resume(session.session_id), resume=True)
            await conn.open({1: 3})
            await conn.mchan.send(Query(1, 3))
            assert isinstance(await conn.reply(), Pending)
        await asyncio.sleep(0.7)
        await conn.close()
        return len(list(runs.iterdir()))

    starts = asyncio.run(asyncio.wait_for(attack(), 60))
    assert starts <= 5, f"the command for one query was started {starts} times"


def test_reconnecting_does_not_reset_the_failed_evaluation_cap(tmp_path):
    """MAX_ATTEMPTS = 5 failed evaluations per query *per connection*: a modeler that
    resumes its session after each 5 gets 5 more, without end (3 connections -> 15 runs
    of a command that may be a paid lab test). The cap should live with the
    reservation in the journal."""
    cmd, runs = _marker_command(tmp_path, fail=True)
    service = _service(tmp_path, objective_cmd=cmd)

    async def attack() -> int:
        session = service.new_session()
        for connection in range(3):
            conn = _Conn(session if connection == 0 else service.resume(session.session_id),
                         resume=connection > 0)
            await conn.open({1: 3} if connection else None)
            for _ in range(6):
                await conn.mchan.send(Query(1, 3))
                while True:
                    reply = await conn.reply()
                    if isinstance(reply, Error):
                        break
            await conn.close()
        return len(list(runs.iterdir()))

    runs_total = asyncio.run(asyncio.wait_for(attack(), 120))
    assert runs_total <= 5, f"a failing command ran {runs_total} times for one query"


# -- F2: a superseded connection still runs the objective --------------------------------

def test_a_superseded_connection_does_not_evaluate_a_reserved_query(tmp_path):
    """Two live connections of one session (two curator processes sharing the journal,
    or the in-process window before the stale task is cancelled): after the session was
    claimed by a new connection, the OLD connection still answers a retry of a reserved
    query with Pending and runs the command (Curator.start returns at once for a seq in
    its in-memory `reserved`, and Journal.reserve's pre-check returns a held reservation
    without the generation check). Only `complete` is fenced. record_answer's promise
    ('a superseded connection never evaluates f') does not hold on demand."""
    cmd, runs = _marker_command(tmp_path, fail=True)
    service = _service(tmp_path, objective_cmd=cmd)

    async def attack() -> tuple[int, object]:
        session = service.new_session()
        old = _Conn(session, resume=False)
        await old.open()
        await old.mchan.send(Query(1, 3))
        assert isinstance(await old.reply(), Pending)
        assert isinstance(await old.reply(), Error)  # evaluation_failed: 1 run
        service.resume(session.session_id)  # a newer connection claims the session
        await old.mchan.send(Query(1, 3))  # the old connection is asked again
        reply = await old.reply()
        await asyncio.sleep(1.0)
        await old.close()
        return len(list(runs.iterdir())), reply

    count, reply = asyncio.run(asyncio.wait_for(attack(), 60))
    assert count == 1, f"the superseded connection ran the command again ({count} runs)"
    assert isinstance(reply, Error) and reply.code == ErrorCode.SUPERSEDED.value, reply


# -- F3: an evaluation task that dies of a non-protocol error wedges the query -----------

@pytest.mark.parametrize("hostile", ["binary", "directory"])
def test_a_bad_results_file_does_not_wedge_the_query_forever(tmp_path, hostile):
    """--results-file that is not UTF-8 (or a directory, or unreadable): read_text raises
    UnicodeDecodeError / IsADirectoryError, which is not a ProtocolError, so `evaluate`
    dies in `_logged` and its finished task stays in `evaluations`. Every retry is then
    answered Pending (the query is 'in evaluations') and no evaluation ever runs again:
    a value entered later with `pobo answer` is never released, and the modeler's
    QueryWindow (each Pending refreshes `_heard`) waits forever -- a hang."""
    results = tmp_path / "results.txt"
    if hostile == "binary":
        results.write_bytes(b"\xff\xfe\x00garbage\x80\x81\n")
    else:
        results.mkdir()
    service = _service(tmp_path, objective_wait=True, results_file=str(results))

    async def run() -> object:
        session = service.new_session()
        conn = _Conn(session, resume=False)
        try:
            await conn.open()
            await conn.mchan.send(Query(1, 3))
            assert isinstance(await conn.reply(), Pending)
            await asyncio.sleep(1.5)  # the evaluation has polled the file once
            service.journal.supply(session.session_id, 1, 0.25)  # `pobo answer`
            for _ in range(12):  # a modeler polling, as QueryWindow does
                await conn.mchan.send(Query(1, 3))
                reply = await conn.reply()
                while isinstance(reply, Pending):
                    try:
                        reply = await conn.mchan.recv(0.5)
                    except Exception:
                        break
                if isinstance(reply, (Reward, Error)):
                    return reply
            return None
        finally:
            await conn.close()

    reply = asyncio.run(asyncio.wait_for(run(), 60))
    assert reply is not None, "the query stayed pending forever after its value was entered"


# -- F4: a seeded LDP batch session answered out of order cannot be resumed -------------

def test_a_seeded_ldp_batch_answered_out_of_order_can_be_resumed(tmp_path):
    """With an on-demand objective, a batch completes out of seq order, and each
    completion draws the LDP noise then. Curator.replay re-draws the noise in SEQ order
    and refuses ('not the same seed') when it does not reproduce the record: a restarted
    curator cannot build the session (session.curator() raises in curate, before the
    Welcome), so the modeler's resume fails until its patience runs out."""
    service = _service(tmp_path, objective_cmd=f"{PY} -c 'print({{index}})'",
                       ldp_epsilon=1.0, reward_bound=40.0, noise_bound=0.0, max_batch=2)
    session = service.new_session(batch=2)
    curator = session.curator()
    assert curator.start(1, 3) is None and curator.start(2, 5) is None
    curator.complete(2, 0.5)  # the second query's value came first
    curator.complete(1, 0.3)
    restored = service.resume(session.session_id)
    again = restored.curator()  # raises ValueError today
    assert again.answered == curator.answered


# -- attacks that held ---------------------------------------------------------------------

def test_held_a_flood_of_retries_runs_the_command_once_and_charges_once(tmp_path):
    cmd, runs = _marker_command(tmp_path, fail=False, sleep=1.0)
    service = _service(tmp_path, objective_cmd=cmd, ldp_epsilon=1.0, reward_bound=40.0,
                       noise_bound=0.0)

    async def flood() -> Reward:
        session = service.new_session()
        conn = _Conn(session, resume=False)
        try:
            await conn.open()
            for _ in range(40):
                await conn.mchan.send(Query(1, 3))
            while True:
                reply = await conn.reply()
                if isinstance(reply, Reward):
                    return reply
                assert isinstance(reply, (Pending, ProtocolError)), reply
        finally:
            await conn.close()

    reward = asyncio.run(asyncio.wait_for(flood(), 60))
    assert reward.seq == 1 and len(list(runs.iterdir())) == 1
    assert service.journal.local_summary()["reports"] == 1


def test_held_a_modeler_may_not_send_pending_or_reward():
    boundary = Boundary(PRIVATE, CURATOR)
    for frame in (Pending(1, 3, 0.0), Reward(1, 3, 0.5, "")):
        with pytest.raises(PolicyViolation):
            boundary.incoming(frame)


def test_held_a_hostile_session_value_cannot_inject_into_the_command_line():
    objective = CommandObjective("measure {index} --session={session} {seq}")
    argv = objective.argv(EvaluationRequest("x; rm -rf / $(id) {index}", 7, 3, None))
    assert argv == ["measure", "3", "--session=x; rm -rf / $(id) {index}", "7"]


def test_held_hostile_results_file_lines(tmp_path):
    journal = Journal(":memory:")
    journal.open_session("s1", {}, b"w", "p", "d", "me")
    for seq in (1, 2, 3):
        journal.reserve("s1", 1, seq, seq, [], Budget())
    results = tmp_path / "r.txt"
    results.write_text("s1 1 nan\ns1 1 inf\ns1 1 -1e999\ns2 1 5\ns1 9 1\ns1 2 "
                       + "9" * 5000 + "\ns1 2 -0.0\ns1 3 1e308\ns1 3 2\n")
    assert ingest_results(results, journal) == 2
    assert journal.supplied("s1", 1) is None
    assert journal.supplied("s1", 2) == 0.0  # -0.0 (SQLite keeps no sign on a REAL zero)
    assert journal.supplied("s1", 3) == 1e308  # the first value entered stands


def test_held_the_row_budget_check_and_charge_is_atomic_across_processes(tmp_path):
    """Two journal connections (two curator processes) reserve on one row at once; the
    row budget allows one report: exactly one reservation gets through."""
    path = tmp_path / "j.db"
    first = Journal(path)
    first.open_session("a", {}, b"w", "p", "d", "me")
    first.open_session("b", {}, b"w", "p", "d", "me")
    budget = Budget(row_epsilon=1.0)
    entry = [Entry("ctl-laplace", 1.0, 0.0, LOCAL, 4)]
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def go(k: int) -> None:
        try:
            journal = Journal(path, busy_timeout=30)
        except BaseException:
            barrier.abort()  # the others must not wait for this one for ever
            raise
        barrier.wait(60)
        try:
            journal.reserve("a" if k % 2 else "b", 1, k + 1, 4, entry, budget)
            outcomes.append("ok")
        except PrivacyBudgetExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=go, args=(k,), daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert sorted(outcomes) == ["ok"] + ["refused"] * 7
    assert first.row_spent(4) == (1.0, 0.0)


# -- F5: a transiently busy journal ends the modeler's session ---------------------------

def test_a_transiently_busy_journal_does_not_end_the_session(tmp_path):
    """Two curator processes share a journal (the documented deployment); one holds the
    write lock a little longer than busy_timeout. The other's reservation fails with
    ProtocolError(BUSY, 'try again'), relayed as Error(code='busy', seq=1) -- but the
    protocol's error table says `busy` is FATAL (connection dropped; 'serves no more
    sessions'), and the modeler's QueryWindow treats any Error other than
    evaluation_failed as the end of the session (PeerError), and connect_modeler does not
    reconnect on it. The curator itself went on: the query could simply be retried."""
    import sqlite3

    from pobo.parties.runners import ask
    from pobo.protocol.errors import PeerError

    cmd, _ = _marker_command(tmp_path, fail=False)
    config = RunConfig("synthetic", T=3, seed=1, options={"grid": 8}, timeout=3,
                       objective_cmd=cmd, journal=str(tmp_path / "j.db"))
    service = prepare_service(config, journal=Journal(config.journal, busy_timeout=0.2))

    async def run():
        session = service.new_session()
        conn = _Conn(session, resume=False, timeout=3)
        other = sqlite3.connect(config.journal, isolation_level=None)
        try:
            await conn.open()
            other.execute("BEGIN IMMEDIATE")  # the other curator process writes
            asyncio.get_running_loop().call_later(1.0, other.execute, "COMMIT")
            return await ask(conn.mchan, Query(1, 3), retries=3)
        except PeerError as exc:
            return exc
        finally:
            other.close()
            await conn.close()

    got = asyncio.run(asyncio.wait_for(run(), 60))
    assert isinstance(got, Reward), f"the session ended on a transient journal lock: {got!r}"
