"""The advisory file lock that every appender of a shared file takes: a transcript's
writers and a session's answer-log writers (flock: held by the open file description,
so two writers in one process exclude each other too)."""
from __future__ import annotations

import errno
import time

try:
    import fcntl
except ImportError:  # (no flock on this platform: `lock` says so)
    fcntl = None  # type: ignore[assignment]

# what flock says on a file system that keeps no such locks (NFS without lockd, some FUSE)
NO_LOCKS = frozenset(getattr(errno, name) for name in ("ENOLCK", "EOPNOTSUPP", "ENOSYS",
                                                      "EINVAL") if hasattr(errno, name))


class LockBusy(Exception):
    """Another holder kept the lock longer than the wait allowed."""


def lock(fd: int, exclusive: bool = True, timeout: float | None = None) -> bool:
    """Lock `fd`'s file, waiting up to `timeout` seconds (None: as long as it takes) for
    another holder to let go, else LockBusy. False where the platform or the file system
    keeps no such locks (nothing is held then)."""
    if fcntl is None:
        return False
    operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    if timeout is not None:
        operation |= fcntl.LOCK_NB
    deadline, pause = None, 0.0005
    while True:
        try:
            fcntl.flock(fd, operation)
            return True
        except BlockingIOError:
            deadline = deadline or time.monotonic() + timeout
            if time.monotonic() >= deadline:
                raise LockBusy("another writer holds the file's lock") from None
            time.sleep(pause)  # (as SQLite's busy handler)
            pause = min(2 * pause, 0.02)
        except OSError as exc:
            if exc.errno in NO_LOCKS:
                return False
            raise


def unlock(fd: int) -> None:
    """Release `lock`'s lock (never raises: a file system without locks holds none)."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
