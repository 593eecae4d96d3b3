"""Memory under a flood of Hellos (issue 22): the Dataset every session sends is one
shared body, sealed per session without a copy and queued by reference, so peers that
never read cannot make the curator hold one copy each. The figure (RSS, latency) is
benchmarks/hello_flood.py's; these tests check the mechanism."""
import asyncio
import dataclasses
import hashlib
import os

import numpy as np
import pytest

from pobo.protocol.channel import Channel
from pobo.protocol.codec import decode, encode
from pobo.protocol.messages import PROTOCOL_VERSION, Dataset, Hello, Welcome
from pobo.protocol.policy import CURATOR, PRIVATE, Boundary
from pobo.protocol.signing import Link, SharedBody, Signer, open_frame, seal
from pobo.protocol.transcript import Transcript, blob_dirs, read_transcript, resolve
from pobo.transport.sockets import DealerPipe, RouterHub, new_context, close_context


@pytest.mark.parametrize("n", [0, 10, 255, 256, 65535, 65536, 3 << 20])
def test_shared_parts_are_the_sealed_frame_byte_for_byte(n):
    body = os.urandom(n)
    shared, signer = SharedBody.of(body), Signer.generate()
    for link in (Link("", 0, bytes(32), bytes(32)), Link("ab" * 16, 7, b"p" * 32, b"q" * 32)):
        for who in (signer, None):
            parts, digest, sig = shared.seal(link, who)
            frame = seal(body, link, who)
            assert b"".join(parts) == frame and digest == hashlib.sha256(frame).digest()
            assert parts[1] is shared.body


class PartsPipe:
    """A pipe that keeps what it is given."""

    def __init__(self):
        self.sent = []

    async def send(self, frame):
        self.sent.append(frame)

    async def send_parts(self, parts):
        self.sent.append(parts)


def test_many_sessions_queue_one_body_and_record_it_once(params, release, tmp_path):
    """100 sessions send the Dataset: every queued frame holds the same body object (no
    per-session copy), the blob store gets it once, and each transcript's record reads
    back as the exact frame sent (the audit's view)."""
    params = dataclasses.replace(params, n=2000)
    release = dataclasses.replace(release, Z=np.arange(4000.0).reshape(2000, 2))
    shared = SharedBody.of(encode(Dataset(release)))
    signer = Signer.generate()
    pipes = []
    for i in range(100):
        pipe = PartsPipe()
        transcript = Transcript(tmp_path / f"s{i}" / "curator.transcript",
                                blobs=tmp_path / "blobs", blob_threshold=4096)
        channel = Channel(pipe, Boundary(PRIVATE, CURATOR), transcript, signer=signer)
        channel.boundary.incoming(Hello(PROTOCOL_VERSION, "m"))

        async def session():
            await channel.send(Welcome(PROTOCOL_VERSION, f"{i:032x}", params))
            await channel.send(Dataset(release), shared=shared)
        asyncio.run(session())
        transcript.close()
        pipes.append(pipe)
        record = list(read_transcript(transcript.path))[1]
        full = resolve(record, blob_dirs(transcript.path, None), {}).frame
        assert full == b"".join(pipe.sent[1])
        assert decode(open_frame(full).body) == Dataset(release)
    assert all(p.sent[1][1] is shared.body for p in pipes)
    assert len(list((tmp_path / "blobs").iterdir())) == 1


async def test_a_frame_sent_in_parts_arrives_whole_over_zeromq():
    ctx = new_context()
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    dealer = DealerPipe.connect(ctx, hub.endpoint)
    try:
        await dealer.send(b"hello")
        pipe = await hub.accept(10)
        assert await pipe.recv(10) == b"hello"
        body = os.urandom(1 << 20)
        await pipe.send_parts([b"head", body, b"tail"])
        assert await dealer.recv(10) == b"head" + body + b"tail"
    finally:
        dealer.close()
        await hub.aclose()
        close_context(ctx)


def test_a_curator_has_a_session_cap_by_default():
    from pobo.cli import build_parser
    from pobo.cli_sessions import DEFAULT_MAX_SESSIONS
    args = build_parser().parse_args(["curator", "synthetic"])
    assert args.max_sessions == DEFAULT_MAX_SESSIONS > 0
