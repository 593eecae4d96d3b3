"""Append-only, hash-chained transcript of every frame a party sends or receives.

The file is a stream of msgpack maps, one per frame, written and flushed as it
happens: {seq, time, dir ("sent"/"recv"), kind, frame (the exact encoded bytes),
prev (SHA-256 hex of the previous record's bytes, zeros for the first)}. Records
hold the encoded frames, so an audit can decode them with the same codec.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgpack

GENESIS = "0" * 64


@dataclass(frozen=True)
class Record:
    """One transcript entry as read back from disk."""

    seq: int
    time: float
    dir: str
    kind: str
    frame: bytes
    prev: str


class Transcript:
    """Writer of one party's transcript file (opened for appending, flushed per record)."""

    def __init__(self, path: str | Path, resume: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._seq, self._prev = 0, GENESIS
        if self.path.exists() and not resume:  # a new session never writes over an old one
            n = 1
            while self.path.with_name(f"{self.path.name}.{n}").exists():
                n += 1
            self.path.rename(self.path.with_name(f"{self.path.name}.{n}"))
        if self.path.exists():  # a resumed party continues its own chain
            for raw, record in raw_records(self.path.read_bytes()):
                self._seq, self._prev = record.seq + 1, hashlib.sha256(raw).hexdigest()
        self._file: BinaryIO | None = open(self.path, "ab")

    @property
    def head(self) -> dict:
        """The number of records and the SHA-256 of the last one: anchor it elsewhere
        (the party's result) so that truncating the tail shows too."""
        return {"records": self._seq, "last": self._prev}

    def append(self, direction: str, kind: str, frame: bytes) -> None:
        """Write one record for a frame sent or received, and flush it to the OS."""
        if self._file is None:
            raise ValueError(f"transcript {self.path} is closed")
        raw = msgpack.packb({"seq": self._seq, "time": time.time(), "dir": direction,
                             "kind": kind, "frame": bytes(frame), "prev": self._prev},
                            use_bin_type=True)
        self._file.write(raw)
        self._file.flush()
        self._seq += 1
        self._prev = hashlib.sha256(raw).hexdigest()

    def close(self) -> None:
        """Close the file; later appends raise."""
        if self._file is not None:
            self._file.close()
            self._file = None


def read_transcript(path: str | Path) -> Iterator[Record]:
    """The records of a transcript file, in order."""
    for _, record in raw_records(Path(path).read_bytes()):
        yield record


class TranscriptError(ValueError):
    """A transcript file that cannot be parsed into records (truncated or corrupt)."""


def raw_records(data: bytes) -> Iterator[tuple[bytes, Record]]:
    """(exact bytes, parsed record) of every record; TranscriptError on a torn tail or
    a record that is not a transcript record."""
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
            record = Record(**item)
        except TypeError:
            raise TranscriptError(f"record at byte {start} is not a transcript record") from None
        yield data[start:end], record
        start = end
