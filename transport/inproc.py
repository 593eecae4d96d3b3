"""An in-process frame pipe over asyncio queues, for simulations and sweeps."""
from __future__ import annotations

import asyncio

from pobo.protocol.errors import PeerGone, PeerTimeout

_CLOSED = object()


class QueuePipe:
    """One end of an in-process pipe; frames still go through codec and policy."""

    def __init__(self, inbox: asyncio.Queue, outbox: asyncio.Queue) -> None:
        self._inbox, self._outbox = inbox, outbox
        self._closed = False

    async def send(self, frame: bytes) -> None:
        """Queue a frame for the other end."""
        if self._closed:
            raise PeerGone("pipe is closed")
        await self._outbox.put(bytes(frame))

    async def recv(self, timeout: float) -> bytes:
        """The next frame from the other end, or PeerTimeout after `timeout` seconds."""
        if not self._inbox.empty():  # the common case in a simulation: no timer, no task
            frame = self._inbox.get_nowait()
        else:
            try:
                async with asyncio.timeout(timeout):  # a timer, not wait_for's extra future
                    frame = await self._inbox.get()
            except TimeoutError:
                raise PeerTimeout(f"no frame from the peer within {timeout:g} s") from None
        if frame is _CLOSED:
            self._inbox.put_nowait(_CLOSED)
            raise PeerGone("the peer closed the pipe")
        return frame

    def close(self) -> None:
        """Tell the other end this side is gone."""
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(_CLOSED)


def pipe_pair() -> tuple[QueuePipe, QueuePipe]:
    """Two connected pipe ends (curator's, modeler's)."""
    a, b = asyncio.Queue(), asyncio.Queue()
    return QueuePipe(a, b), QueuePipe(b, a)
