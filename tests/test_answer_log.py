"""The answer log of a file journal at durability normal (parties.answer_log): an answer
with no charge is one record appended to its session's log instead of a SQLite
transaction. Each test attacks one guarantee the transaction gave: durable before the
reward (kill -9), fenced against a superseded connection (in this process and in
another), never evaluated twice, refused as the table refuses, a full disk, a damaged
file, a racing claim, and folded into the table when a session is resumed or ends."""
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys

import pytest

from pobo.parties import answer_log
from pobo.protocol import filelock
from pobo.parties.journal import Journal, JournalError, JournalFault, Superseded
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import LOCAL, Budget, Entry
from tests.curator_process import ROOT

SID = "a" * 32
OWNER = "key-1"


def _opened(path, session: str = SID) -> Journal:
    journal = Journal(path, durability="normal")
    journal.open_session(session, {}, b"welcome", "p", "d", OWNER)
    return journal


def _answer(journal: Journal, seq: int, generation: int | None = 1, calls: list | None = None,
            value: float | None = None, session: str = SID):
    def evaluate():
        if calls is not None:
            calls.append(seq)
        return (0.25 * seq, 0.5 * seq if value is None else value)
    return journal.record_answer(session, generation, seq, seq % 7, [], Budget(), evaluate)


def _charge(row: int, epsilon: float = 0.5) -> list[Entry]:
    """An LDP report's ledger entry on `row` (an answer that goes to the table)."""
    return [Entry("ctl-laplace", epsilon, 0.0, LOCAL, row)]


def _table(path, session: str = SID) -> dict[int, float]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT seq, value FROM answers WHERE session = ?", (session,)))


def _log(journal: Journal, session: str = SID):
    return answer_log.log_path(journal.answer_dir, session)


def test_an_answer_goes_to_the_log_then_to_the_table_when_the_session_ends(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    for seq in range(1, 6):
        assert _answer(journal, seq) == (0.25 * seq, 0.5 * seq)
    assert _table(path) == {} and _log(journal).exists()  # no transaction per answer
    reader = Journal(path)  # another connection merges the log with the table
    assert [a[0] for a in reader.load(SID).answers] == [1, 2, 3, 4, 5]
    journal.set_status(SID, 1, "ok")
    assert _table(path) == {seq: 0.5 * seq for seq in range(1, 6)}
    assert not _log(journal).exists()  # folded, then removed
    assert reader.load(SID).answers == [(s, s % 7, 0.25 * s, 0.5 * s) for s in range(1, 6)]
    reader.close()
    journal.close()


def test_a_full_durability_or_an_in_memory_journal_keeps_no_log(tmp_path):
    full = Journal(tmp_path / "f.db", durability="full")
    full.open_session(SID, {}, b"w", "p", "d", OWNER)
    assert not full.logging and not full.answer_dir.exists()
    memory = Journal()
    assert not memory.logging
    full.close()
    memory.close()


def test_a_claim_in_this_process_fences_the_older_connection_before_f(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    assert journal.claim(SID, OWNER) == 2
    calls: list[int] = []
    with pytest.raises(Superseded):
        _answer(journal, 2, generation=1, calls=calls)
    assert calls == []  # f never evaluated by the superseded connection
    assert _table(path) == {1: 0.5}  # the claim folded the log's answers into the table
    _answer(journal, 2, generation=2)
    assert [a[0] for a in journal.load(SID).answers] == [1, 2]
    journal.close()


def test_a_claim_by_another_process_fences_the_writer_through_the_file(tmp_path):
    """Two Journal objects on one file hold two open files, as two processes do: the
    claim's CLAIM record is what the older writer's length check sees."""
    path = tmp_path / "j.db"
    old = _opened(path)
    _answer(old, 1)
    new = Journal(path, durability="normal")
    assert new.claim(SID, OWNER) == 2
    calls: list[int] = []
    with pytest.raises(Superseded):
        _answer(old, 2, generation=1, calls=calls)
    with pytest.raises(Superseded):  # and again: it never answers after
        _answer(old, 3, generation=1, calls=calls)
    assert calls == []
    _answer(new, 2, generation=2)
    assert [a[0] for a in Journal(path).load(SID).answers] == [1, 2]
    old.close()
    new.close()


def test_a_refused_claim_supersedes_nobody(tmp_path):
    """Another key's claim (or an unknown session's) is refused before the log is
    touched: the owner's connection goes on answering."""
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    hostile = Journal(path, durability="normal")
    with pytest.raises(ProtocolError) as caught:
        hostile.claim(SID, "key-2")
    assert caught.value.code == ErrorCode.NOT_OWNER
    with pytest.raises(ProtocolError):
        hostile.claim("b" * 32, OWNER)
    _answer(journal, 2)  # not superseded
    assert not answer_log.log_path(journal.answer_dir, "b" * 32).exists()
    hostile.close()
    journal.close()


def test_a_duplicate_seq_is_refused_as_the_table_refuses_it_and_f_is_not_evaluated(tmp_path):
    journal = _opened(tmp_path / "j.db")
    _answer(journal, 1)
    calls: list[int] = []
    with pytest.raises(sqlite3.IntegrityError):
        _answer(journal, 1, calls=calls)
    assert calls == []
    journal.claim(SID, OWNER)  # a resumed connection knows the folded answers too
    with pytest.raises(sqlite3.IntegrityError):
        _answer(journal, 1, generation=2, calls=calls)
    assert calls == []
    journal.close()


def test_a_value_the_table_would_refuse_goes_to_the_table_and_is_refused(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    with pytest.raises(sqlite3.IntegrityError):
        _answer(journal, 1, value=float("nan"))  # stored as NULL: NOT NULL refuses it
    assert journal.fault is None and journal.load(SID).answers == []
    _answer(journal, 1, value=3)  # an int: the table keeps it (as its REAL column does)
    assert _table(path) == {1: 3.0}
    journal.close()


def test_a_full_disk_is_a_sticky_fault_and_the_log_stays_whole(tmp_path, monkeypatch):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    real_write = os.write

    def short(fd, data):  # the disk fills half way through the record
        return real_write(fd, data[:len(data) // 2])

    monkeypatch.setattr(answer_log.os, "write", short)
    with pytest.raises(JournalFault):
        _answer(journal, 2)
    monkeypatch.setattr(answer_log.os, "write", real_write)
    with pytest.raises(JournalFault):  # sticky: nothing more is answered
        _answer(journal, 3)
    assert [a[0] for a in Journal(path).load(SID).answers] == [1]  # cut back, readable


def test_a_damaged_log_is_a_typed_one_line_error_for_every_reader(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    journal.close()
    log = _log(journal)
    intact = log.read_bytes()
    for damaged in (intact[:-8] + b"\xff" * 8, intact[:60] + bytes([intact[60] ^ 0xFF]) + intact[61:],
                    answer_log.MAGIC + b"b" * 32 + intact[48:]):
        log.write_bytes(damaged)
        reader = Journal(path)
        with pytest.raises(JournalError) as caught:
            reader.load(SID)
        assert "\n" not in str(caught.value) and "answer log" in str(caught.value)
        with pytest.raises(JournalError):  # nor is it folded into the table by a claim
            reader.claim(SID, OWNER)
        reader.close()
    assert _table(path) == {}


def test_a_record_cut_short_is_cut_off_by_the_next_claim(tmp_path, caplog):
    """A machine crash inside an append leaves part of a record (a killed process never
    does: its write is whole or not at all). Readers refuse the log, typed; the next
    claim cuts the part off (with a warning) and keeps every whole answer."""
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    journal.close()
    log = _log(journal)
    log.write_bytes(log.read_bytes() + answer_log.record(answer_log.ANSWER, 1, 2, 2, 0.5,
                                                         1.0)[:20])
    reader = Journal(path)
    with pytest.raises(JournalError, match="partial record"):
        reader.load(SID)
    assert reader.claim(SID, OWNER) == 2 and "cut off" in caplog.text
    assert [a[0] for a in reader.load(SID).answers] == [1] and _table(path) == {1: 0.5}
    reader.close()


def test_a_resume_after_kill_9_keeps_every_announced_answer(tmp_path):
    """A writer process killed while appending: every answer it announced (after
    record_answer returned, as a reward is sent after it) is in the journal, and a
    claim folds them into the table."""
    path = tmp_path / "j.db"
    script = f"""
import sys
from pobo.parties.journal import Journal
from pobo.protocol.ledger import Budget
journal = Journal(sys.argv[1], durability="normal")
journal.open_session({SID!r}, {{}}, b"w", "p", "d", {OWNER!r})
for seq in range(1, 10_000_000):
    journal.record_answer({SID!r}, 1, seq, seq % 7, [], Budget(), lambda: (0.25 * seq, 0.5 * seq))
    print(seq, flush=True)
"""
    writer = subprocess.Popen([sys.executable, "-c", script, str(path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        announced = [int(writer.stdout.readline()) for _ in range(300)]
        writer.kill()
        writer.wait(15)
        announced += [int(line) for line in writer.stdout.read().split()]
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(15)
    journal = Journal(path, durability="normal")
    assert journal.claim(SID, OWNER) == 2
    kept = _table(path)
    assert set(announced) <= set(kept) and all(kept[s] == 0.5 * s for s in kept)
    assert sorted(kept) == list(range(1, len(kept) + 1))  # nothing half, nothing skipped
    journal.close()


RACER = f"""
import sys
from pobo.parties.journal import Journal, Superseded
from pobo.protocol.ledger import Budget
journal = Journal(sys.argv[1], durability="normal")
journal.open_session({SID!r}, {{}}, b"w", "p", "d", {OWNER!r})
print("open", flush=True)
evaluated = []
def evaluate(seq):
    evaluated.append(seq)
    return 0.25 * seq, 0.5 * seq
try:
    for seq in range(1, 10_000_000):
        journal.record_answer({SID!r}, 1, seq, seq % 7, [], Budget(), lambda: evaluate(seq))
except Superseded:
    print("superseded", evaluated[-1] if evaluated else 0, flush=True)
"""


@pytest.mark.parametrize("trial", range(3))
def test_a_claim_racing_a_writer_in_another_process_loses_nothing_and_stops_it(tmp_path,
                                                                              trial):
    """The writer appends as fast as it can while this process claims the session: the
    writer stops with Superseded, every answer it evaluated is in the journal, and no
    record of the old generation follows the claim's."""
    path = tmp_path / "j.db"
    writer = subprocess.Popen([sys.executable, "-c", RACER, str(path)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        claimer = Journal(path, durability="normal")
        assert claimer.claim(SID, OWNER) == 2
        out = writer.communicate(timeout=30)[0].split()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(15)
    assert out[0] == "superseded"
    last = int(out[1])
    answers = claimer.load(SID).answers
    assert [a[0] for a in answers] == list(range(1, last + 1))  # all it evaluated, in order
    assert set(_table(path)) == set(range(1, last + 1))  # folded by the claim
    records = list(answer_log.RECORD.iter_unpack(_log(claimer).read_bytes()[48:]))
    claim_at = next(i for i, r in enumerate(records) if r[0] == answer_log.CLAIM and r[2] == 2)
    assert all(r[2] == 2 for r in records[claim_at:])  # nothing of generation 1 after it
    claimer.close()


def test_an_older_writer_of_a_finished_session_is_fenced(tmp_path):
    """The session ends (its log folded and removed) while an older connection in
    another process still holds the removed file open: its next answer is refused."""
    path = tmp_path / "j.db"
    old = _opened(path)
    _answer(old, 1)
    new = Journal(path, durability="normal")
    new.claim(SID, OWNER)
    _answer(new, 2, generation=2)
    new.set_status(SID, 2, "ok")
    assert not _log(new).exists() and _table(path) == {1: 0.5, 2: 1.0}
    with pytest.raises(Superseded):
        _answer(old, 3, generation=1)
    with pytest.raises(ProtocolError) as caught:  # and no claim reopens it
        new.claim(SID, OWNER)
    assert caught.value.code == ErrorCode.SESSION_CLOSED and not _log(new).exists()
    old.close()
    new.close()


def test_without_flock_a_session_answers_through_sqlite(tmp_path, monkeypatch):
    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(filelock.fcntl, "flock", no_locks)
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    assert _table(path) == {1: 0.5}  # a transaction, as before the log
    journal.close()


def test_a_superseded_connection_cannot_finish_the_session(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    other = Journal(path, durability="normal")
    other.claim(SID, OWNER)
    with pytest.raises(Superseded):
        journal.set_status(SID, 1, "ok")
    assert _log(journal).exists()  # still the new connection's
    _answer(other, 2, generation=2)
    other.set_status(SID, 2, "ok")
    assert _table(path) == {1: 0.5, 2: 1.0}
    journal.close()
    other.close()


def test_a_service_keeps_no_open_log_for_a_session_that_ended(tmp_path):
    """Sessions whose peer vanished (interrupted) or that finished close their logs: a
    long-lived curator does not run out of file descriptors."""
    path = tmp_path / "j.db"
    journal = Journal(path, durability="normal")
    before = len(os.listdir("/proc/self/fd"))
    for k in range(300):
        sid = f"{k:032x}"
        journal.open_session(sid, {}, b"w", "p", "d", OWNER)
        _answer(journal, 1, session=sid)
        journal.set_status(sid, 1, "interrupted" if k % 2 else "ok")
    assert len(os.listdir("/proc/self/fd")) - before < 5
    assert len(list(journal.answer_dir.iterdir())) == 150  # the interrupted ones' logs
    reader = Journal(path)
    assert reader.load(f"{1:032x}").answers == [(1, 1, 0.25, 0.5)]
    assert journal.claim(f"{1:032x}", OWNER) == 2  # resumable: it answers again
    _answer(journal, 2, generation=2, session=f"{1:032x}")
    reader.close()
    journal.close()


# -- what a review of the log found (each fails on the log's first version) -------------

def test_a_claim_whose_claim_record_cannot_be_written_is_not_committed(tmp_path, monkeypatch):
    """The CLAIM record goes in before the claim commits: if the disk refuses it, the
    claim is rolled back, so no older writer goes on answering a session SQLite says
    another connection owns."""
    path = tmp_path / "j.db"
    old = _opened(path)
    _answer(old, 1)
    claimer = Journal(path, durability="normal")

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(answer_log.os, "write", full)
    with pytest.raises(JournalFault):
        claimer.claim(SID, OWNER)
    monkeypatch.undo()
    assert old.current(SID, 1)  # the claim left no trace: generation 1 still answers
    _answer(old, 2)
    old.close()


def test_a_connection_superseded_by_another_process_closes_its_log(tmp_path):
    path = tmp_path / "j.db"
    a, b = Journal(path, durability="normal"), Journal(path, durability="normal")
    before = len(os.listdir("/proc/self/fd"))
    for k in range(100):
        sid = f"{k:032x}"
        a.open_session(sid, {}, b"w", "p", "d", OWNER)
        _answer(a, 1, session=sid)
        b.claim(sid, OWNER)
        b.set_status(sid, 2, "ok")
        assert not a.current(sid, 1)  # what the curator asks before it records a status
    assert a._logs == {} and len(os.listdir("/proc/self/fd")) - before < 5
    a.close()
    b.close()


def _slow_answer(writer: Journal, seconds: float):
    """A thread answering seq 1 with an f that takes `seconds` (holding the log's lock
    all along), started, and the event set once f has begun."""
    import threading
    import time

    started = threading.Event()

    def slow():
        started.set()
        time.sleep(seconds)
        return 1.0, 1.0

    answering = threading.Thread(target=writer.record_answer,
                                 args=(SID, 1, 1, 1, [], Budget(), slow))
    answering.start()
    return answering, started


def test_a_claim_waits_busy_timeout_for_a_slow_answer_and_a_reader_not_at_all(tmp_path):
    import time

    path = tmp_path / "j.db"
    writer = _opened(path)
    answering, started = _slow_answer(writer, 1.0)
    try:
        assert started.wait(5)
        other = Journal(path, durability="normal", busy_timeout=0.2)
        t0 = time.monotonic()
        assert other.load(SID).answers == []  # a reader takes no lock
        assert time.monotonic() - t0 < 0.5
        t0 = time.monotonic()
        with pytest.raises(ProtocolError) as busy:
            other.claim(SID, OWNER)
        assert busy.value.code is ErrorCode.BUSY and time.monotonic() - t0 < 0.9
    finally:
        answering.join(10)
    assert other.claim(SID, OWNER) == 2 and _table(path) == {1: 1.0}
    other.close()
    writer.close()


def test_a_logged_seq_is_refused_by_the_table_paths_before_any_charge(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    charge = _charge(1)
    calls: list[int] = []
    with pytest.raises(sqlite3.IntegrityError):
        journal.record_answer(SID, 1, 1, 1, charge, Budget(), lambda: calls.append(1))
    with pytest.raises(sqlite3.IntegrityError):
        journal.reserve(SID, 1, 1, 1, charge, Budget())
    assert calls == [] and journal.entries() == []
    journal.close()


def test_a_session_mixing_the_two_paths_keeps_the_order_of_answering(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    for seq in range(1, 6):
        entries = _charge(seq) if seq % 2 == 0 else []
        journal.record_answer(SID, 1, seq, seq, entries, Budget(), lambda: (1.0, 1.0))
    assert [a[0] for a in journal.load(SID).answers] == [1, 2, 3, 4, 5]
    journal.claim(SID, OWNER)
    assert [a[0] for a in journal.load(SID).answers] == [1, 2, 3, 4, 5]
    journal.close()


def test_no_log_is_left_by_a_claim_refused_as_the_session_finishes(tmp_path, monkeypatch):
    """A claim that finds the session finished between its first check and its
    transaction removes the log it holds; a log a killed curator left behind at a
    session's end is swept at the next start."""
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    claimer = Journal(path, durability="normal")
    checks = iter([True])
    real = claimer.claimable

    def finishing_meanwhile(session, owner):
        generation = real(session, owner)
        if next(checks, False):  # after the first check, the owner's connection ends it
            journal.set_status(SID, 1, "ok")
        return generation

    monkeypatch.setattr(claimer, "claimable", finishing_meanwhile)
    with pytest.raises(ProtocolError) as closed:
        claimer.claim(SID, OWNER)
    assert closed.value.code == ErrorCode.SESSION_CLOSED and not _log(journal).exists()
    _log(journal).write_bytes(answer_log.MAGIC + SID.encode())  # as a kill -9 leaves it
    assert Journal(path).sweep_answer_logs() == 1 and not _log(journal).exists()
    assert _table(path) == {1: 0.5}
    journal.close()
    claimer.close()


def test_a_log_whose_header_could_not_be_written_leaves_the_session_whole(tmp_path,
                                                                          monkeypatch):
    real_write = os.write
    monkeypatch.setattr(answer_log.os, "write", lambda fd, data: real_write(fd, data[:20]))
    path = tmp_path / "j.db"
    journal = _opened(path)  # no log: the session answers through SQLite
    monkeypatch.undo()
    _answer(journal, 1)
    assert Journal(path).load(SID).answers == [(1, 1, 0.25, 0.5)]
    assert journal.claim(SID, OWNER) == 2
    journal.set_status(SID, 2, "ok")
    assert _table(path) == {1: 0.5}
    journal.close()


@pytest.mark.parametrize("session", ["x" * 40, "a/b", "../../escaped", "é" * 4, ""])
def test_an_id_that_names_no_file_safely_answers_through_sqlite(tmp_path, session):
    path = tmp_path / "j.db"
    journal = _opened(path, session)
    _answer(journal, 1, session=session)
    assert _table(path, session) == {1: 0.5}
    assert journal.claim(session, OWNER) == 2
    journal.set_status(session, 2, "ok")
    assert not list(tmp_path.rglob("*.log"))
    journal.close()


def test_a_log_removed_under_its_writer_stops_the_journal_before_f(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    _log(journal).unlink()
    calls: list[int] = []
    with pytest.raises(JournalFault):
        _answer(journal, 2, calls=calls)
    assert calls == []
    with pytest.raises(JournalError, match="missing"):  # nor read as holding no answers
        Journal(path).load(SID)
    journal.close()


@pytest.mark.parametrize("replace", ["fifo", "directory", "symlink"])
def test_a_log_path_that_is_no_regular_file_is_typed_and_never_waits(tmp_path, replace):
    import time

    path = tmp_path / "j.db"
    journal = _opened(path)
    journal.close()
    log = _log(journal)
    log.unlink()
    if replace == "fifo":
        os.mkfifo(log)
    elif replace == "directory":
        log.mkdir()
    else:
        log.symlink_to("/dev/zero")
    reader = Journal(path)
    t0 = time.monotonic()
    for call in (lambda: reader.load(SID), lambda: reader.claim(SID, OWNER)):
        with pytest.raises(JournalError):
            call()
    assert time.monotonic() - t0 < 2
    reader.close()


def test_a_copy_of_the_journal_without_its_answers_folder_is_refused(tmp_path):
    import shutil

    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    copy = tmp_path / "copy.db"
    with sqlite3.connect(path) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    copied = Journal(copy, durability="normal")
    for call in (lambda: copied.load(SID), lambda: copied.claim(SID, OWNER)):
        with pytest.raises(JournalError, match="missing"):
            call()
    shutil.copytree(journal.answer_dir, copied.answer_dir, dirs_exist_ok=True)  # with it: all
    assert [a[0] for a in copied.load(SID).answers] == [1]
    copied.close()
    journal.close()


# -- a second review, of the fixes (each fails on 524cb35) ---------------------------------

def test_a_claim_that_fails_after_its_record_leaves_the_old_writer_answering(tmp_path,
                                                                             monkeypatch):
    """The claim appended its CLAIM record, then its transaction failed (here: refused
    after it; a kill -9 before the COMMIT is the same): the session is still generation
    1's, whose writer takes the record as a failed claim's and goes on, refusing a
    duplicate as before."""
    path = tmp_path / "j.db"
    old = _opened(path)
    _answer(old, 1)
    claimer = Journal(path, durability="normal")

    def refused(session, fd):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(claimer, "_log_noted", refused)
    with pytest.raises(JournalFault):
        claimer.claim(SID, OWNER)
    assert _log(old).stat().st_size == 48 * 3  # header, answer 1, the failed claim's record
    _answer(old, 2)
    with pytest.raises(sqlite3.IntegrityError):
        _answer(old, 1)
    assert [a[0] for a in Journal(path).load(SID).answers] == [1, 2]
    old.close()


def _holding_sqlite(path):
    """Another connection holding SQLite's write lock (closed by the caller)."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_an_end_refused_busy_keeps_the_log_and_a_table_write_never_repeats_a_logged_seq(
        tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path, durability="normal", busy_timeout=0.2)
    journal.open_session(SID, {}, b"w", "p", "d", OWNER)
    _answer(journal, 1)
    holder = _holding_sqlite(path)
    with pytest.raises(ProtocolError) as busy:
        journal.set_status(SID, 1, "ok")
    holder.rollback()
    holder.close()
    assert busy.value.code is ErrorCode.BUSY
    with pytest.raises(sqlite3.IntegrityError):  # the log still answers for seq 1
        _answer(journal, 1)
    journal.set_status(SID, 1, "interrupted")  # the connection ends: its log is closed
    charge = _charge(1)
    with pytest.raises(sqlite3.IntegrityError):  # through the table: folded in first
        journal.record_answer(SID, 1, 1, 1, charge, Budget(), lambda: (9.0, 9.0))
    assert journal.entries() == [] and _table(path) == {1: 0.5}
    journal.close()


def test_a_session_whose_row_is_refused_leaves_no_log_and_strays_are_swept(tmp_path):
    path = tmp_path / "j.db"
    journal = Journal(path, durability="normal", busy_timeout=0.2)
    holder = _holding_sqlite(path)
    with pytest.raises(ProtocolError):
        journal.open_session(SID, {}, b"w", "p", "d", OWNER)
    holder.rollback()
    holder.close()
    assert not _log(journal).exists()
    stray = answer_log.log_path(journal.answer_dir, "b" * 32)  # a killed opener's
    stray.write_bytes(answer_log.MAGIC + b"b" * 32)
    assert journal.sweep_answer_logs() == 1 and not stray.exists()
    journal.close()


def test_a_claim_waits_one_busy_timeout_for_both_locks(tmp_path):
    import time

    path = tmp_path / "j.db"
    writer = _opened(path)
    holder = sqlite3.connect(path, isolation_level=None)
    claimer = Journal(path, durability="normal", busy_timeout=0.8)
    answering, started = _slow_answer(writer, 0.6)  # holds the log's lock
    try:
        assert started.wait(5)
        holder.execute("BEGIN IMMEDIATE")  # and SQLite's, longer
        t0 = time.monotonic()
        with pytest.raises(ProtocolError) as busy:
            claimer.claim(SID, OWNER)
        waited = time.monotonic() - t0
    finally:
        answering.join(10)
        holder.rollback()
        holder.close()
    assert busy.value.code is ErrorCode.BUSY and waited < 1.15  # not 0.6 + 0.8
    claimer.close()
    writer.close()


@pytest.mark.parametrize("damage", ["cut to a record", "an older copy", "header cut"])
def test_a_log_shorter_than_the_journal_noted_is_refused_never_repaired(tmp_path, damage):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    older = _log(journal).read_bytes()
    journal.claim(SID, OWNER)  # notes the log's length, its record included
    _answer(journal, 2, generation=2)
    journal.close()
    log = _log(journal)
    if damage == "cut to a record":
        log.write_bytes(log.read_bytes()[:48 * 2])
    elif damage == "an older copy":
        log.write_bytes(older)
    else:
        log.write_bytes(log.read_bytes()[:20])
    size = log.stat().st_size
    reader = Journal(path, durability="normal")
    for call in (lambda: reader.load(SID), lambda: reader.claim(SID, OWNER),
                 lambda: reader.set_status(SID, 2, "ok")):
        with pytest.raises(JournalError):
            call()
    assert log.stat().st_size == size  # left as found: never made empty again
    reader.close()


def test_a_claim_from_a_full_journal_in_a_group_does_not_wait_on_the_log(tmp_path):
    """A full journal's group transaction holds SQLite's lock; its claim commits the
    group before it takes a log's lock, so a normal connection folding its log (which
    takes the log's lock, then SQLite's) is not held up."""
    import asyncio
    import threading
    import time

    path = tmp_path / "j.db"
    normal = Journal(path, durability="normal", busy_timeout=2.0)
    normal.open_session(SID, {}, b"w", "p", "d", OWNER)
    _answer(normal, 1)
    full = Journal(path, durability="full", busy_timeout=2.0)
    full.open_session("c" * 32, {}, b"w", "p", "d", OWNER)
    staged, took = threading.Event(), {}

    def charged():
        staged.wait(10)
        t0 = time.monotonic()
        normal.record_answer(SID, 1, 2, 2, _charge(2),
                             Budget(), lambda: (1.0, 1.0))
        took["normal"] = time.monotonic() - t0

    async def grouped():
        full.record_answer("c" * 32, 1, 1, 1, [], Budget(), lambda: (1.0, 1.0))
        staged.set()
        time.sleep(0.3)  # the normal side takes the log's lock meanwhile
        t0 = time.monotonic()
        full.claim(SID, OWNER)
        took["claim"] = time.monotonic() - t0
        await full.committed()

    side = threading.Thread(target=charged)
    side.start()
    asyncio.run(asyncio.wait_for(grouped(), 30))
    side.join(30)
    assert took["normal"] < 1.0 and took["claim"] < 1.0
    normal.close()
    full.close()


def test_a_finished_sessions_fold_is_fsynced_before_its_log_is_removed(tmp_path):
    """At normal a COMMIT is not fsynced: a power loss could keep the log's removal and
    lose the fold. The finishing transaction commits at synchronous=FULL."""
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    said: list[str] = []
    journal._conn.set_trace_callback(said.append)
    journal.set_status(SID, 1, "ok")
    journal._conn.set_trace_callback(None)
    full, commit = said.index("PRAGMA synchronous=FULL"), said.index("COMMIT")
    assert full < commit < said.index("PRAGMA synchronous=NORMAL")
    journal.close()


# -- a third review, of the second round (each fails on 6480065) ----------------------------

def test_a_resumed_sessions_table_writes_do_not_read_its_log_again(tmp_path, monkeypatch):
    """At full a claim leaves a (folded) log; the session's later table writes cost a
    stat each, not a read of the log and a SELECT of every answer, and group commit
    still groups them."""
    import asyncio

    path = tmp_path / "j.db"
    opener = _opened(path)
    for seq in range(1, 201):
        _answer(opener, seq)
    opener.close()
    full = Journal(path, durability="full")
    full.claim(SID, OWNER)
    reads: list[int] = []
    real = answer_log.read_from
    monkeypatch.setattr(answer_log, "read_from", lambda fd: reads.append(fd) or real(fd))
    before = full.commits

    async def answers():
        for seq in range(201, 241):
            full.record_answer(SID, 2, seq, seq, _charge(seq, 0.1),
                               Budget(), lambda: (1.0, 1.0))
            if seq % 8 == 0:
                await full.committed()
        await full.committed()

    asyncio.run(answers())
    assert reads == [] and full.commits - before <= 5  # grouped, 8 a turn
    assert len(full.load(SID).answers) == 240
    full.close()


READER = """
import sys, time
from pobo.parties.journal import Journal, JournalError
journal = Journal(sys.argv[1], durability="normal")
errors, loads, end = [], 0, time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    try:
        journal.load(sys.argv[2])
        loads += 1
    except JournalError as exc:
        errors.append(str(exc))
print(loads, len(errors), errors[:1])
"""


def test_readers_never_call_a_healthy_log_cut_while_it_is_claimed(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    readers = [subprocess.Popen([sys.executable, "-c", READER, str(path), SID, "2.0"],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        generation, seq = 1, 0
        import time
        end = time.monotonic() + 2.0
        while time.monotonic() < end:  # claims and appends as fast as they go
            generation = journal.claim(SID, OWNER)
            for _ in range(3):
                seq += 1
                _answer(journal, seq, generation=generation)
        outs = [r.communicate(timeout=30)[0].split(maxsplit=2) for r in readers]
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
                r.wait(10)
    assert generation > 10 and all(int(loads) > 10 and errors == "0" for loads, errors, _ in outs)
    journal.close()


def test_opening_a_recorded_session_again_leaves_its_log_alone(tmp_path):
    path = tmp_path / "j.db"
    journal = _opened(path)
    _answer(journal, 1)
    with pytest.raises(sqlite3.IntegrityError):
        Journal(path, durability="normal").open_session(SID, {}, b"w", "p", "d", OWNER)
    assert _log(journal).exists() and [a[0] for a in journal.load(SID).answers] == [1]
    _answer(journal, 2)
    journal.close()


def test_a_failed_read_of_the_note_leaves_the_log_unlocked(tmp_path, monkeypatch):
    path = tmp_path / "j.db"
    writer = _opened(path)
    _answer(writer, 1)
    claimer = Journal(path, durability="normal", busy_timeout=0.2)
    failing = iter([True])
    real = claimer._noted_length

    def once(session):
        if next(failing, False):
            raise sqlite3.OperationalError("disk I/O error")
        return real(session)

    monkeypatch.setattr(claimer, "_noted_length", once)
    with pytest.raises(ProtocolError):  # typed (a JournalFault)
        claimer.claim(SID, OWNER)
    _answer(writer, 2)  # not BUSY: nothing holds the log's lock
    writer.close()


def test_a_table_write_waits_one_busy_timeout_for_both_locks(tmp_path):
    import threading
    import time

    path = tmp_path / "j.db"
    writer = Journal(path, durability="normal", busy_timeout=0.8)
    writer.open_session(SID, {}, b"w", "p", "d", OWNER)
    _answer(writer, 1)  # unfolded: the charged answer below folds it first
    held = answer_log.open_locked(_log(writer), False)[0]  # as a claim holds it
    threading.Timer(0.6, os.close, (held,)).start()  # lets go after 0.6 s
    holder = _holding_sqlite(path)  # and SQLite's lock, longer
    try:
        t0 = time.monotonic()
        with pytest.raises(ProtocolError) as busy:
            writer.record_answer(SID, 1, 2, 2, _charge(2),
                                 Budget(), lambda: (1.0, 1.0))
        waited = time.monotonic() - t0
    finally:
        holder.rollback()
        holder.close()
    assert busy.value.code is ErrorCode.BUSY and waited < 1.15  # not 0.6 + 0.8
    writer.close()


def test_a_reservation_of_an_answered_seq_is_refused_before_its_charge(tmp_path):
    path = tmp_path / "j.db"
    opener = _opened(path)
    _answer(opener, 1)
    opener.close()
    full = Journal(path, durability="full")
    full.claim(SID, OWNER)  # no writer here: the log folded into the table
    with pytest.raises(sqlite3.IntegrityError):
        full.reserve(SID, 2, 1, 1, _charge(1), Budget())
    assert full.entries() == [] and full.pending() == []
    full.close()
