"""ZeroMQ frame pipes: the curator binds a ROUTER, each modeler connects a DEALER.

All waits are poll-with-deadline (never a cancelled pending recv). Sockets get
MAXMSGSIZE (a peer sending a larger frame is disconnected by libzmq), LINGER=0,
bounded high-water marks, ZeroMQ heartbeats, and ROUTER_MANDATORY so a reply to a
vanished peer raises instead of vanishing.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import zmq
import zmq.asyncio

from protocol.errors import ErrorCode, PeerGone, PeerTimeout, ProtocolError
from transport.security import (
    CURVE, PLAINTEXT, CurveClient, CurveServer, secure_client, secure_server,
)

_POLL_MS = 100


@dataclass(frozen=True)
class SocketOptions:
    """Socket limits; the curator accepts only small frames, the modeler large ones."""

    max_frame: int = 1 << 30
    hwm: int = 1000
    heartbeat_ivl_ms: int = 1000
    heartbeat_timeout_ms: int = 10_000

    def apply(self, sock: zmq.Socket) -> None:
        """Set these options on a socket before it binds or connects."""
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame)
        sock.setsockopt(zmq.SNDHWM, self.hwm)
        sock.setsockopt(zmq.RCVHWM, self.hwm)
        sock.setsockopt(zmq.HEARTBEAT_IVL, self.heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, self.heartbeat_timeout_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, self.heartbeat_timeout_ms)


class DealerPipe:
    """The modeler's end: a DEALER connected to the curator's ROUTER."""

    def __init__(self, sock: zmq.asyncio.Socket) -> None:
        self._sock = sock

    @classmethod
    def connect(cls, ctx: zmq.asyncio.Context, endpoint: str,
                options: SocketOptions = SocketOptions(),
                curve: CurveClient | None = None) -> DealerPipe:
        """A pipe connected to `endpoint` (tcp://host:port or ipc://path), CURVE-encrypted
        to the curator's key when `curve` is given."""
        sock = ctx.socket(zmq.DEALER)
        options.apply(sock)
        if curve is not None:
            secure_client(sock, curve)
        sock.connect(endpoint)
        return cls(sock)

    async def send(self, frame: bytes) -> None:
        """Send one frame to the curator."""
        await self._sock.send(frame, copy=False)

    async def recv(self, timeout: float) -> bytes:
        """The next single-frame message from the curator, within `timeout` seconds."""
        if not await self._sock.poll(max(0, int(timeout * 1000)), zmq.POLLIN):
            raise PeerTimeout(f"no message from the curator within {timeout:g} s")
        parts = await self._sock.recv_multipart(flags=zmq.NOBLOCK, copy=True)
        if len(parts) != 1:
            raise ProtocolError(f"message of {len(parts)} frames, expected 1")
        return parts[0]

    def close(self) -> None:
        """Close the socket at once (LINGER=0)."""
        self._sock.close(linger=0)


class RouterHub:
    """The curator's bound ROUTER, demultiplexing frames into one pipe per peer."""

    def __init__(self, sock: zmq.asyncio.Socket, endpoint: str, security: str = PLAINTEXT) -> None:
        self._sock = sock
        self.endpoint = endpoint
        self.security = security
        self.peers: dict[bytes, str] = {}  # routing identity -> authenticated User-Id
        self._queues: dict[bytes, asyncio.Queue] = {}
        self._arrivals: asyncio.Queue[bytes] = asyncio.Queue()
        self._pump: asyncio.Task | None = None
        self._closed = False

    @classmethod
    def bind(cls, ctx: zmq.asyncio.Context, endpoint: str,
             options: SocketOptions = SocketOptions(max_frame=1 << 16),
             curve: CurveServer | None = None) -> RouterHub:
        """A hub bound to `endpoint`; port 0 or * picks a free port (see `.endpoint`).
        With `curve`, only peers whose keys the running authenticator admits get in."""
        sock = ctx.socket(zmq.ROUTER)
        options.apply(sock)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if curve is not None:
            secure_server(sock, curve)
        if endpoint.startswith("tcp://") and endpoint.endswith(":0"):
            endpoint = endpoint[:-2] + ":*"
        sock.bind(endpoint)
        return cls(sock, sock.getsockopt_string(zmq.LAST_ENDPOINT),
                   CURVE if curve is not None else PLAINTEXT)

    def _ensure_pump(self) -> None:
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run_pump())

    async def _run_pump(self) -> None:
        while not self._closed:
            if not await self._sock.poll(_POLL_MS, zmq.POLLIN):
                continue
            frames = await self._sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            identity, rest = frames[0].bytes, frames[1:]
            item: bytes | ProtocolError = rest[0].bytes if len(rest) == 1 else ProtocolError(
                f"message of {len(rest)} frames, expected 1", ErrorCode.MALFORMED)
            queue = self._queues.get(identity)
            if queue is None:
                queue = self._queues[identity] = asyncio.Queue()
                self.peers[identity] = _user_id(rest[-1]) if rest else ""
                self._arrivals.put_nowait(identity)
            queue.put_nowait(item)

    async def accept(self, timeout: float) -> RouterPipe:
        """A pipe to the next peer that sends a first message, within `timeout` s."""
        self._ensure_pump()
        try:
            identity = await asyncio.wait_for(self._arrivals.get(), timeout)
        except asyncio.TimeoutError:
            raise PeerTimeout(f"no modeler connected within {timeout:g} s") from None
        return RouterPipe(self, identity)

    async def _send(self, identity: bytes, frame: bytes) -> None:
        try:
            await self._sock.send_multipart([identity, frame], copy=False)
        except zmq.ZMQError as exc:
            raise PeerGone(f"cannot reach the modeler: {exc}") from None

    async def _recv(self, identity: bytes, timeout: float) -> bytes:
        try:
            item = await asyncio.wait_for(self._queues[identity].get(), timeout)
        except asyncio.TimeoutError:
            raise PeerTimeout(f"no message from the modeler within {timeout:g} s") from None
        if isinstance(item, ProtocolError):
            raise item
        return item

    def forget(self, identity: bytes) -> None:
        """Drop a finished peer's queue."""
        self._queues.pop(identity, None)

    async def aclose(self) -> None:
        """Stop the pump and close the socket."""
        self._closed = True
        if self._pump is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        self._sock.close(linger=0)


def _user_id(frame: zmq.Frame) -> str:
    """The User-Id ZAP attached to a frame ('' without authentication)."""
    try:
        return frame.get("User-Id") or ""
    except (zmq.ZMQError, AttributeError):
        return ""


class RouterPipe:
    """The curator's pipe to one modeler, routed by the peer's ZeroMQ identity."""

    def __init__(self, hub: RouterHub, identity: bytes) -> None:
        self._hub, self.identity = hub, identity

    @property
    def peer(self) -> str:
        """The authenticated peer (its z85 CURVE public key), or 'plaintext'."""
        return self._hub.peers.get(self.identity) or PLAINTEXT

    async def send(self, frame: bytes) -> None:
        """Send one frame to this modeler."""
        await self._hub._send(self.identity, frame)

    async def recv(self, timeout: float) -> bytes:
        """The next frame from this modeler, within `timeout` seconds."""
        return await self._hub._recv(self.identity, timeout)

    def close(self) -> None:
        """Forget this peer on the hub."""
        self._hub.forget(self.identity)
