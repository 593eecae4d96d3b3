"""The channel seam a party is handed: typed messages in, typed messages out.

A `Channel` wraps a `FramePipe` (ZeroMQ, or in-process queues: the transport
decides) and passes every message through the boundary policy and the codec, and
records every frame in the transcript: a frame it refuses (undecodable, or refused by the
policy) as its digest, size and error only, and past the transcript's cap not even that
(it is counted, and so is the Error that answers it). Party code cannot tell which pipe
it has.
"""
from __future__ import annotations

from typing import Protocol

from protocol.codec import DEFAULT_MAX_FRAME, decode, encode
from protocol.errors import ProtocolError
from protocol.messages import Message, kind_of
from protocol.policy import Boundary
from protocol.transcript import Transcript


class FramePipe(Protocol):
    """A bidirectional, message-framed byte pipe to one peer."""

    async def send(self, frame: bytes) -> None:
        """Queue one frame for the peer."""

    async def recv(self, timeout: float) -> bytes:
        """The next frame from the peer; raises PeerTimeout after `timeout` seconds."""

    def close(self) -> None:
        """Release the pipe's resources; idempotent."""


class Channel:
    """Policy-checked, transcribed message exchange with one peer."""

    def __init__(self, pipe: FramePipe, boundary: Boundary,
                 transcript: Transcript | None = None, *,
                 max_frame: int = DEFAULT_MAX_FRAME, timeout: float = 30.0) -> None:
        self.pipe = pipe
        self.boundary = boundary
        self.transcript = transcript
        self.max_frame = max_frame
        self.timeout = timeout
        self.last_frame: bytes | None = None
        self.answered = False  # whether an Error has been sent on this channel
        self._counted_refusal = False  # the last frame refused was only counted

    def settle(self, boundary: Boundary, transcript: Transcript | None) -> None:
        """Adopt the session's boundary and transcript once the opening message has
        decided which session this is (a resumed one, say), recording that message."""
        self.boundary = boundary
        self.transcript = transcript
        if transcript is not None and self.last_frame is not None:
            transcript.append("recv", kind_of(decode(self.last_frame, self.max_frame)),
                              self.last_frame)

    async def send(self, message: Message) -> None:
        """Check `message` against the policy, encode, record and send it."""
        self.boundary.outgoing(message)
        frame = encode(message)
        kind = kind_of(message)
        self.answered = self.answered or kind == "error"
        if self.transcript is not None:
            if self._counted_refusal and kind == "error":  # the reply to a counted refusal
                self.transcript.count_reply(frame)
            else:
                self.transcript.append("sent", kind, frame)
        self._counted_refusal = False
        await self.pipe.send(frame)

    async def recv(self, timeout: float | None = None) -> Message:
        """The next message from the peer, decoded and admitted by the policy."""
        frame = await self.pipe.recv(self.timeout if timeout is None else timeout)
        self.last_frame = frame
        self._counted_refusal = False
        try:
            message = decode(frame, self.max_frame)
            self.boundary.incoming(message)  # refuses without changing the boundary's state
        except ProtocolError as exc:
            if self.transcript is not None:
                self._counted_refusal = not self.transcript.refuse(frame, exc.code.value,
                                                                   str(exc))
            raise
        if self.transcript is not None:
            self.transcript.append("recv", kind_of(message), frame)
        return message

    def close(self) -> None:
        """Close the pipe and the transcript."""
        self.pipe.close()
        if self.transcript is not None:
            self.transcript.close()
