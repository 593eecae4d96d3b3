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
this writer last left it and still linked, and only then evaluates f and writes. A claim
(a new connection's resume, in this process or another sharing the journal) and a
session's end append a CLAIM record under the same lock before they commit, so every
older writer's next check fails (Superseded) before f is evaluated. Readers take no
lock: a record being appended reads as a torn tail, read again until it is whole. On a
file system without `flock`, or for a session id that is not a plain name, no log is
written: the journal answers through SQLite.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from pobo.protocol.errors import PoboError
from pobo.protocol.filelock import lock

MAGIC = b"pobo-answers\x00v1\x00"  # 16 bytes; then the session id, NUL-padded to 32
HEADER_SIZE = 48
RECORD = struct.Struct("<c3xIqqqdd")  # kind, CRC-32 of the next 40 bytes, gen, seq, row, m, v
_KIND = struct.Struct("<c3xI")  # a record's first 8 bytes
_BODY = struct.Struct("<qqqdd")  # and the 40 its CRC covers
ANSWER, CLAIM = b"a", b"g"
_NAME = re.compile(r"[0-9A-Za-z_-]{1,32}")  # a session id that names a file safely
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK  # never through a link, never waiting on a FIFO


class LogDamaged(PoboError):
    """An answer log whose bytes are not records this module wrote (cut, edited, another
    session's), or a path that is not a regular file."""


class LogTorn(LogDamaged):
    """A log whose last record is incomplete or fails its checksum: an append under way
    (a reader reads again), or one a crash cut short."""

    def __init__(self, message: str, whole: int, partial: bool) -> None:
        super().__init__(message)
        self.whole = whole  # the length of its whole records
        self.partial = partial  # cut short (a crash), not a whole record that fails its CRC


class LogUnmade(LogDamaged):
    """A log shorter than its header: being made (a reader came between its creation and
    its header's write), or cut (which the journal tells apart: a log it noted was made
    whole)."""


class NoLocks(Exception):
    """The file system keeps no flock locks: no answer log can be fenced there."""


@dataclass
class LogWriter:
    """The state of the one connection that appends a session's answers: its open file,
    the length it left it at (the fence), its generation, every seq answered, and how
    many of its records are not in the table yet."""

    fd: int
    size: int
    generation: int
    seqs: set[int] = field(default_factory=set)
    unfolded: int = 0


def loggable(session: str) -> bool:
    """Whether a session id may name a log file (the service's are 32 hex digits)."""
    return _NAME.fullmatch(session) is not None


def log_path(folder: Path, session: str) -> Path:
    """Where a session's answer log lives."""
    return folder / f"{session}.log"


def _header(session: str) -> bytes:
    return MAGIC + session.encode("ascii").ljust(HEADER_SIZE - len(MAGIC), b"\x00")


def record(kind: bytes, generation: int, seq: int, row: int, measured: float,
           value: float) -> bytes:
    """One record's bytes."""
    body = _BODY.pack(generation, seq, row, measured, value)
    return _KIND.pack(kind, zlib.crc32(body)) + body


def answer_record(generation: int, seq: int, row: int, measured, value) -> bytes | None:
    """An answer's record, or None for one the table would refuse or store converted
    (NaN, a value that is no float, an integer past 64 bits): that one goes to the
    table, which says what it says of it."""
    if type(measured) is not float or type(value) is not float or measured != measured \
            or value != value or type(seq) is not int or type(row) is not int:
        return None
    try:
        return record(ANSWER, generation, seq, row, measured, value)
    except struct.error:
        return None


def flock(fd: int, timeout: float | None = None) -> None:
    """`lock` the log exclusively (LockBusy past `timeout`); NoLocks where the file system
    keeps no locks: no log can be fenced there."""
    if not lock(fd, timeout=timeout):
        raise NoLocks("this file system keeps no flock locks")


def _regular(fd: int, path: Path) -> os.stat_result:
    held = os.fstat(fd)
    if not stat.S_ISREG(held.st_mode):
        raise LogDamaged(f"the answer log {path.name} is not a regular file")
    return held


def open_locked(path: Path, create: bool,
                timeout: float | None = None) -> tuple[int, int] | None:
    """(`path` opened for appending and locked exclusively, its length): the file now at
    `path`, not one removed while this waited for the lock; with `create` a missing file
    is made (empty: `make_header` writes its header), else None. OSError as the system
    says; LogDamaged for a link or a file that is not regular; LockBusy; NoLocks."""
    flags = os.O_RDWR | os.O_APPEND | _OPEN | (os.O_CREAT if create else 0)
    while True:
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LogDamaged(f"the answer log {path.name} is a symbolic link") from None
            raise
        try:
            _regular(fd, path)
            flock(fd, timeout=timeout)
            held = os.fstat(fd)
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
                os.close(fd)  # finished and removed while this waited: look again
                continue
            return fd, held.st_size
        except BaseException:
            os.close(fd)
            raise


def make_header(fd: int, session: str) -> int:
    """Write a locked log's header over whatever beginning of it is there (a log being
    made, or one whose making a crash cut short); its length. The file is left empty if
    the write fails (OSError)."""
    data = read_from(fd)
    if not _header(session).startswith(data):
        raise LogDamaged(f"the answer log of session {session[:12]}... has a foreign "
                         "header (not this session's log)")
    os.ftruncate(fd, 0)
    append(fd, _header(session), 0)
    return HEADER_SIZE


def append(fd: int, data: bytes, size: int) -> None:
    """Append `data` in one write to a log `size` bytes long; on a failed or short write
    (a full disk) the log is cut back to `size`, its last whole record, and OSError
    raised."""
    try:
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, "short write: no room left on the device")
    except OSError:
        try:
            os.ftruncate(fd, size)
        except OSError:
            pass  # the log then reads as damaged: every later reader says so
        raise


def read_log(path: Path, session: str,
             timeout: float = 0.1) -> tuple[list[tuple[int, int, float, float]], int] | None:
    """(the answers in a session's log, its length in bytes); None: it has none. Read
    without a lock: a torn
    last record (an append under way, where the system shows one) is read again, up to
    `timeout` seconds, before it is LogDamaged (a crash cut it short: a claim cuts it
    off)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | _OPEN)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LogDamaged(f"the answer log {path.name} is a symbolic link") from None
            raise LogDamaged(f"the answer log {path.name} cannot be read: "
                             f"{exc.strerror or exc}") from None
        try:
            _regular(fd, path)
            data = read_from(fd)
        finally:
            os.close(fd)
        try:
            return answers_in(data, session), len(data)
        except LogTorn:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.001)


def read_from(fd: int) -> bytes:
    """All of an open file's bytes, from its start."""
    chunks, offset = [], 0
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def answers_in(data: bytes, session: str) -> list[tuple[int, int, float, float]]:
    """The answers a log's bytes hold, in the order they were written: (seq, row,
    measured, value). LogTorn for a torn last record; LogDamaged unless every other
    byte is this session's header and whole records whose checksums hold; LogUnmade for
    a beginning of the header only."""
    header = _header(session)
    if len(data) < HEADER_SIZE and header.startswith(data):
        raise LogUnmade(f"the answer log of session {session[:12]}... is cut short inside "
                        "its header")
    if data[:HEADER_SIZE] != header:
        raise LogDamaged(f"the answer log of session {session[:12]}... has a foreign "
                         "header (not this session's log)")
    body = memoryview(data)[HEADER_SIZE:]
    whole = len(body) - len(body) % RECORD.size
    answers, count = [], whole // RECORD.size
    for i, (kind, crc, _, seq, row, measured, value) in enumerate(
            RECORD.iter_unpack(body[:whole])):
        at = i * RECORD.size + _KIND.size
        if zlib.crc32(body[at:at + _BODY.size]) != crc or kind not in (ANSWER, CLAIM):
            if i == count - 1 and whole == len(body):
                raise LogTorn(f"the answer log of session {session[:12]}... ends in a torn "
                              "record", HEADER_SIZE + i * RECORD.size, False)
            raise LogDamaged(f"the answer log of session {session[:12]}... is corrupt at "
                             f"record {i}")
        if kind == ANSWER:
            answers.append((seq, row, measured, value))
    if whole != len(body):
        raise LogTorn(f"the answer log of session {session[:12]}... ends in a partial "
                      f"record ({len(body) - whole} bytes)", HEADER_SIZE + whole, True)
    return answers
