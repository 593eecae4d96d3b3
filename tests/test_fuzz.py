"""A running curator under hostile input: 10,000+ frames of garbage from several peers
while a legitimate session runs beside them. The curator never crashes, answers every
frame it can with a typed error, and the legitimate session gets exactly the result
of an undisturbed run."""
import asyncio
import math
import struct

import msgpack
import numpy as np
import zmq
import zmq.asyncio
from wire import with_cookie  # test helper: the cookie round of PROTOCOL.md 3.7
from waits import stop  # test helper: waits on tasks that are really bounded

from pobo.protocol.codec import ARRAY_EXT, decode, encode
from pobo.protocol.errors import ErrorCode
from pobo.protocol.messages import PROTOCOL_VERSION, Error, Hello, Query, Reward, Welcome
from pobo.remote import connect_modeler, serve_curator
from pobo.session import RunConfig, prepare_service, run_inproc
from pobo.transport.sockets import close_context, new_context

CFG = RunConfig(T=12, seed=3, options={"grid": 10}, timeout=20.0)
FRAMES_PER_PEER = 2600
PEERS = 4


def garbage(rng: np.random.Generator, i: int, n: int) -> list[bytes]:
    """One hostile message (a list of frames), cycling through the kinds of bad input."""
    kind = i % 12
    if kind == 0:
        return [rng.bytes(int(rng.integers(0, 200)))]
    if kind == 1:
        return [encode(Query(1, 2))[: int(rng.integers(1, 8))]]  # truncated
    if kind == 2:
        return [msgpack.packb({"kind": "query", "seq": [1, 2], "index": {"a": 1}})]
    if kind == 3:
        return [msgpack.packb({"kind": rng.choice(["teleport", "dataset", "welcome", ""])})]
    if kind == 4:
        return [encode(Hello(PROTOCOL_VERSION + int(rng.integers(1, 9)), "x"))]
    if kind == 5:
        return [msgpack.packb({"kind": "reward", "seq": 1, "index": 0,
                               "value": rng.choice([math.nan, math.inf]), "noise": ""})]
    if kind == 6:
        return [encode(Query(int(rng.integers(1, 5)), int(rng.choice([-1, n, n + 7, 2**40]))))]
    if kind == 7:
        return [encode(Query(int(rng.integers(50, 10**6)), 1))]  # skipped sequence numbers
    if kind == 8:
        return [encode(Query(1, int(rng.integers(0, n))))]  # replayed sequence number
    if kind == 9:
        return [b"a", b"b", b"c"]  # too many frames per message
    if kind == 10:
        header = struct.pack("<BB2Q", 1, 2, 10**9, 10**9)
        return [msgpack.packb({"kind": "dataset", "release": msgpack.ExtType(ARRAY_EXT, header)})]
    if i % 24 == 11:
        return [encode(Reward(1, 0, 0.5))]  # well-formed, but a modeler may not send it
    return [msgpack.packb([1, 2, 3])]


async def fuzz_peer(ctx, endpoint: str, seed: int, n: int) -> dict:
    """Handshake properly, then send FRAMES_PER_PEER hostile messages in lockstep."""
    rng = np.random.default_rng(seed)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    counts = {"error": 0, "reward": 0, "codes": set()}
    try:
        hello = await with_cookie(sock, Hello(PROTOCOL_VERSION, f"fuzzer-{seed}"), bare=True)
        await sock.send(encode(hello))
        assert isinstance(decode(await asyncio.wait_for(sock.recv(), 10)), Welcome)
        await asyncio.wait_for(sock.recv(), 10)  # the dataset
        for i in range(FRAMES_PER_PEER):
            await sock.send_multipart(garbage(rng, i, n))
            reply = decode(await asyncio.wait_for(sock.recv(), 10))
            if isinstance(reply, Error):
                counts["error"] += 1
                counts["codes"].add(reply.code)
            elif isinstance(reply, Reward):
                counts["reward"] += 1  # a replayed sequence number, answered from the record
    finally:
        sock.close(0)
    return counts


async def oversized_peer(ctx, endpoint: str) -> None:
    """Frames past the curator's MAXMSGSIZE: libzmq drops the connection, nothing else."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        for _ in range(20):
            await sock.send(b"\x00" * (1 << 17))
            await asyncio.sleep(0.01)
    finally:
        sock.close(0)


async def test_curator_survives_ten_thousand_hostile_frames_beside_a_legit_session(tmp_path):
    expected = await run_inproc(CFG, tmp_path / "reference", transcripts=False)
    bound = asyncio.get_running_loop().create_future()
    service = prepare_service(CFG)
    serving = asyncio.ensure_future(serve_curator(
        service, "tcp://127.0.0.1:0", tmp_path / "curator", sessions=0,
        accept_timeout=60.0, verbose=False, on_bound=bound.set_result))
    endpoint = await asyncio.wait_for(bound, 10)
    ctx = new_context()
    legit = None
    try:
        n = expected["n"]
        legit = asyncio.ensure_future(
            connect_modeler(endpoint, tmp_path / "modeler", seed=CFG.seed, timeout=20.0))
        for _ in range(200):  # the legitimate session is the seeded curator's first
            if service.journal.sessions():
                break
            await asyncio.sleep(0.05)
        fuzzers = [fuzz_peer(ctx, endpoint, s, n) for s in range(PEERS)]
        results = await asyncio.wait_for(
            asyncio.gather(legit, oversized_peer(ctx, endpoint), *fuzzers), 240)
        assert not serving.done(), "the curator stopped"
    finally:
        if legit is not None:  # the modeler too: nothing runs on past the test
            await stop(legit, 20)
        await stop(serving, 20)
        close_context(ctx)
    legit_result, _, *counts = results
    assert legit_result["status"] == "ok"
    assert legit_result["queries"] == expected["queries"]
    assert legit_result["rewards"] == expected["rewards"]
    total = sum(c["error"] + c["reward"] for c in counts)
    assert total == PEERS * FRAMES_PER_PEER >= 10_000  # every frame was answered
    codes = set().union(*(c["codes"] for c in counts))
    assert {ErrorCode.MALFORMED.value, ErrorCode.UNKNOWN_KIND.value, ErrorCode.SEQUENCE.value,
            ErrorCode.INDEX_OUT_OF_RANGE.value, ErrorCode.POLICY.value} <= codes
