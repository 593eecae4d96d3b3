"""ZeroMQ frame pipes: the curator binds a ROUTER, each modeler connects a DEALER.

No pending recv is ever cancelled: a wait is a recv with a receive timeout (RCVTIMEO,
which fails the pending recv with EAGAIN before any message is taken) or a poll with a
deadline; a send is non-blocking, retried until a deadline. Sockets get
MAXMSGSIZE (a peer sending a larger frame is disconnected by libzmq), LINGER=0,
bounded high-water marks, ZeroMQ heartbeats, and ROUTER_MANDATORY so a reply to a
vanished peer raises instead of vanishing.

The hub holds bounded memory whatever peers send (`HubLimits`): a peer that was never
accepted may queue a few frames for a limited time, a bounded number of them may wait,
an accepted peer queues at most `hwm` frames; frames past a bound are dropped and
counted (`RouterHub.stats()`), never queued. Plaintext is refused on a non-loopback
endpoint unless asked for, and a modeler whose key the curator refuses is told so
(`AuthenticationFailed`) instead of timing out.
"""
from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import os
import secrets
import struct
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import zmq
import zmq.asyncio

from pobo.protocol.errors import (
    AuthenticationFailed, ErrorCode, HandshakeFailed, PeerGone, PeerTimeout, PoboError,
    ProtocolError,
)
from pobo.transport.security import (
    CURVE, PLAINTEXT, CurveClient, CurveServer, secure_client, secure_server,
)
from pobo.transport.wakeup import Wakeup

LOG = logging.getLogger("pobo.transport")

UNREACHED_EVERY = 10.0  # seconds between 'no curator listening yet' lines
_POLL_MS = 100  # the longest a receive waits before rechecking (monitor, sweep, close)
_COPY_BELOW = 1 << 16  # frames shorter than this are sent by copy (cheaper than zero-copy)
_BATCH = 256  # messages the pump takes per wake-up before yielding to other tasks
_SWEEP_S = 1.0  # how often the pump expires idle, never-accepted peers
_ERROR_COST = 64  # bytes charged for a queued ProtocolError (a malformed message)
_MAX_EVENTS = 1024  # monitor events read per check
_LOG_EVERY_S = 60.0  # at most one "refusing new peers" warning per minute
_SCHEMES = ("tcp", "ipc", "inproc")
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: an enum's & costs a call
_NOBLOCK, _SNDMORE = int(zmq.NOBLOCK), int(zmq.SNDMORE)
_LOOPBACK_NAMES = ("localhost", "lo", "lo0")
_HANDSHAKE_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)


def new_context() -> zmq.asyncio.Context:
    """An asyncio context whose sockets all default to LINGER=0, the ZAP handler's and
    the monitors' included: closing one never waits for a peer that is gone."""
    ctx = zmq.asyncio.Context()
    ctx.setsockopt(zmq.LINGER, 0)
    return ctx


def close_context(ctx: zmq.Context, timeout: float = 5.0) -> bool:
    """Terminate `ctx` within `timeout` s; False, with a warning, when libzmq has not
    finished by then (it can hang on a socket monitor's shutdown: libzmq #1279, #2083),
    so that the caller carries on instead of blocking its event loop for ever. The
    unfinished termination ends with the process.

    A socket of `ctx` still open (an error path that forgot one) would make the
    termination wait for ever: it is closed here first, with a warning, its monitor
    stopped before any socket closes. Call this from the thread that used the sockets."""
    _close_left_open(ctx)
    done = threading.Event()

    def term() -> None:
        ctx.term()
        done.set()

    threading.Thread(target=term, name="pobo-zmq-term", daemon=True).start()
    if done.wait(timeout):
        return True
    LOG.warning("the ZeroMQ context did not terminate within %g s; carrying on", timeout)
    return False


def _close_left_open(ctx: zmq.Context) -> None:
    """Close (LINGER=0) every socket of `ctx` not closed yet, monitors stopped first."""
    left = [sock for sock in list(getattr(ctx, "_sockets", None) or ()) if not sock.closed]
    if not left:
        return
    LOG.warning("closing %d ZeroMQ socket(s) left open before terminating their context",
                len(left))
    for sock in left:  # a monitor's PAIR closed before its socket's monitor stops can hang
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
    for sock in left:
        with contextlib.suppress(zmq.ZMQError):
            sock.close(linger=0)


class BindError(PoboError):
    """An endpoint the curator cannot bind (the port is in use, the address is not this
    machine's, no permission)."""


@dataclass(frozen=True)
class SocketOptions:
    """Socket limits; the curator accepts only small frames, the modeler large ones."""

    max_frame: int = 1 << 30
    hwm: int = 1000
    heartbeat_ivl_ms: int = 1000
    heartbeat_timeout_ms: int = 10_000
    send_timeout_ms: int = 10_000  # a send to a peer whose queue stays full fails after this

    def apply(self, sock: zmq.Socket) -> None:
        """Set these options on a socket before it binds or connects."""
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, self.send_timeout_ms)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame)
        sock.setsockopt(zmq.SNDHWM, self.hwm)
        sock.setsockopt(zmq.RCVHWM, self.hwm)
        sock.setsockopt(zmq.HEARTBEAT_IVL, self.heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, self.heartbeat_timeout_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, self.heartbeat_timeout_ms)


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


def _split(endpoint: str) -> tuple[str, str]:
    """(scheme, address) of a ZeroMQ endpoint, or ValueError naming what is wrong."""
    scheme, sep, address = endpoint.partition("://")
    if not sep or scheme not in _SCHEMES or not address:
        raise ValueError(f"invalid endpoint {endpoint!r}: expected tcp://HOST:PORT, "
                         "ipc://PATH or inproc://NAME")
    return scheme, address


def _host_port(endpoint: str, address: str) -> tuple[str, str]:
    """(host, port) of a tcp address; a connect address may name a source first (SRC;HOST:PORT)."""
    host, sep, port = address.rsplit(";", 1)[-1].rpartition(":")
    if not sep or not host:
        raise ValueError(f"invalid endpoint {endpoint!r}: a tcp endpoint needs HOST:PORT")
    return host, port


def needs_ipv6(endpoint: str) -> bool:
    """Whether a tcp `endpoint` names an IPv6 address ([::1], [fe80::1%eth0]): ZeroMQ binds
    and connects to one only on a socket with its IPV6 option set (without it, 'No such
    device'). Names and IPv4 addresses keep IPv4, as before (a name such as an interface
    could otherwise resolve to its IPv6 address)."""
    try:
        scheme, address = _split(endpoint)
        return scheme == "tcp" and _host_port(endpoint, address)[0].startswith("[")
    except ValueError:
        return False


def check_endpoint(endpoint: str, bind: bool = True) -> str:
    """`endpoint` if it is a valid ZeroMQ endpoint (scheme, and a tcp port 0..65535 or * to
    bind, 1..65535 to connect), else ValueError in one line."""
    scheme, address = _split(endpoint)
    if scheme == "tcp":
        _, port = _host_port(endpoint, address)
        low = 0 if bind else 1
        if not ((bind and port == "*") or (port.isdigit() and low <= int(port) <= 65535)):
            expected = "0..65535 or *" if bind else "1..65535"
            raise ValueError(f"invalid port {port!r} in {endpoint!r}: expected {expected}")
    return endpoint


def check_bindable(endpoint: str) -> None:
    """BindError (the message RouterHub.bind gives) if a tcp `endpoint` on an IP address
    (or *) cannot be bound now: its port in use, the address not this machine's. Checked
    by binding a plain socket and closing it, as ZeroMQ binds (SO_REUSEADDR), before the
    curator prepares its dataset: a start that cannot serve then commits nothing to the
    journal (its budget, the projection's charge). Port 0, an interface name and ipc
    are left to the bind itself."""
    import socket

    scheme, address = _split(check_endpoint(endpoint))
    if scheme != "tcp":
        return
    host, port = _host_port(endpoint, address)
    if not port.isdigit() or int(port) == 0:
        return
    host = host.strip("[]")
    host = "0.0.0.0" if host == "*" else host
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return  # a name: ZeroMQ resolves it (an interface, say)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
            sock.listen(1)
        except OSError as exc:
            raise BindError(f"cannot bind {endpoint}: {exc.strerror}") from None


def is_loopback(endpoint: str) -> bool:
    """Whether `endpoint` stays on this machine: ipc://, inproc://, tcp on 127.0.0.0/8,
    [::1], localhost or the lo interface. tcp://0.0.0.0, tcp://* and any other address
    (or an invalid endpoint) are not."""
    try:
        scheme, address = _split(endpoint)
        if scheme != "tcp":
            return True
        host, _ = _host_port(endpoint, address)
    except ValueError:
        return False
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a host or interface name other than localhost/lo: not known local
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _handshake_cause(event: int, value: int, curve: bool) -> str:
    """What a failed-handshake monitor event means, for a one-line error."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return ("the security handshake failed: one side uses CURVE and the other "
                    "plaintext (compare --curve-secret/--curve-server with the curator's setup)")
        if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
            return ("the CURVE handshake failed a cryptographic check "
                    "(is --curve-server the curator's public key?)")
        return f"the handshake failed with ZMTP protocol error 0x{value:08x}"
    hint = "; check that --curve-server is the curator's public key" if curve else ""
    return f"the handshake failed ({os.strerror(value) if value > 0 else 'no detail'}){hint}"


def _auth_message(endpoint: str, status: int, curve: bool) -> str:
    """The one-line message of an AuthenticationFailed for a ZAP status code."""
    what = "this modeler's CURVE key" if curve else "this modeler"
    if status == 400:
        return (f"the curator at {endpoint} refused {what} (ZAP status 400): its public key "
                "is not in the curator's allowlist (--curve-allow)")
    if status == 300:
        return f"the curator at {endpoint} temporarily refused {what} (ZAP status 300)"
    if status == 500:
        return (f"the curator at {endpoint} refused {what}: its authenticator failed "
                "(ZAP status 500)")
    return f"the curator at {endpoint} refused {what} (ZAP status {status})"


def _monitor(ctx: zmq.asyncio.Context, sock: zmq.Socket) -> zmq.asyncio.Socket:
    """A PAIR receiving `sock`'s handshake events, with no receive limit: libzmq blocks its
    I/O thread on a full monitor pipe, so the pipe must never fill (events are tiny and
    drained on every recv)."""
    address = f"inproc://pobo-monitor-{secrets.token_hex(8)}"
    sock.monitor(address, _HANDSHAKE_EVENTS)
    monitor = ctx.socket(zmq.PAIR)
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.setsockopt(zmq.RCVHWM, 0)
    monitor.connect(address)
    return monitor


class DealerPipe:
    """The modeler's end: a DEALER connected to the curator's ROUTER.

    A socket monitor reports the security handshake: a key the curator's ZAP handler
    refuses raises AuthenticationFailed at once, another handshake failure turns the
    recv deadline's PeerTimeout into a HandshakeFailed naming the cause.
    """

    cookie_round = True  # a networked curator admits a Hello only after a Retry (PROTOCOL.md 3.7)

    def __init__(self, sock: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket | None = None,
                 *, endpoint: str = "", curve: bool = False) -> None:
        self._sock, self._monitor = sock, monitor
        self.endpoint, self._curve = endpoint, curve
        # CURVE authenticates every frame as the curator's: a Channel may verify the
        # signatures of rewards off the hot path (protocol.channel.Channel)
        self.authenticated = curve
        self._failure: tuple[int, int] | None = None  # last failed handshake (event, value)
        self._shook = monitor is None  # a handshake succeeded and none failed since
        # when a listener first answered (a handshake, failed or not), time.monotonic();
        # until then a recv's timeout waits for one, up to `listen_wait` s from connecting
        self._reached_at: float | None = time.monotonic() if monitor is None else None
        self._connected_at = time.monotonic()
        self.listen_wait = 0.0  # seconds a recv waits for a listener before its timeout
        self._said = 0.0  # the last 'still waiting' line, in seconds since connecting
        # every operation goes through plain sockets sharing the asyncio ones' handles
        self._sync = zmq.Socket.shadow(sock.underlying)
        self._events = zmq.Socket.shadow(monitor.underlying) if monitor is not None else None
        # the waiting recv's wake-up: a reader on the socket's descriptor kept from the
        # first wait until close (on the loop of that wait), and a timer kept across
        # frames: no reader, timer or system call added and removed per frame
        self._wakeup = Wakeup()
        self._reader_loop: asyncio.AbstractEventLoop | None = None
        self._watched: list[int] = []  # the monitor's descriptor, while a recv waits on it
        self._closed = False

    @classmethod
    def connect(cls, ctx: zmq.asyncio.Context, endpoint: str,
                options: SocketOptions = SocketOptions(),
                curve: CurveClient | None = None) -> DealerPipe:
        """A pipe connected to `endpoint` (tcp://host:port or ipc://path), CURVE-encrypted
        to the curator's key when `curve` is given."""
        check_endpoint(endpoint, bind=False)
        if curve is None and not is_loopback(endpoint):
            LOG.warning("connecting to %s in plaintext: anyone on the network can read "
                        "and alter the session (use --curve-secret/--curve-server)", endpoint)
        sock = ctx.socket(zmq.DEALER)
        monitor = None
        try:
            options.apply(sock)
            if curve is not None:
                secure_client(sock, curve)
            monitor = _monitor(ctx, sock)
            if needs_ipv6(endpoint):
                sock.setsockopt(zmq.IPV6, 1)
            sock.connect(endpoint)
        except BaseException:
            _close_monitored(sock, monitor)
            raise
        return cls(sock, monitor, endpoint=endpoint, curve=curve is not None)

    async def send(self, frame: bytes) -> None:
        """Queue one frame for the curator. A frame that cannot be queued is retried
        (never awaited on the socket: a send with no timer waited for ever) until the
        socket's send timeout (SNDTIMEO), then PeerGone; as soon as the handshake is
        known to have failed, HandshakeFailed (or AuthenticationFailed) instead. After
        a protocol-level failure (plaintext against CURVE) libzmq may drop the DEALER's
        only pipe for good, so that nothing can be queued again (the CI hang of
        test_plaintext_client_is_refused_by_a_curve_curator: a Hello sent a little
        after that failure waited for ever)."""
        copy = len(frame) < _COPY_BELOW
        if self._try_send(frame, copy):
            return
        loop = asyncio.get_running_loop()
        timeout = self._sync.getsockopt(zmq.SNDTIMEO) / 1000
        deadline = loop.time() + (timeout if timeout >= 0 else math.inf)
        delay = 0.001
        while True:
            self._check_handshake()  # AuthenticationFailed
            if self._failure is not None:
                raise HandshakeFailed(f"cannot send to the curator at {self.endpoint}: "
                                      f"{_handshake_cause(*self._failure, self._curve)}")
            if loop.time() >= deadline:
                raise PeerGone(f"the curator read nothing for {timeout:g} s and the queue "
                               "to it is full (or it never connected)")
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(2 * delay, _POLL_MS / 1000)
            if self._try_send(frame, copy):
                return

    def _try_send(self, frame: bytes, copy: bool) -> bool:
        """Queue `frame` without waiting; False when it cannot be queued now. A send may
        take the socket's edge-triggered signal: a recv waiting meanwhile is woken if a
        message is in."""
        if self._closed:
            raise PeerGone("this pipe to the curator is closed")
        try:
            self._sync.send(frame, flags=zmq.NOBLOCK, copy=copy)
        except zmq.Again:  # no pipe (no connection yet, or none any more) or a full one
            return False
        except zmq.ZMQError as exc:
            raise PeerGone(f"cannot send to the curator: {exc}") from None
        finally:  # a send that failed may have taken the signal too
            self._wake_if_readable()
        return True

    def _wake_if_readable(self) -> None:
        """Wake a recv waiting meanwhile if a message is in (after a send, which may have
        taken the descriptor's edge-triggered signal of it)."""
        waiter = self._wakeup.waiter
        if waiter is not None and not waiter.done() and not self._closed:
            try:
                readable = _readable_now(self._sync)
            except zmq.ZMQError:
                return  # the socket failed: the waiting recv finds out at its next check
            if readable:
                waiter.set_result(None)

    async def recv(self, timeout: float) -> bytes:
        """The next single-frame message from the curator, within `timeout` seconds;
        AuthenticationFailed as soon as the curator refuses this side's key (until a
        handshake has succeeded the monitor wakes the wait; after it, within _POLL_MS:
        a refusal after a reconnect)."""
        loop = asyncio.get_running_loop()
        timeout = max(0.0, timeout)
        start = time.monotonic()
        check_at = -math.inf  # when the monitor is read next: on entry, at every wake until
        while True:  # a handshake has succeeded, and after it every _POLL_MS
            if self._closed:
                raise PeerGone("the pipe to the curator is closed")
            now = loop.time()
            if not self._shook or now >= check_at:
                self._check_handshake()
                check_at = now + _POLL_MS / 1000
            if _readable_now(self._sync):
                try:
                    return _single(_recv_parts(self._sync))
                except zmq.Again:
                    pass
            remaining = self._deadline(start, timeout) - time.monotonic()
            if remaining <= 0:  # read the last events, so the error names a cause;
                self._check_handshake()  # a stream of events never extends the deadline
                if self._reached_at is None and self.listen_wait > 0:
                    raise PeerTimeout(f"no curator listened at {self.endpoint} within "
                                      f"{self.listen_wait:.0f} s")
                raise self._timeout(timeout)
            if self._reader_loop is not loop:
                self._watch(loop)
            if not self._shook:  # the monitor too, until a handshake has succeeded
                self._watched.append(self._events.FD)
                loop.add_reader(self._watched[-1], self._wakeup.wake)
            try:
                await self._wakeup.wait(loop, now + min(remaining, _POLL_MS / 1000))
            finally:
                _unwatch(loop, self._watched)

    def _deadline(self, start: float, timeout: float) -> float:
        """The time.monotonic() deadline of a recv begun at `start` with `timeout`. A
        curator still preparing binds only when ready, so with `listen_wait` no peer
        timeout runs before a listener answers (a handshake, failed or not): the timeout
        counts from then, and until then the wait lasts up to `listen_wait` s from
        connecting, said every UNREACHED_EVERY s."""
        if self.listen_wait <= 0:
            return start + timeout
        if self._reached_at is not None:
            return max(start, self._reached_at) + timeout
        waited = time.monotonic() - self._connected_at
        if waited >= self._said + UNREACHED_EVERY:
            self._said = waited - waited % UNREACHED_EVERY
            LOG.warning("no curator listening at %s yet: still waiting (%.0f s of %.0f)",
                        self.endpoint, waited, self.listen_wait)
        return max(start + timeout, self._connected_at + self.listen_wait)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Keep a reader on the socket's descriptor on `loop` (moved from another loop's)."""
        self._unwatch_socket()
        loop.add_reader(self._sync.FD, self._signalled)
        self._reader_loop = loop

    def _unwatch_socket(self) -> None:
        """Remove the socket's reader (before the socket closes: a reader left on, or
        removed later from, its descriptor number would deafen the next socket given it)."""
        loop, self._reader_loop = self._reader_loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._sync.FD)

    def _signalled(self) -> None:
        """The descriptor signalled: wake the waiting recv, or with none waiting read
        ZMQ_EVENTS, which re-arms the edge-triggered descriptor (else the loop would call
        this at every turn until the next recv; that recv looks at the socket first)."""
        if self._wakeup.waiter is not None:
            self._wakeup.wake()
            return
        if not self._closed:
            try:
                _readable_now(self._sync)
            except zmq.ZMQError:
                pass  # the socket failed: the next recv finds out

    def _timeout(self, timeout: float) -> PeerTimeout:
        """The PeerTimeout of a recv that waited `timeout` s (HandshakeFailed with its
        cause when the last handshake failed)."""
        message = f"no message from the curator within {timeout:g} s"
        if self._failure is not None:
            return HandshakeFailed(f"{message}: {_handshake_cause(*self._failure, self._curve)}")
        return PeerTimeout(message)

    def _check_handshake(self) -> None:
        """Read the pending monitor events (up to _MAX_EVENTS); raise AuthenticationFailed
        if ZAP refused us."""
        events = self._events
        if events is None:
            return
        for _ in range(_MAX_EVENTS):  # bounded: a peer reconnecting non-stop can't pin us here
            if not events.getsockopt(_EVENTS) & _POLLIN:
                break
            try:
                parts = events.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(parts) != 2 or len(parts[0]) != 6:
                continue
            event, value = struct.unpack("=HI", parts[0])
            if self._reached_at is None and event & _HANDSHAKE_EVENTS:
                self._reached_at = time.monotonic()
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._failure, self._shook = None, True
            elif event & _HANDSHAKE_EVENTS:
                self._failure, self._shook = (event, value), False
                LOG.debug("handshake with %s failed: event %d value %d",
                          self.endpoint, event, value)
        if self._failure is not None and self._failure[0] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            status = self._failure[1]
            raise AuthenticationFailed(_auth_message(self.endpoint, status, self._curve), status)

    def close(self) -> None:
        """Close the socket at once (LINGER=0), after stopping its monitor; a recv waiting
        meanwhile ends with PeerGone. Its readers go first: a reader left on (or removed
        later from) a closed socket's descriptor number would deafen the next socket given
        that number (test_socket_readers)."""
        self._closed = True
        waiter = self._wakeup.waiter
        if waiter is not None:
            _unwatch(waiter.get_loop(), self._watched)
        self._unwatch_socket()
        self._wakeup.stop()
        _close_monitored(self._sock, self._monitor)


def _readable_now(sock: zmq.Socket) -> bool:
    """Whether a message can be received from `sock` now (reading ZMQ_EVENTS also re-arms
    its edge-triggered file descriptor)."""
    return bool(sock.getsockopt(_EVENTS) & _POLLIN)


def _unwatch(loop: asyncio.AbstractEventLoop, watched: list[int]) -> None:
    """Remove the readers on the descriptors in `watched`, and empty it."""
    while watched:
        loop.remove_reader(watched.pop())


def _single(parts: list[zmq.Frame]) -> bytes:
    """The frame of a message from the curator: its parts joined (a large frame the
    curator shares between sessions comes as parts, see RouterPipe.send_parts)."""
    return parts[0].bytes if len(parts) == 1 else b"".join(parts)


def _recv_parts(sock: zmq.Socket) -> list[zmq.Frame]:
    """The parts of the next message, without waiting (zmq.Again if none): what
    recv_multipart(NOBLOCK, copy=False) gives, each part telling whether more follow
    (Frame.more), so no RCVMORE getsockopt (and enum conversion) per part."""
    parts = [sock.recv(_NOBLOCK, copy=False)]
    while parts[-1].more:
        parts.append(sock.recv(_NOBLOCK, copy=False))
    return parts


def _send_parts(sock: zmq.Socket, parts: list[bytes], copy: bool) -> None:
    """Queue one message of `parts` without waiting: send_multipart(NOBLOCK) with plain
    int flags (an enum's | per part costs a call)."""
    last = len(parts) - 1
    for i, part in enumerate(parts):
        sock.send(part, _NOBLOCK | _SNDMORE if i < last else _NOBLOCK, copy=copy)


def _close_monitored(sock: zmq.Socket, monitor: zmq.Socket | None) -> None:
    """Stop `sock`'s monitor before closing its PAIR (else libzmq may block), then close both."""
    if monitor is not None:
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        monitor.close(linger=0)
    sock.close(linger=0)


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
