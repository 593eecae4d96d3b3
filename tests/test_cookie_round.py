"""The cookie round (PROTOCOL.md 3.7) and the replay window (3.5), attacked over ZeroMQ.

Issue 48 item 5: Hellos that are sent and never read took a session slot each until the
curator's --timeout, so a crowd of them locked every modeler out (`busy`). Issue 45 item
6: the nonce window remembered refused Hellos too, 4,096 of them in memory, so a flood
flushed it and a captured signed resume Hello then took a live session over; after a
restart no flood was needed. Every wait here is bounded; every port is a free loopback one.
"""
import asyncio
from dataclasses import replace

import zmq
import zmq.asyncio
from wire import dealer, hello_frame, reply, serve, with_cookie  # test helpers
from waits import result_within, stop  # test helper: waits on tasks that are really bounded

from pobo.parties.journal import Journal
from pobo.protocol.codec import decode, encode
from pobo.protocol.cookie import COOKIE_BUCKET, CookieJar, screen
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Error, Hello, Query, Retry, Reward, Welcome, new_nonce,
)
from pobo.protocol.signing import Link, Signer, open_frame, seal
from pobo.remote import REPLAY_WINDOW, Admissions, connect_modeler
from pobo.session import RunConfig, Signing, prepare_service

CFG = RunConfig(T=3, seed=5, options={"grid": 8}, timeout=30.0)


def _sessions(tmp_path) -> list:
    """The session folders the curator made (one per admitted session)."""
    out = tmp_path / "curator"
    return [p for p in out.iterdir() if p.is_dir() and len(p.name) == 32] if out.exists() else []


# ----------------------------------------------------------------- the cookie itself

def test_a_cookie_is_valid_for_its_peer_and_nonce_for_one_to_two_buckets_only():
    jar, nonce = CookieJar.fresh(), new_nonce()
    cookie = jar.make(b"plaintext", nonce, now=100.0)
    assert len(cookie) == 64 and jar.valid(cookie, b"plaintext", nonce, now=100.0)
    assert jar.valid(cookie, b"plaintext", nonce, now=100.0 + COOKIE_BUCKET)  # the next bucket
    assert not jar.valid(cookie, b"plaintext", nonce, now=100.0 + 2 * COOKIE_BUCKET)  # stale
    assert not jar.valid(cookie, b"plaintext", new_nonce(), now=100.0)  # another Hello's
    assert not jar.valid(cookie, b"another-curve-key", nonce, now=100.0)  # another peer's
    assert not CookieJar.fresh().valid(cookie, b"plaintext", nonce, now=100.0)  # a restart
    assert not jar.valid("", b"plaintext", nonce) and not jar.valid(cookie, b"plaintext", "")


def test_screen_answers_a_first_hello_with_a_retry_and_lets_its_echo_through():
    jar, signer = CookieJar.fresh(), Signer.generate()
    hello = Hello(PROTOCOL_VERSION, "m", nonce=new_nonce())
    retry_frame = screen(hello_frame(hello), jar, b"plaintext", signer, 1 << 16)
    retry = decode(open_frame(retry_frame).body)
    assert isinstance(retry, Retry) and open_frame(retry_frame).link.session == ""
    echoed = replace(hello, cookie=retry.cookie)
    assert screen(hello_frame(echoed), jar, b"plaintext", signer, 1 << 16) is None
    bare = screen(hello_frame(hello, bare=True), jar, b"plaintext", None, 1 << 16)
    assert isinstance(decode(bare), Retry)  # a bare Hello gets a bare Retry
    # what the handshake refuses, typed, goes on to it: no Retry for garbage, an old
    # version or a Hello without a nonce (its cookie could bind nothing)
    for frame in (b"\x00garbage", hello_frame(replace(hello, version=5)),
                  hello_frame(replace(hello, nonce=""))):
        assert screen(frame, jar, b"plaintext", signer, 1 << 16) is None


def test_the_replay_window_keeps_only_admitted_nonces_for_its_time_whatever_their_number():
    slots = Admissions(0, 0)
    first = new_nonce()
    slots.remember(first, now=0.0)
    for i in range(5000):  # more admitted Hellos than the old window's 4,096 entries
        slots.remember(new_nonce(), now=1.0)
    assert slots.replayed(first, now=2.0)  # not flushed by their number
    assert not slots.replayed(new_nonce(), now=2.0)  # asking remembers nothing
    assert not slots.replayed(first, now=REPLAY_WINDOW + 1.0)  # only past its time
    assert len(slots.nonces) == 0


# ----------------------------------------------------------------- issue 48 item 5

async def test_unread_hellos_take_no_slot_and_do_not_lock_a_modeler_out(tmp_path):
    """1,100 Hellos sent in one burst and never read, against a curator serving 4
    sessions at once: before the cookie round, 4 of them held every slot for --timeout
    (30 s here) and the modeler got `busy`, and 1,100 new peers at once overflow the
    hub's 1,024 waiting slots, so a Hello queued behind them could be dropped unanswered.
    Now none takes a slot or a waiting slot, and the modeler's session completes (the
    bound is generous: this is not a timing test)."""
    service = prepare_service(CFG)
    task, endpoint = await serve(tmp_path, service, sessions=0, max_sessions=4)
    ctx = zmq.asyncio.Context()
    ctx.set(zmq.MAX_SOCKETS, 2048)
    socks = [dealer(ctx, endpoint, rcvhwm=1) for _ in range(1100)]
    try:
        await asyncio.sleep(1.0)  # connected: the Hellos below go out in one burst
        frames = [hello_frame(Hello(PROTOCOL_VERSION, "flood",
                                    nonce=new_nonce() if i % 10 else ""))
                  for i in range(len(socks))]
        for sock, frame in zip(socks, frames):
            await sock.send(frame)
        result = await result_within(connect_modeler(
            endpoint, tmp_path / "m", seed=5, timeout=20.0, patience=0.0), 60)
        assert result["status"] == "ok" and len(result["queries"]) == CFG.T
        assert len(_sessions(tmp_path)) == 1  # the modeler's; the flood opened none
    finally:
        for sock in socks:
            sock.close(0)
        await stop(task)
        ctx.destroy(0)


async def test_a_hello_without_nonce_or_with_a_forged_cookie_opens_nothing(tmp_path):
    """PROTOCOL.md 3.5, 3.7: a Hello with no nonce is refused `malformed` (a cookie could
    bind nothing); one echoing a cookie this curator never made gets a Retry, as a first
    Hello does; only the echo of a real cookie opens a session."""
    service = prepare_service(CFG)
    task, endpoint = await serve(tmp_path, service, sessions=0)
    ctx = zmq.asyncio.Context()
    socks = [dealer(ctx, endpoint) for _ in range(3)]
    try:
        await socks[0].send(hello_frame(Hello(PROTOCOL_VERSION, "no-nonce")))
        answer = await reply(socks[0])
        assert isinstance(answer, Error) and answer.code == "malformed", answer
        forged = Hello(PROTOCOL_VERSION, "forger", nonce=new_nonce(), cookie="ab" * 32)
        await socks[1].send(hello_frame(forged))
        assert isinstance(await reply(socks[1]), Retry)
        hello = await with_cookie(socks[2], Hello(PROTOCOL_VERSION, "m"))
        await socks[2].send(hello_frame(hello))
        assert isinstance(await reply(socks[2]), Welcome)
        assert len(_sessions(tmp_path)) == 1
    finally:
        for sock in socks:
            sock.close(0)
        await stop(task)
        ctx.destroy(0)


# ----------------------------------------------------------------- issue 45 item 6

async def _open(ctx, endpoint, key: Signer, resume: str = "") -> tuple:
    """A signed session opened (or resumed) by `key` on a new connection: (the socket,
    the Welcome, the frame of the admitted Hello, which an eavesdropper captures)."""
    sock = dealer(ctx, endpoint)
    hello = await with_cookie(sock, Hello(PROTOCOL_VERSION, "victim", resume,
                                          sign_key=key.public_hex), key)
    frame = seal(encode(hello), Link(resume, 0, bytes(32), bytes(32)), key)
    await sock.send(frame)
    welcome = await reply(sock)
    assert isinstance(welcome, Welcome), welcome
    await asyncio.wait_for(sock.recv_multipart(), 20)  # the Dataset
    return sock, welcome, frame


async def _query(sock, welcome, key: Signer, seq: int, last: bytes):
    """Send Query(seq) on a session's connection; the answer."""
    link = Link(welcome.session, 10 * seq, bytes(32), last)
    await sock.send(seal(encode(Query(seq, seq)), link, key))
    return await reply(sock)


async def test_a_captured_resume_hello_cannot_take_a_session_over_after_a_flood(tmp_path):
    """The attack of issue 45 item 6: a signed session, resumed on a new connection whose
    Hello an eavesdropper captures; 4,200 other Hellos, each refused `busy` once admitted
    to the handshake; then the captured Hello again. It used to be admitted (its nonce
    flushed out of the 4,096-entry window by the refused ones) and took the live session
    over; now refused Hellos are not remembered and an admitted one is for longer than
    its cookie lives: `replay`, and the victim's connection still holds the session."""
    curator, victim = Signer.generate(), Signer.generate()
    service = prepare_service(CFG)
    task, endpoint = await serve(tmp_path, service, sessions=0, max_sessions=1,
                                  signing=Signing(curator=curator))
    ctx = zmq.asyncio.Context()
    ctx.set(zmq.MAX_SOCKETS, 4096)
    first = live = thief = None
    try:
        first, welcome, _ = await _open(ctx, endpoint, victim)
        first.close(0)
        live, again, captured = await _open(ctx, endpoint, victim, resume=welcome.session)
        assert again.session == welcome.session

        async def junk(n: int) -> None:
            for _ in range(n):
                sock = dealer(ctx, endpoint)
                try:
                    hello = Hello(PROTOCOL_VERSION, "junk", nonce=new_nonce())
                    await sock.send(hello_frame(hello))
                    answer = await reply(sock)
                    if isinstance(answer, Retry):  # it reads: echo the cookie, get refused
                        await sock.send(hello_frame(replace(hello, cookie=answer.cookie)))
                        answer = await reply(sock)
                    assert isinstance(answer, Error) and answer.code == "busy", answer
                finally:
                    sock.close(0)

        await result_within(asyncio.gather(*(junk(70) for _ in range(60))), 600)
        thief = dealer(ctx, endpoint)
        await thief.send(captured)
        answer = await reply(thief)
        assert isinstance(answer, Error) and answer.code == "replay", answer
        assert isinstance(await _query(live, again, victim, 1, bytes(32)), Reward)
    finally:
        for sock in (first, live, thief):
            if sock is not None:
                sock.close(0)
        await stop(task)
        ctx.destroy(0)


async def test_a_captured_resume_hello_is_not_admitted_by_a_restarted_curator(tmp_path):
    """The other half: a curator restarted on its journal used to admit the captured
    resume Hello at once (its window was empty). Its new cookie secret voids every cookie
    issued before: the Hello gets a Retry, the session stays as the journal has it."""
    curator, victim = Signer.generate(), Signer.generate()
    path = tmp_path / "journal.db"
    service = prepare_service(CFG, journal=Journal(path, durability="normal"))
    task, endpoint = await serve(tmp_path, service, sessions=0, signing=Signing(curator=curator))
    ctx = zmq.asyncio.Context()
    socks = []
    try:
        sock, welcome, _ = await _open(ctx, endpoint, victim)
        socks.append(sock)
        sock.close(0)
        sock, _, captured = await _open(ctx, endpoint, victim, resume=welcome.session)
        socks.append(sock)
        await stop(task)
        service.journal.close()
        generation = Journal(path).load(welcome.session).generation
        service = prepare_service(CFG, journal=Journal(path, durability="normal"))
        task, endpoint = await serve(tmp_path, service, sessions=0, signing=Signing(curator=curator))
        thief = dealer(ctx, endpoint)
        socks.append(thief)
        await thief.send(captured)
        answer = await reply(thief)
        assert isinstance(answer, Retry), answer  # not a Welcome: the session is not taken
        await asyncio.sleep(0.2)
        assert service.journal.load(welcome.session).generation == generation
        assert len(_sessions(tmp_path)) == 1
    finally:
        for sock in socks:
            sock.close(0)
        await stop(task)
        service.journal.close()
        ctx.destroy(0)
