"""Hello flood on one long-lived curator: its memory, and a legitimate Welcome's latency.

    python benchmarks/hello_flood.py [--scenario hospital] [--hellos 1100]

Starts `pobo curator SCENARIO --sessions 0` (embedded data, seed 0; hospital's Z is
about 8 MB) as a separate process. Baseline, measured first in the same run: the
curator's resident memory (VmRSS) once it listens and has served one legitimate session,
and that session's Hello -> Welcome latency. Then `--hellos` peers each send one valid,
unsigned Hello (about 30 bytes of message) and never read a byte (receive high-water
mark 1), and right after the last of them one legitimate peer (another process) says
Hello and times its Welcome (from its first Hello,
through the cookie round of PROTOCOL.md 3.7, to the Welcome). Prints the RSS growth over
the baseline (goal: <= +150 MB for 1,000 Hellos), the legitimate Welcome latency during
the flood (goal: <= 1 s, issue 48 item 5: 1,100 unread Hellos), beside the quiet one, and
the session slots the flood holds (goal: 0). Loopback only; every wait is bounded.
"""
from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq
import zmq.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.hostile import Sampler, rss_mb, start_curator, stop_curator  # noqa: E402
from pobo.protocol.codec import decode, encode  # noqa: E402
from pobo.protocol.messages import (  # noqa: E402
    PROTOCOL_VERSION, End, Hello, Retry, Welcome, new_nonce,
)
from pobo.protocol.signing import ZERO, Link, open_frame, seal  # noqa: E402


def hello_frame(cookie: str = "", nonce: str = "") -> bytes:
    """An unsigned enveloped Hello opening a new session (what any modeler may send)."""
    return seal(encode(Hello(PROTOCOL_VERSION, "flood", nonce=nonce or new_nonce(),
                             cookie=cookie)), Link("", 0, ZERO, ZERO), None)


async def welcome_latency(ctx: zmq.asyncio.Context, endpoint: str) -> float:
    """Seconds from a legitimate Hello to its Welcome; it then reads the Dataset and Ends."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        start = time.perf_counter()
        nonce = new_nonce()
        await sock.send(hello_frame(nonce=nonce))
        retry = decode(open_frame(await asyncio.wait_for(sock.recv(), 300)).body)
        assert isinstance(retry, Retry), retry
        await sock.send(hello_frame(retry.cookie, nonce))
        welcome = decode(open_frame(await asyncio.wait_for(sock.recv(), 300)).body)
        latency = time.perf_counter() - start
        assert isinstance(welcome, Welcome), welcome
        await asyncio.wait_for(sock.recv(copy=False), 300)  # the Dataset
        end = Link(welcome.session, 1, ZERO, ZERO)
        await sock.send(seal(encode(End("done")), end, None))
        return latency
    finally:
        sock.close(0)


def legitimate_elsewhere(endpoint: str) -> subprocess.Popen:
    """welcome_latency, measured from another process (its own ZeroMQ I/O thread, not the
    one busy with the flooding peers) once it reads a line on its stdin: started before
    the flood, so that its imports are done when it is told to go."""
    code = ("import asyncio, sys, zmq.asyncio; from benchmarks.hello_flood import "
            "welcome_latency; sys.stdin.readline(); print(asyncio.run(welcome_latency("
            f"zmq.asyncio.Context(), {endpoint!r})))")
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1])


def latency_of(legit: subprocess.Popen) -> float:
    """The latency the process of legitimate_elsewhere printed (bounded wait)."""
    out, err = legit.communicate(timeout=600)
    if legit.returncode != 0:
        raise SystemExit(err)
    return float(out.strip().splitlines()[-1])


async def flood(endpoint: str, hellos: int) -> tuple[float, float, float, list]:
    """(the quiet latency, the latency of a Hello sent right after the last of the flood,
    the flood's sending time, the flooding sockets: left open, their Hellos unread)."""
    ctx = zmq.asyncio.Context()
    ctx.set(zmq.MAX_SOCKETS, hellos + 64)
    quiet = await welcome_latency(ctx, endpoint)
    legit = legitimate_elsewhere(endpoint)
    await asyncio.sleep(3.0)  # its imports done: it waits for the word
    socks = []
    for _ in range(hellos):  # connected first, so that the Hellos go out in one burst
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1)
        sock.setsockopt(zmq.RCVBUF, 4096)
        sock.connect(endpoint)
        socks.append(sock)
    await asyncio.sleep(2.0)
    frames = [hello_frame() for _ in socks]
    start = time.perf_counter()
    for sock, frame in zip(socks, frames):  # never read: the replies pile up unread
        await sock.send(frame)
    sending = time.perf_counter() - start
    legit.stdin.write("go\n")  # the legitimate Hello goes out behind the whole flood
    legit.stdin.flush()
    during = await asyncio.to_thread(latency_of, legit)
    return quiet, during, sending, socks


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="hospital")
    parser.add_argument("--hellos", type=int, default=1100)
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds to watch the RSS after the legitimate Welcome")
    parser.add_argument("curator_args", nargs="*", help="more `pobo curator` options")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pobo-flood-") as out:
        cmd = [sys.executable, "-m", "pobo", "curator", args.scenario, "--seed", "0",
               "--bind", "tcp://127.0.0.1:0", "--sessions", "0", "--timeout", "600",
               "--out", out, "-q", *args.curator_args]
        curator, endpoint = start_curator(cmd, str(Path(out) / "home"))
        try:
            sampler = Sampler(curator.pid)

            async def measure():
                ctx = zmq.asyncio.Context()
                await welcome_latency(ctx, endpoint)  # warm: one session served
                ctx.destroy(0)
                await asyncio.sleep(1.0)
                base = rss_mb(curator.pid)
                sampler.start()
                quiet, during, sending, socks = await flood(endpoint, args.hellos)
                await asyncio.sleep(args.settle)
                for s in socks:
                    s.close(0)
                return base, quiet, during, sending

            base, quiet, during, sending = asyncio.run(measure())
            # every session has a folder: the three legitimate ones, and any the flood opened
            held = sum(1 for p in Path(out).iterdir() if p.is_dir() and len(p.name) == 32) - 3
            sampler.running = False
            alive = curator.poll() is None
        finally:
            stop_curator(curator)
    print(f"{args.scenario}: {args.hellos} Hellos that never read, sent in {sending:.1f} s")
    print(f"curator RSS: baseline {base:.0f} MB, peak {sampler.peak:.0f} MB "
          f"(+{sampler.peak - base:.0f} MB; goal <= +150 MB)")
    print(f"legitimate Hello -> Welcome: quiet {quiet * 1e3:.0f} ms, during the flood "
          f"{during * 1e3:.0f} ms (goal <= 1000 ms)")
    print(f"sessions the flood opened: {held} (goal 0; each takes a slot until --timeout)")
    print(f"curator survived: {'yes' if alive else 'NO'}")


if __name__ == "__main__":
    main()
