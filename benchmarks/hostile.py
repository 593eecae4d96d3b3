"""Hostile load on one long-lived curator: memory, disk and a legitimate session's latency.

    python benchmarks/hostile.py [--scenario hospital] [--hellos 1000] [--frames 100000]

Starts `pobo curator SCENARIO --sessions 0` as a separate process (embedded data, seed 0)
and measures its resident memory (VmRSS) once it listens: the baseline. Then, from this
process and all at once:
- `--frames` hostile frames: garbage before any Hello from many identities, and garbage
  inside opened sessions (refused, answered with a typed Error, recorded as digests);
- `--hellos` sessions that say Hello, take the Welcome and the Dataset, and End;
- one legitimate session that times each query -> reward round trip.
Prints the curator's RSS at the baseline, at the peak and after the sessions end (goal:
within +100 MB of the baseline afterwards), the transcript bytes per refused frame
(goal <= 200), the legitimate round trip p50/p99 during the flood against the same
session's round trips with no flood (measured first, in the same run), and whether the
curator survived.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
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

from pobo.protocol.codec import decode, encode  # noqa: E402
from pobo.protocol.messages import PROTOCOL_VERSION, End, Hello, Query, Retry, new_nonce  # noqa: E402
from pobo.remote import LISTENING  # noqa: E402


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Sampler(threading.Thread):
    """Samples a process's RSS every 50 ms; keeps the peak."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self) -> None:
        while self.running:
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except OSError:
                return
            time.sleep(0.05)


def dealer(ctx: zmq.asyncio.Context, endpoint: str) -> zmq.asyncio.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.connect(endpoint)
    return sock


async def garbage_before_hello(ctx, endpoint: str, frames: int, rng) -> None:
    """`frames` garbage frames, each from a fresh routing identity (never a session):
    rounds of 64 sockets, each round's sockets closed before the next opens."""
    sent = 0
    while sent < frames:
        socks = []
        for _ in range(min(64, frames - sent)):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, rng.bytes(16))
            sock.connect(endpoint)
            socks.append(sock)
        for sock in socks:
            await sock.send(rng.bytes(int(rng.integers(1, 120))))
            sent += 1
        await asyncio.sleep(0.02)  # let the frames leave before the sockets close
        for sock in socks:
            sock.close(0)


async def say_hello(sock, client: str, timeout: float) -> None:
    """Open a session with bare frames, through the cookie round (PROTOCOL.md 3.7): a
    first Hello, the curator's Retry, the Hello echoing its cookie."""
    hello = Hello(PROTOCOL_VERSION, client, nonce=new_nonce())
    await sock.send(encode(hello))
    retry = decode(await asyncio.wait_for(sock.recv(), timeout))
    assert isinstance(retry, Retry), retry
    await sock.send(encode(Hello(PROTOCOL_VERSION, client, nonce=hello.nonce,
                                 cookie=retry.cookie)))


async def hello_then_garbage(ctx, endpoint: str, garbage: int, rng) -> int:
    """Open a session, take Welcome and Dataset, send `garbage` refused frames, End."""
    sock = dealer(ctx, endpoint)
    errors = 0
    try:
        await say_hello(sock, "hostile", 60)
        for _ in range(2):
            await asyncio.wait_for(sock.recv(copy=False), 60)
        for _ in range(garbage):
            await sock.send(rng.bytes(int(rng.integers(1, 120))))
            await asyncio.wait_for(sock.recv(), 60)
            errors += 1
        await sock.send(encode(End("done")))
    except (asyncio.TimeoutError, zmq.ZMQError):
        pass
    finally:
        sock.close(0)
    return errors


async def legitimate(ctx, endpoint: str, rounds: int, n: int) -> list[float]:
    """A well-behaved session of `rounds` queries; its round trips in seconds."""
    sock = dealer(ctx, endpoint)
    rtts = []
    try:
        await say_hello(sock, "legit", 120)
        for _ in range(2):
            await asyncio.wait_for(sock.recv(copy=False), 120)
        for seq in range(1, rounds + 1):
            start = time.perf_counter()
            await sock.send(encode(Query(seq, seq % n)))
            decode(await asyncio.wait_for(sock.recv(), 120))
            rtts.append(time.perf_counter() - start)
        await sock.send(encode(End("done")))
    finally:
        sock.close(0)
    return rtts


async def flood(endpoint: str, args, n: int) -> tuple[list[float], list[float], int]:
    ctx = zmq.asyncio.Context()
    rng = np.random.default_rng(0)
    try:
        quiet = await legitimate(ctx, endpoint, 50, n)
        per_session = args.frames // 2 // max(args.hellos, 1)

        async def sessions_in_batches() -> int:
            refused = 0
            for start in range(0, args.hellos, 50):  # 50 hostile sessions at a time
                batch = [hello_then_garbage(ctx, endpoint, per_session, rng)
                         for _ in range(min(50, args.hellos - start))]
                refused += sum(await asyncio.gather(*batch))
            return refused

        during, refused, _ = await asyncio.gather(
            legitimate(ctx, endpoint, 200, n), sessions_in_batches(),
            garbage_before_hello(ctx, endpoint, args.frames - args.frames // 2, rng))
        return quiet, during, refused
    finally:
        ctx.destroy(linger=0)  # closes any socket an interrupted coroutine left open


def start_curator(cmd: list[str], home: str) -> tuple[subprocess.Popen, str]:
    """Start a curator command, its key store in `home` (not the user's); (the process,
    the endpoint it listens on), its further output drained in a thread."""
    curator = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env={**os.environ, "POBO_HOME": home})
    line = curator.stdout.readline()
    if not line.startswith(LISTENING):
        curator.kill()
        raise SystemExit(f"the curator did not start: {line!r}")
    threading.Thread(target=lambda: [None for _ in curator.stdout], daemon=True).start()
    return curator, line[len(LISTENING):].strip()


def stop_curator(curator: subprocess.Popen) -> None:
    """Terminate a benchmark's curator, killing it after 30 s."""
    curator.terminate()
    try:
        curator.wait(30)
    except subprocess.TimeoutExpired:
        curator.kill()


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # many short-lived peers
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="hospital")
    parser.add_argument("--hellos", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--T", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pobo-hostile-") as out:
        cmd = [sys.executable, "-m", "pobo", "curator", args.scenario, "--seed", "0",
               "--bind", "tcp://127.0.0.1:0", "--sessions", "0", "--T", str(args.T),
               "--timeout", "30", "--out", out]
        curator, endpoint = start_curator(cmd, str(Path(out) / "home"))
        try:
            time.sleep(1.0)
            base = rss_mb(curator.pid)
            sampler = Sampler(curator.pid)
            sampler.start()
            started = time.perf_counter()
            from pobo.scenarios.registry import build_problem
            n = build_problem(args.scenario, 0).X.shape[0]
            quiet, during, refused = asyncio.run(flood(endpoint, args, n))
            wall = time.perf_counter() - started
            time.sleep(2.0)
            after = rss_mb(curator.pid)
            sampler.running = False
            alive = curator.poll() is None
        finally:
            stop_curator(curator)
        transcripts = list(Path(out).rglob("curator.transcript*"))
        size = sum(p.stat().st_size for p in transcripts)
        blobs = sum(p.stat().st_size for p in Path(out).rglob("blobs/*"))
    q, d = np.array(quiet) * 1e3, np.array(during) * 1e3
    print(f"{args.scenario}: {args.hellos} Hellos, {args.frames} hostile frames "
          f"({refused} refused inside sessions, the rest before any Hello), {wall:.1f} s")
    print(f"curator RSS: baseline {base:.0f} MB, peak {sampler.peak:.0f} MB, after the "
          f"sessions end {after:.0f} MB (+{after - base:.0f} MB; goal <= +100 MB)")
    print(f"transcripts: {len(transcripts)} files, {size / 1e6:.1f} MB (+ {blobs / 1e6:.1f} MB "
          f"of shared blobs); {size / max(refused, 1):.0f} bytes per refused frame "
          "(includes each session's handshake records; goal <= 200)")
    print(f"legitimate round trip: quiet p50 {np.median(q):.2f} ms p99 "
          f"{np.percentile(q, 99):.2f} ms; during the flood p50 {np.median(d):.2f} ms p99 "
          f"{np.percentile(d, 99):.2f} ms ({np.median(d) / np.median(q):.1f}x)")
    print(f"curator survived: {'yes' if alive else 'NO'}")


if __name__ == "__main__":
    main()
