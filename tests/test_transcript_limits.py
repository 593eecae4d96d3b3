"""Transcripts stay small whatever the peer does: a refused frame is recorded as its digest
(at most 200 bytes, at most `max_refused` of them, then a summary), and a large frame that
every session shares (the dataset) is stored once in a content-addressed blob store."""
import asyncio
import hashlib
import json
import os
from pathlib import Path

import msgpack
import numpy as np
import pytest

from pobo.parties.runners import resume_state
from pobo.protocol.audit import audit_session, audit_transcript, compare, readable_records
from pobo.protocol.channel import Channel
from pobo.protocol.codec import decode, encode
from pobo.protocol.messages import PROTOCOL_VERSION, Dataset, End, Error, Hello, Query, Reward
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
from pobo.protocol.signing import open_frame
from pobo.protocol.transcript import (
    REFUSED, REFUSED_RECORD_BYTES, REFUSED_SUMMARY, Transcript, TranscriptError,
    linked_records, raw_records, read_transcript,
)
from pobo.session import RunConfig, curate, optimise, prepare_service
from pobo.transport.inproc import pipe_pair

FLOOD = 10_000


def _hostile_frames(n: int) -> list[bytes]:
    """n frames the curator refuses: garbage of many sizes (up to 40 KB), unknown kinds,
    rewards (the modeler may not send one), queries out of sequence (seq < 1)."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        pick = i % 4
        if pick == 0:
            out.append(b"\xc1" + rng.bytes(int(rng.integers(0, 40_000))))
        elif pick == 1:
            out.append(msgpack.packb({"kind": f"teleport-{i}", "x": i}))
        elif pick == 2:
            out.append(encode(Reward(i, 0, 1.0)))
        else:
            out.append(encode(Query(-i, 0)))
    return out


async def _flood(tmp_path: Path) -> dict:
    """A curator session (transcribed) against a peer that sends FLOOD refused frames, each
    answered by an Error, then one good query and End; the peer keeps its own transcript."""
    service = prepare_service(RunConfig(T=3, options={"grid": 8}))
    session = service.new_session()
    cpipe, mpipe = pipe_pair()
    path = tmp_path / "curator.transcript"
    cchan = Channel(cpipe, Boundary(PRIVATE, CURATOR), Transcript(path), timeout=10)
    peer = Transcript(tmp_path / "modeler.transcript")

    async def send(kind: str, frame: bytes) -> None:
        peer.append("sent", kind, frame)
        await mpipe.send(frame)

    async def recv() -> object:
        frame = await mpipe.recv(10)
        message = decode(frame)
        peer.append("recv", type(message).__name__.lower(), frame)
        return message

    async def drive() -> dict:
        await send("hello", encode(Hello(PROTOCOL_VERSION, "hostile")))
        await recv(), await recv()  # welcome, dataset
        before = path.stat().st_size
        codes = set()
        for frame in _hostile_frames(FLOOD):
            await send("hostile", frame)
            reply = await recv()
            assert isinstance(reply, Error)
            codes.add(reply.code)
        after = path.stat().st_size
        await send("query", encode(Query(1, 3)))
        assert isinstance(await recv(), Reward)  # the session still works
        await send("end", encode(End("done")))
        assert isinstance(await recv(), End)  # the curator's, with the ledger's head
        return {"flood_bytes": after - before, "codes": codes}

    try:
        result, figures = await asyncio.gather(curate(cchan, session, tmp_path, verbose=False),
                                               drive())
    finally:
        cchan.close()
        peer.close()
    assert result["status"] == "ok" and result["queries"] == [3]
    return figures


def test_refused_frames_cost_at_most_200_bytes_each_and_are_capped(tmp_path):
    figures = asyncio.run(_flood(tmp_path))
    assert figures["codes"] == {"malformed", "unknown_kind", "policy", "sequence"}
    per_frame = figures["flood_bytes"] / FLOOD  # the refused records and their Error replies
    print(f"\n{FLOOD} refused frames: {figures['flood_bytes']} transcript bytes, "
          f"{per_frame:.1f} per frame")
    assert per_frame <= 200
    records = list(raw_records((tmp_path / "curator.transcript").read_bytes()))
    refused = [(raw, r) for raw, r in records if r.kind == REFUSED]
    assert len(refused) == 1000  # the default cap
    assert max(len(raw) for raw, _ in refused) <= REFUSED_RECORD_BYTES
    assert all(not r.frame and len(r.sha256) == 64 and r.code and len(r.error) <= 80
               for _, r in refused)
    frames = _hostile_frames(FLOOD)
    assert [r.sha256 for _, r in refused] == [hashlib.sha256(f).hexdigest()
                                              for f in frames[:1000]]
    assert [r.size for _, r in refused] == [len(f) for f in frames[:1000]]
    [summary] = [r for _, r in records if r.kind == REFUSED_SUMMARY]
    skipped = hashlib.sha256(b"".join(hashlib.sha256(f).digest() for f in frames[1000:]))
    assert (summary.count, summary.replies) == (FLOOD - 1000, FLOOD - 1000)
    assert summary.sha256 == skipped.hexdigest()
    # the audit verifies the chain, treats each refused record as a refused frame (it was
    # answered with an Error), reports the counts; the session's ledger is untouched
    report = audit_transcript(tmp_path / "curator.transcript")
    assert report.ok, report.violations[:5]
    assert report.refused == {"recorded": 1000, "counted": FLOOD - 1000,
                              "replies": FLOOD - 1000, "summaries": 1,
                              "codes": {"malformed": 250, "unknown_kind": 250, "policy": 250,
                                        "sequence": 250}}
    assert any("9000 more past the cap" in n for n in report.notes)
    # the head the curator anchored in its record names the summary too (it was taken
    # before the summary was written: any modeler could make that record fail its audit)
    head = json.loads((tmp_path / "curator.json").read_text())["transcript_head"]
    anchored = audit_transcript(tmp_path / "curator.transcript", head)
    assert anchored.ok, anchored.violations[:5]
    # and the peer's own record of what it sent agrees with the curator's, digest for digest
    comparison = compare(readable_records(tmp_path / "curator.transcript"),
                         readable_records(tmp_path / "modeler.transcript"))
    assert not comparison.violations, comparison.violations
    assert comparison.unacknowledged == {"curator->modeler": 0, "modeler->curator": 0}


def test_an_unanswered_refusal_and_a_forged_summary_are_violations(tmp_path):
    asyncio.run(_flood(tmp_path))
    path = tmp_path / "curator.transcript"
    raws = [raw for raw, _ in raw_records(path.read_bytes())]
    items = [msgpack.unpackb(raw, raw=False) for raw in raws]
    k = next(i for i, item in enumerate(items) if item["kind"] == REFUSED)
    assert items[k + 1]["kind"] == "error"
    items[k + 1]["kind"] = "reward"  # stands for a party that acted on the refused frame
    items[k + 1]["frame"] = encode(Reward(1, 3, 0.5))
    _rechain(path, items)
    report = audit_transcript(path)
    assert any(v.startswith(f"record {k}: received a frame it refused") for v in report.violations)
    # a summary that does not account for the frames the peer sent
    asyncio.run(_flood(tmp_path / "again"))
    path = tmp_path / "again" / "curator.transcript"
    items = [msgpack.unpackb(raw, raw=False) for raw, _ in raw_records(path.read_bytes())]
    summary = next(item for item in items if item["kind"] == REFUSED_SUMMARY)
    summary["count"] -= 1
    _rechain(path, items)
    comparison = compare(readable_records(path),
                         readable_records(tmp_path / "again" / "modeler.transcript"))
    assert comparison.violations


def _rechain(path: Path, items: list[dict]) -> None:
    """Rewrite a transcript with edited records and a valid chain (a forger's best effort)."""
    prev, out = bytes(32), []
    for item in items:
        item["prev"] = prev
        raw = msgpack.packb(item, use_bin_type=True)
        out.append(raw)
        prev = hashlib.sha256(raw).digest()
    path.write_bytes(b"".join(out))


def test_the_cap_is_a_parameter_and_a_resumed_transcript_continues_it(tmp_path):
    path = tmp_path / "t.transcript"
    t = Transcript(path, max_refused=3)
    frames = [bytes([i]) * (i + 1) for i in range(10)]
    assert [t.refuse(f, "malformed", "undecodable frame " * 20) for f in frames] == \
        [True] * 3 + [False] * 7
    t.count_reply(b"reply")
    t.close()
    records = list(read_transcript(path))
    assert [r.kind for r in records] == [REFUSED] * 3 + [REFUSED_SUMMARY]
    assert records[-1].count == 7 and records[-1].replies == 1
    assert records[-1].sha256 == hashlib.sha256(
        b"".join(hashlib.sha256(f).digest() for f in frames[3:])).hexdigest()
    assert all(len(r.error) <= 80 for r in records[:3])
    again = Transcript(path, resume=True, max_refused=3)
    assert again.refuse(b"x", "policy", "no") is False  # the cap is per file
    again.close()
    assert [r.kind for r in read_transcript(path)][-1] == REFUSED_SUMMARY
    assert audit_transcript(path).refused["counted"] == 8


def test_a_second_writer_cannot_fork_the_chain(tmp_path):
    path = tmp_path / "t.transcript"
    stale = Transcript(path)
    stale.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    fresh = Transcript(path, resume=True)  # a resumed connection takes the file over
    fresh.append("sent", "error", encode(Error("sequence", "x")))
    with pytest.raises(TranscriptError, match="another writer"):
        stale.append("sent", "error", encode(Error("sequence", "late")))
    stale.close()
    fresh.close()
    assert [r.seq for r in read_transcript(path)] == [0, 1]



def _blocked_while_another_writer_holds_the_lock(path, work):
    """Run `work` in a thread while another writer of `path` (a second open file) holds
    the writers' lock and appends a record; whether `work` waited for it, and what it
    raised (None if nothing)."""
    import fcntl
    import threading

    other = Transcript(path, resume=True)
    fcntl.flock(other._file.fileno(), fcntl.LOCK_EX)  # the other writer, mid-append
    outcome: list = []

    def run() -> None:
        try:
            work()
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(0.3)
    waited = thread.is_alive()
    other.append("sent", "error", encode(Error("sequence", "the other writer")))  # unlocks
    other.close()
    thread.join(10)
    assert not thread.is_alive()
    return waited, outcome[0]


def test_two_writers_racing_never_fork_the_chain(tmp_path):
    """The check that no other writer appended and the append itself hold the writers'
    lock (as a resumed writer's reading of the chain does): a writer whose check came
    just before another's append, or whose resume read the chain just before it, cannot
    then write a record at the same seq (a review forked the chain of two processes
    racing without it, in 6 trials of 300)."""
    path = tmp_path / "t.transcript"
    stale = Transcript(path)
    stale.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    waited, raised = _blocked_while_another_writer_holds_the_lock(
        path, lambda: stale.append("sent", "error", encode(Error("sequence", "late"))))
    assert waited and isinstance(raised, TranscriptError) and "another writer" in str(raised)
    stale.close()
    assert [r.seq for r in read_transcript(path)] == [0, 1]

    opened: list[Transcript] = []
    waited, raised = _blocked_while_another_writer_holds_the_lock(
        path, lambda: opened.append(Transcript(path, resume=True)))
    assert waited and raised is None
    opened[0].append("sent", "error", encode(Error("sequence", "on")))  # after the other's
    opened[0].close()
    assert [r.seq for r in read_transcript(path)] == [0, 1, 2, 3]
    assert not [b for _, _, breaks in linked_records(path.read_bytes()) for b in breaks]


def test_a_file_system_without_locks_keeps_transcripts_with_the_size_check(tmp_path,
                                                                           monkeypatch):
    """Where flock fails (NFS without lockd: ENOLCK; some FUSE file systems) a transcript
    is written and resumed with the size check alone, as before the lock (a review: every
    session there was refused)."""
    import errno

    from pobo.protocol import filelock

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(filelock.fcntl, "flock", no_locks)
    path = tmp_path / "t.transcript"
    t = Transcript(path)
    t.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    t.close()
    again = Transcript(path, resume=True)
    again.append("sent", "error", encode(Error("sequence", "x")))
    other = Transcript(path, resume=True)
    other.append("sent", "error", encode(Error("sequence", "y")))
    with pytest.raises(TranscriptError, match="another writer"):  # the size check still
        again.append("sent", "error", encode(Error("sequence", "late")))
    again.close()
    other.close()
    assert [r.seq for r in read_transcript(path)] == [0, 1, 2]


def test_a_writer_refuses_a_file_cut_short_behind_it(tmp_path):
    """The writer check reads the file's size at every record (lseek to its end): a file
    another process truncated is refused as one another writer appended to, and nothing
    is written to it; once its bytes are back, the writer's records append at its end."""
    path = tmp_path / "t.transcript"
    t = Transcript(path)
    t.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    t.append("sent", "error", encode(Error("sequence", "x")))
    assert [r.seq for r in read_transcript(path)] == [0, 1]
    whole = path.read_bytes()
    with open(path, "r+b") as other:  # another process cuts the last record off
        other.truncate(len(whole) - 3)
    with pytest.raises(TranscriptError, match="another writer"):
        t.append("sent", "error", encode(Error("sequence", "late")))
    assert path.read_bytes() == whole[:-3]  # nothing written
    path.write_bytes(whole)  # restored, byte for byte: the writer goes on where it was
    t.append("sent", "error", encode(Error("sequence", "on")))
    t.close()
    assert [r.seq for r in read_transcript(path)] == [0, 1, 2]

SESSIONS = 20


async def _sessions(out: Path) -> tuple[list[Path], bytes]:
    """SESSIONS sessions of one curator service, both sides transcribed to out/<sid>/ with
    one blob store out/blobs; returns the session folders and the dataset frame."""
    service = prepare_service(RunConfig(T=3, options={"grid": 40}))  # Z: 1600 x 10 float64
    folders = []
    for _ in range(SESSIONS):
        session = service.new_session()
        where = out / session.session_id
        cpipe, mpipe = pipe_pair()
        cchan = Channel(cpipe, Boundary(PRIVATE, CURATOR),
                        Transcript(where / "curator.transcript", blobs=out / "blobs"), timeout=10)
        mchan = Channel(mpipe, Boundary(PRIVATE, MODELER),
                        Transcript(where / "modeler.transcript", blobs=out / "blobs"), timeout=10)
        try:
            await asyncio.gather(curate(cchan, session, where, verbose=False),
                                 optimise(mchan, 0, "random", where))
        finally:
            cchan.close()
            mchan.close()
        folders.append(where)
    return folders, encode(Dataset(service.release))


def test_the_dataset_of_20_sessions_is_stored_once(tmp_path):
    folders, dataset = asyncio.run(_sessions(tmp_path))
    digest = hashlib.sha256(dataset).hexdigest()
    assert sorted(os.listdir(tmp_path / "blobs")) == [digest]
    assert (tmp_path / "blobs" / digest).read_bytes() == dataset
    transcripts = [p for f in folders for p in f.glob("*.transcript")]
    small = sum(p.stat().st_size for p in transcripts)
    total = small + len(dataset)
    print(f"\n{SESSIONS} sessions: Z frame {len(dataset)} bytes stored once; "
          f"{len(transcripts)} transcripts {small} bytes ({small // len(transcripts)} each); "
          f"inline it would be {small + 2 * SESSIONS * len(dataset)}")
    assert len(dataset) > 1 << 16
    # every transcript holds the digest, not Z (each record ~200 bytes: its envelope's links;
    # since version 6 the Welcome and End also carry a Merkle root, the log id and a
    # consistency proof: 3,940 -> 4,235 bytes a transcript here)
    assert small < len(transcripts) * 5120
    assert total < len(dataset) + len(transcripts) * 5120  # one Z plus small records
    # 17: each session's records carry the signed ledger heads of its Welcome and End
    # (about 750 bytes a transcript, 1,050 with version 6's Merkle heads; 20 before any)
    assert total < (small + 2 * SESSIONS * len(dataset)) / 17
    for folder in folders[:3] + folders[-1:]:
        records = list(read_transcript(folder / "curator.transcript"))
        [sent] = [r for r in records if r.kind == "dataset"]
        assert sent.ref == digest and sent.size == len(dataset)
        assert open_frame(sent.frame).body == dataset  # the envelope, rebuilt around Z
        assert sent.digest == hashlib.sha256(sent.frame).hexdigest()
        reports = audit_session(folder / "curator.transcript", folder / "modeler.transcript")
        assert all(r.ok for r in reports), [r.violations for r in reports]
        state = resume_state(folder / "modeler.transcript")
        assert np.array_equal(state.Z, decode(dataset).release.Z)
    # explicit blob folder, elsewhere
    moved = tmp_path / "elsewhere"
    (tmp_path / "blobs").rename(moved)
    with pytest.raises(TranscriptError, match=f"blob {digest} is missing"):
        resume_state(folders[0] / "modeler.transcript")
    missing = audit_transcript(folders[0] / "curator.transcript")
    assert any(digest in v and "missing" in v for v in missing.violations)
    assert audit_transcript(folders[0] / "curator.transcript", blobs=moved).ok
    assert resume_state(folders[0] / "modeler.transcript", blobs=moved).session
    # a corrupted blob is a violation naming its digest, and resume refuses it
    blob = moved / digest
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    report = audit_transcript(folders[1] / "curator.transcript", blobs=moved)
    assert any(f"blob {digest} is corrupt" in v for v in report.violations), report.violations
    with pytest.raises(TranscriptError, match=f"blob {digest} is corrupt"):
        resume_state(folders[1] / "modeler.transcript", blobs=moved)


def test_a_blob_is_written_atomically_and_repaired_when_corrupt(tmp_path):
    frame = os.urandom(100_000)
    digest = hashlib.sha256(frame).hexdigest()
    t = Transcript(tmp_path / "a.transcript", blobs=tmp_path / "blobs")
    t.append("sent", "dataset", frame)
    t.append("sent", "end", b"small")
    (tmp_path / "blobs" / digest).write_bytes(b"damaged")
    t.append("sent", "dataset", frame)  # the same frame again: the store is repaired
    t.close()
    assert (tmp_path / "blobs" / digest).read_bytes() == frame
    assert not [p for p in (tmp_path / "blobs").iterdir() if p.name != digest]  # no temp files
    records = list(read_transcript(tmp_path / "a.transcript"))
    assert [r.frame for r in records] == [frame, b"small", frame]
    assert len((tmp_path / "a.transcript").read_bytes()) < 400
    # a transcript written before blobs and refused records existed still reads back
    old = tmp_path / "old.transcript"
    prev, raws = "0" * 64, []
    for item in ({"seq": 0, "time": 1.0, "dir": "recv", "kind": "malformed", "frame": b"\xc1"},
                 {"seq": 1, "time": 2.0, "dir": "sent", "kind": "end", "frame": b"x"}):
        raw = msgpack.packb({**item, "prev": prev}, use_bin_type=True)
        raws.append(raw)
        prev = hashlib.sha256(raw).hexdigest()
    old.write_bytes(b"".join(raws))
    assert [(r.kind, r.frame) for r in read_transcript(old)] == [("malformed", b"\xc1"),
                                                                 ("end", b"x")]
    resumed = Transcript(old, resume=True)
    resumed.append("sent", "end", b"y")
    resumed.close()
    report = audit_transcript(old)
    assert not any("chain" in v for v in report.violations)


@pytest.mark.timeout(30)  # the failure this guards against is a wait for ever
def test_a_stopped_writer_holding_the_lock_does_not_stop_this_one(tmp_path):
    """The attack: another process takes the writers' lock (mid-append) and is stopped
    with SIGSTOP. This writer's append and a resumed writer's opening read wait at most
    `lock_wait`, then refuse with a one-line TranscriptError, writing nothing (before,
    they waited for ever, and the party's whole event loop with them); once the holder
    is gone the same writer appends on, the chain whole."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "t.transcript"
    t = Transcript(path, lock_wait=0.3)
    t.append("recv", "hello", encode(Hello(PROTOCOL_VERSION, "a")))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, signal, sys\n"
         f"f = open({str(path)!r}, 'ab')\n"
         "fcntl.flock(f.fileno(), fcntl.LOCK_EX)\n"
         "print('locked', flush=True)\n"
         "os.kill(os.getpid(), signal.SIGSTOP)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        size = path.stat().st_size
        started = time.monotonic()
        with pytest.raises(TranscriptError, match="held its lock for over 0.3 s"):
            t.append("sent", "error", encode(Error("sequence", "x")))
        with pytest.raises(TranscriptError, match="held its lock"):
            Transcript(path, resume=True, lock_wait=0.3)
        assert time.monotonic() - started < 5.0
        assert path.stat().st_size == size  # nothing written
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(10)
    t.append("sent", "error", encode(Error("sequence", "after")))
    t.close()
    assert [r.seq for r in read_transcript(path)] == [0, 1]
    assert not [b for _, _, breaks in linked_records(path.read_bytes()) for b in breaks]
