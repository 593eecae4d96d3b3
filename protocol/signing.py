"""Signed, cross-linked envelopes: what every frame of protocol version 2 is.

A frame is a msgpack map {"body": <the encoded message, exactly as `codec.encode` makes
it>, "link": {"session", "seq", "prev", "peer"}, "sig": <64 bytes, or b"" unsigned>}:

- `session`: the session id (a Hello: the id it resumes, '' for a new session);
- `seq`: the sender's transcript record number of this send (the record that holds it);
- `prev`: the SHA-256 of the sender's previous transcript record (32 zero bytes if none);
- `peer`: the SHA-256 of the last frame the sender received from the peer on this
  connection (zeros if none): a receipt for everything up to that frame.

`sig` is Ed25519 (libsodium, through PyNaCl: about twice as fast as OpenSSL through
`cryptography`, and the same bytes: Ed25519 signatures are deterministic, RFC 8032) over
DOMAIN + a fixed-layout encoding of
the link and the SHA-256 of the body, so one signature fixes the message and where it
stands in the sender's chain and in the conversation. A frame that is not such a map is
a bare message (protocol version 1 framing): a channel accepts it only in an unsigned
session, and answers it bare (so a version-1 peer can read its version_mismatch error).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import struct
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import msgpack
from nacl.bindings import crypto_sign, crypto_sign_seed_keypair
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from pobo.protocol.errors import ErrorCode, ProtocolError

DOMAIN = b"pobo-v2 signed frame\x00"
_ENVELOPE_KEYS = frozenset({"body", "link", "sig"})  # compared with a map's keys: no set per frame
_LINK_KEYS = frozenset({"session", "seq", "prev", "peer"})
ZERO = bytes(32)
SIGNED, UNSIGNED = "signed", "unsigned"


class Link(NamedTuple):
    """Where a frame stands: its session, the sender's record number and previous record
    hash, and the hash of the last frame the sender received. (Named tuples, this and
    Envelope: one of each is made per frame, at half a frozen dataclass's cost.)"""

    session: str
    seq: int
    prev: bytes
    peer: bytes


class Envelope(NamedTuple):
    """An opened frame: the message body, its link (None for a bare frame) and signature."""

    body: bytes
    link: Link | None
    sig: bytes

    @property
    def bare(self) -> bool:
        return self.link is None


def signed_bytes(body: bytes, link: Link, body_digest: bytes | None = None) -> bytes:
    """What the signature covers: the domain, the link and the body's SHA-256 (given as
    `body_digest` when already known)."""
    session = link.session.encode()
    return b"".join((DOMAIN, struct.pack(">I", len(session)), session,
                     struct.pack(">q", link.seq), link.prev, link.peer,
                     body_digest or hashlib.sha256(body).digest()))


def link_map(link: Link) -> dict:
    """The envelope's `link` map, in its wire order."""
    return {"session": link.session, "seq": link.seq, "prev": link.prev, "peer": link.peer}


def seal(body: bytes, link: Link, signer: "Signer | None") -> bytes:
    """The frame of `body` at `link`, signed by `signer` (empty sig without one)."""
    sig = signer.sign(signed_bytes(body, link)) if signer is not None else b""
    return msgpack.packb({"body": body, "link": link_map(link), "sig": sig}, use_bin_type=True)


@dataclass(frozen=True, eq=False)
class SharedBody:
    """A large body that every session sends (the curator's Dataset), prepared once: its
    SHA-256, and the envelope's bytes before the body and their running hash, so that
    sealing it for one more session (`seal`) hashes and packs only the link and the
    signature and never copies the body: the frame goes out as parts [head, body, tail]
    whose concatenation is exactly `seal(body, link, signer)` (same bytes, same
    signature), the body part the same object in every session. `stored` remembers the
    blob stores that already hold it (protocol.transcript.Transcript.append_shared).
    The body's own SHA-256 (`digest`) is computed when first needed (a signature or a
    blob store needs it; an unsigned in-process sweep run does not)."""

    body: bytes
    head: bytes
    prefix: object  # hashlib sha256 state after head + body
    stored: set = field(default_factory=set)

    @cached_property
    def digest(self) -> bytes:
        """The SHA-256 of the body (what a signature covers, what a blob is named by)."""
        return hashlib.sha256(self.body).digest()

    @classmethod
    def of(cls, body: bytes) -> "SharedBody":
        """Prepare `body` (the encoded message) for sealing in many sessions."""
        body = bytes(body)
        n = len(body)
        header = (b"\xc4" + struct.pack(">B", n) if n < 1 << 8 else
                  b"\xc5" + struct.pack(">H", n) if n < 1 << 16 else
                  b"\xc6" + struct.pack(">I", n))  # msgpack bin 8/16/32
        head = b"\x83" + msgpack.packb("body") + header  # a map of 3: body, link, sig
        prefix = hashlib.sha256(head)
        prefix.update(body)
        return cls(body, head, prefix)

    def seal(self, link: Link, signer: "Signer | None") -> tuple[list[bytes], bytes, bytes]:
        """(the frame's parts, the frame's SHA-256, the signature) at `link`."""
        sig = (signer.sign(signed_bytes(self.body, link, self.digest)) if signer is not None
               else b"")
        tail = b"".join(msgpack.packb(x, use_bin_type=True)
                        for x in ("link", link_map(link), "sig", sig))
        whole = self.prefix.copy()
        whole.update(tail)
        return [self.head, self.body, tail], whole.digest(), sig


def open_frame(frame: bytes, max_frame: int | None = None) -> Envelope:
    """The envelope in `frame` (a bare message frame comes back with link None); a
    ProtocolError for an envelope that is malformed."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    if max_frame is not None and len(frame) > max_frame:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds the limit of {max_frame}",
                            ErrorCode.OVERSIZED)
    try:  # only the outer map: the body stays bytes, decoded by the codec
        item = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_map_len=8,
                               max_array_len=0, max_str_len=1 << 16,
                               max_bin_len=max(len(frame), 1), max_ext_len=0)
    except Exception:
        return Envelope(frame, None, b"")  # not an envelope: the codec judges the bytes
    if not (isinstance(item, dict) and "body" in item):
        return Envelope(frame, None, b"")
    link, body, sig = item.get("link"), item.get("body"), item.get("sig", b"")
    if item.keys() != _ENVELOPE_KEYS or not isinstance(body, bytes) \
            or not isinstance(sig, bytes) or not isinstance(link, dict) \
            or link.keys() != _LINK_KEYS:
        raise ProtocolError("malformed envelope")
    session, seq, prev, peer = (link["session"], link["seq"], link["prev"], link["peer"])
    if not (isinstance(session, str) and type(seq) is int and 0 <= seq < 1 << 63
            and isinstance(prev, bytes)
            and len(prev) == 32 and isinstance(peer, bytes) and len(peer) == 32
            and len(sig) in (0, 64)):
        raise ProtocolError("malformed envelope link")
    return Envelope(body, Link(session, seq, prev, peer), sig)


def split_envelope(frame: bytes) -> tuple[bytes, dict, bytes] | None:
    """(body, link map, sig) of an envelope frame that `rebuild` gives back byte for byte
    (what a transcript stores apart: the body, large and shared, in its blob store), or
    None for any other frame."""
    try:
        item = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_map_len=8,
                               max_array_len=0, max_ext_len=0, max_bin_len=max(len(frame), 1))
    except Exception:
        return None
    if not (isinstance(item, dict) and list(item) == ["body", "link", "sig"]
            and isinstance(item["body"], bytes) and isinstance(item["link"], dict)
            and isinstance(item["sig"], bytes)):
        return None
    if rebuild(item["body"], item["link"], item["sig"]) != frame:
        return None
    return item["body"], item["link"], item["sig"]


def rebuild(body: bytes, link: dict, sig: bytes) -> bytes:
    """The envelope frame of a body, a link map and a signature (see split_envelope)."""
    return msgpack.packb({"body": body, "link": link, "sig": sig}, use_bin_type=True)


def body_of(frame: bytes) -> bytes:
    """The message bytes of a frame, enveloped or bare (no verification)."""
    return open_frame(frame).body


class Signer:
    """An Ed25519 signing key (libsodium): from its 32-byte seed, a PyNaCl SigningKey or
    a `cryptography` Ed25519PrivateKey (the same key, the same signatures)."""

    def __init__(self, key) -> None:
        if isinstance(key, (bytes, bytearray)):
            key = SigningKey(bytes(key))
        elif not isinstance(key, SigningKey):  # a cryptography Ed25519PrivateKey
            key = SigningKey(_raw_private(key))
        self.key = key
        self.public = key.verify_key
        self.public_hex = self.public.encode().hex()
        # libsodium's 64-byte secret key (seed + public key), for signing through the
        # binding itself: no SignedMessage and no copies of the data per signature
        self._secret = crypto_sign_seed_keypair(bytes(key))[1]

    @classmethod
    def generate(cls) -> "Signer":
        return cls(SigningKey.generate())

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `data` (what `self.key.sign(data).signature`
        is: libsodium's crypto_sign, whose output starts with the signature)."""
        return crypto_sign(data, self._secret)[:64]

    def secret_bytes(self) -> bytes:
        """The 32-byte seed: what a sign_secret file holds."""
        return bytes(self.key)


def _raw_private(key) -> bytes:
    """The 32 raw bytes of a `cryptography` Ed25519 private key."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def verify_key(public_hex: str) -> VerifyKey:
    """The Ed25519 public key of a 64-hex-digit string; ProtocolError if it is not one."""
    try:
        raw = bytes.fromhex(public_hex)
        if len(raw) != 32:
            raise ValueError
        return VerifyKey(raw)
    except (ValueError, TypeError):
        raise ProtocolError(f"{public_hex[:80]!r} is not an Ed25519 public key (64 hex digits)",
                            ErrorCode.WRONG_KEY) from None


def verify(envelope: Envelope, key: VerifyKey) -> bool:
    """Whether the envelope's signature is the key's over its body and link."""
    if envelope.link is None or len(envelope.sig) != 64:
        return False
    try:
        key.verify(signed_bytes(envelope.body, envelope.link), envelope.sig)
        return True
    except BadSignatureError:
        return False


def load_signing_key(path: str | Path) -> Signer:
    """A signing key from a file: 32 raw bytes, 64 hex digits, or PEM (PKCS#8). A public
    key file given instead (named *.sign_public, or holding the key of a *.sign_public
    file beside it) is refused: its 64 hex digits would pass for a seed that everyone
    holding the public file knows."""
    path = Path(path)
    if path.name.endswith(".sign_public"):
        raise ValueError(f"{path} is a public signing key, not a secret one: give the "
                         ".sign_secret file")
    data = path.read_bytes()
    text = data.strip()
    seed = data if len(data) == 32 else None
    if seed is None and len(text) == 64:
        with contextlib.suppress(ValueError):
            seed = bytes.fromhex(text.decode())
    if seed is not None:
        for public in path.parent.glob("*.sign_public"):  # a copy of one beside it
            key = None
            with contextlib.suppress(OSError, ValueError):
                key = bytes.fromhex(public.read_text().strip())
            if key == seed:
                raise ValueError(f"{path} holds the public key of {public}, not a secret "
                                 "one: give the .sign_secret file")
        check_private(path)
        return Signer(seed)
    from cryptography.hazmat.primitives import serialization  # PEM only: parsed by cryptography
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 secret key")
    check_private(path)
    return Signer(key)


class OpenKeyFile(ValueError):
    """A secret key file that others than its owner may read (or write)."""


def check_private(path: Path) -> None:
    """OpenKeyFile when group or others may read or write the secret key at `path`, as
    ssh refuses a private key with open permissions: anyone who can read it signs as
    this party, and its transcripts would prove nothing (`pobo keys` and the key store
    write 0600). Checked after a public key given instead is said to be one; not on
    platforms without POSIX modes."""
    if os.name != "posix":
        return
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        raise OpenKeyFile(f"secret signing key {path} may be read by others (mode "
                          f"{mode:04o}): refused, as ssh refuses such a key; chmod 600 "
                          f"{path}")


def load_verify_key(path: str | Path) -> str:
    """The hex Ed25519 public key in a sign_public file (checked)."""
    text = Path(path).read_text().strip()
    verify_key(text)
    return text


def load_allowed_keys(directory: str | Path) -> frozenset[str]:
    """The public signing keys in the *.sign_public files of a folder (an allowlist)."""
    keys = frozenset(load_verify_key(p) for p in sorted(Path(directory).glob("*.sign_public")))
    if not keys:
        raise ValueError(f"{directory} holds no *.sign_public key")
    return keys


def key_id(public_hex: str) -> str:
    """A short name for a public key in messages."""
    return public_hex[:16] + "..." if public_hex else "(none)"
