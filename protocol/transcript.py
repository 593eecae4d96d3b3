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

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO | None = open(self.path, "ab")
        self._seq = 0
        self._prev = GENESIS

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
    with open(path, "rb") as fh:
        for item in msgpack.Unpacker(fh, raw=False, max_buffer_size=1 << 31):
            yield Record(**item)
