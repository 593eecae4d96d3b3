"""An in-process frame pipe, for simulations and sweeps: two deques and a waiter each."""
from __future__ import annotations

import asyncio
from collections import deque

from pobo.protocol.errors import PeerGone, PeerTimeout

_CLOSED = object()


class _Inbox:
    """Frames for one end, and the future its reader waits on (one reader at a time)."""

    __slots__ = ("frames", "waiter")

    def __init__(self) -> None:
        self.frames: deque = deque()
        self.waiter: asyncio.Future | None = None

    def put(self, item) -> None:
        self.frames.append(item)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class QueuePipe:
    """One end of an in-process pipe; frames still go through codec and policy."""

    def __init__(self, inbox: _Inbox, outbox: _Inbox) -> None:
        self._inbox, self._outbox = inbox, outbox
        self._closed = False

    async def send(self, frame: bytes) -> None:
        """Queue a frame for the other end."""
        if self._closed:
            raise PeerGone("pipe is closed")
        self._outbox.put(bytes(frame))

    async def recv(self, timeout: float) -> bytes:
        """The next frame from the other end, or PeerTimeout after `timeout` seconds
        (a timer only when the reader has to wait: in a simulation it rarely does)."""
        inbox = self._inbox
        if not inbox.frames:
            loop = asyncio.get_running_loop()
            waiter = inbox.waiter = loop.create_future()
            timer = loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                inbox.waiter = None
            if not inbox.frames:
                raise PeerTimeout(f"no frame from the peer within {timeout:g} s")
        frame = inbox.frames.popleft()
        if frame is _CLOSED:
            inbox.frames.appendleft(_CLOSED)
            raise PeerGone("the peer closed the pipe")
        return frame

    def close(self) -> None:
        """Tell the other end this side is gone."""
        if not self._closed:
            self._closed = True
            self._outbox.put(_CLOSED)


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def pipe_pair() -> tuple[QueuePipe, QueuePipe]:
    """Two connected pipe ends (curator's, modeler's)."""
    a, b = _Inbox(), _Inbox()
    return QueuePipe(a, b), QueuePipe(b, a)
