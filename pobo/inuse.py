"""One live run per output folder: `pobo run` holds an advisory lock (flock) on its
`--out` folder for as long as it runs, so a second run into the same folder is refused
at once, in one line, instead of overwriting the first run's records (a review saw the
longer of two runs print the shorter one's summary, its own result.json lost). The
lock is held by the open folder, so it goes when the run's process does, however it
ends (even kill -9): nothing to clean up."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pobo.protocol.errors import PoboError
from pobo.protocol.filelock import LockBusy, lock, unlock


class FolderInUse(PoboError):
    """Another live run holds this output folder."""


@contextlib.contextmanager
def holding(folder: Path | str) -> Iterator[Path]:
    """Hold `folder` (made if missing) for one run; FolderInUse at once if another live
    run holds it. Where the file system keeps no locks, nothing is held (as the
    transcript's writers: protocol.filelock)."""
    folder = Path(folder)
    made = folder.absolute()  # the outermost folder made here (to remove if left empty)
    while not made.parent.exists():
        made = made.parent
    made = None if folder.exists() else made
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        try:
            lock(fd, timeout=0)
        except LockBusy:
            raise FolderInUse(f"--out {folder} is in use by another run that is still going: "
                              "wait for it to end, or give another --out") from None
        try:
            yield folder
        finally:
            unlock(fd)
    finally:
        os.close(fd)
        if made is not None:  # a run that wrote nothing leaves no folder behind
            _remove_empty(folder.absolute(), made)


def _remove_empty(folder: Path, up_to: Path) -> None:
    """Remove `folder` and its parents up to `up_to` while they are empty."""
    while True:
        try:
            folder.rmdir()  # only if empty
        except OSError:
            return
        if folder == up_to or folder.parent == folder:
            return
        folder = folder.parent


def in_use(folder: Path | str) -> bool:
    """Whether a live run holds `folder` now (`holding`), without waiting or holding it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return False
    try:
        try:
            if lock(fd, timeout=0):
                unlock(fd)
            return False
        except LockBusy:
            return True
    finally:
        os.close(fd)
