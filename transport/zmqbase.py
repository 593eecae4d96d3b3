"""What both ZeroMQ ends share: the context, the socket options, non-blocking frame I/O.

A context's sockets default to LINGER=0 and its termination is bounded
(`close_context`); `SocketOptions` sets the limits a socket gets before it binds or
connects; `_recv_parts` and `_send_parts` move one message's parts without waiting.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass

import zmq
import zmq.asyncio

LOG = logging.getLogger("pobo.transport")

_POLL_MS = 100  # the longest a receive waits before rechecking (monitor, sweep, close)
_COPY_BELOW = 1 << 16  # frames shorter than this are sent by copy (cheaper than zero-copy)
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: an enum's & costs a call
_NOBLOCK, _SNDMORE = int(zmq.NOBLOCK), int(zmq.SNDMORE)


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
