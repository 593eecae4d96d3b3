"""Append-only, hash-chained transcript of every frame a party sends or receives.

The file is a stream of msgpack maps, one per record, written and flushed as it happens.
Every record has `seq` (from 0), `time`, `kind` and `prev`: the SHA-256 of the exact
bytes of the record before (zeros for the first), stored as 32 raw bytes (files written
before held 64 hex characters; both read back as hex). By kind:

- a message sent or received (`hello`, `query`, ...): `dir` ("sent"/"recv") and `frame`,
  the exact encoded bytes, so an audit can decode them with the same codec. With a blob
  store, a frame larger than the threshold is written once to `blobs/<sha256 hex>`
  (atomically) and the record carries `ref` (its SHA-256, 32 bytes) and `size` instead
  of `frame`: every session's transcript shares the one copy of the dataset, and the
  record's own hash covers the digest, so the chain still fixes the frame's bytes.
  A signed envelope (protocol.signing) is split: its body (the message: the same bytes in
  every session, so one copy of Z for all of them) goes to the blob store under `ref`, and
  the record keeps `link` and `sig` (the envelope without its body) and `fsha`, the
  SHA-256 of the whole envelope frame, which reading it back rebuilds and checks.
- a `dataset` record whose Dataset announced a body in chunk frames (protocol.chunks)
  also carries `body` (its SHA-256, 32 bytes) and `body_size`: the body itself (Z's
  bytes, once, however many chunks carried it) is a blob, written before the record, in
  the blob store or, without one, in `blobs/` beside the transcript.
- `refused`: a received frame the party refused (undecodable, or refused by the boundary
  policy), as `sha256` (32 bytes), `size`, `code` (the ErrorCode) and `error` (a short
  message), never the frame: a record is at most REFUSED_RECORD_BYTES. At most
  `max_refused` of them per file; past the cap a refused frame is only counted, and so is
  the Error answering it (the next frame the party sends, when it is an Error).
- `refused-summary`: written when a transcript that counted frames closes: `count` and
  `sha256` (SHA-256 over the counted frames' 32-byte digests, in order), `replies` and
  `replies_sha256` likewise for the counted Error replies. A party killed before it closes
  writes none.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import msgpack

from pobo.protocol.filelock import LockBusy, lock, unlock  # around each append (where the
# system keeps no such locks, the size check alone guards the chain, as before the lock)
from pobo.protocol.signing import SharedBody, rebuild, split_envelope

GENESIS = "0" * 64
REFUSED = "refused"
REFUSED_SUMMARY = "refused-summary"
REFUSED_RECORD_BYTES = 200  # a refused record's message is trimmed to keep it within this
REFUSED_MESSAGE_CHARS = 80
DEFAULT_MAX_REFUSED = 1000
DEFAULT_BLOB_THRESHOLD = 1 << 16
# seconds a writer waits for another writer of its file to let the lock go: an append holds
# it for microseconds, so a holder past this is stopped (SIGSTOP, a debugger), and waiting
# on would freeze the waiting party's whole event loop with it
LOCK_WAIT = 2.0
_DIGESTS = ("prev", "ref", "sha256", "replies_sha256", "fsha", "body")  # 32 raw bytes on disk, hex in Record
log = logging.getLogger("pobo.transcript")


@dataclass(frozen=True)
class Record:
    """One transcript entry as read back from disk (digests as hex; see the module docstring)."""

    seq: int
    time: float
    kind: str
    prev: str
    dir: str = "recv"
    frame: bytes = b""  # empty for refused, summary and (until resolved) blob records
    ref: str = ""  # the SHA-256 of a frame kept in the blob store
    size: int = 0  # the bytes of the frame a blob or refused record stands for
    sha256: str = ""  # refused: the frame's digest; summary: over the counted digests
    code: str = ""
    error: str = ""
    count: int = 0  # summary: refused frames counted, not recorded one by one
    replies: int = 0  # summary: Error replies to them, counted likewise
    replies_sha256: str = ""
    fsha: str = ""  # a split envelope: the SHA-256 of the whole frame (its body is `ref`)
    link: dict | None = None  # a split envelope: its link map ...
    sig: bytes = b""  # ... and its signature
    body: str = ""  # a chunked Dataset: the SHA-256 of its body, a blob (protocol.chunks)
    body_size: int = 0

    @property
    def digest(self) -> str:
        """The SHA-256 (hex) of the frame this record stands for, without reading a blob."""
        if self.fsha:
            return self.fsha
        if self.ref:
            return self.ref
        if self.kind == REFUSED:
            return self.sha256
        return hashlib.sha256(self.frame).hexdigest()


@dataclass(frozen=True, eq=False)
class Body:
    """Bytes a frame record stands for besides its frame (a chunked Dataset's Z): `data`
    (bytes-like) whose SHA-256 is `digest`, stored once per blob store (`stored` holds
    the stores that have it), never copied."""

    digest: bytes
    data: object
    stored: set = field(default_factory=set)


class TranscriptError(ValueError):
    """A transcript file that cannot be parsed into records (truncated or corrupt), a blob
    it references that is missing or corrupt, or a file another writer appended to."""


class BlobStore:
    """Content-addressed files `<root>/<sha256 hex>`: large frames many transcripts share,
    stored once."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def put(self, data: bytes, digest: str) -> Path:
        """Store `data` (whose SHA-256 is `digest`) unless a verified copy is there already;
        written to a temporary file and renamed, so a reader never sees half a blob."""
        path = self.root / digest
        if path.is_file() and path.stat().st_size == len(data) and file_digest(path) == digest:
            return path
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{digest}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path


READ_CHUNK = 1 << 24  # bytes read (and hashed) at a time by read_hashing


def read_hashing(f: BinaryIO, into: memoryview, hasher) -> bool:
    """Fill `into` (bytes) from `f`, updating `hasher` with every byte as it is read, then
    with the rest of the file; False if the file ends first. What was hashed is what was
    read: a memory map checked first could change under a file rewritten in place, and a
    file truncated under it kills the process (a stored projection, a dataset body)."""
    at = 0
    while at < len(into):
        got = f.readinto(into[at:at + READ_CHUNK])
        if not got:
            return False
        hasher.update(into[at:at + got])
        at += got
    while rest := f.read(READ_CHUNK):  # bytes past what was asked: part of the digest
        hasher.update(rest)
    return True


def file_digest(path: Path) -> str:
    """The SHA-256 (hex) of a file's bytes, read in chunks (a blob, a stored projection)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def blob_dirs(transcript: str | Path, blobs: str | Path | None = None) -> list[Path]:
    """Where a transcript's blobs are looked up: `blobs` if given, else `<its dir>/blobs`
    then `<its dir>/../blobs` (a multi-session curator's shared OUT/blobs)."""
    if blobs is not None:
        return [Path(blobs)]
    parent = Path(transcript).parent
    return [parent / "blobs", parent.parent / "blobs"]


def load_blob(digest: str, dirs: list[Path]) -> bytes:
    """The frame stored under `digest`, verified; TranscriptError naming the digest when it
    is missing from every dir or its bytes do not hash to it."""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise TranscriptError(f"blob reference {digest[:80]!r} is not a SHA-256")
    for folder in dirs:
        path = folder / digest
        if path.is_file():
            data = path.read_bytes()
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                raise TranscriptError(f"blob {digest} is corrupt: {path} hashes to {actual}")
            return data
    raise TranscriptError(f"blob {digest} is missing (looked in "
                          f"{', '.join(str(d) for d in dirs)})")


def resolve(record: Record, dirs: list[Path], cache: dict[str, bytes] | None = None) -> Record:
    """`record` with the frame of its blob reference read back (unchanged without one)."""
    if not record.ref:
        return record
    if cache is not None and record.ref in cache:
        frame = cache[record.ref]
    else:
        frame = load_blob(record.ref, dirs)
        if cache is not None:
            cache[record.ref] = frame
    if record.link is not None:  # a split envelope: rebuild it around its body
        frame = rebuild(frame, record.link, record.sig)
        if hashlib.sha256(frame).hexdigest() != record.fsha:
            raise TranscriptError(f"record {record.seq}: the envelope rebuilt around blob "
                                  f"{record.ref} does not hash to the record's {record.fsha}")
    return dataclasses.replace(record, frame=frame)


class Transcript:
    """Writer of one party's transcript file (opened for appending, flushed per record)."""

    def __init__(self, path: str | Path, resume: bool = False, blobs: str | Path | None = None,
                 blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
                 max_refused: int = DEFAULT_MAX_REFUSED, lock_wait: float = LOCK_WAIT) -> None:
        self.path = Path(path)
        self.lock_wait = lock_wait
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(blobs) if blobs is not None else None
        self.blob_threshold = blob_threshold
        self.max_refused = max_refused
        self._seq, self._prev = 0, bytes(32)
        self._refused = 0  # refused records in the file (the cap is per file)
        self._counted, self._counted_hash = 0, hashlib.sha256()
        self._replies, self._replies_hash = 0, hashlib.sha256()
        if self.path.exists() and not resume:  # a new session never writes over an old one
            n = 1
            while self.path.with_name(f"{self.path.name}.{n}").exists():
                n += 1
            self.path.rename(self.path.with_name(f"{self.path.name}.{n}"))
        self._file: BinaryIO | None = open(self.path, "ab", buffering=0)  # a write per record
        fd = self._file.fileno()
        try:
            self._lock(fd)  # the size and the chain read together: no writer appends between
            try:
                self._end = os.lseek(fd, 0, os.SEEK_END)
                if self._end:  # a resumed party continues its own chain, checked first
                    self._seq, self._prev, self._refused = chain_end(self.path)
            finally:
                unlock(fd)
        except BaseException:  # (a damaged file, say: refused, and not left open)
            self._file.close()
            raise

    @property
    def head(self) -> dict:
        """The number of records and the SHA-256 of the last one: anchor it elsewhere
        (the party's result) so that truncating the tail shows too."""
        return {"records": self._seq, "last": self._prev.hex()}

    @property
    def position(self) -> tuple[int, bytes]:
        """(the seq the next record gets, the SHA-256 of the last record): what a signed
        frame's link commits to."""
        return self._seq, self._prev

    @property
    def refused(self) -> dict:
        """Refused frames so far: recorded one by one in the file, and counted past the cap."""
        return {"recorded": self._refused, "counted": self._counted, "replies": self._replies}

    def append(self, direction: str, kind: str, frame: bytes,
               dataset_body: Body | None = None) -> None:
        """Write one record for a frame sent or received (a large one to the blob store,
        referenced by digest), and flush it to the OS; `dataset_body`: the chunked body
        the frame announced, stored as a blob and named by the record."""
        frame = bytes(frame)
        item: dict = {"seq": self._seq, "time": time.time(), "dir": direction, "kind": kind}
        split = (split_envelope(frame) if self.blobs is not None
                 and len(frame) > self.blob_threshold else None)
        if split is not None:  # the body apart, shared by every session that sends it
            body, link, sig = split
            digest = hashlib.sha256(body).digest()
            self._check_open()
            self.blobs.put(body, digest.hex())  # before the record that names it
            item.update(ref=digest, size=len(body), fsha=hashlib.sha256(frame).digest(),
                        link=link, sig=sig)
        elif self.blobs is not None and len(frame) > self.blob_threshold:
            digest = hashlib.sha256(frame).digest()
            self._check_open()
            self.blobs.put(frame, digest.hex())  # before the record that names it
            item.update(ref=digest, size=len(frame))
        else:
            item["frame"] = frame
        if dataset_body is not None:
            self._store_body(item, dataset_body)
        self._write(item)

    def _store_body(self, item: dict, body: Body) -> None:
        """Put a chunked Dataset's body in the blob store (or `blobs/` beside the
        transcript) unless this store holds it already, and name it in `item`."""
        self._check_open()
        store = self.blobs if self.blobs is not None else BlobStore(self.path.parent / "blobs")
        root = str(store.root.resolve())
        if root not in body.stored:
            store.put(body.data, body.digest.hex())  # before the record that names it
            body.stored.add(root)
        item.update(body=body.digest, body_size=memoryview(body.data).nbytes)

    def append_shared(self, direction: str, kind: str, shared: SharedBody, link: dict,
                      sig: bytes, frame_digest: bytes, dataset_body: Body | None = None) -> None:
        """`append` for the envelope of a body sealed by `shared.seal` (the same record,
        byte for byte): the body goes to the blob store once per store, never rehashed
        or copied per session. Without a blob store the whole frame is recorded."""
        if self.blobs is None or len(shared.body) <= self.blob_threshold:
            self.append(direction, kind, rebuild(shared.body, link, sig), dataset_body)
            return
        item: dict = {"seq": self._seq, "time": time.time(), "dir": direction, "kind": kind}
        self._check_open()
        root = str(self.blobs.root.resolve())
        if root not in shared.stored:
            self.blobs.put(shared.body, shared.digest.hex())  # before the record naming it
            shared.stored.add(root)
        item.update(ref=shared.digest, size=len(shared.body), fsha=frame_digest, link=link,
                    sig=sig)
        if dataset_body is not None:
            self._store_body(item, dataset_body)
        self._write(item)

    def refuse(self, frame: bytes, code: str, error: str, always: bool = False) -> bool:
        """Record a received frame the party refused as its digest, size, code and a short
        message; past the cap only count it, unless `always` (a frame refused after it was
        accepted, which ends the session: its record is what keeps a resume from counting
        it). True when it was recorded."""
        digest = hashlib.sha256(frame).digest()
        if self._refused >= self.max_refused and not always:
            self._check_open()
            self._counted += 1
            self._counted_hash.update(digest)
            return False
        message = " ".join(str(error).split())[:REFUSED_MESSAGE_CHARS]
        item = {"seq": self._seq, "time": time.time(), "kind": REFUSED, "sha256": digest,
                "size": len(frame), "code": str(code)[:24], "error": message}
        while True:  # trim the message until the record fits
            excess = len(self._pack(item)) - REFUSED_RECORD_BYTES
            if excess <= 0 or not item["error"]:
                break
            item["error"] = item["error"].encode()[:-excess].decode(errors="ignore")
        self._write(item)
        self._refused += 1
        return True

    def count_reply(self, frame: bytes) -> None:
        """Count (not record) an Error sent in reply to a refused frame that was only counted."""
        self._check_open()
        self._replies += 1
        self._replies_hash.update(hashlib.sha256(frame).digest())

    def anchor(self) -> dict:
        """The head a party anchors in its result: the refused-summary of the frames
        counted so far written first, so that the head names the file's last record (a
        peer that sent more frames than the cap cannot make the party's own record and
        file disagree). Frames counted later get a summary of their own."""
        self._summarise()
        return self.head

    def _summarise(self) -> None:
        """Write the refused-summary record of the frames only counted since the last one
        (none: nothing), and start counting afresh."""
        if self._file is None or not (self._counted or self._replies):
            return
        try:
            self._write({"seq": self._seq, "time": time.time(), "kind": REFUSED_SUMMARY,
                         "count": self._counted, "sha256": self._counted_hash.digest(),
                         "replies": self._replies,
                         "replies_sha256": self._replies_hash.digest()})
        except TranscriptError as exc:  # another writer owns the file now: leave it intact
            log.warning("refused-summary not written: %s", exc)
        finally:
            self._counted, self._counted_hash = 0, hashlib.sha256()
            self._replies, self._replies_hash = 0, hashlib.sha256()

    def close(self) -> None:
        """Write the refused-summary record if frames were only counted, and close the file;
        later appends raise."""
        if self._file is None:
            return
        try:
            self._summarise()
        finally:
            self._file.close()
            self._file = None

    def _check_open(self) -> None:
        if self._file is None:
            raise ValueError(f"transcript {self.path} is closed")

    def _lock(self, fd: int) -> None:
        """The writers' lock on the file, waited for at most `lock_wait` seconds; past them
        a TranscriptError (nothing read or written): a stopped writer holding it must
        not stop this one's party for ever."""
        try:
            lock(fd, timeout=self.lock_wait)
        except LockBusy:
            raise TranscriptError(f"{self.path}: another writer has held its lock for over "
                                  f"{self.lock_wait:g} s (a stopped process?): not "
                                  "writing") from None

    def _pack(self, item: dict) -> bytes:
        item["prev"] = self._prev  # the caller's own map: no copy per record
        return msgpack.packb(item, use_bin_type=True)

    def _write(self, item: dict) -> None:
        """Append one record, unless another writer has appended since (it would fork the
        chain: TranscriptError, nothing written). The check and the write hold the file's
        advisory lock, as every writer's do (and a writer's opening read of the chain): no
        other writer's record can land between them, nor be cut off with a torn one of
        this writer's (a review forked the chain of two writers racing without it)."""
        self._check_open()
        assert self._file is not None
        raw = self._pack(item)
        fd = self._file.fileno()
        self._lock(fd)
        try:
            # the file's size, as lseek to its end gives it: what fstat's st_size says,
            # without a stat object per record (the offset it sets is moot: O_APPEND)
            size = os.lseek(fd, 0, os.SEEK_END)
            if size != self._end:
                raise TranscriptError(f"{self.path} was written by another writer ({size} "
                                      f"bytes, this one wrote up to {self._end}): not "
                                      "appending")
            try:
                written = self._file.write(raw)  # unbuffered: the record reaches the OS
                if written != len(raw):  # (survives kill -9); a short write is finished here
                    view = memoryview(raw)[written:]
                    while view:
                        view = view[self._file.write(view):]
            except OSError:  # a full disk, say: no torn record is left for a resume
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._end)
                raise
        finally:
            unlock(fd)
        self._end += len(raw)
        self._seq += 1
        self._prev = hashlib.sha256(raw).digest()


def linked_records(data: bytes) -> Iterator[tuple[bytes, Record, list[str]]]:
    """Each record of a transcript's bytes (exact bytes, parsed) with what breaks the hash
    chain at it (empty: it follows the record before -- its seq is its position, its
    prev the SHA-256 of the record before); TranscriptError at a torn or corrupt tail.
    The one definition of a whole chain: the audit reports every break, a resumed
    writer refuses the first (`chain_end`)."""
    prev = GENESIS
    for i, (raw, record) in enumerate(raw_records(data)):
        breaks = []
        if record.seq != i:
            breaks.append(f"record {i}: sequence number {record.seq} (records reordered, "
                          "removed or inserted)")
        if record.prev != prev:
            breaks.append(f"record {i}: hash chain broken (record {i - 1} edited, or records "
                          "reordered or removed)")
        yield raw, record, breaks
        prev = hashlib.sha256(raw).hexdigest()


def chain_end(path: str | Path) -> tuple[int, bytes, int]:
    """(the seq the next record gets, the SHA-256 of the last record, the refused records)
    of the transcript at `path`: where a resumed writer goes on. TranscriptError for a
    file whose hash chain is broken (a record edited, removed or reordered) or whose tail
    is torn: nothing may be appended to it."""
    seq, last, refused = 0, b"", 0
    for raw, record, breaks in linked_records(Path(path).read_bytes()):
        if breaks:
            raise TranscriptError(f"{path}: {breaks[0]}: the file was edited or damaged, "
                                  "not continuing it")
        seq, last, refused = seq + 1, raw, refused + (record.kind == REFUSED)
    return seq, hashlib.sha256(last).digest() if seq else bytes(32), refused


def read_transcript(path: str | Path, blobs: str | Path | None = None) -> Iterator[Record]:
    """The records of a transcript file, in order, with blob references resolved (from
    `blobs`, or the defaults of `blob_dirs`); TranscriptError for a missing or corrupt blob."""
    dirs, cache = blob_dirs(path, blobs), {}
    for _, record in raw_records(Path(path).read_bytes()):
        yield resolve(record, dirs, cache)


def raw_records(data: bytes) -> Iterator[tuple[bytes, Record]]:
    """(exact bytes, parsed record) of every record; TranscriptError on a torn tail or
    a record that is not a transcript record. Blob references are left unresolved."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1 << 20))
    unpacker.feed(data)
    start = 0
    while True:
        try:
            item = unpacker.unpack()
        except msgpack.OutOfData:
            if start != len(data):
                raise TranscriptError(f"truncated record at byte {start} "
                                      f"({len(data) - start} trailing bytes)") from None
            return
        except Exception as exc:
            raise TranscriptError(f"corrupt record at byte {start}: {exc}") from None
        end = unpacker.tell()
        try:
            record = _record(item)
        except (TypeError, ValueError):
            raise TranscriptError(f"record at byte {start} is not a transcript record") from None
        yield data[start:end], record
        start = end


def _record(item: object) -> Record:
    """A Record from one unpacked map, its fields checked; TypeError/ValueError if not one."""
    if not isinstance(item, dict):
        raise TypeError("not a map")
    fields = dict(item)
    for key in _DIGESTS:
        value = fields.get(key)
        if isinstance(value, bytes):
            if len(value) != 32:
                raise ValueError(f"{key} is not a SHA-256")
            fields[key] = value.hex()
    record = Record(**fields)
    if not (isinstance(record.seq, int) and isinstance(record.kind, str)
            and isinstance(record.prev, str) and len(record.prev) == 64
            and isinstance(record.frame, bytes)):
        raise ValueError("bad field types")
    if record.kind == REFUSED:
        if len(record.sha256) != 64 or record.dir != "recv":
            raise ValueError("a refused record needs the frame's digest")
    elif record.kind != REFUSED_SUMMARY and record.dir not in ("sent", "recv"):
        raise ValueError(f"direction {record.dir!r}")
    if record.ref and (len(record.ref) != 64 or record.frame):
        raise ValueError("a blob reference with a frame")
    if record.link is not None and not (isinstance(record.link, dict) and record.ref
                                        and len(record.fsha) == 64
                                        and isinstance(record.sig, bytes)):
        raise ValueError("a split envelope without its blob reference and digest")
    if (record.body or record.body_size) and not (len(record.body) == 64
                                                  and isinstance(record.body_size, int)
                                                  and record.body_size > 0
                                                  and record.kind == "dataset"):
        raise ValueError("a body reference outside a dataset record, or without its size")
    return record
