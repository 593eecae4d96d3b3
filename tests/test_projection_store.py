"""Projections kept as content-addressed .npy files next to the journal (issue 23 item 2):
no SQLite blob (and so no 1 GB cap), memory-mapped on load, verified against the digest
the journal holds, refused in one typed line when missing or altered."""
from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pytest

from pobo.parties.journal import NPY_REF, Journal, JournalError
from pobo.protocol.codec import encode
from pobo.protocol.ledger import Budget, Entry, PrivacyBudgetExceeded
from pobo.protocol.messages import Dataset, ProjectedDataset


def _release(n: int = 500, r: int = 4, seed: int = 0) -> ProjectedDataset:
    Z = np.random.default_rng(seed).standard_normal((n, r))
    return ProjectedDataset("gaussian-release", 1.0, 1e-5, 0.0, Z, noise_std=0.25)


def _store(journal: Journal, release: ProjectedDataset, key: str = "k") -> None:
    journal.store_projection(key, release, {"lifted": False}, [Entry("gaussian", 1.0, 1e-5)],
                             Budget(epsilon=10.0))


def _stored_file(journal: Journal, key: str = "k"):
    frame = journal._db.execute("SELECT frame FROM projections WHERE key = ?",
                                (key,)).fetchone()[0]
    assert frame.startswith(NPY_REF) and len(frame) < 4096  # a reference, not Z
    files = list(journal.projection_dir.glob("*.npy"))
    assert len(files) == 1
    return files[0]


def test_an_on_disk_journal_keeps_z_in_a_file_named_by_its_digest(tmp_path):
    journal = Journal(tmp_path / "j.db")
    release = _release()
    _store(journal, release)
    path = _stored_file(journal)
    assert path.stem == hashlib.sha256(path.read_bytes()).hexdigest()
    back, report = Journal(tmp_path / "j.db").projection("k")  # as a restarted curator
    assert report == {"lifted": False} and back == release
    assert isinstance(back.Z, np.memmap) and not back.Z.flags.writeable
    assert (back.mechanism, back.noise_std, back.dp) == ("gaussian-release", 0.25, True)
    assert journal.entries() == [Entry("gaussian", 1.0, 1e-5)]  # charged with the row


def test_a_projection_larger_than_sqlites_blob_limit_is_stored(tmp_path):
    """SQLite's length limit lowered to 64 kB stands for its 1 GB cap: a 320 kB Z (the
    whole frame inline would be refused) is stored and read back."""
    journal = Journal(tmp_path / "j.db")
    journal._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 16)
    release = _release(n=10_000, r=4)
    _store(journal, release)
    assert journal.projection("k")[0] == release
    inline = Journal(":memory:")  # keeps Z in the process, a reference in the row
    inline._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 16)
    _store(inline, release)
    assert inline.projection("k")[0] == release


def test_an_altered_projection_file_is_refused_on_load(tmp_path):
    journal = Journal(tmp_path / "j.db")
    _store(journal, _release())
    path = _stored_file(journal)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one bit of one coordinate of Z
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match="corrupt"):
        journal.projection("k")


def test_a_missing_projection_file_is_refused_on_load(tmp_path):
    journal = Journal(tmp_path / "j.db")
    _store(journal, _release())
    _stored_file(journal).unlink()
    with pytest.raises(JournalError, match="missing"):
        journal.projection("k")


def test_the_same_z_is_stored_once(tmp_path):
    journal = Journal(tmp_path / "j.db")
    _store(journal, _release(seed=3), "a")
    _store(journal, _release(seed=3), "b")
    assert len(list(journal.projection_dir.glob("*.npy"))) == 1
    assert journal.projection("a")[0] == journal.projection("b")[0]
    assert not list(journal.projection_dir.glob("*.tmp"))


def test_an_in_memory_journal_keeps_z_itself_not_a_copy():
    """n = 1e7 x r = 20 is 1.6 GB: an in-memory journal holds the release's own array and
    a reference to it in the row, never an encoded copy (which SQLite caps at 1 GB)."""
    journal = Journal()
    release = _release()
    _store(journal, release)
    frame = journal._db.execute("SELECT frame FROM projections").fetchone()[0]
    assert frame.startswith(NPY_REF) and len(frame) < 4096
    back = journal.projection("k")[0]
    assert back == release and back.Z is release.Z


def test_a_refused_in_memory_projection_is_not_kept():
    """Past the budget the row is rolled back, and Z is not held either."""
    journal = Journal()
    with pytest.raises(PrivacyBudgetExceeded):
        journal.store_projection("k", _release(), {}, [Entry("gaussian", 2.0, 1e-5)],
                                 Budget(epsilon=1.0))
    assert journal.projection("k") is None and not journal._arrays


def test_a_service_in_memory_keeps_the_releases_own_z_and_sends_what_a_disk_one_sends(
        tmp_path):
    """The in-memory journal holds the release's own array (no copy); a service on
    disk sends the same Dataset bytes."""
    from pobo.protocol.codec import decode
    from pobo.session import RunConfig, prepare_service

    config = RunConfig("synthetic", T=5, seed=1, options={"grid": 10})
    memory = prepare_service(config)
    assert memory.journal._arrays[memory.projection_key] is memory.release.Z
    assert decode(memory.dataset_body.body).release == memory.release
    disk = prepare_service(config, journal=Journal(tmp_path / "j.db"))
    assert disk.dataset_body.body == memory.dataset_body.body
    assert disk.journal.projection(disk.projection_key)[0] == memory.release
