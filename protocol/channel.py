"""The channel seam a party is handed: typed messages in, typed messages out.

A `Channel` wraps a `FramePipe` (ZeroMQ, or in-process queues: the transport
decides) and passes every message through the boundary policy and the codec, and
records every frame in the transcript: a frame it refuses (undecodable, or refused by the
policy) as its digest, size and error only, and past the transcript's cap not even that
(it is counted, and so is the Error that answers it). Party code cannot tell which pipe
it has.
"""
from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable
from typing import Protocol

from pobo.protocol.chunks import MAX_BODY_BYTES, ChunkedDataset, is_chunk_frame, receive_body
from pobo.protocol.codec import DEFAULT_MAX_FRAME, decode, encode
from pobo.protocol.errors import ChunkError, ErrorCode, ProtocolError
from pobo.protocol.messages import (
    Dataset, End, Error, Hello, Message, Pending, Query, Reward, Welcome, kind_of,
)
from pobo.protocol.signing import (
    SIGNED, UNSIGNED, ZERO, Link, SharedBody, Signer, key_id, link_map, open_frame, seal,
    verify, verify_key,
)
from pobo.protocol.policy import CURATOR, Boundary
from pobo.protocol.transcript import Transcript


def before_handshake(message: Message, role: str) -> ProtocolError:
    """The refusal of a message other than the opening one on a connection: to the curator,
    `session_lost` (this connection has no session: a new one, or one the modeler's
    DEALER re-opened after the curator dropped it; resume the session), naming the query;
    to the modeler, `sequence`."""
    seq = getattr(message, "seq", 0) if isinstance(message, Query) else 0
    if role == CURATOR:
        return ProtocolError(f"a {kind_of(message)} on a connection with no session (resume "
                             "the session with a Hello)", ErrorCode.SESSION_LOST, seq)
    return ProtocolError(f"a {kind_of(message)} before the peer's handshake",
                         ErrorCode.SEQUENCE, seq)


class FramePipe(Protocol):
    """A bidirectional, message-framed byte pipe to one peer."""

    async def send(self, frame: bytes) -> None:
        """Queue one frame for the peer."""

    async def recv(self, timeout: float) -> bytes:
        """The next frame from the peer; raises PeerTimeout after `timeout` seconds."""

    def close(self) -> None:
        """Release the pipe's resources; idempotent."""


# what a channel whose pipe authenticated the peer (CURVE) may verify after acting on it:
# the per-round-trip messages; a handshake, an End, an Error or a release is verified first
HOT = (Query, Reward, Pending)


class LateSignature(ProtocolError):
    """A frame accepted on an authenticated pipe whose signature, checked after it was
    acted on, does not verify: the session cannot go on (the frame is in the transcript,
    followed by a refused record naming it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.BAD_SIGNATURE)

    @property
    def recoverable(self) -> bool:
        return False


class Channel:
    """Policy-checked, signed, transcribed message exchange with one peer.

    Every frame sent is a `protocol.signing` envelope: the encoded message, its link
    (session, this side's transcript position, the hash of the last frame received) and,
    with a `signer`, an Ed25519 signature over both. Every frame received is opened, its
    signature checked with the key the peer announced in its Hello or Welcome (which must
    be in `peer_keys` when that is given: '' = unsigned is then refused too) and its links
    checked (the session; a receipt only for a frame this side sent, never going back)
    BEFORE the policy sees it; a frame that fails is refused with a typed ProtocolError
    (bad_signature, wrong_key) and recorded as refused.

    Where the pipe has authenticated the peer (`pipe.authenticated`: CURVE, whose every
    frame libsodium has already authenticated as the peer's), a Query, Reward or Pending
    is acted on first and its signature checked at the next `recv` before it waits (off
    the round trip's critical path: while the peer works), or at `close`; one that fails
    raises LateSignature (not recoverable: the session ends) and is recorded as refused
    after it. Without an authenticated pipe every frame is verified before it is acted
    on: a curator verifies a query before f is evaluated, a modeler a reward before it
    uses it. A peer whose first frame is bare (no envelope: version-1 framing) is
    answered bare, and only if it need not sign. A Dataset whose Z is larger than
    `chunk_bytes` (default protocol.chunks.CHUNK_BYTES) goes out in chunk frames after
    it, and one received so is reassembled (up to `max_body` bytes) before the policy
    sees it (protocol.chunks).
    """

    def __init__(self, pipe: FramePipe, boundary: Boundary,
                 transcript: Transcript | None = None, *,
                 max_frame: int = DEFAULT_MAX_FRAME, timeout: float = 30.0,
                 signer: Signer | None = None, peer_keys: frozenset[str] | None = None,
                 chunk_bytes: int | None = None, max_body: int = MAX_BODY_BYTES) -> None:
        self.pipe = pipe
        self.chunk_bytes, self.max_body = chunk_bytes, max_body
        self.boundary = boundary
        self.transcript = transcript
        self.max_frame = max_frame
        self.timeout = timeout
        self.signer = signer
        self.peer_keys = peer_keys  # None: any key the peer announces (or none)
        self.peer_key: str | None = None  # the key the peer announced (None: not yet)
        self._peer_vk = None
        self.session_id = ""
        self.bare: bool | None = None  # the peer's framing, from its first frame accepted
        self._last_bare = False  # the framing of the last frame received (refused or not)
        self.last_frame: bytes | None = None
        self.answered = False  # whether an Error has been sent on this channel
        self._counted_refusal = False  # the last frame refused was only counted
        self._sent: dict[bytes, int] = {}  # SHA-256 of each frame sent -> its order
        self._acked = -1  # the latest frame sent that the peer acknowledged
        self._peer_seq = -1  # the peer's record number in its last frame
        self._last_recv = ZERO  # SHA-256 of the last frame accepted from the peer
        self._sends = 0
        # frames accepted before their signatures were checked (an authenticated pipe only)
        self.late = bool(getattr(pipe, "authenticated", False))
        self._unverified: list[tuple[bytes, object]] = []
        # why a frame acted on was found forged (LateSignature), once it was: the session
        # cannot go on, so every later recv raises it again, and every send but an Error
        # or an End that gives up (one saying "done" would vouch for the forged frame)
        self.late_failure: str | None = None
        self._sending = asyncio.Lock()  # one frame at a time: links and transcript in order
        # a pipe whose send queues the frame at once, never waiting (transport.inproc):
        # a send that finds no other under way needs no lock
        self._at_once = bool(getattr(pipe, "queues_at_once", False))
        self._waiting = 0  # sends waiting for the lock (first come, first served)
        # the send of an envelope frame and its SHA-256: handed over with it where the pipe
        # takes it (transport.inproc: the peer's Channel then need not hash the same bytes
        # again), else the pipe's plain send
        sealed = getattr(pipe, "send_sealed", None)
        self._send_envelope = sealed if sealed is not None else (
            lambda frame, digest: pipe.send(frame))

    @property
    def sign_key(self) -> str:
        """This side's public signing key (hex), '' when it signs nothing."""
        return self.signer.public_hex if self.signer is not None else ""

    @property
    def signatures(self) -> str:
        """'signed' when both sides sign their frames, else 'unsigned'."""
        return SIGNED if self.signer is not None and self.peer_key and not self.bare \
            else UNSIGNED

    def settle(self, boundary: Boundary, transcript: Transcript | None) -> None:
        """Adopt the session's boundary and transcript once the opening message has
        decided which session this is (a resumed one, say), recording that message."""
        self.boundary = boundary
        self.transcript = transcript
        if transcript is not None and self.last_frame is not None:
            body = open_frame(self.last_frame).body
            transcript.append("recv", kind_of(decode(body, self.max_frame)), self.last_frame)

    async def send(self, message: Message, shared: SharedBody | None = None) -> None:
        """Check `message` against the policy, encode, seal, record and send it (several
        tasks may send on one channel: their frames go out one at a time, in order).
        `shared`: `message` already encoded once for every session (SharedBody.of(
        encode(message))): sealed and recorded without copying or hashing the body again,
        and sent as parts the pipe may pass on without a copy (`send_parts`); for a
        Dataset, a ChunkedDataset (protocol.chunks) too. An End, whatever its reason, is
        never sent over frames not yet verified: they are checked first (LateSignature),
        so that a session closed early still learns of a bad one."""
        if self.late_failure is not None or self._unverified and isinstance(message, End):
            self._check_late(message)
        sending = self._sending
        if self._at_once and shared is None and type(message) is not Dataset \
                and not self._waiting and not sending.locked():
            # the pipe queues a frame without waiting (transport.inproc) and no send is
            # under way or waiting: nothing can come between this frame's sealing and its
            # queueing, and no earlier send is overtaken
            await self._send(message)
            return
        self._waiting += 1
        try:
            await sending.acquire()  # (not `async with`: two coroutine layers less per frame)
        finally:
            self._waiting -= 1
        try:
            if self.late_failure is not None or self._unverified and isinstance(message, End):
                self._check_late(message)  # again: a receive may have found one meanwhile
            if type(message) is Dataset and not isinstance(shared, SharedBody):
                await self._send_dataset(message, shared)
            elif shared is not None and self.bare is not True and not (
                    self.bare is None and self._last_bare):
                await self._send_shared(message, shared)
            else:
                await self._send(message)
        finally:
            sending.release()

    def _check_late(self, message: Message) -> None:
        """LateSignature unless `message` may go out now: after a frame acted on was found
        forged only an Error or an End that gives up may (one saying "done" would vouch
        for it), and an End first checks the frames not yet verified."""
        if self.late_failure is not None and not (
                type(message) is Error or type(message) is End and message.reason != "done"):
            raise LateSignature(self.late_failure)
        if self._unverified and isinstance(message, End):
            self.verify_accepted()

    async def _send_dataset(self, message: Dataset, chunked: ChunkedDataset | None) -> None:
        """A Dataset: in one frame when its Z fits one chunk, else its head then its chunk
        frames, nothing in between (the send lock is held), the body recorded once."""
        if chunked is None:
            chunked = ChunkedDataset.of(message, self.chunk_bytes)
            if chunked is None:
                await self._send(message)
                return
        if self.bare if self.bare is not None else self._last_bare:
            raise ProtocolError("a dataset in chunks needs envelopes: this peer speaks bare "
                                "frames", ErrorCode.POLICY)
        await self._send_shared(message, chunked.head, chunked.body)
        send_parts = getattr(self.pipe, "send_parts", None)
        for parts in chunked.frames():
            if send_parts is not None:
                await send_parts(parts)
            else:
                await self.pipe.send(b"".join(parts))
            await asyncio.sleep(0)  # an in-process receiver takes each chunk before the next

    def _send_shared(self, message: Message, shared: SharedBody,
                     body=None) -> Awaitable[None]:
        """Check, seal and record `message` (its body `shared`); the pipe's send of it
        (to await: a plain function, one coroutine layer less per frame)."""
        self.boundary.outgoing(message)
        seq, prev = (self.transcript.position if self.transcript is not None
                     else (self._sends, ZERO))
        link = Link(self.session_id, seq, prev, self._last_recv)
        parts, digest, sig = shared.seal(link, self.signer)
        if self.transcript is not None:
            self.transcript.append_shared("sent", kind_of(message), shared, link_map(link),
                                          sig, digest, body)
        self._counted_refusal = False
        self._sent[digest] = self._sends
        self._sends += 1
        send_parts = getattr(self.pipe, "send_parts", None)
        if send_parts is not None:
            return send_parts(parts)
        return self._send_envelope(b"".join(parts), digest)

    def _send(self, message: Message) -> Awaitable[None]:
        """Check, encode, seal and record `message`; the pipe's send of its frame (to
        await: a plain function, one coroutine layer less per frame)."""
        self.boundary.outgoing(message)
        body = encode(message)
        kind = kind_of(message)
        if isinstance(message, Hello):
            self.session_id = message.resume
        elif isinstance(message, Welcome):
            self.session_id = message.session
        if self.bare if self.bare is not None else self._last_bare:
            frame = body  # a peer that spoke bare frames gets bare answers
        else:
            seq, prev = (self.transcript.position if self.transcript is not None
                         else (self._sends, ZERO))
            frame = seal(body, Link(self.session_id, seq, prev, self._last_recv), self.signer)
        self.answered = self.answered or kind == "error"
        if self.transcript is not None:
            if self._counted_refusal and kind == "error":  # the reply to a counted refusal
                self.transcript.count_reply(frame)
            else:
                self.transcript.append("sent", kind, frame)
        self._counted_refusal = False
        if frame is body:  # bare: nothing acknowledges it
            self._sends += 1
            return self.pipe.send(frame)
        digest = hashlib.sha256(frame).digest()  # an envelope: the peer may acknowledge it
        self._sent[digest] = self._sends
        self._sends += 1
        return self._send_envelope(frame, digest)

    async def recv(self, timeout: float | None = None) -> Message:
        """The next message from the peer: opened, verified, decoded and admitted by the
        policy."""
        if self._unverified or self.late_failure is not None:
            self.verify_accepted()
        frame = await self.pipe.recv(self.timeout if timeout is None else timeout)
        # its SHA-256 as its sender computed it, from a pipe that passes the very bytes
        # object within one process (transport.inproc); None: hashed here when accepted
        digest = getattr(self.pipe, "sender_digest", None)
        self.last_frame = frame
        self._counted_refusal = False
        body = None
        try:
            message, accepted = self._open(frame)
            if type(message) is Dataset and message.rows:  # its Z follows in chunk frames
                message, body = await receive_body(self.pipe.recv, message, self.timeout,
                                                   self.boundary.incoming_head,
                                                   self.max_body)
            self.boundary.incoming(message)  # refuses without changing the boundary's state
        except ProtocolError as exc:
            if self.transcript is not None:
                self._counted_refusal = not self.transcript.refuse(frame, exc.code.value,
                                                                   str(exc))
            raise
        self._accept(frame, digest, *accepted)
        if self.transcript is not None:
            self.transcript.append("recv", kind_of(message), frame, body)
        return message

    def _open(self, frame: bytes):
        """(the message in `frame`, what `_accept` commits when it is accepted: the
        arguments after the frame); ProtocolError if the frame is malformed, unsigned where
        it must be signed, badly signed or badly linked. Nothing changes before that."""
        self._last_bare = True  # until the frame is known to be an envelope
        envelope = open_frame(frame, self.max_frame)
        self._last_bare = is_bare = envelope.link is None  # (Envelope.bare, without a call)
        bare = self.bare if self.bare is not None else is_bare
        if is_bare:
            if is_chunk_frame(frame):
                raise ChunkError("a dataset chunk frame outside a dataset body",
                                 ErrorCode.SEQUENCE)
            message = decode(envelope.body, self.max_frame)
            if isinstance(message, Hello) and message.version not in self.boundary.versions:
                self.boundary.incoming(message)  # the typed version_mismatch, answered bare
            if self.peer_keys is not None or self.peer_key or self.bare is False:
                raise ProtocolError("an unsigned bare frame where every frame must be a "
                                    "signed envelope", ErrorCode.BAD_SIGNATURE)
            handshake = self._handshake_key(message)
            if handshake is not None and handshake[0]:
                raise ProtocolError("a bare frame announcing a signing key",
                                    ErrorCode.BAD_SIGNATURE)
            return message, (envelope, bare, handshake, self._acked, False)
        if self.bare:
            raise ProtocolError("an envelope from a peer that spoke bare frames",
                                ErrorCode.BAD_SIGNATURE)
        link = envelope.link
        assert link is not None
        message = None
        if self._peer_vk is not None and self.late:
            message = decode(envelope.body, self.max_frame)
        late = message is not None and isinstance(message, HOT)
        if self._peer_vk is not None and not late and not verify(envelope, self._peer_vk):
            raise ProtocolError(f"bad signature on a frame claiming record {link.seq} of "
                                f"the peer", ErrorCode.BAD_SIGNATURE)
        if message is None:
            message = decode(envelope.body, self.max_frame)
        handshake = self._handshake_key(message) if self.peer_key is None else None
        session = self.session_id
        if handshake is not None:
            announced, session, vk = handshake
            if vk is not None and not verify(envelope, vk):
                raise ProtocolError("bad signature on the handshake for the key it announces",
                                    ErrorCode.BAD_SIGNATURE)
        elif self.peer_key is None and not isinstance(message, Error):
            raise before_handshake(message, self.boundary.role)
        elif self.peer_key is None and self.peer_keys is not None and "" not in self.peer_keys \
                and not any(verify(envelope, verify_key(k)) for k in self.peer_keys):
            # an Error before the handshake from a peer whose key this side knows already
            raise ProtocolError("an Error before the handshake not signed by an expected "
                                "key", ErrorCode.BAD_SIGNATURE)
        # an Error from a peer connection with no session: a refusal before any session
        # was settled, or the curator's session_lost (its link counts from 0 again)
        sessionless = isinstance(message, Error) and link.session == "" and (
            self.peer_key is None or message.code == ErrorCode.SESSION_LOST.value)
        if link.session != session and not sessionless:
            raise ProtocolError(f"the frame is linked to session {link.session[:40]!r}, this "
                                f"is {session[:40]!r}", ErrorCode.BAD_SIGNATURE)
        if link.seq < self._peer_seq and not sessionless:
            raise ProtocolError(f"the peer's record number went back from {self._peer_seq} "
                                f"to {link.seq}", ErrorCode.BAD_SIGNATURE)
        acked = self._acked
        if link.peer != ZERO:
            acked = self._sent.get(link.peer, -2)
            if acked == -2:
                raise ProtocolError("the frame acknowledges a frame this side never sent",
                                    ErrorCode.BAD_SIGNATURE)
            if acked < self._acked:
                raise ProtocolError("the frame acknowledges an older frame than the peer "
                                    "did before", ErrorCode.BAD_SIGNATURE)
        elif self._acked >= 0 and not sessionless:  # a session-less link accepted nothing
            raise ProtocolError("the frame acknowledges nothing after the peer acknowledged "
                                "a frame", ErrorCode.BAD_SIGNATURE)
        return message, (envelope, False, handshake, acked, late)

    def _accept(self, frame: bytes, known: bytes | None, envelope, bare: bool, handshake,
                acked: int, late: bool) -> None:
        """Commit what accepting `frame` (its SHA-256 `known`, if the pipe gave it) changes, as
        `_open` checked it (a method, not a closure made per frame)."""
        if envelope.link is None:  # bare
            self.bare = bare
            if handshake is not None:
                self.peer_key = ""
            return
        self.bare = False
        if acked > self._acked:  # frames before the one acknowledged can never be again
            for digest in [d for d, i in self._sent.items() if i < acked]:
                del self._sent[digest]
        self._acked = acked
        self._peer_seq = max(self._peer_seq, envelope.link.seq)
        self._last_recv = known or hashlib.sha256(frame).digest()
        if late:
            self._unverified.append((frame, envelope))
        if handshake is not None:
            self.peer_key, self.session_id, self._peer_vk = handshake

    def _handshake_key(self, message: Message):
        """For the peer's Hello or Welcome (the first one on this channel): (the key it
        announces, the session it names, its verify key or None); WRONG_KEY for a key
        other than the expected one. None for any other message."""
        if self.peer_key is not None or not isinstance(message, (Hello, Welcome)):
            return None
        announced = message.sign_key
        if self.peer_keys is not None and announced not in self.peer_keys:
            raise ProtocolError(f"the peer signs with key {key_id(announced)}, not one this "
                                "side expects", ErrorCode.WRONG_KEY)
        session = message.resume if isinstance(message, Hello) else message.session
        return announced, session, verify_key(announced) if announced else None

    def verify_accepted(self) -> None:
        """Check the signatures of the frames accepted before they were verified (an
        authenticated pipe's hot messages); LateSignature for the first that fails,
        recorded in the transcript as refused after the frame itself, and again at every
        later call (the session cannot go on: a review found a retried query answered
        and the session recorded ok after one)."""
        if self.late_failure is not None:
            raise LateSignature(self.late_failure)
        pending, self._unverified = self._unverified, []
        for frame, envelope in pending:
            if not verify(envelope, self._peer_vk):
                why = (f"bad signature on record {envelope.link.seq} of the peer, found after "
                       "it was accepted (an authenticated pipe verifies off the hot path)")
                if self.transcript is not None:
                    self.transcript.refuse(frame, ErrorCode.BAD_SIGNATURE.value, why,
                                           always=True)
                self.late_failure = why
                raise LateSignature(why)

    def close(self) -> None:
        """Check what is still unverified (a failure is recorded), close the pipe and the
        transcript."""
        try:
            self.verify_accepted()
        except LateSignature:
            pass  # recorded in the transcript; the session is over either way
        self.pipe.close()
        if self.transcript is not None:
            self.transcript.close()
