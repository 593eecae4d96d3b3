"""An in-process frame pipe, for simulations and sweeps: two deques and a wake-up each
(transport.wakeup: no future, timer or event per frame that needs no wait).

Both ends live in one process and a frame is passed as the same immutable bytes object,
so a sender that has hashed its frame (a Channel hashes every envelope it sends) hands
the SHA-256 over with it (`send_sealed`), and the receiving end reports it
(`sender_digest`) instead of the receiving Channel hashing the same bytes again: a
sweep's Dataset frame is hashed once, not twice. A frame sent with plain `send` carries
none (None), as does a frame that is not bytes. The receiver trusts the digest as the frame's: both ends are one program. A
sender that handed over a wrong one would make the receiver acknowledge bytes it never
received; the sender's own channel refuses that receipt, and an audit of the receiver's
transcript flags it (tests/test_inproc_pipe.py)."""
from __future__ import annotations

import asyncio
from collections import deque

from pobo.protocol.errors import PeerGone, PeerTimeout
from pobo.transport.wakeup import Wakeup

_CLOSED = object()


class _Inbox(Wakeup):
    """Frames for one end, and the wake-up its reader waits on (one reader at a time)."""

    __slots__ = ("frames",)

    def __init__(self) -> None:
        super().__init__()
        self.frames: deque = deque()

    def put(self, item, digest: bytes | None = None) -> None:
        self.frames.append((item, digest))
        self.wake()


class QueuePipe:
    """One end of an in-process pipe; frames still go through codec and policy."""

    queues_at_once = True  # a send queues its frame without ever waiting (Channel.send)

    def __init__(self, inbox: _Inbox, outbox: _Inbox) -> None:
        self._inbox, self._outbox = inbox, outbox
        self._closed = False
        # the SHA-256 of the frame `recv` returned last, as its sender handed it over (None:
        # sent without one)
        self.sender_digest: bytes | None = None

    async def send(self, frame: bytes) -> None:
        """Queue a frame for the other end."""
        if self._closed:
            raise PeerGone("pipe is closed")
        self._outbox.put(bytes(frame))

    async def send_sealed(self, frame: bytes, digest: bytes) -> None:
        """Queue a frame with its SHA-256, which the other end's `sender_digest` reports
        when it receives it (the frame is passed as this very object: see the module
        docstring)."""
        if self._closed:
            raise PeerGone("pipe is closed")
        if type(frame) is not bytes:  # a copy: no longer the object hashed (the peer hashes it)
            frame, digest = bytes(frame), None
        self._outbox.put(frame, digest)

    async def recv(self, timeout: float) -> bytes:
        """The next frame from the other end, or PeerTimeout after `timeout` seconds
        (the inbox's kept timer: none is created per frame)."""
        inbox = self._inbox
        if not inbox.frames:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:  # waits at least once: a frame a ready task sends is seen, even at 0
                await inbox.wait(loop, deadline)
                if inbox.frames:
                    break
                if loop.time() >= deadline:
                    raise PeerTimeout(f"no frame from the peer within {timeout:g} s")
        frame, self.sender_digest = inbox.frames.popleft()
        if frame is _CLOSED:
            inbox.frames.appendleft((_CLOSED, None))
            raise PeerGone("the peer closed the pipe")
        return frame

    def close(self) -> None:
        """Tell the other end this side is gone (and drop this end's kept timer)."""
        if not self._closed:
            self._closed = True
            self._outbox.put(_CLOSED)
            self._inbox.stop()


def pipe_pair() -> tuple[QueuePipe, QueuePipe]:
    """Two connected pipe ends (curator's, modeler's)."""
    a, b = _Inbox(), _Inbox()
    return QueuePipe(a, b), QueuePipe(b, a)
