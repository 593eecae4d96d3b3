"""Group commit (issue 23 item 5): answers staged in one event-loop turn share one COMMIT,
none is visible (or announced) before it, each keeps its own checks, and a failed
COMMIT fails every waiter (kill -9: tests/test_journal_durability.py)."""
from __future__ import annotations

import asyncio
import sqlite3

import pytest

from pobo.parties.journal import Journal, JournalFault
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import Budget, Entry, PrivacyBudgetExceeded


def _ldp(row: int, eps: float = 0.5) -> list[Entry]:
    return [Entry("ldp", eps, 0.0, "local", row)]


def _answers(path) -> dict[tuple[str, int], float]:
    with sqlite3.connect(path) as db:
        return {(s, q): v for s, q, v in db.execute("SELECT session, seq, value FROM answers")}


def test_answers_of_one_turn_share_one_commit_and_none_is_visible_before_it(tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path, durability="full")
    budget = Budget(row_epsilon=10.0)

    async def main() -> None:
        before = journal.commits
        for k in range(8):  # eight sessions' answers in one turn
            journal.record_answer(f"s{k}", None, 1, k, _ldp(k), budget, lambda k=k: (k, k + 0.5))
        assert _answers(path) == {}  # staged: another connection sees nothing yet
        await journal.committed()
        assert journal.commits == before + 1  # one COMMIT (one fsync) for all eight
        assert _answers(path) == {(f"s{k}", 1): k + 0.5 for k in range(8)}

    asyncio.run(main())
    journal.close()


def test_a_synchronous_caller_commits_each_answer_at_once(tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path, durability="normal")
    before = journal.commits
    for seq in (1, 2, 3):
        journal.record_answer("s", None, seq, seq, [], Budget(), lambda: (1.0, 1.0))
        assert len(_answers(path)) == seq
    assert journal.commits == before + 3
    journal.close()


def test_at_normal_durability_an_answer_commits_at_once_even_in_a_loop(tmp_path):
    """At normal a COMMIT is a write to the WAL (no fsync): waiting for the group's turn
    would cost the round trip more than it saves, so each answer commits as it is
    written, and another connection sees it before the loop turns."""
    path = tmp_path / "j.db"
    journal = Journal(path, durability="normal")
    assert not journal.group_commit and Journal(tmp_path / "f.db").group_commit

    async def main() -> None:
        before = journal.commits
        journal.record_answer("s", None, 1, 7, [], Budget(), lambda: (1.0, 1.0))
        assert journal.commits == before + 1 and _answers(path) == {("s", 1): 1.0}
        await journal.committed()

    asyncio.run(main())
    journal.close()


def test_a_refused_answer_is_rolled_back_alone_and_later_ones_see_earlier_charges(tmp_path):
    """Row 3's budget is 1.0: the first two 0.5 reports fit, the third (same group) is
    refused, and the answers around it commit."""
    path = tmp_path / "j.db"
    journal = Journal(path)
    budget = Budget(row_epsilon=1.0)

    async def main() -> None:
        journal.record_answer("a", None, 1, 3, _ldp(3), budget, lambda: (1.0, 1.0))
        journal.record_answer("b", None, 1, 3, _ldp(3), budget, lambda: (2.0, 2.0))
        with pytest.raises(PrivacyBudgetExceeded):
            journal.record_answer("c", None, 1, 3, _ldp(3), budget, lambda: (3.0, 3.0))
        journal.record_answer("c", None, 2, 4, _ldp(4), budget, lambda: (4.0, 4.0))
        await journal.committed()

    asyncio.run(main())
    assert _answers(path) == {("a", 1): 1.0, ("b", 1): 2.0, ("c", 2): 4.0}
    assert journal.row_spent(3) == (1.0, 0.0) and journal.row_spent(4) == (0.5, 0.0)
    journal.close()


def test_a_second_process_waits_for_the_group_and_then_sees_its_charges(tmp_path):
    """The group holds the write lock until its COMMIT: another connection (as another
    curator process would) is told BUSY meanwhile, and after the COMMIT its budget
    check counts the group's charges."""
    path = tmp_path / "j.db"
    journal, other = Journal(path), Journal(path, busy_timeout=0.05)
    budget = Budget(row_epsilon=1.0)

    async def main() -> None:
        journal.record_answer("a", None, 1, 7, _ldp(7, 0.75), budget, lambda: (1.0, 1.0))
        with pytest.raises(ProtocolError) as busy:
            other.charge("b", _ldp(7, 0.5), budget)
        assert busy.value.code is ErrorCode.BUSY
        await journal.committed()

    asyncio.run(main())
    with pytest.raises(PrivacyBudgetExceeded):
        other.charge("b", _ldp(7, 0.5), budget)  # 0.75 + 0.5 > 1: the group's charge counts
    other.charge("b", _ldp(7, 0.25), budget)
    journal.close()
    other.close()


class _FailingCommit:
    """The journal's connection, whose COMMIT fails like a full disk: every one, or (with
    `once`) the next one after `armed` is set."""

    def __init__(self, db: sqlite3.Connection, once: bool = False) -> None:
        self._db, self.once, self.armed = db, once, not once

    def execute(self, sql, *args):
        if sql == "COMMIT" and self.armed:
            self.armed = not self.once
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


def test_a_failed_group_commit_fails_every_waiter_and_every_later_reply(tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path)
    real = journal._db
    journal._db = _FailingCommit(real)

    async def main() -> list:
        async def answer(k: int) -> None:
            journal.record_answer(f"s{k}", None, 1, k, [], Budget(), lambda: (1.0, 1.0))
            await journal.committed()

        return await asyncio.gather(*(answer(k) for k in range(4)), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, JournalFault) for o in outcomes), outcomes
    assert journal.fault is not None and _answers(path) == {}
    with pytest.raises(JournalFault):  # sticky: nothing is announced after a failure
        asyncio.run(journal.committed())
    journal._db = real
    journal.close()


def test_an_immediate_write_commits_the_staged_group_first(tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path)

    async def main() -> None:
        journal.record_answer("s", None, 1, 0, [], Budget(), lambda: (1.0, 1.0))
        journal.set_meta("k", "v")  # not grouped: it commits the group, then itself
        assert _answers(path) == {("s", 1): 1.0}
        await journal.committed()  # already done

    asyncio.run(main())
    journal.close()


def test_a_refused_first_write_drops_its_group_and_the_next_opens_another(tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path)
    budget = Budget(row_epsilon=0.4)

    async def main() -> None:
        with pytest.raises(PrivacyBudgetExceeded):
            journal.record_answer("a", None, 1, 3, _ldp(3), budget, lambda: (1.0, 1.0))
        await journal.committed()  # nothing staged: returns at once
        journal.record_answer("a", None, 2, 4, [], budget, lambda: (2.0, 2.0))
        await journal.committed()

    asyncio.run(main())
    assert _answers(path) == {("a", 2): 2.0} and journal.row_spent(3) == (0.0, 0.0)
    journal.close()


class _CheckingPipe:
    """A curator's pipe that, for every Reward it carries, reads the journal through
    another connection first: the answer must already be committed there."""

    def __init__(self, pipe, path, seen: list) -> None:
        self._pipe, self._path, self._seen = pipe, path, seen

    async def send(self, frame: bytes) -> None:
        from pobo.protocol.codec import decode
        from pobo.protocol.messages import Reward
        from pobo.protocol.signing import body_of

        message = decode(body_of(frame))
        if isinstance(message, Reward):
            reader = Journal(self._path)  # another connection (at normal the answer may
            try:  # be in its session's log, which a reader merges with the table)
                row = [a for sid, _ in reader.sessions() for a in reader.load(sid).answers
                       if (a[0], a[3]) == (message.seq, message.value)]
            finally:
                reader.close()
            self._seen.append(bool(row))
        await self._pipe.send(frame)

    async def recv(self, timeout: float) -> bytes:
        return await self._pipe.recv(timeout)

    def close(self) -> None:
        self._pipe.close()


@pytest.mark.parametrize("durability", ["full", "normal"])
def test_every_reward_of_concurrent_sessions_is_committed_before_it_is_sent(tmp_path,
                                                                            durability):
    """Four in-process sessions on one journal: every Reward the curators send is
    already in the journal as another connection reads it; at durability full the
    answers shared COMMITs (fewer COMMITs than answers), at normal each has its own."""
    from pobo.session import (
        RunConfig, curate, open_channel, optimise, prepare_service,
    )
    from pobo.transport.inproc import pipe_pair

    path = tmp_path / "j.db"
    journal = Journal(path, durability=durability)
    service = prepare_service(RunConfig("synthetic", T=12, seed=2, options={"grid": 10},
                                        timeout=60), journal=journal)
    seen: list[bool] = []

    async def one(k: int) -> None:
        session = service.new_session()
        cpipe, mpipe = pipe_pair()
        cchan = open_channel(_CheckingPipe(cpipe, path, seen), "curator", False, None, 60.0)
        mchan = open_channel(mpipe, "modeler", False, None, 60.0)
        try:
            await asyncio.gather(curate(cchan, session, None, verbose=False),
                                 optimise(mchan, k))
        finally:
            cchan.close()
            mchan.close()

    async def main() -> None:
        await asyncio.gather(*(one(k) for k in range(4)))

    before = journal.commits
    asyncio.run(main())
    assert len(seen) == 4 * 12 and all(seen)
    if durability == "full":
        assert journal.commits - before < 4 * 12  # grouped: not one COMMIT per answer
    else:
        assert journal.commits - before >= 4 * 12  # each answer at once, no group
    journal.close()


def test_an_in_memory_journal_commits_each_answer_at_once_even_in_a_running_loop():
    """In memory a COMMIT has no fsync to share: each answer is committed before
    `record_answer` returns (nothing is staged for the end of the turn), and a refused
    one is rolled back alone. Asked for, grouping still works in memory."""
    journal, budget = Journal(), Budget(row_epsilon=1.0)

    def answers(j: Journal) -> dict[tuple[str, int], float]:
        return {(s, q): v for s, q, v in j._db.execute("SELECT session, seq, value FROM answers")}

    async def main() -> None:
        before = journal.commits
        for k in range(3):
            journal.record_answer("s", None, k + 1, 5, _ldp(5, 0.25), budget,
                                  lambda k=k: (k, k + 0.5))
            assert journal.commits == before + k + 1 and journal._group is None
            assert len(answers(journal)) == k + 1
        with pytest.raises(PrivacyBudgetExceeded):  # 3 x 0.25 + 0.5 > 1
            journal.record_answer("s", None, 9, 5, _ldp(5, 0.5), budget, lambda: (9, 9))
        await journal.committed()
        assert answers(journal) == {("s", k + 1): k + 0.5 for k in range(3)}

        grouped = Journal(group_commit=True)
        before = grouped.commits
        for k in range(3):
            grouped.record_answer("s", None, k + 1, k, [], Budget(), lambda: (1.0, 1.0))
        assert grouped.commits == before and grouped._group is not None
        await grouped.committed()
        assert grouped.commits == before + 1 and len(answers(grouped)) == 3

    asyncio.run(main())


def _ldp_service(path):
    from pobo.session import RunConfig, prepare_service
    config = RunConfig("synthetic", T=12, seed=2, options={"grid": 10}, timeout=20,
                       ldp_epsilon=2.0)
    return config, prepare_service(config, journal=Journal(path, durability="full"))


@pytest.mark.parametrize("fails", [False, True], ids=["commits", "commit-fails"])
def test_a_ledger_head_never_commits_to_an_answer_not_yet_durable(tmp_path, fails):
    """Session A's query and session B's End in one loop turn: B's closing head was read
    through the connection holding A's staged answer, so it counted an entry not yet
    committed (signed, and kept in the head file): a kill -9 or a failed COMMIT then left
    a curator that never started again (LedgerBehind). A head now commits the staged
    group first; when that COMMIT fails, A is told and B's End carries no head."""
    from pobo.protocol.messages import NO_LEDGER_HEAD, PROTOCOL_VERSION, End, Hello, Query
    from pobo.session import curate, open_channel, prepare_service
    from pobo.transport.inproc import pipe_pair
    path = tmp_path / "j.db"
    config, service = _ldp_service(path)
    journal = service.journal
    connection = journal._conn = _FailingCommit(journal._conn, once=True)

    async def main():
        modelers = []
        for _ in range(2):
            cpipe, mpipe = pipe_pair()
            asyncio.ensure_future(curate(open_channel(cpipe, "curator", False, None, 20.0),
                                         service.new_session(), None, verbose=False,
                                         raise_errors=False))
            m = open_channel(mpipe, "modeler", False, None, 20.0)
            await m.send(Hello(PROTOCOL_VERSION, "x"))
            await m.recv()
            await m.recv()
            modelers.append(m)
        a, b = modelers
        connection.armed = fails
        await a.send(Query(1, 4))
        await b.send(End("done"))
        return await asyncio.wait_for(a.recv(), 20), await asyncio.wait_for(b.recv(), 20)

    answer, end = asyncio.run(main())
    journal._conn = connection._db
    with sqlite3.connect(path) as db:
        durable = db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
    if fails:
        assert type(answer).__name__ == "Error" and answer.code == "internal"
        assert end.ledger == NO_LEDGER_HEAD
    else:
        assert type(answer).__name__ == "Reward" and end.ledger.entries == durable
    journal.close()
    prepare_service(config, journal=Journal(path)).journal.close()  # it starts again


def test_after_a_failed_group_commit_no_write_reports_success(tmp_path):
    """After a group's COMMIT failed (its answers rolled back), the next immediate write
    ran and succeeded: a release was granted, a session marked 'ok', over answers that
    were lost. Every write is now the same JournalFault, and nothing is written."""
    path = tmp_path / "j.db"
    journal = Journal(path)
    journal.open_session("s", {}, b"w", "p", "f", "owner")
    connection = journal._conn = _FailingCommit(journal._conn, once=True)

    async def main():
        connection.armed = True
        journal.record_answer("s", 1, 1, 3, [], Budget(), lambda: (1.0, 1.0))  # staged
        with pytest.raises(JournalFault):
            journal.charge_release("s", 1, [Entry("release:noisy", 0.5, 1e-3)], Budget(),
                                   "noisy")
        with pytest.raises(JournalFault):
            journal.set_status("s", 1, "ok")
        with pytest.raises(JournalFault):
            await journal.committed()

    asyncio.run(main())
    journal._conn = connection._db
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM answers").fetchone()[0] == 0
        assert db.execute("SELECT status, release FROM sessions").fetchone() == ("open", None)
        assert db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0] == 0
    journal.close()
