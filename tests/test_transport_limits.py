"""The curator's ROUTER hub holds bounded memory whatever peers send, endpoints are
validated, and plaintext is refused beyond loopback unless asked for."""
import asyncio
import logging

import pytest
import zmq
import zmq.asyncio

from pobo.protocol.errors import PeerGone, PeerTimeout, ProtocolError
from pobo.transport.sockets import (
    HubLimits, RouterHub, SocketOptions, check_endpoint, close_context, is_loopback, needs_ipv6, new_context,
)


@pytest.fixture
async def ctx():
    context = new_context()
    yield context
    close_context(context)


def dealer(ctx: zmq.asyncio.Context, endpoint: str) -> zmq.asyncio.Socket:
    """A raw DEALER (no pobo wrapper) connected to `endpoint`."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


async def until(condition, timeout: float = 20.0) -> None:
    """Wait for `condition()` to hold, polling, at most `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out waiting for the hub"
        await asyncio.sleep(0.02)


def received(hub: RouterHub) -> int:
    """Frames the hub has taken off the socket so far (queued or dropped)."""
    stats = hub.stats()
    return stats["queued_frames"] + stats["dropped_frames"]


@pytest.mark.parametrize("endpoint, local", [
    ("tcp://127.0.0.1:5555", True), ("tcp://127.3.2.1:0", True), ("tcp://localhost:5555", True),
    ("tcp://[::1]:5555", True), ("tcp://lo:5555", True), ("ipc:///tmp/pobo.sock", True),
    ("inproc://pobo", True), ("tcp://[::ffff:127.0.0.1]:1", True),
    ("tcp://0.0.0.0:5555", False), ("tcp://*:5555", False), ("tcp://[::]:5555", False),
    ("tcp://192.168.1.10:5555", False), ("tcp://10.0.0.1:*", False),
    ("tcp://curator.example.org:5555", False), ("tcp://eth0:5555", False),
    ("127.0.0.1:5555", False), ("udp://127.0.0.1:5555", False),
])
def test_is_loopback(endpoint, local):
    assert is_loopback(endpoint) is local


@pytest.mark.parametrize("endpoint, v6", [
    ("tcp://[::1]:5555", True), ("tcp://[fe80::1%eth0]:0", True), ("tcp://[::]:*", True),
    ("tcp://127.0.0.1;[::1]:5555", True), ("tcp://127.0.0.1:5555", False),
    ("tcp://*:5555", False), ("tcp://lo:5555", False), ("tcp://localhost:1", False),
    ("ipc:///tmp/x", False), ("not an endpoint", False)])
def test_ipv6_is_asked_for_an_ipv6_address_only(endpoint, v6):
    assert needs_ipv6(endpoint) is v6


@pytest.mark.parametrize("endpoint", [
    "127.0.0.1:5555", "udp://127.0.0.1:5555", "tcp://", "tcp://127.0.0.1", "tcp://:5555",
    "tcp://127.0.0.1:65536", "tcp://127.0.0.1:-1", "tcp://127.0.0.1:http", "ipc://",
])
def test_invalid_endpoints_are_refused_in_one_line(endpoint):
    with pytest.raises(ValueError) as info:
        check_endpoint(endpoint)
    assert "\n" not in str(info.value) and endpoint in str(info.value)


@pytest.mark.parametrize("endpoint", [
    "tcp://127.0.0.1:0", "tcp://*:*", "tcp://0.0.0.0:65535", "ipc:///tmp/x.sock", "inproc://x",
])
def test_valid_endpoints_pass(endpoint):
    assert check_endpoint(endpoint) == endpoint


def test_connect_needs_a_concrete_port():
    with pytest.raises(ValueError, match="1..65535"):
        check_endpoint("tcp://127.0.0.1:0", bind=False)
    assert check_endpoint("tcp://127.0.0.1:5555", bind=False)


async def test_plaintext_bind_beyond_loopback_needs_insecure(ctx, caplog):
    with pytest.raises(ValueError) as info:
        RouterHub.bind(ctx, "tcp://0.0.0.0:0")
    assert str(info.value) == (
        "binding tcp://0.0.0.0:0 in plaintext exposes the session to the network: use "
        "CURVE keys (--curve-secret/--curve-allow) or pass --insecure")
    with pytest.raises(ValueError, match="--insecure"):
        RouterHub.bind(ctx, "tcp://*:0")
    with pytest.raises(ValueError, match="invalid port"):
        RouterHub.bind(ctx, "tcp://127.0.0.1:99999")
    with caplog.at_level(logging.WARNING, logger="pobo.transport"):
        hub = RouterHub.bind(ctx, "tcp://0.0.0.0:0", insecure=True)
    try:
        assert hub.endpoint.startswith("tcp://0.0.0.0:")
        assert any("plaintext" in r.getMessage() for r in caplog.records)
    finally:
        await hub.aclose()
    for local in ("tcp://127.0.0.1:0", "tcp://localhost:0"):
        hub = RouterHub.bind(ctx, local)
        await hub.aclose()


async def test_curve_may_bind_beyond_loopback(ctx, tmp_path):
    from pobo.transport.security import CurveServer, make_keys
    keys = make_keys(tmp_path / "keys")
    hub = RouterHub.bind(ctx, "tcp://0.0.0.0:0", curve=CurveServer(keys["curator_secret"],
                                                                   keys["allowed"]))
    assert hub.security == "curve"
    await hub.aclose()


async def test_flood_of_strangers_and_a_peer_that_is_not_read_stay_within_the_caps(ctx):
    """2,000 identities never accepted (3 frames each) and 10^4 frames from one accepted
    peer that the curator never reads: every queue stays within its cap, the rest is
    dropped and counted, and the accepted peer's first frames are intact."""
    limits = HubLimits(max_pending=256, pending_frames=2, pending_bytes=1 << 20,
                       pending_ttl=120.0)
    hwm = 100
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0", SocketOptions(max_frame=1 << 16, hwm=hwm),
                         limits=limits)
    greedy = dealer(ctx, hub.endpoint)
    strangers: list[zmq.asyncio.Socket] = []
    try:
        await greedy.send(b"hello")
        pipe = await hub.accept(10)
        for i in range(10_000):
            await greedy.send(b"%05d" % i + b"x" * 200)
        await until(lambda: received(hub) == 10_001)
        sent = 10_001
        for batch in range(20):  # 100 sockets at a time keeps the descriptors bounded
            strangers = [dealer(ctx, hub.endpoint) for _ in range(100)]
            for sock in strangers:
                for _ in range(3):
                    await sock.send(b"hello?" * 10)
            sent += 300
            await until(lambda: received(hub) == sent)
            stats = hub.stats()
            assert stats["pending"] <= limits.max_pending
            assert stats["pending_bytes"] <= limits.pending_bytes
            for sock in strangers:
                sock.close(0)
            strangers = []
        stats = hub.stats()
        assert stats["pending"] == limits.max_pending
        assert stats["peers"] == limits.max_pending + 1
        assert stats["refused_peers"] == 2000 - limits.max_pending
        assert stats["queued_frames"] == hwm + limits.max_pending * limits.pending_frames
        assert stats["max_peer_frames"] == hwm
        assert stats["dropped_frames"] == (10_001 - hwm) + limits.max_pending * 1 + \
            (2000 - limits.max_pending) * 3
        assert stats["queued_bytes"] < 1 << 20
        assert stats["pump_errors"] == 0
        # drop-tail: the accepted peer's first frames are kept, in order
        assert await pipe.recv(1) == b"hello"
        assert (await pipe.recv(1)).startswith(b"00000")
    finally:
        for sock in strangers:
            sock.close(0)
        greedy.close(0)
        await hub.aclose()


async def test_default_limits_bound_the_bytes_held_under_full_size_frames(ctx):
    """With the defaults, strangers sending the largest frames the curator accepts and a
    peer that is not read hold at most pending_bytes + peer_bytes (+ one frame)."""
    limits, frame = HubLimits(), b"z" * 60_000
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    greedy = dealer(ctx, hub.endpoint)
    strangers: list[zmq.asyncio.Socket] = []
    try:
        await greedy.send(b"hello")
        await hub.accept(10)
        for _ in range(300):
            await greedy.send(frame)
        sent = 301
        for _ in range(4):
            strangers = [dealer(ctx, hub.endpoint) for _ in range(100)]
            for sock in strangers:
                for _ in range(5):
                    await sock.send(frame)
            sent += 500
            await until(lambda: received(hub) == sent)
            for sock in strangers:
                sock.close(0)
            strangers = []
        stats = hub.stats()
        assert stats["pending_bytes"] <= limits.pending_bytes
        assert stats["queued_bytes"] <= limits.pending_bytes + limits.peer_bytes + len(frame)
        assert stats["refused_peers"] > 0 and stats["dropped_frames"] > 0
    finally:
        for sock in strangers:
            sock.close(0)
        greedy.close(0)
        await hub.aclose()


async def test_waiting_peers_expire_and_may_arrive_again(ctx):
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0", limits=HubLimits(pending_ttl=0.3))
    hub._ensure_pump()
    sock = dealer(ctx, hub.endpoint)
    try:
        await sock.send(b"first")
        await until(lambda: hub.stats()["pending"] == 1)
        await until(lambda: hub.stats()["pending"] == 0, timeout=5)
        assert hub.stats()["expired_peers"] == 1 and hub.stats()["peers"] == 0
        await sock.send(b"again")
        pipe = await hub.accept(5)
        assert await pipe.recv(1) == b"again"
    finally:
        sock.close(0)
        await hub.aclose()


async def test_a_forgotten_peer_does_not_come_back(ctx):
    """After its pipe is closed, a late frame from the same connection is dropped and
    counted; it never becomes a new arrival."""
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    sock = dealer(ctx, hub.endpoint)
    try:
        await sock.send(b"hello")
        pipe = await hub.accept(5)
        assert await pipe.recv(1) == b"hello"
        pipe.close()
        with pytest.raises(PeerGone):
            await pipe.recv(0.1)
        for _ in range(5):
            await sock.send(b"late")
        await until(lambda: hub.stats()["late_frames"] == 5)
        assert hub.stats()["pending"] == 0 and hub.stats()["peers"] == 0
        with pytest.raises(PeerTimeout):
            await hub.accept(0.3)
    finally:
        sock.close(0)
        await hub.aclose()


async def test_remembered_identities_are_bounded(ctx):
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0", limits=HubLimits(remember_forgotten=10))
    try:
        for i in range(1000):
            hub.forget(b"peer-%d" % i)
        assert len(hub._forgotten) == 10
    finally:
        await hub.aclose()


async def test_a_malformed_message_is_an_error_item_and_the_pump_goes_on(ctx):
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    sock = dealer(ctx, hub.endpoint)
    try:
        await sock.send_multipart([b"a", b"b", b"c"])
        await sock.send(b"")
        await sock.send(b"fine")
        pipe = await hub.accept(5)
        with pytest.raises(ProtocolError, match="3 frames"):
            await pipe.recv(1)
        assert await pipe.recv(1) == b""
        assert await pipe.recv(1) == b"fine"
        assert hub.stats()["pump_errors"] == 0
    finally:
        sock.close(0)
        await hub.aclose()


async def test_a_peer_that_stops_reading_is_gone_after_the_send_timeout(ctx):
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0", SocketOptions(max_frame=1 << 16, hwm=10),
                         limits=HubLimits(send_timeout=0.5))
    sock = dealer(ctx, hub.endpoint)
    sock.setsockopt(zmq.RCVHWM, 10)
    try:
        await sock.send(b"hello")
        pipe = await hub.accept(5)

        async def flood() -> int:
            for i in range(100_000):
                await pipe.send(b"y" * 60_000)
            return i

        with pytest.raises(PeerGone, match="queue is full"):
            await asyncio.wait_for(flood(), 60)
    finally:
        sock.close(0)
        await hub.aclose()


async def test_accept_returns_peers_in_arrival_order_and_names_the_user(ctx):
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    hub._ensure_pump()
    socks = [dealer(ctx, hub.endpoint) for _ in range(3)]
    try:
        for i, sock in enumerate(socks):
            await sock.send(b"%d" % i)
            await until(lambda: hub.stats()["pending"] == i + 1)
        for i in range(3):
            pipe = await hub.accept(1)
            assert pipe.peer == "plaintext"
            assert await pipe.recv(1) == b"%d" % i
    finally:
        for sock in socks:
            sock.close(0)
        await hub.aclose()


# --- no wait outlives its bound: a stream of handshake events, a context that hangs ----

async def test_a_stream_of_handshake_events_never_extends_the_receive_deadline(ctx):
    """A monitor that reports a failed handshake every few microseconds (a peer that
    reconnects as fast as it can) must not keep `recv` polling past its deadline."""
    import struct
    import threading
    import time

    from pobo.protocol.errors import HandshakeFailed
    from pobo.transport.sockets import DealerPipe

    address = "inproc://test-monitor-stream"
    monitor = ctx.socket(zmq.PAIR)
    monitor.bind(address)
    sock = ctx.socket(zmq.DEALER)
    sock.connect("tcp://127.0.0.1:9")  # nothing answers: no frame ever arrives
    stop = threading.Event()

    def feed() -> None:
        feeder = zmq.Context.shadow(ctx.underlying).socket(zmq.PAIR)
        feeder.setsockopt(zmq.LINGER, 0)
        feeder.connect(address)
        event = struct.pack("=HI", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, 1)
        try:  # never blocked in a send (a full pipe once the reader stops): stop is seen
            while not stop.is_set():
                try:
                    feeder.send_multipart([event, b"tcp://127.0.0.1:9"], flags=zmq.NOBLOCK)
                except zmq.Again:
                    time.sleep(0.001)
        finally:
            feeder.close()

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    pipe = DealerPipe(sock, monitor, endpoint="tcp://127.0.0.1:9")
    started = time.monotonic()
    try:
        with pytest.raises(HandshakeFailed, match="no message from the curator within 0.2 s"):
            await asyncio.wait_for(pipe.recv(0.2), 5)
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        thread.join(5)
        monitor.close()
        sock.close()
    assert not thread.is_alive()


def test_a_context_that_cannot_terminate_is_given_up_on_with_a_warning(caplog):
    """close_context returns within its timeout when libzmq would block (here: a socket
    left open that it cannot see, made through another Python handle of the same libzmq
    context), instead of hanging the caller; the context ends once the socket closes."""
    import time

    from pobo.transport.sockets import close_context as close

    context = new_context()
    tracked = context.socket(zmq.DEALER)
    assert tracked.getsockopt(zmq.LINGER) == 0  # new_context's default
    tracked.close()
    left_open = zmq.Context.shadow(context.underlying).socket(zmq.DEALER)
    left_open.setsockopt(zmq.LINGER, 0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pobo.transport"):
        assert close(context, timeout=0.3) is False
    assert time.monotonic() - started < 2.0
    assert any("did not terminate" in r.getMessage() for r in caplog.records)
    left_open.close()
    for _ in range(50):  # the termination left running finishes now
        if context.closed:
            break
        time.sleep(0.05)
    assert context.closed


async def test_a_socket_an_error_path_left_open_does_not_block_the_context(caplog):
    """A monitored DEALER nobody closed (an error path between connect and the channel)
    used to keep ctx.term() waiting for ever (close_context: 5 s, then a thread stuck for
    the life of the process); close_context closes it, monitor first, and terminates."""
    import time

    from pobo.transport.sockets import DealerPipe

    context = new_context()
    pipe = DealerPipe.connect(context, "tcp://127.0.0.1:9")  # never closed (kept alive)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pobo.transport"):
        assert close_context(context, timeout=3.0) is True
    assert time.monotonic() - started < 2.0 and context.closed
    assert any("left open" in r.getMessage() for r in caplog.records)
    del pipe


async def test_a_dealer_send_that_cannot_queue_fails_instead_of_waiting_for_ever(ctx):
    """Nothing reads the DEALER's frames (no curator): once its queue is full a send
    used to wait for ever; it now raises PeerGone after the socket's send timeout."""
    from pobo.transport.sockets import DealerPipe

    pipe = DealerPipe.connect(ctx, "tcp://127.0.0.1:9", SocketOptions(hwm=1, send_timeout_ms=200))
    try:
        with pytest.raises(PeerGone, match="queue to it is full"):
            for _ in range(100):
                await asyncio.wait_for(pipe.send(b"x"), 5)
    finally:
        pipe.close()


async def test_a_pump_whose_receive_fails_at_once_still_lets_the_loop_run(ctx):
    """A receive that fails (any error, not only a ZMQError) must not make the hub's
    reader spin: it is paused for _POLL_MS, the other tasks run, aclose works, and the
    frames sent meanwhile are taken once the socket works again."""
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    real = hub._drain
    calls = []

    class Failing:  # the hub's socket, whose every receive raises
        def __getattr__(self, name):
            return getattr(real, name)

        def getsockopt(self, option):
            return zmq.POLLIN if option == zmq.EVENTS else real.getsockopt(option)

        def recv(self, *args, **kw):  # what the hub's reader receives a part with
            calls.append(1)
            raise RuntimeError("broken")

    hub._drain = Failing()
    sock = dealer(ctx, hub.endpoint)
    try:
        hub._ensure_pump()
        ticks = 0
        for _ in range(20):  # the loop keeps running: other tasks are served
            await asyncio.sleep(0.005)
            ticks += 1
        assert ticks == 20 and 1 <= len(calls) < 10, len(calls)
        assert hub.stats()["pump_errors"] == len(calls)
        hub._drain = real  # the socket works again: the next resume takes the frame
        await sock.send(b"later")
        pipe = await hub.accept(5)
        assert await pipe.recv(5) == b"later"
    finally:
        hub._drain = real
        sock.close(0)
        await asyncio.wait_for(hub.aclose(), 5)
