"""A Dataset larger than one chunk (protocol.chunks, PROTOCOL.md 5.1): Z in chunk frames
after a signed head, reassembled into one preallocated array, recorded once by digest.

Small n with small chunks: every path of n = 1e7 (whose chunks are 16 MiB) at kilobytes.
Every hostile chunk is a typed one-line ChunkError, the head recorded refused, no crash.
"""
import asyncio
import hashlib
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest

from pobo.parties.runners import resume_state
from pobo.protocol import chunks
from pobo.protocol.audit import audit_transcript
from pobo.protocol.channel import Channel
from pobo.protocol.chunks import ChunkedDataset, Reassembly, chunk_header, shared_dataset
from pobo.protocol.errors import ChunkError, ErrorCode, PeerTimeout, ProtocolError
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Hello, KernelParams, Mechanism, ProjectedDataset, Query,
    SessionParams, Welcome,
)
from pobo.protocol.policy import CURATOR, DP_PROJECTION, MODELER, PRIVATE, Boundary
from pobo.protocol.codec import encode
from pobo.protocol.signing import Link, SharedBody, Signer, seal
from pobo.protocol.transcript import Transcript, TranscriptError, read_transcript
from pobo.transport.inproc import pipe_pair

ROOT = Path(__file__).resolve().parents[1]
N, R, CHUNK = 1000, 4, 4096  # 32 000 bytes of Z: 8 chunks of 128 rows (the last 104)
SID = "0123456789abcdef0123456789abcdef"


def _release(n: int = N) -> ProjectedDataset:
    Z = np.random.default_rng(0).normal(size=(n, R))
    return ProjectedDataset(DP_PROJECTION, 1.0, 1e-5, 3.5, Z)


def _params(n: int = N) -> SessionParams:
    return SessionParams("test", n, R, 3, "private", (Mechanism(DP_PROJECTION, 1.0, 1e-5),),
                         KernelParams("se", 1.0, 1.0, 1e-4), "seeded")


def _raw(channel: Channel, message) -> bytes:
    """The frame `channel` would send for `message`, sealed at its current link but past
    its own policy and transcript: what a hostile peer sends."""
    seq, prev = channel.transcript.position
    return seal(encode(message), Link(channel.session_id, seq, prev, channel._last_recv),
                channel.signer)


class _Pair:
    """A curator and a modeler channel over an in-process pipe, signed, transcribed in
    one folder (so the two transcripts share one blobs/), after Hello and Welcome."""

    def __init__(self, tmp_path: Path, n: int = N) -> None:
        self.curator_pipe, self.modeler_pipe = pipe_pair()
        self.keys = Signer.generate(), Signer.generate()
        self.curator = Channel(self.curator_pipe, Boundary(PRIVATE, CURATOR),
                               Transcript(tmp_path / "curator.transcript"), timeout=2.0,
                               signer=self.keys[0], chunk_bytes=CHUNK)
        self.modeler = Channel(self.modeler_pipe, Boundary(PRIVATE, MODELER),
                               Transcript(tmp_path / "modeler.transcript"), timeout=2.0,
                               signer=self.keys[1], chunk_bytes=CHUNK)
        self.n = n

    async def open(self) -> None:
        await self.modeler.send(Hello(PROTOCOL_VERSION, "t", sign_key=self.modeler.sign_key))
        await self.curator.recv()
        await self.curator.send(Welcome(PROTOCOL_VERSION, SID, _params(self.n),
                                        self.curator.sign_key))
        assert isinstance(await self.modeler.recv(), Welcome)

    def close(self) -> None:
        self.curator.close()
        self.modeler.close()

    async def refusal(self, kind: type = ProtocolError) -> ProtocolError:
        """The error the modeler's next recv raises (a `kind`); the pair closed."""
        try:
            with pytest.raises(kind) as caught:
                await self.modeler.recv()
        finally:
            self.close()
        return caught.value


def _deliver(tmp_path: Path, release: ProjectedDataset) -> Dataset:
    """A session that sends `release` and ends: the Dataset the modeler received."""
    async def session():
        pair = _Pair(tmp_path)
        await pair.open()
        await pair.curator.send(Dataset(release))
        got = await pair.modeler.recv()
        await pair.modeler.send(End("done"))
        await pair.curator.recv()
        pair.close()
        return got

    return asyncio.run(session())


def test_a_large_dataset_arrives_whole_recorded_once_and_audits(tmp_path):
    release = _release()
    got = _deliver(tmp_path, release)
    assert isinstance(got, Dataset) and got.rows == N and got.chunk_rows == CHUNK // (8 * R)
    assert np.array_equal(got.release.Z, release.Z) and not got.release.Z.flags.writeable
    assert got.digest == hashlib.sha256(release.Z.tobytes()).hexdigest()
    blobs = list((tmp_path / "blobs").iterdir())
    assert [b.name for b in blobs] == [got.digest]  # both transcripts: one copy of the body
    for role in ("curator", "modeler"):
        records = [r for r in read_transcript(tmp_path / f"{role}.transcript")
                   if r.kind == "dataset"]
        assert len(records) == 1 and records[0].body == got.digest
        assert records[0].body_size == release.Z.nbytes and len(records[0].frame) < 4096
        report = audit_transcript(tmp_path / f"{role}.transcript")
        assert report.ok, report.violations
    assert np.array_equal(resume_state(tmp_path / "modeler.transcript").Z, release.Z)


def test_a_dataset_that_fits_one_chunk_goes_in_one_frame(tmp_path):
    release = _release(100)  # 3200 bytes <= CHUNK

    async def session():
        pair = _Pair(tmp_path, 100)
        await pair.open()
        await pair.curator.send(Dataset(release))
        assert len(pair.modeler_pipe._inbox.frames) == 1  # the Dataset frame and nothing else
        got = await pair.modeler.recv()
        pair.close()
        return got

    got = asyncio.run(session())
    assert got == Dataset(release) and got.rows == 0 and not (tmp_path / "blobs").exists()
    assert ChunkedDataset.of(Dataset(release), CHUNK) is None
    assert isinstance(shared_dataset(Dataset(release), CHUNK), SharedBody)


def test_the_sender_never_copies_z():
    """Every chunk is a view of the release's own array (n = 1e7: 1.6 GB, not 3.2)."""
    release = _release()
    chunked = ChunkedDataset.of(Dataset(release), CHUNK)
    assert chunked.count == 8 and chunked.message.release.Z.shape == (0, R)
    for i, (header, data) in enumerate(chunked.frames()):
        assert data.obj is release.Z or np.shares_memory(np.asarray(data.obj), release.Z)
        assert header + bytes(data) == msgpack.packb(
            {"chunk": i, "data": release.Z.tobytes()[i * CHUNK:(i + 1) * CHUNK]})


def _hostile(name: str, chunked: ChunkedDataset) -> list[bytes]:
    """The chunk frames a hostile (or broken) curator sends after a valid head."""
    frames = [b"".join(parts) for parts in chunked.frames()]
    data = [msgpack.unpackb(f)["data"] for f in frames]
    if name == "wrong-digest":
        flipped = bytearray(data[3])
        flipped[0] ^= 1
        return frames[:3] + [chunk_header(3, len(flipped)) + bytes(flipped)] + frames[4:]
    if name == "too-many-bytes":
        return frames[:-1] + [chunk_header(7, len(data[7]) + 8) + data[7] + bytes(8)]
    if name == "short":
        return [chunk_header(0, CHUNK - 8) + data[0][:-8]] + frames[1:]
    if name == "out-of-order":
        return [frames[1], frames[0]] + frames[2:]
    if name == "missing":
        return frames[:2] + frames[3:]
    if name == "stopped":  # the chunks simply stop: no frame comes where chunk 3 is due
        return frames[:3]
    if name == "oversized":
        return [chunk_header(0, 4 * CHUNK) + bytes(4 * CHUNK)]
    if name == "a-message-instead":
        return frames[:5] + [msgpack.packb({"body": b"x", "link": {}, "sig": b""})]
    raise AssertionError(name)


@pytest.mark.parametrize("name, code", [
    ("wrong-digest", ErrorCode.MALFORMED), ("too-many-bytes", ErrorCode.OVERSIZED),
    ("short", ErrorCode.MALFORMED), ("out-of-order", ErrorCode.SEQUENCE),
    ("missing", ErrorCode.SEQUENCE), ("oversized", ErrorCode.OVERSIZED),
    ("a-message-instead", ErrorCode.SEQUENCE), ("stopped", ErrorCode.TIMEOUT)])
def test_hostile_chunks_are_a_typed_one_line_refusal(tmp_path, name, code):
    release = _release()
    chunked = ChunkedDataset.of(Dataset(release), CHUNK)

    async def session():
        pair = _Pair(tmp_path)
        await pair.open()
        await pair.curator._send_shared(Dataset(release), chunked.head, chunked.body)
        for frame in _hostile(name, chunked):
            await pair.curator_pipe.send(frame)
        return await pair.refusal(ChunkError)

    error = asyncio.run(session())
    assert error.code is code and "\n" not in str(error) and len(str(error)) < 200, error
    records = list(read_transcript(tmp_path / "modeler.transcript"))
    kinds = [r.kind for r in records]
    assert kinds[-1] == "refused" and "dataset" not in kinds  # the head, refused
    assert records[-1].code == code.value  # (chunks that stop were not recorded at all)
    assert isinstance(error, PeerTimeout) == (name == "stopped")  # the peer may be gone


def test_a_chunk_after_the_end_is_refused_by_either_side(tmp_path):
    release = _release()
    chunked = ChunkedDataset.of(Dataset(release), CHUNK)
    extra = b"".join(list(chunked.frames())[-1])

    async def session():
        pair = _Pair(tmp_path)
        await pair.open()
        await pair.curator.send(Dataset(release), shared=chunked)
        await pair.modeler.recv()
        await pair.curator_pipe.send(extra)  # one chunk too many
        with pytest.raises(ChunkError, match="outside a dataset body") as at_modeler:
            await pair.modeler.recv()
        await pair.modeler_pipe.send(extra)  # a chunk frame to the curator: refused, not fatal
        with pytest.raises(ChunkError) as at_curator:
            await pair.curator.recv()
        await pair.modeler.send(Query(1, 2))  # the session goes on
        assert await pair.curator.recv() == Query(1, 2)
        pair.close()
        return at_modeler.value, at_curator.value

    errors = asyncio.run(session())
    assert all(e.code is ErrorCode.SEQUENCE and e.recoverable for e in errors)


def test_a_head_is_refused_before_anything_is_allocated(tmp_path):
    """The Welcome's shape, the direction, the chunk size and the body limit are checked
    on the head: a hostile curator cannot make the modeler allocate what it names."""
    release = _release()
    chunked = ChunkedDataset.of(Dataset(release), CHUNK)

    async def receive(head: Dataset, n: int = N, max_body: int = chunks.MAX_BODY_BYTES):
        pair = _Pair(tmp_path, n)
        pair.modeler.max_body = max_body
        await pair.open()
        await pair.curator_pipe.send(_raw(pair.curator, head))
        return await pair.refusal()

    head = chunked.message
    wrong_n = asyncio.run(receive(head, n=N + 1))
    assert wrong_n.code is ErrorCode.MALFORMED and "shape" in str(wrong_n)
    too_big = asyncio.run(receive(Dataset(head.release, 10**12, head.chunk_rows, head.digest),
                                  n=10**12))
    assert too_big.code is ErrorCode.OVERSIZED
    over_limit = asyncio.run(receive(head, max_body=release.Z.nbytes - 1))
    assert over_limit.code is ErrorCode.OVERSIZED
    big_chunks = asyncio.run(receive(Dataset(head.release, N, 1 << 22, head.digest)))
    assert big_chunks.code is ErrorCode.OVERSIZED


def test_a_modeler_cannot_make_the_curator_receive_a_body(tmp_path):
    release = _release()
    chunked = ChunkedDataset.of(Dataset(release), CHUNK)

    async def session():
        pair = _Pair(tmp_path)
        await pair.open()
        try:
            with pytest.raises(ProtocolError) as own:  # pobo's modeler refuses to send it
                await pair.modeler._send_shared(chunked.message, chunked.head)
            await pair.modeler_pipe.send(_raw(pair.modeler, chunked.message))
            for frame in chunked.frames():  # never read: refused at the head
                await pair.modeler_pipe.send(b"".join(frame))
            with pytest.raises(ProtocolError) as at_curator:
                await pair.curator.recv()
            assert len(pair.curator_pipe._inbox.frames) == chunked.count
        finally:
            pair.close()
        return own.value, at_curator.value

    own, at_curator = asyncio.run(session())
    assert own.code is ErrorCode.POLICY and at_curator.code is ErrorCode.POLICY
    boundary = Boundary(PRIVATE, CURATOR)
    boundary.outgoing(Welcome(PROTOCOL_VERSION, SID, _params()))
    with pytest.raises(ProtocolError) as refused:
        boundary.incoming_head(chunked.message, (N, R))
    assert refused.value.code is ErrorCode.POLICY


def test_reassembly_refuses_every_fault_and_takes_nothing():
    release = _release()
    chunked = ChunkedDataset.of(Dataset(release), CHUNK)
    frames = [b"".join(p) for p in chunked.frames()]
    reassembly = Reassembly(chunked.message)
    reassembly.feed(frames[0])
    for bad in (frames[2], frames[0], b"\x82\xa5chunk\x01\xa4data\xc4\x01x"):
        with pytest.raises(ChunkError):
            reassembly.feed(bad)
        assert reassembly.next == 1
    with pytest.raises(ChunkError, match="never came"):
        reassembly.result()
    for frame in frames[1:]:
        reassembly.feed(frame)
    assert np.array_equal(reassembly.result(), release.Z)
    with pytest.raises(ChunkError, match="after the last"):
        reassembly.feed(frames[-1])


def test_a_missing_or_altered_body_fails_the_audit_and_the_resume(tmp_path):
    _deliver(tmp_path, _release())
    blob = next((tmp_path / "blobs").iterdir())
    data = bytearray(blob.read_bytes())
    data[100] ^= 1
    blob.write_bytes(bytes(data))
    report = audit_transcript(tmp_path / "modeler.transcript")
    assert any("corrupt" in v for v in report.violations), report.violations
    with pytest.raises(TranscriptError, match="corrupt"):
        resume_state(tmp_path / "modeler.transcript")
    blob.unlink()
    assert any("missing" in v for v in audit_transcript(tmp_path / "modeler.transcript")
               .violations)


def test_pobo_run_sends_a_two_chunk_dataset_between_two_processes(tmp_path):
    """n = 160 000, r = 20: 25.6 MB of Z, two 16 MiB chunks, over loopback tcp; both
    transcripts audit and name one blob."""
    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "pobo", "run", "synthetic", "--grid", "400",
                    "--r", "20", "--T", "3", "--out", str(out), "-q"], cwd=ROOT, check=True,
                   timeout=240, capture_output=True)
    blobs = list((out / "blobs").iterdir())
    assert len(blobs) == 1 and blobs[0].stat().st_size == 160_000 * 20 * 8
    audit = subprocess.run([sys.executable, "-m", "pobo", "audit", str(out / "curator.transcript"),
                            str(out / "modeler.transcript")], cwd=ROOT, capture_output=True,
                           text=True, timeout=240)
    assert audit.returncode == 0 and audit.stdout.count(": OK") == 2, audit.stdout


def test_an_in_process_pipe_holds_one_chunk_at_a_time(tmp_path):
    """Over asyncio queues (pobo run --transport inproc) the sender yields after each
    chunk, so the queue never holds the whole body a second time."""
    release = _release()
    seen: list[int] = []

    async def session():
        pair = _Pair(tmp_path)
        await pair.open()
        inbox, recv = pair.modeler_pipe._inbox, pair.modeler_pipe.recv

        async def counting(timeout):
            seen.append(len(inbox.frames))
            return await recv(timeout)

        pair.modeler_pipe.recv = counting
        await asyncio.gather(pair.curator.send(Dataset(release)), pair.modeler.recv())
        pair.close()

    asyncio.run(session())
    assert len(seen) == 9 and max(seen) <= 2, seen  # the head and 8 chunks


def test_a_frame_sent_while_a_dataset_goes_out_in_chunks_waits_for_its_last_chunk(tmp_path):
    """The in-process pipe queues a frame at once, so a send that finds no other under
    way takes no lock (Channel.send); one that comes while a Dataset's chunks are going
    out (the sender yields after each) must still wait for the last of them: the
    modeler gets the whole Dataset and then the Error, every link accepted."""
    from pobo.protocol.messages import Error

    release = _release()

    async def session():
        pair = _Pair(tmp_path)
        await pair.open()
        order: list[str] = []

        async def dataset():
            await pair.curator.send(Dataset(release))
            order.append("dataset sent")

        async def error():
            await asyncio.sleep(0)  # once the dataset's first chunk is out
            await pair.curator.send(Error(ErrorCode.BUSY.value, "meanwhile"))
            order.append("error sent")

        sending = asyncio.gather(dataset(), error())
        whole = await pair.modeler.recv()
        after = await pair.modeler.recv()
        await sending
        pair.close()
        return order, whole, after

    order, whole, after = asyncio.run(session())
    assert order == ["dataset sent", "error sent"]
    assert isinstance(whole, Dataset) and np.array_equal(whole.release.Z, release.Z)
    assert after.message == "meanwhile"


def test_sends_waiting_for_a_dataset_s_chunks_go_first_come_first_served(tmp_path):
    """A send that waits for a Dataset's chunks is not overtaken by a send called after
    it, once the Dataset is out (the in-process pipe's lock-free send must not barge)."""
    from pobo.protocol.messages import Error

    async def session():
        pair = _Pair(tmp_path)
        await pair.open()

        async def a():
            await pair.curator.send(Dataset(_release()))
            await pair.curator.send(Error(ErrorCode.BUSY.value, "called second"))

        async def b():
            await asyncio.sleep(0)  # mid-dataset: waits for its chunks
            await pair.curator.send(Error(ErrorCode.BUSY.value, "called first"))

        sending = asyncio.gather(a(), b())
        got = [await pair.modeler.recv() for _ in range(3)]
        await sending
        pair.close()
        return got

    got = asyncio.run(session())
    assert isinstance(got[0], Dataset)
    assert [m.message for m in got[1:]] == ["called first", "called second"]


def test_a_body_read_back_is_what_was_checked_even_if_its_file_changes_after(tmp_path):
    """The body a resume or an audit reads back is read into memory and hashed as it is
    read: rewriting its blob in place afterwards changes nothing of the Z in use, and a
    blob cut short or lengthened is corrupt (a review changed a memory-mapped Z after
    its check, and a map of a file truncated under it kills the process)."""
    release = _release()
    _deliver(tmp_path, release)
    blob = next((tmp_path / "blobs").iterdir())
    Z = resume_state(tmp_path / "modeler.transcript").Z
    assert isinstance(Z, np.ndarray) and not isinstance(Z, np.memmap)
    assert np.array_equal(Z, release.Z) and not Z.flags.writeable
    whole = blob.read_bytes()
    with open(blob, "r+b") as f:  # rewritten in place, the same inode
        f.write(np.full(4, 666.0).tobytes())
    assert np.array_equal(Z, release.Z)
    for damaged in (whole[:-8], whole + b"\0" * 8):
        blob.write_bytes(damaged)
        with pytest.raises(TranscriptError, match="corrupt"):
            resume_state(tmp_path / "modeler.transcript")
    blob.write_bytes(whole)
    assert np.array_equal(resume_state(tmp_path / "modeler.transcript").Z,
                          release.Z)


def test_an_audit_reads_each_dataset_body_once_however_many_records_name_it(tmp_path):
    """Read into memory (not mapped) a body costs its size: an audit of a session
    resumed k times, k Dataset records naming one body, holds one copy of it, not k (a
    review's concern)."""
    from types import SimpleNamespace

    from pobo.protocol.chunks import with_body

    release = _release()
    _deliver(tmp_path, release)
    record = next(r for r in read_transcript(tmp_path / "modeler.transcript")
                  if r.kind == "dataset")
    from pobo.protocol.codec import decode
    from pobo.protocol.signing import body_of

    head = decode(body_of(record.frame))
    assert isinstance(head, Dataset) and head.rows and head.digest == record.body
    bodies: dict = {}
    first = with_body(head, SimpleNamespace(body=record.body, seq=1), [tmp_path / "blobs"],
                      bodies)
    next((tmp_path / "blobs").iterdir()).unlink()  # read once: the second needs no file
    again = with_body(head, SimpleNamespace(body=record.body, seq=5), [tmp_path / "blobs"],
                      bodies)
    assert again.release.Z is first.release.Z and np.array_equal(first.release.Z, release.Z)
