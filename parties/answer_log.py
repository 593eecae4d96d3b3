"""A session's answer log: the file a journal at durability normal appends each answer
to, instead of committing one SQLite transaction per answer (issue 23, item 4).

One file per live session, `<journal>.answers/<session>.log`: a 48-byte header (magic and
session id), then 48-byte records (kind, CRC-32 of the rest, generation, seq, row,
measured, value). An answer's record is one `write` to the file, so it survives the
curator being killed (what `normal` promises of a SQLite commit, whose WAL frames are
written the same way) and is in the file before its reward is sent. The journal folds a
log's answers into its SQLite table when the session is claimed by a new connection and
when it finishes (then the file goes); every reader merges the log with the table.

The fence: every append takes `flock` on the file, checks that the file is as long as
this writer last left it, and only then evaluates f and writes. A claim (a new
connection's resume, in this process or another sharing the journal) and a session's
end append a CLAIM record under the same lock, so every older writer's next check fails
(Superseded) before f is evaluated. On a file system without `flock` no log is written:
the journal keeps answering through SQLite.
"""
from __future__ import annotations

import errno
import os
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

try:
    import fcntl
except ImportError:  # (no flock: the journal answers through SQLite)
    fcntl = None

from pobo.protocol.errors import PoboError

MAGIC = b"pobo-answers\x00v1\x00"  # 16 bytes; then the session id, 32 ASCII hex digits
HEADER_SIZE = 48
RECORD = struct.Struct("<c3xIqqqdd")  # kind, CRC-32 of the next 40 bytes, gen, seq, row, m, v
_KIND = struct.Struct("<c3xI")  # a record's first 8 bytes
_BODY = struct.Struct("<qqqdd")  # and the 40 its CRC covers
ANSWER, CLAIM = b"a", b"g"
_NO_LOCKS = frozenset(getattr(errno, name) for name in ("ENOLCK", "EOPNOTSUPP", "ENOSYS",
                                                       "EINVAL") if hasattr(errno, name))


class LogDamaged(PoboError):
    """An answer log whose bytes are not records this module wrote (cut, edited, another
    session's)."""


class NoLocks(Exception):
    """The file system keeps no flock locks: no answer log can be fenced there."""


@dataclass
class LogWriter:
    """The state of the one connection that appends a session's answers: its open file,
    the length it left it at (the fence), its generation and every seq answered."""

    fd: int
    size: int
    generation: int
    seqs: set[int] = field(default_factory=set)


def log_path(folder: Path, session: str) -> Path:
    """Where a session's answer log lives."""
    return folder / f"{session}.log"


def _header(session: str) -> bytes:
    sid = session.encode("ascii")
    if len(sid) > HEADER_SIZE - len(MAGIC):
        raise ValueError(f"session id {session[:40]!r} is too long for an answer log")
    return MAGIC + sid.ljust(HEADER_SIZE - len(MAGIC), b"\x00")


def record(kind: bytes, generation: int, seq: int, row: int, measured: float,
           value: float) -> bytes:
    """One record's bytes."""
    body = _BODY.pack(generation, seq, row, measured, value)
    return _KIND.pack(kind, zlib.crc32(body)) + body


def flock(fd: int, exclusive: bool = True, timeout: float | None = None) -> bool:
    """Lock `fd`'s file (held by the open file description), waiting up to `timeout`
    seconds (None: as long as it takes) for another holder (a claim in progress) to let
    go; False if it did not. NoLocks where the file system has no such locks."""
    operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.0005
    while True:
        try:
            fcntl.flock(fd, operation if deadline is None else operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)  # (as SQLite's busy handler: a claim holds it for ms)
            pause = min(2 * pause, 0.02)
        except OSError as exc:
            if exc.errno in _NO_LOCKS:
                raise NoLocks(str(exc)) from None
            raise


def unlock(fd: int) -> None:
    """Release `flock`'s lock (never raises on a file system without locks)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        pass


def open_locked(path: Path, session: str, create: bool) -> int | None:
    """`path` opened for appending and locked (exclusive): the file now at `path`, not
    one removed while this waited for the lock; created with its header when `create`
    and missing, else None when missing. OSError as the system says; NoLocks."""
    if fcntl is None:
        raise NoLocks("this platform has no flock")
    flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
    while True:
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            return None
        try:
            flock(fd)
            held = os.fstat(fd)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
                os.close(fd)  # finished and removed while this waited: look again
                continue
            if held.st_size == 0:
                write_all(fd, _header(session))
            return fd
        except BaseException:
            os.close(fd)
            raise


def write_all(fd: int, data: bytes) -> None:
    """Append `data` in one write; OSError if the system wrote less (a full disk)."""
    if os.write(fd, data) != len(data):
        raise OSError(errno.ENOSPC, "short write: no room left on the device")


def read_locked(path: Path, session: str) -> bytes:
    """The bytes of a session's log (b"" when it has none), read under a shared lock, so
    that no append is half read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        try:
            if fcntl is not None:
                flock(fd, exclusive=False)
        except NoLocks:
            pass
        return read_from(fd)
    finally:
        os.close(fd)  # (closing releases the lock)


def read_from(fd: int) -> bytes:
    """All of an open file's bytes, from its start."""
    size, chunks, offset = os.fstat(fd).st_size, [], 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def answers_in(data: bytes, session: str) -> list[tuple[int, int, float, float]]:
    """The answers a log's bytes hold, in the order they were written: (seq, row,
    measured, value). LogDamaged unless every byte is this session's header and whole
    records whose checksums hold."""
    if not data:
        return []
    if data[:HEADER_SIZE] != _header(session):
        raise LogDamaged(f"the answer log of session {session[:12]}... has a foreign "
                         "header (not this session's log)")
    body = memoryview(data)[HEADER_SIZE:]
    if len(body) % RECORD.size:
        raise LogDamaged(f"the answer log of session {session[:12]}... ends in a partial "
                         f"record ({len(body) % RECORD.size} bytes)")
    answers = []
    for i, (kind, crc, generation, seq, row, measured, value) in enumerate(
            RECORD.iter_unpack(body)):
        at = i * RECORD.size + 8
        if zlib.crc32(body[at:at + RECORD.size - 8]) != crc or kind not in (ANSWER, CLAIM):
            raise LogDamaged(f"the answer log of session {session[:12]}... is corrupt at "
                             f"record {i}")
        if kind == ANSWER:
            answers.append((seq, row, measured, value))
    return answers
