"""A Dataset larger than one chunk: Z travels in chunk frames after the Dataset frame.

PROTOCOL.md section 5.1 (protocol version 5). The Dataset frame -- an envelope, signed
and recorded like any other -- carries the release with Z as an empty (0, r) array and
announces the body: `rows`, `chunk_rows` and `digest`, the SHA-256 of Z's bytes (rows x
r elements, little-endian, C order). Right after it, with nothing in between, the
sender sends ceil(rows / chunk_rows) chunk frames in order: chunk i is the msgpack map
{"chunk": i, "data": bin} (keys in that order) whose data are the bytes of rows
[i chunk_rows, min((i + 1) chunk_rows, rows)). A chunk frame is no envelope: the signed
digest fixes every byte of the body, so one signature covers it all.

The sender prepares this once for every session (`ChunkedDataset.of`: the head encoded
once, the digest computed once, each chunk a view of Z: nothing is copied, whatever
the number of sessions). The receiver (`Reassembly`) preallocates Z once from the
head, copies each chunk into its place as it comes and hashes it on the way, then
checks the digest and that the floats are finite. Every departure is a one-line
`ChunkError`: a head announcing more than MAX_CHUNK_BYTES a chunk or more than the
receiver's body limit (`oversized`, before anything is allocated); a chunk frame
larger than its chunk can be (`oversized`, not even unpacked), holding more bytes than
its rows (`oversized`) or fewer (`malformed`), out of order or past a missing one
(`sequence`), a message where a chunk was due (`sequence`), a chunk frame outside a
body (`sequence`), and a body that does not hash to its digest (`malformed`).

In a transcript the body is recorded once, by digest (protocol.transcript, `body` of
the Dataset's record): `with_body` reads it back for an audit or a resume.
"""
from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from pobo.protocol.codec import encode
from pobo.protocol.errors import ChunkError, ChunksStopped, ErrorCode, PeerTimeout
from pobo.protocol.messages import Dataset
from pobo.protocol.signing import SharedBody
from pobo.protocol.transcript import Body, Record, TranscriptError, read_hashing

CHUNK_BYTES = 1 << 24  # pobo sends a Z of more bytes than this in chunks of at most this many
MAX_CHUNK_BYTES = 1 << 26  # a receiver refuses a head announcing larger chunks
MAX_BODY_BYTES = 1 << 36  # a receiver's default limit on a whole body (allocated at once)
CHUNK_PREFIX = b"\x82\xa5chunk"  # every chunk frame starts so: a map of 2, key "chunk"
_OVERHEAD = len(CHUNK_PREFIX) + 9 + 5 + 5  # the index (<= 9 bytes), "data", a bin32 header
_DATA_KEY = msgpack.packb("data")
_FINITE_BLOCK = 1 << 22  # elements per block of the finiteness check


def is_chunk_frame(frame: bytes) -> bool:
    """Whether `frame` has the layout of a chunk frame (its first bytes)."""
    return bytes(frame[:len(CHUNK_PREFIX)]) == CHUNK_PREFIX


def chunk_header(index: int, size: int) -> bytes:
    """The bytes of chunk frame `index` before its `size` data bytes: the frame is
    exactly msgpack.packb({"chunk": index, "data": data})."""
    return (CHUNK_PREFIX + msgpack.packb(index) + _DATA_KEY
            + (b"\xc4" + struct.pack(">B", size) if size < 1 << 8 else
               b"\xc5" + struct.pack(">H", size) if size < 1 << 16 else
               b"\xc6" + struct.pack(">I", size)))


@dataclass(frozen=True, eq=False)
class ChunkedDataset:
    """A Dataset prepared once for sending in chunks to any number of sessions: `message`
    the head (Z empty, the body announced), `head` its encoding, `body` Z's bytes (a view,
    never copied) with their SHA-256, and the chunk size in rows."""

    message: Dataset
    head: SharedBody
    body: Body
    chunk_rows: int
    row_bytes: int

    @classmethod
    def of(cls, message: Dataset, chunk_bytes: int | None = None) -> "ChunkedDataset | None":
        """`message` prepared for chunks of at most `chunk_bytes` (default CHUNK_BYTES),
        or None when its Z fits one chunk (it is then sent whole, in the Dataset frame) or
        it announces a body already."""
        chunk_bytes = CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
        Z = message.release.Z
        if message.rows or Z.nbytes <= chunk_bytes or Z.ndim != 2 or not Z.size:
            return None
        Z = np.ascontiguousarray(Z, dtype=Z.dtype.newbyteorder("<"))  # no copy if it is
        _check_finite(Z, "the dataset to send")
        row_bytes = Z.shape[1] * Z.itemsize
        chunk_rows = max(1, chunk_bytes // row_bytes)
        data = memoryview(Z).cast("B")
        digest = hashlib.sha256(data).digest()
        head = Dataset(dataclasses.replace(message.release, Z=Z[:0]), Z.shape[0], chunk_rows,
                       digest.hex())
        return cls(head, SharedBody.of(encode(head)), Body(digest, data), chunk_rows, row_bytes)

    @property
    def count(self) -> int:
        """The number of chunk frames."""
        return -(-self.message.rows // self.chunk_rows)

    def frames(self) -> Iterator[list]:
        """Each chunk frame as parts [header, data view]: joined, the frame's bytes."""
        data, step = self.body.data, self.chunk_rows * self.row_bytes
        for index in range(self.count):
            part = data[index * step:(index + 1) * step]
            yield [chunk_header(index, len(part)), part]


def shared_dataset(message: Dataset,
                   chunk_bytes: int | None = None) -> SharedBody | ChunkedDataset:
    """The Dataset every session of a curator sends, prepared once: in chunks when Z is
    larger than one chunk, else its one frame's body (protocol.signing.SharedBody)."""
    chunked = ChunkedDataset.of(message, chunk_bytes)
    return chunked if chunked is not None else SharedBody.of(encode(message))


def check_head(head: Dataset, max_body: int = MAX_BODY_BYTES) -> tuple[int, int, np.dtype]:
    """(rows, r, dtype) of the body a Dataset announces; ChunkError for an inconsistent
    head (`malformed`) or one announcing chunks or a body over the limits (`oversized`)."""
    if not head.rows:
        if head.chunk_rows or head.digest:
            raise ChunkError("a dataset with no chunked body announces chunk rows or a digest")
        return 0, 0, head.release.Z.dtype
    Z = head.release.Z
    if head.rows < 0 or head.chunk_rows < 1 or Z.ndim != 2 or Z.shape[0] != 0 or Z.shape[1] < 1:
        raise ChunkError(f"a chunked dataset head must announce rows >= 1 and chunk_rows >= 1 "
                         f"with Z of shape (0, r), not rows {head.rows}, chunk_rows "
                         f"{head.chunk_rows}, Z {Z.shape}")
    if len(head.digest) != 64 or any(c not in "0123456789abcdef" for c in head.digest):
        raise ChunkError("a chunked dataset's digest must be 64 lowercase hex digits")
    row_bytes = Z.shape[1] * Z.itemsize
    if head.chunk_rows * row_bytes > MAX_CHUNK_BYTES:
        raise ChunkError(f"chunks of {head.chunk_rows * row_bytes} bytes announced, over the "
                         f"{MAX_CHUNK_BYTES} a chunk may have", ErrorCode.OVERSIZED)
    if head.rows * row_bytes > max_body:
        raise ChunkError(f"a dataset body of {head.rows * row_bytes} bytes announced, over "
                         f"this receiver's {max_body}", ErrorCode.OVERSIZED)
    return head.rows, Z.shape[1], Z.dtype.newbyteorder("<")


class Reassembly:
    """Z rebuilt from the chunk frames a Dataset head announced: preallocated once, each
    chunk checked and copied into place as it comes (`feed`), the digest checked at the
    end (`result`). Every fault is a ChunkError (module docstring)."""

    def __init__(self, head: Dataset, max_body: int = MAX_BODY_BYTES) -> None:
        rows, cols, dtype = check_head(head, max_body)
        if not rows:
            raise ChunkError("this dataset announces no chunked body")
        self.head = head
        self.row_bytes = cols * dtype.itemsize
        self.chunk_bytes = head.chunk_rows * self.row_bytes
        self.total = rows * self.row_bytes
        self.count = -(-rows // head.chunk_rows)
        try:
            self.Z = np.empty((rows, cols), dtype=dtype)
        except MemoryError:
            raise ChunkError(f"no memory for a dataset body of {self.total} bytes",
                             ErrorCode.OVERSIZED) from None
        self._view = memoryview(self.Z).cast("B")
        self._hash = hashlib.sha256()
        self.next = 0  # the chunk due

    @property
    def complete(self) -> bool:
        """Whether every chunk has come."""
        return self.next == self.count

    def feed(self, frame: bytes) -> None:
        """Take the next chunk frame into place; ChunkError (nothing taken) otherwise."""
        if self.complete:
            raise ChunkError(f"a dataset chunk after the last of {self.count}",
                             ErrorCode.SEQUENCE)
        index, data = parse_chunk(frame, self.chunk_bytes, self.next, self.count)
        if index != self.next:
            raise ChunkError(f"dataset chunk {index} where chunk {self.next} of {self.count} "
                             "was due (out of order, or one is missing)", ErrorCode.SEQUENCE)
        start = index * self.chunk_bytes
        size = min(self.chunk_bytes, self.total - start)
        if len(data) > size:
            raise ChunkError(f"dataset chunk {index} holds {len(data)} bytes, more than its "
                             f"{size}", ErrorCode.OVERSIZED)
        if len(data) < size:
            raise ChunkError(f"dataset chunk {index} holds {len(data)} bytes, short of its "
                             f"{size}")
        self._view[start:start + size] = data
        self._hash.update(data)
        self.next += 1

    def result(self) -> np.ndarray:
        """The whole Z, read-only, once every chunk has come and their bytes hash to the
        digest the head announced and the floats are finite."""
        if not self.complete:  # no frame came where chunk `next` was due: they stopped
            raise ChunksStopped(f"dataset chunks {self.next}..{self.count - 1} of "
                                f"{self.count} never came")
        if self._hash.hexdigest() != self.head.digest:
            raise ChunkError("the dataset body does not match its digest (SHA-256 "
                             f"{self._hash.hexdigest()[:16]}..., announced "
                             f"{self.head.digest[:16]}...)")
        _check_finite(self.Z, "the dataset body")
        self.Z.flags.writeable = False
        return self.Z

    def dataset(self) -> tuple[Dataset, Body]:
        """The head with the whole Z (`result`), and Z's bytes as a transcript Body."""
        Z = self.result()
        whole = Dataset(dataclasses.replace(self.head.release, Z=Z), self.head.rows,
                        self.head.chunk_rows, self.head.digest)
        return whole, Body(bytes.fromhex(self.head.digest), self._view)


def parse_chunk(frame: bytes, chunk_bytes: int, due: int = 0, count: int = 0) -> tuple[int, bytes]:
    """(index, data) of a chunk frame whose data may be at most `chunk_bytes` long;
    ChunkError for a frame that does not start as a chunk frame does (a message where
    chunk `due` of `count` was due), an oversized one (never unpacked), or anything else
    that is not a chunk frame."""
    if not is_chunk_frame(frame):
        raise ChunkError(f"a frame that is not a dataset chunk where chunk {due} of {count} "
                         "was due", ErrorCode.SEQUENCE)
    if len(frame) > chunk_bytes + _OVERHEAD:
        raise ChunkError(f"a dataset chunk frame of {len(frame)} bytes, over the "
                         f"{chunk_bytes + _OVERHEAD} a chunk of this dataset may have",
                         ErrorCode.OVERSIZED)
    try:
        item = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_map_len=2,
                               max_array_len=0, max_str_len=8, max_ext_len=0,
                               max_bin_len=max(len(frame), 1))
    except Exception as exc:
        raise ChunkError(f"an undecodable dataset chunk frame: {type(exc).__name__}") from None
    index, data = item.get("chunk"), item.get("data")
    if list(item) != ["chunk", "data"] or type(index) is not int or index < 0 \
            or not isinstance(data, bytes):
        raise ChunkError('a dataset chunk frame must be {"chunk": index >= 0, "data": bin}')
    return index, data


async def receive_body(recv: Callable[[float], Awaitable[bytes]], head: Dataset,
                       timeout: float,
                       check: Callable[[Dataset, tuple[int, int]], None] | None = None,
                       max_body: int = MAX_BODY_BYTES) -> tuple[Dataset, Body]:
    """The Dataset whose head announced a chunked body, with the whole Z, and the body,
    from the chunk frames `recv(timeout)` returns next; `check(head, (rows, r))` first,
    before anything is allocated (the receiver's policy: Boundary.incoming_head)."""
    rows, cols, _ = check_head(head, max_body)
    if check is not None:
        check(head, (rows, cols))
    reassembly = Reassembly(head, max_body)
    while not reassembly.complete:
        try:
            frame = await recv(timeout)
        except PeerTimeout:
            raise ChunksStopped(f"no dataset chunk {reassembly.next} of {reassembly.count} "
                                f"within {timeout:g} s: the chunks stopped") from None
        reassembly.feed(frame)
    return reassembly.dataset()


def with_body(message: object, record: Record, dirs: list[Path],
              bodies: dict | None = None) -> object:
    """`message` (decoded from `record`) with its chunked body read back from the blob
    its record names (read into memory and hashed as it is read: it is served only if it
    hashes to the digest the Dataset announced); any other message unchanged.
    TranscriptError for a missing, corrupt or mismatched body. `bodies` (digest -> Z,
    read-only) keeps each body read once for a caller that meets it again (an audit of a
    session resumed k times: one copy, not k)."""
    if not (isinstance(message, Dataset) and message.rows):
        return message
    try:
        rows, cols, dtype = check_head(message)
    except ChunkError as exc:
        raise TranscriptError(f"record {record.seq}: {exc}") from None
    if record.body != message.digest:
        raise TranscriptError(f"record {record.seq}: the dataset announces body "
                              f"{message.digest[:16]}..., the record names "
                              f"{record.body[:16] or 'none'}...")
    bodies = {} if bodies is None else bodies
    if message.digest not in bodies:
        bodies[message.digest] = _read_body(message, record, dirs, rows, cols, dtype)
    return dataclasses.replace(message, release=dataclasses.replace(
        message.release, Z=bodies[message.digest]))


def _read_body(message: Dataset, record: Record, dirs: list[Path], rows: int, cols: int,
               dtype: np.dtype) -> np.ndarray:
    """The body `message` announces, from the first of `dirs` that holds its blob: read
    into memory and hashed as it is read (not a map checked first: it could change
    under the reader), read-only; TranscriptError if missing or not that body."""
    for folder in dirs:
        path = folder / message.digest
        if path.is_file():
            Z, hasher = np.empty((rows, cols), dtype=dtype), hashlib.sha256()
            with open(path, "rb") as f:
                whole = read_hashing(f, memoryview(Z.reshape(-1)).cast("B"), hasher)
            if not whole or hasher.hexdigest() != message.digest:
                raise TranscriptError(f"record {record.seq}: the dataset body {path} is "
                                      "corrupt (its size or SHA-256 differs)")
            Z.flags.writeable = False
            return Z
    raise TranscriptError(f"record {record.seq}: the dataset body {message.digest} is "
                          f"missing (looked in {', '.join(str(d) for d in dirs)})")


def _check_finite(Z: np.ndarray, what: str) -> None:
    """ChunkError unless every element of a float Z is finite (checked block by block)."""
    if Z.dtype.kind != "f":
        return
    flat = Z.reshape(-1)
    for start in range(0, flat.size, _FINITE_BLOCK):
        if not np.isfinite(flat[start:start + _FINITE_BLOCK]).all():
            raise ChunkError(f"{what} holds NaN or infinity")

