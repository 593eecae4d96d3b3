"""Refusals the docs promise (issue 48 item 6), tried against a curator over ZeroMQ.

A resume whose answer log is damaged used to kill the connection's task with an
unhandled JournalError, and the modeler heard nothing; a first frame over the curator's
64 KiB limit is dropped with its connection by libzmq, before pobo sees it, as
docs/deployment.md and PROTOCOL.md 2 now say. Every wait is bounded; ports are free
loopback ones.
"""
import asyncio

import pytest
import zmq
import zmq.asyncio
from wire import dealer, hello_frame, reply, serve, with_cookie  # test helpers
from waits import result_within, stop  # test helper: waits on tasks that are really bounded

from pobo.parties import answer_log
from pobo.parties.journal import Journal
from pobo.protocol.codec import encode
from pobo.protocol.messages import PROTOCOL_VERSION, Error, Hello, Query, Reward, Welcome
from pobo.protocol.signing import Link, seal
from pobo.remote import connect_modeler
from pobo.session import RunConfig, prepare_service

CFG = RunConfig(T=3, seed=5, options={"grid": 8}, timeout=30.0)


async def _hello(sock, resume: str = ""):
    """Open (or resume) a session on `sock`: the Welcome, or the curator's Error."""
    hello = await with_cookie(sock, Hello(PROTOCOL_VERSION, "m", resume))
    await sock.send(hello_frame(hello))
    answer = await reply(sock)
    if isinstance(answer, Welcome):
        await asyncio.wait_for(sock.recv_multipart(), 20)  # the Dataset
    return answer


async def test_a_resume_over_a_damaged_answer_log_gets_a_typed_refusal(tmp_path):
    """Two answers in the session's answer log (durability normal), the log damaged, the
    session resumed: the modeler gets `internal` naming the damage, the journal is left
    as it was, and the curator serves the next session. Before: no reply at all."""
    journal = Journal(tmp_path / "j.db", durability="normal")
    service = prepare_service(CFG, journal=journal)
    task, endpoint = await serve(tmp_path, service, sessions=0)
    ctx = zmq.asyncio.Context()
    socks = []
    try:
        first = dealer(ctx, endpoint)
        socks.append(first)
        welcome = await _hello(first)
        assert isinstance(welcome, Welcome), welcome
        for seq in (1, 2):
            link = Link(welcome.session, seq, bytes(32), bytes(32))
            await first.send(seal(encode(Query(seq, seq)), link, None))
            assert isinstance(await reply(first), Reward)
        log = answer_log.log_path(journal.answer_dir, welcome.session)
        intact = log.read_bytes()
        log.write_bytes(intact[:60] + bytes([intact[60] ^ 0xFF]) + intact[61:])
        again = dealer(ctx, endpoint)
        socks.append(again)
        refused = await _hello(again, resume=welcome.session)
        assert isinstance(refused, Error) and refused.code == "internal", refused
        assert "answer log" in refused.message and "\n" not in refused.message
        assert log.read_bytes() != intact  # left as found, for the operator
        assert not task.done(), "the refusal stopped the curator"
        other = dealer(ctx, endpoint)
        socks.append(other)
        assert isinstance(await _hello(other), Welcome)  # it goes on serving
    finally:
        for sock in socks:
            sock.close(0)
        await stop(task)
        journal.close()
        ctx.destroy(0)


@pytest.mark.parametrize("size", ["100k-deep", "100MB"])
async def test_a_first_frame_over_64_kib_is_dropped_with_its_connection_and_costs_no_slot(
        tmp_path, size):
    """PROTOCOL.md 2 and 4.1: a first frame over the curator's ZeroMQ MAXMSGSIZE (64 KiB)
    never reaches pobo: libzmq closes that connection and no Error is sent (none could
    be: the frame is never read). A 100k-deep nesting is 100 KB, so it is such a frame
    (one that fits, 60,000 deep, is answered `malformed`: tests/test_sessions.py). The
    curator keeps no state and serves its one session to the next modeler."""
    frame = (b"\x91" * 100_000 + b"\xc0") if size == "100k-deep" else bytes(100 << 20)
    service = prepare_service(CFG)
    task, endpoint = await serve(tmp_path, service, sessions=1)
    ctx = zmq.asyncio.Context()
    hostile = dealer(ctx, endpoint)
    try:
        await hostile.send(frame, copy=False)
        assert not await hostile.poll(2000), "an answer to a frame over 64 KiB"
        assert not task.done(), "one frame stopped the curator"
        result = await result_within(connect_modeler(endpoint, tmp_path / "m", seed=5,
                                                     timeout=20.0), 60)
        assert result["status"] == "ok" and len(result["queries"]) == CFG.T
        assert (await result_within(task, 30))["status"] == "ok"  # its one session: this
        assert len(service.journal.sessions()) == 1
    finally:
        hostile.close(0)
        await stop(task)
        ctx.destroy(0)


async def test_every_first_frame_of_a_burst_of_new_peers_is_answered(tmp_path):
    """1,100 new peers send a garbage first frame at once, more than the hub's 1,024
    waiting slots: the curator takes every waiting peer at each turn, so each one gets
    its typed Error (before, one peer was taken per loop turn, the waiting slots filled
    within a few turns and the frames past them were dropped unanswered)."""
    service = prepare_service(CFG)
    task, endpoint = await serve(tmp_path, service, sessions=0)
    ctx = zmq.asyncio.Context()
    ctx.set(zmq.MAX_SOCKETS, 2048)
    socks = [dealer(ctx, endpoint) for _ in range(1100)]
    try:
        await asyncio.sleep(1.0)  # connected: the frames below go out in one burst
        for sock in socks:
            await sock.send(b"\x00garbage")
        answers = await asyncio.gather(*(reply(sock, 60) for sock in socks),
                                       return_exceptions=True)
        unanswered = sum(1 for a in answers if not isinstance(a, Error))
        assert unanswered == 0, f"{unanswered} of {len(socks)} first frames unanswered"
        assert {a.code for a in answers} == {"malformed"}
    finally:
        for sock in socks:
            sock.close(0)
        await stop(task)
        ctx.destroy(0)
