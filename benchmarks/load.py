"""Load: many concurrent modeler sessions on one curator process over loopback tcp.

    python benchmarks/load.py [--sessions 100] [--T 30]

Starts `pobo curator synthetic --sessions N` as a separate process, then N modeler
sessions at once from this process (full protocol: codec, policy, handshake, dataset;
rows chosen at random so that the figure is the protocol's, not the GP's). Prints how
many sessions completed, lost messages (queries without a reward, or answers the
curator did not record: must be 0), and p50/p99 query round-trip times next to a raw
pyzmq REQ/REP round trip of a same-sized frame measured in the same run; and one session
alone with Ed25519-signed frames beside one without signatures (both sides sign every
frame they send and verify every frame they receive: two signatures and two
verifications per round trip), alternating runs in the same process.
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

from pobo.protocol.channel import Channel  # noqa: E402
from pobo.protocol.cookie import cookie_round  # noqa: E402
from pobo.protocol.messages import (  # noqa: E402
    PROTOCOL_VERSION, Dataset, End, Hello, Query, Reward, Welcome, new_nonce,
)
from pobo.protocol.policy import MODELER, PRIVATE, Boundary  # noqa: E402
from pobo.protocol.signing import load_signing_key, load_verify_key  # noqa: E402
from pobo.transport.security import make_signing_keys  # noqa: E402
from pobo.remote import LISTENING  # noqa: E402
from pobo.transport.sockets import DealerPipe  # noqa: E402


async def session(ctx, endpoint: str, seed: int, rtts: list[float],
                  keys: Path | None = None) -> tuple[int, int]:
    """One modeler session (signed with the modeler key in `keys`); (queries sent, rewards
    received)."""
    signer = load_signing_key(keys / "modeler.sign_secret") if keys else None
    expected = frozenset([load_verify_key(keys / "curator.sign_public")]) if keys else None
    channel = Channel(DealerPipe.connect(ctx, endpoint), Boundary(PRIVATE, MODELER), timeout=60,
                      signer=signer, peer_keys=expected)
    rng = np.random.default_rng(seed)
    sent = got = 0
    try:
        await channel.send(await cookie_round(channel, Hello(  # PROTOCOL.md 3.7
            PROTOCOL_VERSION, f"load-{seed}", sign_key=channel.sign_key, nonce=new_nonce())))
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


async def drive(endpoint: str, sessions: int,
                keys: Path | None = None) -> tuple[list, list[float]]:
    """All sessions at once."""
    ctx = zmq.asyncio.Context()
    rtts: list[float] = []
    try:
        results = await asyncio.gather(*(session(ctx, endpoint, s, rtts, keys)
                                         for s in range(sessions)), return_exceptions=True)
    finally:
        ctx.term()
    return results, rtts


def run_load(sessions: int, T: int, signed: bool = False):
    """(modeler results, round trips, curator records, wall seconds) of one load run
    (every frame Ed25519-signed and verified on both sides when `signed`)."""
    with tempfile.TemporaryDirectory() as out:
        keys, sign = None, []
        if signed:
            keys = Path(out) / "keys"
            make_signing_keys(keys)
            sign = ["--sign-secret", str(keys / "curator.sign_secret"),
                    "--sign-allow", str(keys / "allowed")]
        curator = subprocess.Popen(
            [sys.executable, "-m", "pobo", "curator", "synthetic", "--grid", "20",
             "--T", str(T), "--seed", "1", "--bind", "tcp://127.0.0.1:0", "--sessions",
             str(sessions), "--timeout", "120", "--out", str(Path(out) / "c"), *sign],
            stdout=subprocess.PIPE, text=True)
        try:
            line = curator.stdout.readline()
            endpoint = line[len(LISTENING):].strip()
            threading.Thread(target=curator.stdout.read, daemon=True).start()  # keep it flowing
            started = time.perf_counter()
            results, rtts = asyncio.run(drive(endpoint, sessions, keys))
            wall = time.perf_counter() - started
            curator.wait(120)
        finally:
            if curator.poll() is None:
                curator.kill()
            curator.wait(10)
        pattern = "*/curator.json" if sessions > 1 else "curator.json"
        records = [json.loads(p.read_text()) for p in (Path(out) / "c").glob(pattern)]
        if signed:
            assert all(r["signatures"] == "signed" for r in records), "unsigned session"
    return results, rtts, records, wall


def ed25519_costs(n: int = 2000) -> tuple[float, float]:
    """Microseconds to seal (sign) a reward frame and to open and verify one."""
    from pobo.protocol.codec import encode
    from pobo.protocol.signing import Link, Signer, open_frame, seal, verify

    signer, body = Signer.generate(), encode(Reward(3, 17, 0.123))
    link = Link("0" * 32, 10, bytes(32), bytes(32))
    frame = seal(body, link, signer)
    start = time.perf_counter()
    for _ in range(n):
        seal(body, link, signer)
    mid = time.perf_counter()
    for _ in range(n):
        assert verify(open_frame(frame), signer.public)
    end = time.perf_counter()
    return (mid - start) / n * 1e6, (end - mid) / n * 1e6


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--T", type=int, default=30)
    parser.add_argument("--signing-rounds", type=int, default=300,
                        help="queries per single session in the signed/unsigned comparison")
    parser.add_argument("--signing-repeats", type=int, default=3,
                        help="alternating signed/unsigned single-session runs of each")
    args = parser.parse_args()
    plain: list[float] = []
    signed: list[float] = []
    for _ in range(args.signing_repeats):  # alternate, so that drift hits both alike
        plain += run_load(1, args.signing_rounds)[1]
        signed += run_load(1, args.signing_rounds, signed=True)[1]
    alone = plain
    results, rtts, records, wall = run_load(args.sessions, args.T)
    ok = [r for r in results if isinstance(r, tuple)]
    sent, got = sum(s for s, _ in ok), sum(g for _, g in ok)
    recorded = sum(len(r["queries"]) for r in records)
    completed = sum(1 for r in records if r["status"] == "ok")
    raw = raw_reqrep(40, 2000)
    sign_us, verify_us = ed25519_costs()
    p = lambda xs, q: 1e3 * float(np.percentile(xs, q))  # noqa: E731
    print(f"{args.sessions} concurrent sessions x T = {args.T} on one curator over tcp: "
          f"{completed} completed, {len(results) - len(ok)} failed, wall {wall:.1f} s")
    print(f"lost messages: {sent - got} (queries sent {sent}, rewards received {got}, "
          f"answers recorded by the curator {recorded})")
    print(f"query round trip: p50 {p(rtts, 50):.2f} ms, p99 {p(rtts, 99):.2f} ms "
          f"(all {len(rtts)} queries, while every session runs at once)")
    print(f"one session alone: p50 {p(alone, 50):.3f} ms, p99 {p(alone, 99):.3f} ms")
    print(f"one session alone, every frame signed (Ed25519) and verified on both sides: "
          f"p50 {p(signed, 50):.3f} ms, p99 {p(signed, 99):.3f} ms; without signatures p50 "
          f"{p(plain, 50):.3f} ms, p99 {p(plain, 99):.3f} ms: signing adds "
          f"{p(signed, 50) - p(plain, 50):+.3f} ms per round trip at p50 ({len(signed)} and "
          f"{len(plain)} queries, {args.signing_repeats} alternating runs of each)")
    print(f"Ed25519 (libsodium via PyNaCl) in this process: seal and sign a reward frame "
          f"{sign_us:.1f} us, open and verify it {verify_us:.1f} us; a round trip does two of "
          f"each: {2 * (sign_us + verify_us) / 1e3:.3f} ms")
    print(f"raw pyzmq REQ/REP round trip: p50 {p(raw, 50):.3f} ms, p99 {p(raw, 99):.3f} ms; "
          f"ratios p50: one session {p(alone, 50) / p(raw, 50):.1f}x, {args.sessions} sessions "
          f"{p(rtts, 50) / p(raw, 50):.0f}x (they share the curator's one event loop)")


if __name__ == "__main__":
    main()
