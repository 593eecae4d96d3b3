"""The in-process pipe's waits: a timeout on time, a kept timer never late, no timer per
frame, and a closed peer seen at once (transport.inproc, transport.wakeup)."""
import asyncio
import time

import pytest

from pobo.protocol.errors import PeerGone, PeerTimeout
from pobo.transport.inproc import pipe_pair


async def _later(delay: float, action) -> None:
    await asyncio.sleep(delay)
    action()


async def test_recv_times_out_on_time():
    a, _ = pipe_pair()
    started = time.monotonic()
    with pytest.raises(PeerTimeout):
        await a.recv(0.1)
    assert 0.09 <= time.monotonic() - started < 2.0


async def test_a_kept_timer_from_a_shorter_wait_wakes_early_but_never_times_out_early():
    a, b = pipe_pair()
    sender = asyncio.ensure_future(_later(0.01, lambda: b._outbox.put(b"first")))
    assert await a.recv(0.15) == b"first"  # leaves a timer armed for ~0.15 s from the start
    await sender
    kept = a._inbox.timer
    assert kept is not None
    # the next wait is longer: the kept timer rings first; the recv must wait on, not fail
    sender = asyncio.ensure_future(_later(0.4, lambda: b._outbox.put(b"second")))
    started = time.monotonic()
    assert await a.recv(2.0) == b"second"
    assert 0.35 <= time.monotonic() - started < 2.0
    await sender


async def test_a_shorter_deadline_replaces_a_later_kept_timer():
    a, b = pipe_pair()
    sender = asyncio.ensure_future(_later(0.01, lambda: b._outbox.put(b"x")))
    assert await a.recv(30.0) == b"x"  # a timer 30 s away is kept
    await sender
    started = time.monotonic()
    with pytest.raises(PeerTimeout):
        await a.recv(0.1)  # must not wait for the 30 s timer
    assert time.monotonic() - started < 2.0


async def test_no_timer_is_created_per_frame():
    a, b = pipe_pair()
    loop = asyncio.get_running_loop()
    timers = []
    original = loop.call_at

    def counting(when, callback, *args, **kwargs):
        timers.append(when)
        return original(when, callback, *args, **kwargs)

    loop.call_at = counting
    try:
        async def echo():
            for _ in range(50):
                await b.send(await b.recv(60.0))

        task = asyncio.ensure_future(echo())
        for i in range(50):
            await a.send(b"%d" % i)
            assert await a.recv(60.0) == b"%d" % i
        await asyncio.wait_for(task, 5)
    finally:
        loop.call_at = original
    assert len(timers) <= 4, f"{len(timers)} timers for 100 frames"


async def test_close_wakes_the_waiting_peer_with_peer_gone_and_drops_the_timer():
    a, b = pipe_pair()
    closer = asyncio.ensure_future(_later(0.05, b.close))
    started = time.monotonic()
    with pytest.raises(PeerGone):
        await a.recv(30.0)
    assert time.monotonic() - started < 2.0
    await closer
    with pytest.raises(PeerGone):  # and it stays gone
        await a.recv(0.01)
    a.close()
    assert a._inbox.timer is None and b._inbox.timer is None


async def test_a_second_reader_at_once_is_refused_not_left_to_hang():
    a, _ = pipe_pair()
    first = asyncio.ensure_future(a.recv(0.3))
    await asyncio.sleep(0)  # the first reader waits
    with pytest.raises(RuntimeError, match="one at a time"):
        await a.recv(0.3)
    with pytest.raises(PeerTimeout):  # and the first still times out, on time
        await asyncio.wait_for(first, 2.0)


async def test_a_cancelled_recv_leaves_no_timer_behind():
    a, _ = pipe_pair()
    reader = asyncio.ensure_future(a.recv(600.0))
    await asyncio.sleep(0)
    assert a._inbox.timer is not None
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert a._inbox.timer is None


async def test_a_zero_timeout_still_sees_a_frame_a_ready_task_sends():
    a, b = pipe_pair()

    async def sender():
        await b.send(b"now")

    task = asyncio.ensure_future(sender())  # ready, not yet run
    assert await a.recv(0) == b"now"
    await task


def test_a_pipe_used_on_a_second_loop_times_out_on_time():
    a, _ = pipe_pair()

    async def leave_a_kept_timer():  # a frame comes before the deadline: the timer stays
        reader = asyncio.ensure_future(a.recv(1.0))
        await asyncio.sleep(0)
        a._inbox.put(b"y")
        assert await reader == b"y"
        assert a._inbox.timer is not None

    async def on_the_next_loop():  # the first loop's timer (due sooner) never rings here
        started = time.monotonic()
        with pytest.raises(PeerTimeout):
            await asyncio.wait_for(a.recv(1.5), 5.0)
        assert 1.4 <= time.monotonic() - started < 4.0

    asyncio.run(leave_a_kept_timer())
    asyncio.run(on_the_next_loop())


# ---- a frame's SHA-256 handed over with it (Channel.send -> QueuePipe.send_sealed) -------

async def _session(tmp_path, digest_of=None):
    """A modeler Channel past the opening of an in-process session with a curator task,
    every frame the modeler's pipe sent kept as (frame, digest handed over); with
    `digest_of`, the modeler's pipe hands over digest_of(frame, digest) instead."""
    from pobo.parties.journal import Journal
    from pobo.protocol.messages import PROTOCOL_VERSION, Hello
    from pobo.protocol.policy import CURATOR, MODELER
    from pobo.session import RunConfig, curate, open_channel, prepare_service

    service = prepare_service(RunConfig("synthetic", T=5, seed=1, options={"grid": 8}),
                              journal=Journal(tmp_path / "j.db", durability="normal"))
    cpipe, mpipe = pipe_pair()
    sent, send_sealed = [], mpipe.send_sealed

    async def keeping(frame, digest):
        sent.append((frame, digest))
        await send_sealed(frame, digest if digest_of is None else digest_of(frame, digest))

    mpipe.send_sealed = keeping  # (before the channel takes the pipe's send_sealed)
    cur = open_channel(cpipe, CURATOR, False, None, 5)
    mod = open_channel(mpipe, MODELER, False, None, 5)
    task = asyncio.ensure_future(curate(cur, service.new_session(), verbose=False,
                                        raise_errors=False))
    await mod.send(Hello(PROTOCOL_VERSION, "digest"))
    await mod.recv()
    await mod.recv()
    return cur, mod, sent, task


async def _end(mod, task) -> None:
    from pobo.protocol.messages import End

    await mod.send(End("done"))
    await asyncio.wait_for(task, 5)
    mod.close()


async def test_a_channel_hands_each_frame_s_digest_over_and_the_peer_acknowledges_those_bytes(
        tmp_path):
    import hashlib

    from pobo.protocol.messages import Query, Reward

    cur, mod, sent, task = await _session(tmp_path)
    for seq in (1, 2):
        await mod.send(Query(seq, seq))
        assert isinstance(await mod.recv(), Reward)  # its link acknowledges the query
        frame, digest = sent[-1]
        assert digest == hashlib.sha256(frame).digest()  # the sender's hash of these bytes
        assert cur.pipe.sender_digest == digest and cur._last_recv == digest
    await _end(mod, task)


async def test_a_frame_sent_without_its_digest_is_hashed_by_the_receiver(tmp_path):
    import hashlib

    from pobo.protocol.codec import encode
    from pobo.protocol.messages import Query, Reward
    from pobo.protocol.signing import Link, seal

    cur, mod, sent, task = await _session(tmp_path)
    link = Link(mod.session_id, mod._sends, bytes(32), mod._last_recv)
    frame = seal(encode(Query(1, 3)), link, None)
    mod._sent[hashlib.sha256(frame).digest()] = mod._sends
    mod._sends += 1
    mod.boundary.outgoing(Query(1, 3))
    await mod.pipe.send(frame)  # a raw frame (a test's, a hostile peer's): no digest with it
    assert isinstance(await mod.recv(), Reward)
    assert cur.pipe.sender_digest is None
    assert cur._last_recv == hashlib.sha256(frame).digest()
    await _end(mod, task)


async def test_a_bytearray_sent_sealed_goes_without_the_digest_handed_over():
    """A frame that is not bytes is copied on its way: the copy is not the object the
    sender hashed, so no digest goes with it and the receiving Channel hashes it."""
    a, b = pipe_pair()
    await a.send_sealed(bytearray(b"frame"), b"\x00" * 32)
    assert await b.recv(1.0) == b"frame"
    assert b.sender_digest is None


async def test_a_wrong_digest_handed_over_breaks_only_the_liar_s_own_session(tmp_path):
    """A sender handing over a digest that is not its frame's makes the receiver
    acknowledge bytes the sender never sent: the sender refuses that acknowledgement
    (bad_signature) at the receiver's next frame. (The receiver's transcript then holds
    that false receipt, which an audit flags: the digest is trusted as the frame's, both
    ends being one program.)"""
    from pobo.protocol.errors import ErrorCode, ProtocolError
    from pobo.protocol.messages import Query

    lies = []

    def lying(frame, digest):
        if lies:  # the handshake honest, then a wrong digest with the query
            return bytes(32 - 1) + b"\x01"
        return digest

    cur, mod, sent, task = await _session(tmp_path, lying)
    lies.append(True)
    await mod.send(Query(1, 3))
    with pytest.raises(ProtocolError) as refused:
        await mod.recv()
    assert refused.value.code is ErrorCode.BAD_SIGNATURE
    assert "never sent" in str(refused.value)
    mod.close()
    await asyncio.wait_for(task, 5)
