"""The curator's end of the ZeroMQ pipes: a bound ROUTER hub and one pipe per modeler.

The hub holds bounded memory whatever peers send (`HubLimits`): a peer that was never
accepted may queue a few frames for a limited time, a bounded number of them may wait,
an accepted peer queues at most `hwm` frames; frames past a bound are dropped and
counted (`RouterHub.stats()`), never queued. ROUTER_MANDATORY makes a reply to a
vanished peer raise instead of vanishing; plaintext is refused on a non-loopback
endpoint unless asked for.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio

from pobo.protocol.errors import ErrorCode, PeerGone, PeerTimeout, ProtocolError
from pobo.transport.endpoints import BindError, check_endpoint, is_loopback, needs_ipv6
from pobo.transport.security import CURVE, PLAINTEXT, CurveServer, secure_server
from pobo.transport.wakeup import Wakeup
from pobo.transport.zmqbase import (
    _COPY_BELOW, _EVENTS, _POLL_MS, _POLLIN, LOG, SocketOptions, _recv_parts, _send_parts,
)

_BATCH = 256  # messages the pump takes per wake-up before yielding to other tasks
_SWEEP_S = 1.0  # how often the pump expires idle, never-accepted peers
_ERROR_COST = 64  # bytes charged for a queued ProtocolError (a malformed message)
_LOG_EVERY_S = 60.0  # at most one "refusing new peers" warning per minute


@dataclass(frozen=True)
class HubLimits:
    """What peers can make a RouterHub hold; past any bound a frame is dropped and counted.

    An accepted peer queues at most `SocketOptions.hwm` frames and `peer_bytes` bytes (one
    frame always fits an empty queue). A peer not yet accepted queues at most
    `pending_frames` frames and `pending_peer_bytes` bytes, all such peers together at most
    `pending_bytes`; at most `max_pending` of them wait (a new identity past either bound
    is refused, never queued), and one whose last queued frame is `pending_ttl` seconds
    old is dropped (it may arrive again). The last `remember_forgotten` identities whose
    pipe was closed stay closed: a late frame from one is dropped, so one connection
    carries at most one session. `send_timeout` bounds a reply to a peer that stops reading.
    Worst case held: pending_bytes + accepted peers x peer_bytes (plus libzmq's own buffers).
    """

    max_pending: int = 1024
    pending_ttl: float = 30.0
    pending_frames: int = 16
    pending_peer_bytes: int = 64 << 10
    pending_bytes: int = 16 << 20
    peer_bytes: int = 1 << 20
    remember_forgotten: int = 4096
    send_timeout: float = 10.0
    peer_sndbuf: int = 256 << 10  # the kernel's send buffer per peer connection (SO_SNDBUF)


class _Peer(Wakeup):
    """One routing identity's queue of frames (or ProtocolErrors) and its bookkeeping; a
    recv waiting for a frame waits on it (transport.wakeup: no timer or event per frame)."""

    __slots__ = ("user_id", "frames", "bytes", "accepted", "last_seen", "warned",
                 "foreign_warned")

    def __init__(self, user_id: str, now: float) -> None:
        super().__init__()
        self.user_id = user_id
        self.frames: deque[tuple[bytes | ProtocolError, int]] = deque()
        self.bytes = 0
        self.accepted = False
        self.last_seen = now
        self.warned = self.foreign_warned = False


class RouterHub:
    """The curator's bound ROUTER, demultiplexing frames into one bounded pipe per peer."""

    def __init__(self, sock: zmq.asyncio.Socket, endpoint: str, security: str = PLAINTEXT,
                 *, hwm: int = SocketOptions().hwm, limits: HubLimits = HubLimits()) -> None:
        self._sock = sock
        # every operation goes through a plain socket sharing the asyncio one's handle: a
        # reader on its descriptor takes the frames, no future or timer per frame
        self._drain = zmq.Socket.shadow(sock.underlying)
        self.endpoint = endpoint
        self.security = security
        self.limits = limits
        self._hwm = max(1, hwm)
        self.peers: dict[bytes, str] = {}  # live routing identity -> authenticated User-Id
        self._peers: dict[bytes, _Peer] = {}
        self._pending: OrderedDict[bytes, None] = OrderedDict()  # not yet accepted, oldest first
        self._pending_bytes = 0
        self._forgotten: OrderedDict[bytes, None] = OrderedDict()
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        self._arrived = asyncio.Event()
        self._counts = {"dropped_frames": 0, "refused_peers": 0, "expired_peers": 0,
                        "late_frames": 0, "pump_errors": 0, "foreign_frames": 0,
                        "screened": 0}
        self._last_refusal_log = float("-inf")
        self._pump: asyncio.AbstractEventLoop | None = None  # the loop reading, once started
        self._sweeper: asyncio.TimerHandle | None = None
        self._paused: asyncio.TimerHandle | None = None
        self._recheck = False  # a read is scheduled for after a send
        self._closed = False
        # the first frame of a new peer, and its User-Id -> a reply to send at once, the
        # peer then forgotten as if it had never come (a curator's Retry: PROTOCOL.md
        # 3.7), or None: the frame is queued and the peer waits to be accepted
        self.screen: Callable[[bytes, str], bytes | None] | None = None

    @classmethod
    def bind(cls, ctx: zmq.asyncio.Context, endpoint: str,
             options: SocketOptions = SocketOptions(max_frame=1 << 16),
             curve: CurveServer | None = None, *, insecure: bool = False,
             limits: HubLimits = HubLimits()) -> RouterHub:
        """A hub bound to `endpoint`; port 0 or * picks a free port (see `.endpoint`).
        With `curve`, only peers whose keys the running authenticator admits get in;
        without it, a non-loopback endpoint needs `insecure` (ValueError otherwise)."""
        check_endpoint(endpoint, bind=True)
        if curve is None and not is_loopback(endpoint):
            if not insecure:
                raise ValueError(f"binding {endpoint} in plaintext exposes the session to the "
                                 "network: use CURVE keys (--curve-secret/--curve-allow) "
                                 "or pass --insecure")
            LOG.warning("binding %s in plaintext (--insecure): anyone on the network can "
                        "read and alter the sessions", endpoint)
        sock = ctx.socket(zmq.ROUTER)
        try:
            options.apply(sock)
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
            # a kernel send buffer of its own size per peer: a peer that never reads holds
            # at most this much of the Dataset in the kernel, not megabytes each
            sock.setsockopt(zmq.SNDBUF, limits.peer_sndbuf)
            if curve is not None:
                secure_server(sock, curve)
            if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
                endpoint = endpoint[:-2] + ":*"
            if needs_ipv6(endpoint):
                sock.setsockopt(zmq.IPV6, 1)
            try:
                sock.bind(endpoint)
            except zmq.ZMQError as exc:  # in use, no such interface, no permission
                raise BindError(f"cannot bind {endpoint}: {exc.strerror}") from None
            bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            sock.close(linger=0)
            raise
        return cls(sock, bound, CURVE if curve is not None else PLAINTEXT,
                   hwm=options.hwm, limits=limits)

    def stats(self) -> dict[str, int]:
        """Counters and current sizes, for an operator or a benchmark to print."""
        queued = [len(p.frames) for p in self._peers.values()]
        return {"peers": len(self._peers), "pending": len(self._pending),
                "accepted": len(self._peers) - len(self._pending),
                "queued_frames": sum(queued), "max_peer_frames": max(queued, default=0),
                "queued_bytes": sum(p.bytes for p in self._peers.values()),
                "pending_bytes": self._pending_bytes, **self._counts}

    def _ensure_pump(self) -> None:
        """Start taking frames: a reader on the socket's file descriptor, which is
        edge-triggered (it signals a change of ZMQ_EVENTS, not a message: every wake-up
        reads until ZMQ_EVENTS says nothing more is in, and so re-arms it), and a timer
        that expires idle, never-accepted peers."""
        if self._pump is not None or self._closed:
            return
        loop = self._pump = asyncio.get_running_loop()
        loop.add_reader(self._drain.FD, self._readable)
        self._sweeper = loop.call_later(_SWEEP_S, self._sweep)
        loop.call_soon(self._readable)  # what arrived before the reader was added

    def _readable(self) -> None:
        """Take the messages the socket holds, up to a batch (the rest on the next loop
        turn, so that the sessions run in between); never raise. A socket that fails is
        left alone for _POLL_MS (never spin on it), counted and logged."""
        loop, sock = self._pump, self._drain
        self._recheck = False
        if self._closed or loop is None or self._paused is not None:
            return
        try:
            now = loop.time()
            for _ in range(_BATCH):
                if not sock.getsockopt(_EVENTS) & _POLLIN:
                    return
                self._take_one(_recv_parts(sock), now)
            loop.call_soon(self._readable)  # a full batch: let the sessions run first
        except zmq.Again:
            return
        except Exception as exc:  # a ZMQError or anything else: pause, never spin
            if self._closed:
                return
            self._pump_error(exc)
            loop.remove_reader(sock.FD)
            self._paused = loop.call_later(_POLL_MS / 1000, self._resume)

    def _resume(self) -> None:
        """Read again after a pause that followed a failing receive."""
        self._paused = None
        if not self._closed and self._pump is not None:
            self._pump.add_reader(self._drain.FD, self._readable)
            self._readable()

    def _sweep(self) -> None:
        """Expire idle pending peers, and come back in _SWEEP_S."""
        if self._closed or self._pump is None:
            return
        self._expire(self._pump.time())
        self._sweeper = self._pump.call_later(_SWEEP_S, self._sweep)

    def _take_one(self, frames: list[zmq.Frame], now: float) -> None:
        """`_take`, counting (never raising) what goes wrong: one bad message never stops
        the pump."""
        try:
            self._take(frames, now)
        except Exception as exc:
            self._pump_error(exc)

    def _pump_error(self, exc: BaseException) -> None:
        """Count an unexpected pump failure; log the first and then every power of two."""
        self._counts["pump_errors"] += 1
        n = self._counts["pump_errors"]
        if n & (n - 1) == 0:
            LOG.error("frame pump error #%d (the hub carries on): %r", n, exc)

    def _take(self, frames: list[zmq.Frame], now: float) -> None:
        """Queue one received message for its peer, or drop and count it."""
        identity, rest = frames[0].bytes, frames[1:]
        size = len(rest[0]) if len(rest) == 1 else _ERROR_COST
        peer = self._peers.get(identity)
        if peer is None and self._screened(identity, rest):
            return
        if peer is None:
            peer = self._arrive(identity, rest, size, now)
            if peer is None:
                self._counts["dropped_frames"] += 1
                return
        elif self.security == CURVE and rest and _user_id(rest[-1]) != peer.user_id:
            self._foreign(peer, identity, rest[-1])  # another key under this routing id
            return
        if not self._fits(peer, size):
            self._drop(peer, identity)
            return
        item: bytes | ProtocolError = (rest[0].bytes if len(rest) == 1 else ProtocolError(
            f"message of {len(rest)} frames, expected 1", ErrorCode.MALFORMED))
        peer.frames.append((item, size))
        peer.bytes += size
        if not peer.accepted:
            self._pending_bytes += size
        peer.last_seen = now
        peer.wake()

    def _screened(self, identity: bytes, rest: list[zmq.Frame]) -> bool:
        """Whether `screen` answered a new peer's first frame (sent at once if its queue
        has room, else dropped: that peer is not reading); nothing of the peer is kept,
        no task runs, and no waiting slot is taken, however many such peers come."""
        if self.screen is None or len(rest) != 1 or identity in self._forgotten:
            return False
        reply = self.screen(rest[0].bytes, _user_id(rest[-1]))
        if reply is None:
            return False
        self._counts["screened"] += 1
        try:
            self._try_send([identity, reply], True)
        except PeerGone:
            pass  # gone already: nothing to answer
        return True

    def _arrive(self, identity: bytes, rest: list[zmq.Frame], size: int,
                now: float) -> _Peer | None:
        """A new pending peer for a first message of `size` bytes, or None when it must
        not be queued (a closed identity, or no room for one more waiting peer)."""
        if identity in self._forgotten:
            self._counts["late_frames"] += 1
            return None
        limits = self.limits
        if (len(self._pending) >= limits.max_pending
                or self._pending_bytes + size > limits.pending_bytes):
            if identity not in self._refused:
                self._counts["refused_peers"] += 1
                self._refused[identity] = None
                while len(self._refused) > limits.remember_forgotten:
                    self._refused.popitem(last=False)
            if now - self._last_refusal_log >= _LOG_EVERY_S:
                self._last_refusal_log = now
                LOG.warning("%d peers holding %d bytes wait to be accepted (limits: %d peers, "
                            "%d bytes): refusing new peers (%d refused so far)",
                            len(self._pending), self._pending_bytes, limits.max_pending,
                            limits.pending_bytes, self._counts["refused_peers"])
            return None
        self._refused.pop(identity, None)
        peer = _Peer(_user_id(rest[-1]) if rest else "", now)
        self._peers[identity] = peer
        self.peers[identity] = peer.user_id
        self._pending[identity] = None
        self._arrived.set()
        return peer

    def _foreign(self, peer: _Peer, identity: bytes, frame: zmq.Frame) -> None:
        """Drop and count a frame that comes under a peer's routing identity from another
        CURVE key (a client may choose its routing id: after the peer's connection
        dropped, another allowed key could otherwise speak in its session, which its
        pipe, `authenticated`, lets verify signatures late); warn once per peer."""
        self._counts["foreign_frames"] += 1
        if not peer.foreign_warned:
            peer.foreign_warned = True
            LOG.warning("peer %s (%s): a frame from another key (%s) under its routing id "
                        "was dropped", identity.hex(), peer.user_id, _user_id(frame))

    def _fits(self, peer: _Peer, size: int) -> bool:
        """Whether one more frame of `size` bytes stays within this peer's bounds."""
        if peer.accepted:
            return not peer.frames or (len(peer.frames) < self._hwm
                                       and peer.bytes + size <= self.limits.peer_bytes)
        return (len(peer.frames) < self.limits.pending_frames
                and peer.bytes + size <= self.limits.pending_peer_bytes
                and self._pending_bytes + size <= self.limits.pending_bytes)

    def _drop(self, peer: _Peer, identity: bytes) -> None:
        """Count a frame dropped past a bound; warn once per accepted peer."""
        self._counts["dropped_frames"] += 1
        if peer.accepted and not peer.warned:
            peer.warned = True
            LOG.warning("peer %s (%s) is not being read: dropping its frames past %d queued",
                        identity.hex(), peer.user_id or PLAINTEXT, len(peer.frames))

    def _expire(self, now: float) -> None:
        """Drop pending peers idle for longer than `pending_ttl` (they may arrive again)."""
        ttl = self.limits.pending_ttl
        for identity in [i for i in self._pending if now - self._peers[i].last_seen >= ttl]:
            peer = self._remove(identity)
            if peer is not None:
                self._counts["expired_peers"] += 1
                self._counts["dropped_frames"] += len(peer.frames)

    def _remove(self, identity: bytes) -> _Peer | None:
        """Drop a peer and its queue; wake any task waiting on it."""
        peer = self._peers.pop(identity, None)
        self.peers.pop(identity, None)
        if peer is not None:
            if identity in self._pending:
                del self._pending[identity]
                self._pending_bytes -= peer.bytes
            peer.stop()
        return peer

    async def accept(self, timeout: float) -> RouterPipe:
        """A pipe to the next peer that sends a first message, within `timeout` s."""
        self._ensure_pump()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self._pending:
            self._arrived.clear()
            if self._closed:
                raise PeerGone("the hub is closed")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise PeerTimeout(f"no modeler connected within {timeout:g} s")
            await _wait(self._arrived, remaining)
        return self._accept_one()

    def accept_ready(self) -> list[RouterPipe]:
        """Pipes to every peer waiting now, at once (a burst of new peers leaves the
        waiting slots free for the next, rather than one accepted per loop turn)."""
        return [self._accept_one() for _ in range(len(self._pending))]

    def _accept_one(self) -> RouterPipe:
        """Accept the oldest waiting peer."""
        identity, _ = self._pending.popitem(last=False)
        peer = self._peers[identity]
        peer.accepted = True
        self._pending_bytes -= peer.bytes
        return RouterPipe(self, identity, peer.user_id)

    async def _send(self, identity: bytes, frame: bytes | list[bytes]) -> None:
        """Send to one peer (one frame, or its parts), retrying a full queue until
        `send_timeout` (then PeerGone)."""
        parts = frame if isinstance(frame, list) else [frame]
        copy = sum(map(len, parts)) < _COPY_BELOW
        if self._try_send([identity, *parts], copy):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.send_timeout
        delay = 0.001
        while True:
            if loop.time() >= deadline:
                raise PeerGone(f"the modeler read nothing for {self.limits.send_timeout:g} s "
                               "and its queue is full") from None
            await asyncio.sleep(delay)
            delay = min(2 * delay, 0.05)
            if self._try_send([identity, *parts], copy):
                return

    def _try_send(self, message: list[bytes], copy: bool) -> bool:
        """Queue one message without waiting; False when the peer's queue is full,
        PeerGone when it cannot be reached. A send, even one that fails, may take the
        descriptor's edge-triggered signal (libzmq processes the socket's commands
        first): the socket is read again on the next turn, after the frame has left
        (reading ZMQ_EVENTS right after a send costs several us)."""
        try:
            _send_parts(self._drain, message, copy)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            raise PeerGone(f"cannot reach the modeler: {exc}") from None
        finally:  # a failed send too: it processed the socket's commands first
            if self._pump is not None and not self._recheck and not self._closed:
                self._recheck = True
                self._pump.call_soon(self._readable)
        return True

    async def _recv(self, identity: bytes, timeout: float) -> bytes:
        """The next frame queued for `identity`, within `timeout` s."""
        peer = self._peers.get(identity)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while peer is None or not peer.frames:
            if peer is None or self._peers.get(identity) is not peer or self._closed:
                raise PeerGone("this modeler's pipe is closed")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise PeerTimeout(f"no message from the modeler within {timeout:g} s")
            await peer.wait(loop, deadline)
        item, size = peer.frames.popleft()
        peer.bytes -= size
        if isinstance(item, ProtocolError):
            raise item
        return item

    def forget(self, identity: bytes) -> None:
        """Drop a finished peer's queue and remember its identity (bounded), so a late frame
        from it is dropped rather than starting a new arrival: one connection, one session."""
        self._remove(identity)
        self._forgotten.pop(identity, None)
        self._forgotten[identity] = None
        while len(self._forgotten) > self.limits.remember_forgotten:
            self._forgotten.popitem(last=False)

    async def aclose(self) -> None:
        """Stop reading, wake every waiter and close the socket (at once: nothing is
        awaited, so a cancelled caller cannot leave the socket open); idempotent."""
        if self._sock.closed:
            return
        self._closed = True
        self._arrived.set()
        for peer in self._peers.values():
            peer.stop()
        for timer in (self._sweeper, self._paused):
            if timer is not None:
                timer.cancel()
        if self._pump is not None and not self._pump.is_closed():
            self._pump.remove_reader(self._drain.FD)
        self._sock.close(linger=0)


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Wait until `event` is set or `timeout` s pass (the caller checks which): a timer
    sets the event, so no task is created and nothing is cancelled."""
    timer = asyncio.get_running_loop().call_later(timeout, event.set)
    try:
        await event.wait()
    finally:
        timer.cancel()


def _user_id(frame: zmq.Frame) -> str:
    """The User-Id ZAP attached to a frame ('' without authentication)."""
    try:
        return frame.get("User-Id") or ""
    except (zmq.ZMQError, AttributeError):
        return ""


class RouterPipe:
    """The curator's pipe to one modeler, routed by the peer's ZeroMQ identity."""

    def __init__(self, hub: RouterHub, identity: bytes, peer: str = "") -> None:
        self._hub, self.identity, self._peer = hub, identity, peer

    @property
    def authenticated(self) -> bool:
        """Whether CURVE authenticates every frame as this peer's (protocol.channel.Channel
        then verifies the signatures of queries off the hot path)."""
        return self._hub.security == CURVE

    @property
    def peer(self) -> str:
        """The authenticated peer (its z85 CURVE public key), or 'plaintext'."""
        return self._peer or self._hub.peers.get(self.identity) or PLAINTEXT

    def send(self, frame: bytes) -> Awaitable[None]:
        """Send one frame to this modeler (the hub's coroutine itself: no layer per frame)."""
        return self._hub._send(self.identity, frame)

    def send_parts(self, parts: list[bytes]) -> Awaitable[None]:
        """Send one frame given as parts (ZeroMQ message parts the modeler joins): a part
        shared by many sessions (the Dataset's body) is queued by reference, never copied,
        however many peers have not read it yet."""
        return self._hub._send(self.identity, parts)

    def recv(self, timeout: float) -> Awaitable[bytes]:
        """The next frame from this modeler, within `timeout` seconds (one reader at a
        time: a session's Channel)."""
        return self._hub._recv(self.identity, timeout)

    def close(self) -> None:
        """Forget this peer on the hub."""
        self._hub.forget(self.identity)
