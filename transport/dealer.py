"""The modeler's end of a ZeroMQ pipe: a DEALER connected to the curator's ROUTER.

No pending recv is ever cancelled: a wait is a reader on the socket's descriptor with a
deadline; a send is non-blocking, retried until a deadline. A socket monitor reports
the security handshake, so that a modeler whose key the curator refuses is told so
(`AuthenticationFailed`) instead of timing out.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import struct
import time

import zmq
import zmq.asyncio

from pobo.protocol.errors import AuthenticationFailed, HandshakeFailed, PeerGone, PeerTimeout
from pobo.transport.endpoints import check_endpoint, is_loopback, needs_ipv6
from pobo.transport.security import CurveClient, secure_client
from pobo.transport.wakeup import Wakeup
from pobo.transport.zmqbase import (
    _COPY_BELOW, _EVENTS, _POLL_MS, _POLLIN, LOG, SocketOptions, _recv_parts,
)

UNREACHED_EVERY = 10.0  # seconds between 'no curator listening yet' lines
_MAX_EVENTS = 1024  # monitor events read per check
_HANDSHAKE_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)


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


def _close_monitored(sock: zmq.Socket, monitor: zmq.Socket | None) -> None:
    """Stop `sock`'s monitor before closing its PAIR (else libzmq may block), then close both."""
    if monitor is not None:
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        monitor.close(linger=0)
    sock.close(linger=0)
