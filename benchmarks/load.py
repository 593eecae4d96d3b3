"""Load: many concurrent modeler sessions on one curator process over loopback tcp.

    python benchmarks/load.py [--sessions 100] [--T 30]

Starts `pobo curator synthetic --sessions N` as a separate process, then N modeler
sessions at once from this process (full protocol: codec, policy, handshake, dataset;
rows chosen at random so that the figure is the protocol's, not the GP's). Prints how
many sessions completed, lost messages (queries without a reward, or answers the
curator did not record: must be 0), and p50/p99 query round-trip times next to a raw
pyzmq REQ/REP round trip of a same-sized frame measured in the same run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zmq
import zmq.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol.channel import Channel  # noqa: E402
from protocol.messages import PROTOCOL_VERSION, Dataset, End, Hello, Query, Reward, Welcome  # noqa: E402
from protocol.policy import MODELER, PRIVATE, Boundary  # noqa: E402
from scenarios.remote import LISTENING  # noqa: E402
from transport.sockets import DealerPipe  # noqa: E402


async def session(ctx, endpoint: str, seed: int, rtts: list[float]) -> tuple[int, int]:
    """One modeler session; (queries sent, rewards received)."""
    channel = Channel(DealerPipe.connect(ctx, endpoint), Boundary(PRIVATE, MODELER), timeout=60)
    rng = np.random.default_rng(seed)
    sent = got = 0
    try:
        await channel.send(Hello(PROTOCOL_VERSION, f"load-{seed}"))
        welcome = await channel.recv()
        assert isinstance(welcome, Welcome)
        assert isinstance(await channel.recv(), Dataset)
        for seq in range(1, welcome.params.T + 1):
            start = time.perf_counter()
            await channel.send(Query(seq, int(rng.integers(welcome.params.n))))
            sent += 1
            reply = await channel.recv()
            rtts.append(time.perf_counter() - start)
            got += isinstance(reply, Reward)
        await channel.send(End("done"))
    finally:
        channel.close()
    return sent, got


def raw_reqrep(frame_size: int, rounds: int) -> list[float]:
    """Round trips of a raw REQ/REP echo over loopback tcp (the baseline)."""
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    port = rep.bind_to_random_port("tcp://127.0.0.1")

    def echo() -> None:
        for _ in range(rounds):
            rep.send(rep.recv())

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    req = ctx.socket(zmq.REQ)
    req.connect(f"tcp://127.0.0.1:{port}")
    payload, times = b"x" * frame_size, []
    for _ in range(rounds):
        start = time.perf_counter()
        req.send(payload)
        req.recv()
        times.append(time.perf_counter() - start)
    thread.join(5)
    req.close(0)
    rep.close(0)
    ctx.term()
    return times


async def drive(endpoint: str, sessions: int) -> tuple[list, list[float]]:
    """All sessions at once."""
    ctx = zmq.asyncio.Context()
    rtts: list[float] = []
    try:
        results = await asyncio.gather(*(session(ctx, endpoint, s, rtts) for s in range(sessions)),
                                       return_exceptions=True)
    finally:
        ctx.term()
    return results, rtts


def run_load(sessions: int, T: int):
    """(modeler results, round trips, curator records, wall seconds) of one load run."""
    with tempfile.TemporaryDirectory() as out:
        curator = subprocess.Popen(
            [sys.executable, "-m", "scenarios.cli", "curator", "synthetic", "--grid", "20",
             "--T", str(T), "--seed", "1", "--bind", "tcp://127.0.0.1:0", "--sessions",
             str(sessions), "--timeout", "120", "--out", out],
            stdout=subprocess.PIPE, text=True)
        try:
            line = curator.stdout.readline()
            endpoint = line[len(LISTENING):].strip()
            threading.Thread(target=curator.stdout.read, daemon=True).start()  # keep it flowing
            started = time.perf_counter()
            results, rtts = asyncio.run(drive(endpoint, sessions))
            wall = time.perf_counter() - started
            curator.wait(120)
        finally:
            if curator.poll() is None:
                curator.kill()
            curator.wait(10)
        pattern = "*/curator.json" if sessions > 1 else "curator.json"
        records = [json.loads(p.read_text()) for p in Path(out).glob(pattern)]
    return results, rtts, records, wall


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--T", type=int, default=30)
    args = parser.parse_args()
    _, alone, _, _ = run_load(1, args.T)
    results, rtts, records, wall = run_load(args.sessions, args.T)
    ok = [r for r in results if isinstance(r, tuple)]
    sent, got = sum(s for s, _ in ok), sum(g for _, g in ok)
    recorded = sum(len(r["queries"]) for r in records)
    completed = sum(1 for r in records if r["status"] == "ok")
    raw = raw_reqrep(40, 2000)
    p = lambda xs, q: 1e3 * float(np.percentile(xs, q))  # noqa: E731
    print(f"{args.sessions} concurrent sessions x T = {args.T} on one curator over tcp: "
          f"{completed} completed, {len(results) - len(ok)} failed, wall {wall:.1f} s")
    print(f"lost messages: {sent - got} (queries sent {sent}, rewards received {got}, "
          f"answers recorded by the curator {recorded})")
    print(f"query round trip: p50 {p(rtts, 50):.2f} ms, p99 {p(rtts, 99):.2f} ms "
          f"(all {len(rtts)} queries, while every session runs at once)")
    print(f"one session alone: p50 {p(alone, 50):.3f} ms, p99 {p(alone, 99):.3f} ms")
    print(f"raw pyzmq REQ/REP round trip: p50 {p(raw, 50):.3f} ms, p99 {p(raw, 99):.3f} ms; "
          f"ratios p50: one session {p(alone, 50) / p(raw, 50):.1f}x, {args.sessions} sessions "
          f"{p(rtts, 50) / p(raw, 50):.0f}x (they share the curator's one event loop)")


if __name__ == "__main__":
    main()
