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
transcript flags it (tests/test_inproc_pipe.py).

For the same reason a Channel sending a query or a reward hands over, with its frame, the
message and envelope it sealed it from (`send_opened`; the message only when every field
is exactly its wire type, so that decoding the frame would give an equal message of the
same types: protocol.codec.exact_body). The receiving Channel takes them instead of
parsing the bytes back (a sweep's two frames a step, each ~4 us of parsing in a loop and
several times that between GP steps), and checks everything else as for any frame: the
size limit, the signature (in plaintext, before the message is used), the links, the
policy; the transcript records the frame itself. Both are frozen and hold only ints,
floats, strings and bytes, so neither side can change what the other holds."""
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

    def put(self, item, digest: bytes | None = None, opened: tuple | None = None) -> None:
        self.frames.append((item, digest, opened))
        self.wake()


class QueuePipe:
    """One end of an in-process pipe; frames still go through codec and policy."""

    queues_at_once = True  # a send queues its frame without ever waiting (Channel.send)

    def __init__(self, inbox: _Inbox, outbox: _Inbox) -> None:
        self._inbox, self._outbox = inbox, outbox
        self._closed = False
        # the SHA-256 of the frame `recv` returned last, as its sender handed it over (None:
        # sent without one), and the (message, envelope) the sender sealed it from, if it
        # handed them over (`send_opened`)
        self.sender_digest: bytes | None = None
        self.sender_opened: tuple | None = None

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

    async def send_opened(self, frame: bytes, digest: bytes, opened: tuple) -> None:
        """`send_sealed`, also handing over `opened`: the (message, envelope) the frame was
        sealed from, both immutable (a Query or Reward of exact field types, and its
        protocol.signing.Envelope), which the receiving Channel takes instead of parsing
        the same bytes back (see the module docstring)."""
        if self._closed:
            raise PeerGone("pipe is closed")
        if type(frame) is not bytes:  # a copy: no longer the bytes they were sealed in
            await self.send(frame)
            return
        self._outbox.put(frame, digest, opened)

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
        frame, self.sender_digest, self.sender_opened = inbox.frames.popleft()
        if frame is _CLOSED:
            inbox.frames.appendleft((_CLOSED, None, None))
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
