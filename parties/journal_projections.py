"""The journal's projections: each release stored once, keyed by its parameters, Z kept
as a content-addressed `.npy` file beside the journal and hashed as it is read back."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

from pobo.protocol.ledger import Budget, Entry
from pobo.protocol.transcript import file_digest, read_hashing
from pobo.parties.journal_core import (
    JournalError, NPY_REF, _DIGEST, _fsync_dir, _unlink_quietly, log,
)


def _sweep_stale_tmp(folder: Path) -> None:
    """Remove the temporary files of projection writes whose process is gone (a curator
    killed while writing leaves one, as large as Z); another live writer's are kept."""
    for tmp in folder.glob(".*.npy.tmp"):
        try:
            pid = int(tmp.name.split(".")[1])
            os.kill(pid, 0)  # raises ProcessLookupError when no such process is running
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except (ValueError, IndexError, PermissionError):
            continue  # not one of ours, or another user's live process


def read_npy(path: Path, digest: str, shape: tuple[int, ...]):
    """The float64 array of `shape` in the .npy file `path`, read into memory through one
    descriptor and hashed as it is read, so that what was checked is what is served (a
    memory map checked first could change under a file rewritten in place, and a file
    truncated under it kills the process). Read-only. JournalError unless the file is a
    .npy of float64 in C order of `shape` whose bytes hash (SHA-256) to `digest`; it
    never unpickles anything."""
    import numpy as np
    from numpy.lib import format as npy

    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise JournalError(f"the journal's projection file {path} is missing") from None
    with f:
        try:
            version = npy.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version}")
            read_header = (npy.read_array_header_1_0 if version == (1, 0)
                           else npy.read_array_header_2_0)
            held, fortran, dtype = read_header(f)
        except ValueError as exc:
            raise JournalError(f"the journal's projection file {path} is not a .npy "
                               f"array: {exc}") from None
        if tuple(held) != tuple(shape) or fortran or dtype != np.dtype("<f8"):
            raise JournalError(f"the journal's projection file {path} holds {dtype} of shape "
                               f"{tuple(held)}{' (Fortran order)' if fortran else ''}, not "
                               f"float64 of shape {tuple(shape)}")
        header = f.tell()
        f.seek(0)
        hasher = hashlib.sha256(f.read(header))
        Z = np.empty(shape, dtype="<f8")
        if not read_hashing(f, memoryview(Z.reshape(-1)).cast("B"), hasher):
            raise JournalError(f"the journal's projection file {path} is truncated")
    if hasher.hexdigest() != digest:
        raise JournalError(f"the journal's projection file {path} is corrupt: it hashes to "
                           f"{hasher.hexdigest()}, the journal holds {digest}")
    Z.flags.writeable = False
    return Z


class ProjectionStore:
    """The projections a journal holds (a part of `parties.journal.Journal`)."""


    def projection_keys(self) -> list[str]:
        """The key of every projection stored, oldest first (what each was prepared with:
        its mechanism, epsilon, delta, lift, r and randomness, as JSON)."""
        return [k for k, in self._db.execute("SELECT key FROM projections ORDER BY rowid")]

    def projection(self, key: str):
        """(the stored ProjectedDataset, curator-private report), or None. A projection
        kept in a .npy file is read into memory and checked against the digest the
        journal holds as it is read (JournalError if it is missing or altered)."""
        row = self._db.execute("SELECT frame, report FROM projections WHERE key = ?",
                               (key,)).fetchone()
        if row is None:
            return None
        frame, report = row
        from pobo.protocol.codec import decode

        if not frame.startswith(NPY_REF):  # Z in memory, or in the row itself (older)
            return decode(frame).release, json.loads(report)
        ref = json.loads(frame[len(NPY_REF):])
        Z = (self._held_array(ref["memory"]) if "memory" in ref
             else read_npy(self.projection_dir / f"{ref['npy']}.npy", ref["npy"],
                           tuple(ref["shape"])))
        head = decode(bytes.fromhex(ref["dataset"])).release
        from dataclasses import replace

        return replace(head, Z=Z), json.loads(report)

    def _held_array(self, key: str):
        """An in-memory projection's Z in its stored order: the array itself, or, once its
        server permuted it in place (`hold_permuted`), its rows put back (a copy)."""
        import numpy as np

        held = self._arrays[key]
        if not isinstance(held, tuple):
            return held
        Z, order = held
        Z = Z[np.argsort(order)]
        Z.flags.writeable = False
        return Z

    def hold_permuted(self, key: str, Z, order) -> None:
        """Note that the in-memory projection `key` is now `Z` with its rows in `order` (row
        j the stored row order[j]): the service that serves it permuted the array this
        journal kept in place (parties/row_order.py), and one Z stays in memory, not two.
        Nothing to do on disk (the file keeps the stored order)."""
        if self.path == ":memory:" and key in self._arrays:
            self._arrays[key] = (Z, order)

    def store_projection(self, key: str, release, report: dict, entries: list[Entry],
                         budget: Budget) -> None:
        """Store a projection and charge its entries atomically (refused past the budget).
        On disk Z goes to a content-addressed .npy file (`projection_dir`), written and
        fsynced before the row that names it by SHA-256 (no SQLite blob: those stop at
        1 GB); an in-memory journal, which lives as long as the process, keeps Z itself
        (the release's own array, not a copy) and a reference to it in the row."""
        from dataclasses import replace

        import numpy as np

        from pobo.protocol.codec import encode
        from pobo.protocol.messages import Dataset

        if release.Z.ndim != 2 or release.Z.dtype != np.dtype("<f8"):  # all it reads back
            raise JournalError(f"a journal stores float64 projections (n x r), not "
                               f"{release.Z.dtype} of shape {release.Z.shape}")
        Z = release.Z if self.path == ":memory:" else np.ascontiguousarray(release.Z)
        head = encode(Dataset(replace(release, Z=np.empty((0, Z.shape[1]), Z.dtype))))
        tmp = None
        if self.path == ":memory:":
            where: dict = {"memory": key}
        else:
            digest, tmp = self._save_npy(Z)
            where = {"npy": digest}
        frame = NPY_REF + json.dumps({**where, "shape": list(Z.shape),
                                      "dataset": head.hex()}).encode()

        def insert() -> list[tuple[str, tuple]]:
            if tmp is not None:  # in place under the write lock, with the row naming it
                self._place_npy(tmp, where["npy"])
            return [("INSERT INTO projections VALUES (?, ?, ?, ?)",
                     (key, frame, json.dumps(report), time.time()))]

        try:
            self._transaction(insert, "", entries, budget)
        except BaseException:  # refused, raced or failed: no row names the file
            if "npy" in where:
                self._discard_npy(where["npy"])
            raise
        finally:
            if tmp is not None:
                _unlink_quietly(tmp)
        if "memory" in where:  # stored and charged: only now does the key name Z
            self._arrays[key] = Z

    def _discard_npy(self, digest: str) -> None:
        """Remove `<digest>.npy` unless a projection row names it (a file this process
        put in place for a store that did not commit), under the write lock: no other
        process can be between putting the same file in place and committing its row.
        Left for `sweep_projections` if the journal cannot be locked now."""
        try:
            self._unnamed_npy_removed({digest})
        except (sqlite3.Error, OSError) as exc:  # never over the store's own error
            log.warning("journal %s: projection file %s.npy left behind: %s", self.path,
                        digest, exc)

    def sweep_projections(self) -> int:
        """Remove the projection files no row names, under the write lock; the number
        removed. A curator killed between putting its Z's file in place and committing
        the row that names it leaves one, as large as Z, that no later store would
        reuse (an unseeded projection is drawn anew). No other process's store can be
        in between: a file goes in place only inside the transaction that names it
        (`store_projection`). A journal another process keeps locked past the busy
        timeout is swept at a later start (a warning)."""
        if self.path == ":memory:" or not self.projection_dir.is_dir():
            return 0
        try:
            removed = self._unnamed_npy_removed(None)
        except (sqlite3.Error, OSError) as exc:
            log.warning("journal %s: projection files not swept: %s", self.path, exc)
            return 0
        if removed:
            log.warning("journal %s: removed %d projection file(s) that no stored "
                        "projection names (left by a curator stopped while storing one)",
                        self.path, removed)
        return removed

    def _unnamed_npy_removed(self, digests: set[str] | None) -> int:
        """Under the write lock, remove the `<digest>.npy` files of `digests` (None: every
        one in the folder) that no projection row names; the number removed."""
        with self._lock:
            if self._group is not None:
                self._commit_group()  # a staged group first: its own transaction
            cur = self._db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                named = set()
                for (frame,) in cur.execute("SELECT frame FROM projections"):
                    if bytes(frame[:len(NPY_REF)]) == NPY_REF:
                        named.add(json.loads(bytes(frame[len(NPY_REF):])).get("npy"))
                candidates = ({p.stem for p in self.projection_dir.glob("*.npy")}
                              if digests is None else digests)
                removed = 0
                for digest in candidates - named:
                    if _DIGEST.fullmatch(digest or ""):
                        path = self.projection_dir / f"{digest}.npy"
                        if path.is_file():
                            path.unlink()
                            removed += 1
                return removed
            finally:
                cur.execute("ROLLBACK")  # nothing written: the lock is all it took

    @property
    def projection_dir(self) -> Path:
        """Where an on-disk journal keeps its projections: `<journal>.projections/`, beside
        the journal's real file (the same folder whatever link or relative path opened
        it)."""
        return Path(self._real_path + ".projections")

    def _save_npy(self, Z) -> tuple[str, Path]:
        """Write Z to a temporary file in `projection_dir`, fsynced; (the SHA-256 of its
        bytes, the file), for `_place_npy` to put in place as `<digest>.npy` inside the
        transaction whose row names it. JournalError (one line) when the file cannot be
        written (a full disk); nothing is left behind then."""
        import secrets

        import numpy as np

        folder = self.projection_dir
        tmp = folder / f".{os.getpid()}.{secrets.token_hex(4)}.npy.tmp"
        try:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True)
                _fsync_dir(folder.parent)  # the folder's own entry, before a row names it
            _sweep_stale_tmp(folder)
            with open(tmp, "wb") as f:
                np.save(f, Z, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            return file_digest(tmp), tmp
        except OSError as exc:
            _unlink_quietly(tmp)
            raise JournalError(f"cannot write the projection file in {folder}: "
                               f"{exc.strerror or exc}") from exc

    def _place_npy(self, tmp: Path, digest: str) -> None:
        """Rename the written file to `<digest>.npy` (a copy already there has the same
        bytes, or is damaged: replaced either way) and fsync the folder, so that the
        rename is durable before the row that names it commits."""
        folder = self.projection_dir
        try:
            os.replace(tmp, folder / f"{digest}.npy")
            _fsync_dir(folder)
        except OSError as exc:
            raise JournalError(f"cannot write the projection file in {folder}: "
                               f"{exc.strerror or exc}") from exc
