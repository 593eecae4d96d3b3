"""The cookie round (PROTOCOL.md 3.7): a curator admits a Hello only from a peer that reads.

A curator answers a Hello that carries no valid cookie with a Retry whose cookie is

    HMAC-SHA256(secret, "pobo cookie v1" || u64_be(bucket) || u32_be(len(peer)) || peer
                || nonce)

where `secret` is 32 random bytes drawn when the curator starts, `bucket` the curator's
clock in COOKIE_BUCKET-second steps, `peer` the peer's authenticated identity (its CURVE
key, `plaintext` without CURVE) and `nonce` the Hello's. Only a Hello with the same nonce,
echoing a cookie of the current or the previous bucket, goes on to the handshake and may
take a session slot; once admitted, its nonce is refused (`replay`) for longer than any
cookie is valid. The curator keeps nothing per Hello (as QUIC's
Retry, RFC 9000 8.1, and DTLS's HelloVerifyRequest, RFC 6347 4.2.1): a peer that never
reads costs it one HMAC and one small frame, and a restart (a new secret) voids every
cookie issued before it, so a captured Hello cannot be admitted by a restarted curator.
The modeler side is `cookie_round`: its first Hello is a probe, not part of the session's
transcript, and the Hello that opens the session echoes the cookie.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
import time
from dataclasses import dataclass, replace

from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ErrorCode, PeerError, ProtocolError
from pobo.protocol.messages import PROTOCOL_VERSION, Error, Hello, Retry
from pobo.protocol.signing import ZERO, Link, Signer, open_frame, seal, verify, verify_key

COOKIE_BUCKET = 30.0  # seconds per time bucket: a cookie is valid for 30 to 60 s
COOKIE_LIFETIME = 2 * COOKIE_BUCKET  # the longest any cookie is valid
_LABEL = b"pobo cookie v1"
_HEX = frozenset("0123456789abcdef")


def is_cookie(text: str) -> bool:
    """Whether `text` has a cookie's form: 64 lowercase hex digits."""
    return len(text) == 64 and set(text) <= _HEX


@dataclass(frozen=True)
class CookieJar:
    """A curator's cookie secret and clock (one per process; nothing per Hello)."""

    secret: bytes
    bucket: float = COOKIE_BUCKET

    @classmethod
    def fresh(cls) -> CookieJar:
        """A jar with a new 32-byte secret from the OS CSPRNG."""
        return cls(secrets.token_bytes(32))

    def _mac(self, peer: bytes, nonce: str, index: int) -> str:
        data = (_LABEL + struct.pack(">QI", index, len(peer)) + peer + nonce.encode())
        return hmac.new(self.secret, data, hashlib.sha256).hexdigest()

    def make(self, peer: bytes, nonce: str, now: float | None = None) -> str:
        """The cookie for a Hello with `nonce` on the connection `peer`, now."""
        now = time.monotonic() if now is None else now
        return self._mac(peer, nonce, int(now // self.bucket))

    def valid(self, cookie: str, peer: bytes, nonce: str, now: float | None = None) -> bool:
        """Whether `cookie` is one this jar made for (`peer`, `nonce`) in the current or
        the previous bucket (compared in constant time)."""
        if not (nonce and is_cookie(cookie)):
            return False
        now = time.monotonic() if now is None else now
        index = int(now // self.bucket)
        return any(hmac.compare_digest(cookie, self._mac(peer, nonce, i))
                   for i in (index, index - 1))


def screen(frame: bytes, jar: CookieJar, peer: bytes, signer: Signer | None,
           max_frame: int) -> bytes | None:
    """The Retry frame a curator answers a connection's first `frame` with, or None when
    the frame goes on to the handshake: a Hello of this version with a nonce and no
    valid cookie gets a Retry (in the Hello's framing, signed by `signer`); a Hello
    with a valid cookie, and anything else (refused typed by the handshake), go on."""
    try:
        envelope = open_frame(frame, max_frame)
        message = decode(envelope.body, max_frame)
    except ProtocolError:
        return None
    if (not isinstance(message, Hello) or message.version != PROTOCOL_VERSION
            or not (len(message.nonce) == 32 and set(message.nonce) <= _HEX)
            or jar.valid(message.cookie, peer, message.nonce)):
        return None
    body = encode(Retry(jar.make(peer, message.nonce)))
    if envelope.link is None:  # a bare Hello is answered bare (PROTOCOL.md 3.6)
        return body
    return seal(body, Link("", 0, ZERO, ZERO), signer)


async def cookie_round(channel, hello: Hello) -> Hello:
    """The modeler's side: send `hello` as a probe (sealed, signed, not recorded) on the
    channel's pipe and return it with the cookie of the curator's Retry, to be sent
    through the channel as the session's opening Hello. An Error answer raises
    PeerError (the probe changed nothing on the curator); a Retry or Error not signed
    by an expected curator key, or anything else, a typed ProtocolError."""
    probe = seal(encode(hello), Link(hello.resume, 0, ZERO, ZERO), channel.signer)
    await channel.pipe.send(probe)
    frame = await channel.pipe.recv(channel.timeout)
    envelope = open_frame(frame, channel.max_frame)
    message = decode(envelope.body, channel.max_frame)
    keys = channel.peer_keys
    if keys is not None and "" not in keys and not any(
            verify(envelope, verify_key(k)) for k in keys):
        raise ProtocolError(f"a {type(message).__name__} before the Welcome not signed by "
                            "the curator's key", ErrorCode.BAD_SIGNATURE)
    if isinstance(message, Error):
        raise PeerError(message.code, message.message)
    if not isinstance(message, Retry) or not is_cookie(message.cookie):
        raise ProtocolError(f"expected the curator's Retry to a first Hello, got "
                            f"{type(message).__name__}", ErrorCode.SEQUENCE)
    return replace(hello, cookie=message.cookie)
