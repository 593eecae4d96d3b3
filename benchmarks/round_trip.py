"""One query -> reward round trip over loopback tcp: pobo's full path against raw ZeroMQ.

    python benchmarks/round_trip.py [--reps 7] [--block 300] [--cpus 0]

Every server is its own OS process (as a curator is); this process is the client. In
each of `--reps` repetitions every path does a block of `--block` round trips, in an
order rotated from one repetition to the next, so that the machine's drift (its cores
are shared) hits every path alike. The paths:

  (a) raw pyzmq REQ/REP echo of a frame as long as a signed Reward;
  (b) raw zmq.asyncio DEALER -> ROUTER echo of the same frame: the baseline of every ratio;
  (b) with CURVE: the same, CURVE-encrypted (what a deployment's transport costs);
  pipe: pobo's DealerPipe -> RouterHub echo of the same frame (the pipe layer alone);
  (p) the same work as (c) written flat, outside pobo, on raw zmq.asyncio sockets: each
      side msgpack-encodes its message, signs it (libsodium), appends it to a transcript
      file (a record chained by SHA-256) and sends; the server appends the answer to a
      log file (under flock, its length checked, as pobo's journal does at
      --durability normal) before it replies; each side verifies the
      peer's signature after its own send (as (c) does over CURVE). No policy, links,
      codec validation or session machinery: the floor of this work in Python here;
      then the same over CURVE: the floor of the figure's work, (c) over CURVE; then the
      same over CURVE with both sides on pobo's polling loops (below);
  (c) pobo's full path: `pobo curator synthetic` with signatures, transcripts and a
      journal on disk, and a modeler Channel (signed, with its transcript) sending a Query
      and receiving its Reward, each side on the event loop pobo runs its parties on
      (pobo.transport.spin: the curator's by default, the modeler's here on a thread of
      this process, as `pobo modeler` runs it; it polls briefly between close frames).
      The figure: over CURVE (as every deployment off loopback runs; the signatures of
      queries and rewards are then verified off the critical path, see
      protocol.channel.Channel) with the journal at --durability normal; then the same at
      full; signed in plaintext (every signature verified before the message is used);
      unsigned in plaintext; and the figure's path with `--spin 0` on both sides (plain
      asyncio loops: what the polling is worth);
  (b) on pobo's polling loops: the baseline's echo with both sides on those loops (what
      they are worth to code that does no work: the baseline itself stays plain asyncio).
      A last line divides (c) and the flat prototype by it: pobo's cost over raw ZeroMQ
      like for like, every side on the same loops.

`--cpus 0` (a list: `0,1`) pins this process and every server to those CPUs (their
threads inherit it), a diagnostic: on one CPU no frame wakes a thread on another core, so
a path's time is its work, not the machine's cross-core wake-ups (see docs/performance.md,
"The round trip").

Each path is printed as the median and p90 of all its round trips in ms, and as the
median over repetitions of (its median / (b)'s median in the same repetition). Then the
pieces measured in this process: Ed25519 signing and verifying, one round trip of two
Channels over in-process queues (codec, policy, envelopes, transcripts, no socket), and
one journal commit of an answer with its ledger entry at each durability, and one answer
with no charge at normal (a record in its session's answer log, as `(c)` writes).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zmq
import zmq.asyncio
import zmq.auth

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from load import ed25519_costs  # noqa: E402  (benchmarks/ is this script's folder)
from pobo.parties.journal import Journal  # noqa: E402
from pobo.protocol.channel import Channel  # noqa: E402
from pobo.protocol.cookie import cookie_round  # noqa: E402
from pobo.protocol.ledger import LOCAL, Budget, Entry  # noqa: E402
from pobo.protocol.messages import (  # noqa: E402
    PROTOCOL_VERSION, Dataset, End, Hello, Query, Reward, Welcome, new_nonce,
)
from pobo.protocol.policy import (  # noqa: E402
    CURATOR, LDP_REWARD, MODELER, PRIVATE, Boundary,
)
from pobo.protocol.signing import Signer, load_signing_key, load_verify_key  # noqa: E402
from pobo.protocol.transcript import Transcript  # noqa: E402
from pobo.remote import LISTENING  # noqa: E402
from pobo.transport.inproc import pipe_pair  # noqa: E402
from pobo.transport.security import (  # noqa: E402
    CurveClient, make_keys,
)
from pobo.transport import spin  # noqa: E402
from pobo.transport.sockets import DealerPipe, RouterHub  # noqa: E402

TIMEOUT = 30.0
FLAT_POLLED = "(p) flat over CURVE, pobo's polling loops"


# ---- the servers, each run as `round_trip.py --serve MODE` in its own process ----------

def serve(mode: str, keys: Path | None = None) -> None:
    """Echo every frame back: REQ/REP, a raw asyncio ROUTER (with CURVE given `keys`; on
    pobo's polling loop for router-spin) or pobo's RouterHub."""
    if mode == "rep":
        ctx = zmq.Context()
        rep = ctx.socket(zmq.REP)
        port = rep.bind_to_random_port("tcp://127.0.0.1")
        print(f"{LISTENING}tcp://127.0.0.1:{port}", flush=True)
        while True:
            rep.send(rep.recv())
    if mode in ("router-spin", "flat-curve-spin"):  # on pobo's polling loop
        spin.run(_serve_async(mode.removesuffix("-spin"), keys, polling=True))
    asyncio.run(_serve_async(mode, keys))


async def _serve_async(mode: str, keys: Path | None, polling: bool = False) -> None:
    ctx = zmq.asyncio.Context()
    if mode in ("flat", "flat-curve"):
        await _serve_flat(ctx, keys, curve=mode == "flat-curve",
                          folder=mode + "-spin" * polling)
    if mode in ("router", "router-curve"):
        sock = ctx.socket(zmq.ROUTER)
        if mode == "router-curve":  # every client admitted: the handshake is not timed
            public, secret = zmq.auth.load_certificate(keys / "curator.key_secret")
            sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        print(f"{LISTENING}tcp://127.0.0.1:{port}", flush=True)
        while True:
            await sock.send_multipart(await sock.recv_multipart())
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0")
    print(LISTENING + hub.endpoint, flush=True)

    async def echo(pipe) -> None:
        while True:
            await pipe.send(await pipe.recv(3600))

    tasks = []
    while True:
        tasks.append(asyncio.ensure_future(echo(await hub.accept(3600))))


PROTO_KEYS = (b"\x01" * 32, b"\x02" * 32)  # (server, client) signing seeds: a benchmark's


class FlatSide:
    """One side of the (p) prototype: its signing key, the peer's verify key, a chained
    transcript file and the peer frames not yet verified."""

    def __init__(self, mine: bytes, peer: bytes, transcript: Path) -> None:
        from nacl.signing import SigningKey

        self.key, self.peer = SigningKey(mine), SigningKey(peer).verify_key
        self.file = open(transcript, "ab", buffering=0)
        self.prev, self.unverified = bytes(32), []

    def record(self, direction: str, frame: bytes) -> None:
        import hashlib

        import msgpack

        raw = msgpack.packb({"dir": direction, "frame": frame, "prev": self.prev,
                             "time": time.time()}, use_bin_type=True)
        self.file.write(raw)
        self.prev = hashlib.sha256(raw).digest()

    def seal(self, message: dict) -> bytes:
        import msgpack

        body = msgpack.packb(message, use_bin_type=True)
        frame = msgpack.packb({"body": body, "sig": self.key.sign(body).signature},
                              use_bin_type=True)
        self.record("sent", frame)
        return frame

    def open(self, frame: bytes) -> dict:
        import msgpack

        envelope = msgpack.unpackb(frame, raw=False)
        self.unverified.append((envelope["body"], envelope["sig"]))
        self.record("recv", frame)
        return msgpack.unpackb(envelope["body"], raw=False)

    def verify(self) -> None:
        for body, sig in self.unverified:
            self.peer.verify(body, sig)
        self.unverified.clear()


async def _serve_flat(ctx, keys: Path, curve: bool = False, folder: str = "flat") -> None:
    """The (p) server: answer each query from a table, appended to an answer log first
    (as pobo's journal at durability normal does: under flock, the file's length checked,
    one write of a 48-byte record with its CRC-32), over CURVE with `curve`, its files in
    `folder`."""
    import fcntl
    import struct
    import zlib

    where = keys.parent / folder
    where.mkdir()
    sock = ctx.socket(zmq.ROUTER)
    if curve:
        public, secret = zmq.auth.load_certificate(keys / "curator.key_secret")
        sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    log = os.open(where / "answers.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    size, body = 0, struct.Struct("<qqqdd")
    side = FlatSide(PROTO_KEYS[0], PROTO_KEYS[1], where / "flat-server.transcript")
    f = np.random.default_rng(0).standard_normal(2500)
    print(f"{LISTENING}tcp://127.0.0.1:{port}", flush=True)
    while True:
        identity, frame = await sock.recv_multipart()
        query = side.open(frame)
        value = float(f[query["index"]])
        fcntl.flock(log, fcntl.LOCK_EX)
        if os.lseek(log, 0, os.SEEK_END) != size:
            raise RuntimeError("another writer appended to the answer log")
        data = body.pack(1, query["seq"], query["index"], value, value)
        size += os.write(log, struct.pack("<c3xI", b"a", zlib.crc32(data)) + data)
        fcntl.flock(log, fcntl.LOCK_UN)
        await sock.send_multipart([identity, side.seal(
            {"kind": "reward", "seq": query["seq"], "index": query["index"], "value": value})])
        side.verify()


def start(argv: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    """A server process and the endpoint it prints first. Its output goes to the file
    `log`, read here only until that line: a thread of this process draining a pipe of
    per-answer lines would take this process's GIL, and so time, from the client."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line, newline, _ = log.read_text().partition("\n")
        if newline or proc.poll() is not None:
            break
        time.sleep(0.05)
    if line.startswith(LISTENING):
        return proc, line[len(LISTENING):].strip()
    proc.kill()
    raise RuntimeError(f"server did not start: {log.read_text()[:200]!r}")


# ---- the clients: one round trip each ------------------------------------------------

@dataclass
class Path_:
    """One measured path: its label, a round trip, and every time measured."""

    label: str
    trip: object  # async () -> None
    times: list[list[float]] = field(default_factory=list)  # one list per repetition
    polling: bool = False  # its client runs on pobo's own loop (PoboLoop), not this one


class PoboLoop:
    """pobo's event loop (transport.spin.event_loop, as `pobo modeler` runs) in a thread
    of this process: the clients of the paths that run as pobo runs are made, timed and
    closed on it, while this process's plain asyncio loop (the baselines') waits."""

    def __init__(self) -> None:
        self.loop = spin.event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def call(self, coro):
        """The result of `coro`, run on pobo's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def called(function, *args):
    """`function(*args)`, as a coroutine: called on the loop that runs it."""
    return function(*args)


async def timed(path: Path_, rounds: int, pobo_loop: PoboLoop) -> None:
    """A block of `path`, on the loop its client runs on."""
    await (pobo_loop.call(block(path, rounds)) if path.polling else block(path, rounds))


async def block(path: Path_, rounds: int) -> None:
    """`rounds` timed round trips of `path`, appended as one repetition."""
    times = []
    trip = path.trip
    for _ in range(rounds):
        start_ = time.perf_counter()
        await trip()
        times.append(time.perf_counter() - start_)
    path.times.append(times)


async def pobo_session(ctx, endpoint: str, keys: Path | None, transcript: Path,
                       rng: np.random.Generator, curve: bool = False):
    """A modeler channel past the handshake, and its round trip (a Query, its Reward)."""
    signer = load_signing_key(keys / "modeler.sign_secret") if keys else None
    expected = frozenset([load_verify_key(keys / "curator.sign_public")]) if keys else None
    client = (CurveClient(keys / "modeler.key_secret", keys / "curator.key") if curve
              else None)
    channel = Channel(DealerPipe.connect(ctx, endpoint, curve=client),
                      Boundary(PRIVATE, MODELER),
                      Transcript(transcript), timeout=TIMEOUT, signer=signer,
                      peer_keys=expected)
    await channel.send(await cookie_round(channel, Hello(  # PROTOCOL.md 3.7
        PROTOCOL_VERSION, "round-trip", sign_key=channel.sign_key, nonce=new_nonce())))
    welcome = await channel.recv()
    dataset = await channel.recv()
    assert isinstance(welcome, Welcome) and isinstance(dataset, Dataset)
    n, seq = welcome.params.n, [0]

    async def trip() -> None:
        seq[0] += 1
        await channel.send(Query(seq[0], int(rng.integers(n))))
        reply = await channel.recv()
        assert isinstance(reply, Reward), reply

    return channel, (welcome, dataset), trip


def curator_argv(where: Path, durability: str, keys: Path | None, T: int,
                 curve: bool = False, polling: bool = True) -> list[str]:
    """`pobo curator` of the synthetic scenario, journal and transcripts in `where`
    (with `--spin 0` unless `polling`)."""
    sign = ["--sign-secret", str(keys / "curator.sign_secret"),
            "--sign-allow", str(keys / "allowed")] if keys else ["--unsigned"]
    if curve:
        sign += ["--curve-secret", str(keys / "curator.key_secret"),
                 "--curve-allow", str(keys / "allowed")]
    return [sys.executable, "-m", "pobo", "curator", "synthetic", "--grid", "50", "--T", str(T),
            "--seed", "1", "--bind", "tcp://127.0.0.1:0", "--timeout", "600",
            "--journal", str(where / "journal.db"), "--durability", durability,
            "--out", str(where / "c"), *sign, *([] if polling else ["--spin", "0"])]


# ---- the pieces, in this process -------------------------------------------------------

async def channel_alone(opening: tuple[Welcome, Dataset], rounds: int,
                        where: Path) -> list[float]:
    """Round trips of two signed, transcribed Channels over in-process queues."""
    cur_signer, mod_signer = Signer.generate(), Signer.generate()
    a, b = pipe_pair()
    cur = Channel(a, Boundary(PRIVATE, CURATOR), Transcript(where / "c.transcript"),
                  signer=cur_signer)
    mod = Channel(b, Boundary(PRIVATE, MODELER), Transcript(where / "m.transcript"),
                  signer=mod_signer)
    await mod.send(Hello(PROTOCOL_VERSION, "alone", sign_key=mod.sign_key))
    await cur.recv()
    welcome, dataset = opening
    params = welcome.params
    await cur.send(Welcome(PROTOCOL_VERSION, "0" * 32, params, cur.sign_key))
    await cur.send(dataset)
    await mod.recv()
    await mod.recv()
    times = []
    for seq in range(1, rounds + 1):
        start_ = time.perf_counter()
        await mod.send(Query(seq, seq % params.n))
        query = await cur.recv()
        await cur.send(Reward(query.seq, query.index, 0.5))
        await mod.recv()
        times.append(time.perf_counter() - start_)
    cur.close()
    mod.close()
    return times


async def journal_commits(where: Path, rounds: int, reps: int) -> dict[str, list[float]]:
    """Seconds per committed answer with its ledger entry (an LDP answer's: the row's
    local entry), normal and full interleaved, and per answer with no entry at normal
    (`log`: a record in its session's answer log, as `(c)` writes), written as the
    curator does it (`committed()` awaited: a group commit at full, at once at normal)."""
    journals = {d: Journal(where / f"commit-{d}.db", durability=d.split("-")[0])
                for d in ("normal", "full", "normal-log")}
    sid = "c" * 32
    journals["normal-log"].open_session(sid, {}, b"welcome", "p", "d", "me")
    budget, times = Budget(), {d: [] for d in journals}
    seq = 0
    for _ in range(reps):
        for d, journal in journals.items():
            for _ in range(rounds):
                seq += 1
                logged = d == "normal-log"
                start_ = time.perf_counter()
                journal.record_answer(sid if logged else "s", None, seq, seq % 97,
                                      [] if logged else
                                      [Entry(LDP_REWARD, 0.5, 0.0, LOCAL, seq % 97)], budget,
                                      lambda: (0.5, 0.5))
                await journal.committed()
                times[d].append(time.perf_counter() - start_)
    for journal in journals.values():
        journal.close()
    return times


# ---- the report --------------------------------------------------------------------------

def ms(xs: list[float], q: float) -> float:
    """The q-th percentile of `xs` (seconds) in ms."""
    return 1e3 * float(np.percentile(xs, q))


def ratio(path: Path_, base: Path_) -> float:
    """The median over repetitions of path's median / base's median in that repetition."""
    return float(np.median([np.median(p) / np.median(b) for p, b in zip(path.times, base.times)]))


async def measure(args: argparse.Namespace, out: Path) -> None:
    """Start every server, run the interleaved blocks, print the table and the pieces."""
    keys = out / "keys"
    make_keys(keys)
    T = args.reps * args.block + 100
    me = [sys.executable, __file__, "--keys", str(keys), "--serve"]
    servers = {name: start([*me, name], out / f"{name}.log")
               for name in ("rep", "router", "router-curve", "hub", "flat", "flat-curve",
                            "router-spin", "flat-curve-spin")}
    curators = {  # name: (durability, signed, CURVE, on pobo's polling loops)
        "curve": ("normal", True, True, True), "full": ("full", True, True, True),
        "plain": ("normal", True, False, True), "unsigned": ("normal", False, False, True),
        "still": ("normal", True, True, False)}
    started = {name: start(curator_argv(out / name, d, keys if signed else None, T, curve,
                                        polling), out / f"{name}.log")
               for name, (d, signed, curve, polling) in curators.items()}
    pobo_loop = PoboLoop()
    ctx = zmq.asyncio.Context()
    sync_ctx = zmq.Context()
    rng = np.random.default_rng(0)
    channels = []
    try:
        sessions = {}
        for name, (_, endpoint) in started.items():
            _, signed, curve, polling = curators[name]
            made = pobo_session(ctx, endpoint, keys if signed else None,
                                out / f"{name}.modeler.transcript", rng, curve)
            channel, opening, trip = await (pobo_loop.call(made) if polling else made)
            channels.append((channel, polling))
            await (pobo_loop.call(trip()) if polling else trip())
            sessions[name] = (trip, channel.last_frame)
        frame = b"x" * len(sessions["plain"][1])  # as long as a signed Reward frame

        req = sync_ctx.socket(zmq.REQ)
        req.connect(servers["rep"][1])
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(servers["router"][1])
        curved = ctx.socket(zmq.DEALER)
        public, secret = zmq.auth.load_certificate(keys / "modeler.key_secret")
        curved.curve_secretkey, curved.curve_publickey = secret, public
        curved.curve_serverkey, _ = zmq.auth.load_certificate(keys / "curator.key")
        curved.connect(servers["router-curve"][1])
        pipe = DealerPipe.connect(ctx, servers["hub"][1])

        async def polled_dealer():
            """A DEALER of the router-spin server, made on pobo's loop, and its trip."""
            sock = ctx.socket(zmq.DEALER)
            sock.connect(servers["router-spin"][1])

            async def trip() -> None:
                await sock.send(frame)
                await sock.recv()
            return sock, trip
        polled, raw_polled = await pobo_loop.call(polled_dealer())

        async def reqrep() -> None:
            req.send(frame)
            req.recv()

        async def raw() -> None:
            await dealer.send(frame)
            await dealer.recv()

        async def raw_curve() -> None:
            await curved.send(frame)
            await curved.recv()

        def flat_client(server: str, curve: bool):
            """A (p) client of `server` (over CURVE with `curve`) and its round trip."""
            sock = ctx.socket(zmq.DEALER)
            if curve:
                public, secret = zmq.auth.load_certificate(keys / "modeler.key_secret")
                sock.curve_secretkey, sock.curve_publickey = secret, public
                sock.curve_serverkey, _ = zmq.auth.load_certificate(keys / "curator.key")
            sock.connect(servers[server][1])
            side = FlatSide(PROTO_KEYS[1], PROTO_KEYS[0], out / f"{server}-client.transcript")
            seq = [0]

            async def flat_trip() -> None:
                seq[0] += 1
                await sock.send(side.seal({"kind": "query", "seq": seq[0],
                                           "index": int(rng.integers(2500))}))
                side.verify()  # the previous reward, while the server works
                reward = side.open(await sock.recv())
                assert reward["seq"] == seq[0]
            return sock, flat_trip

        flat_sock, flat_trip = flat_client("flat", False)
        flat_curve_sock, flat_curve_trip = flat_client("flat-curve", True)
        flat_polled_sock, flat_polled_trip = await pobo_loop.call(
            called(flat_client, "flat-curve-spin", True))

        async def piped() -> None:
            await pipe.send(frame)
            await pipe.recv(TIMEOUT)

        paths = [Path_("(a) raw pyzmq REQ/REP", reqrep),
                 Path_("(b) raw asyncio DEALER/ROUTER", raw),
                 Path_("(b) with CURVE", raw_curve),
                 Path_("pipe: DealerPipe/RouterHub echo", piped),
                 Path_("(p) the same work, flat, no pobo", flat_trip),
                 Path_("(p) the same, flat, over CURVE", flat_curve_trip),
                 Path_(FLAT_POLLED, flat_polled_trip, polling=True),
                 Path_("(c) pobo, signed, journal normal", sessions["curve"][0], polling=True),
                 Path_("(c) pobo, signed, journal full", sessions["full"][0], polling=True),
                 Path_("(c) signed, plaintext, normal", sessions["plain"][0], polling=True),
                 Path_("(c) unsigned, plaintext, normal", sessions["unsigned"][0],
                       polling=True),
                 Path_("(c) with --spin 0 (loops that never poll)", sessions["still"][0]),
                 Path_("(b) on pobo's polling loops", raw_polled, polling=True)]
        for p in paths:  # warm up every path
            await timed(Path_(p.label, p.trip, polling=p.polling), 20, pobo_loop)
        for rep in range(args.reps):
            k = rep % len(paths)
            for p in paths[k:] + paths[:k]:
                await timed(p, args.block, pobo_loop)
        for channel, polling in channels:
            await (pobo_loop.call(channel.send(End("done"))) if polling
                   else channel.send(End("done")))
        await pobo_loop.call(called(polled.close, 0))
        await pobo_loop.call(called(flat_polled_sock.close, 0))
        pipe.close()
        flat_sock.close(0)
        flat_curve_sock.close(0)
        curved.close(0)
        dealer.close(0)
        req.close(0)
    finally:
        for channel, polling in channels:
            if polling:
                await pobo_loop.call(called(channel.close))
            else:
                channel.close()
        pobo_loop.stop()
        for proc, _ in [*servers.values()]:
            proc.kill()
        for proc, _ in started.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        ctx.term()
        sync_ctx.term()

    base = paths[1]
    cpus = sorted(os.sched_getaffinity(0))
    print(f"round trip over loopback tcp, {len(frame)}-byte frames (a signed Reward); "
          f"{args.reps} interleaved repetitions x {args.block} round trips per path; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
          f"run on CPU{'s' if len(cpus) > 1 else ''} {','.join(map(str, cpus))}")
    print("(c) without a qualifier runs over CURVE, as a deployment off loopback does")
    print(f"{'path':<38} {'p50 ms':>8} {'p90 ms':>8} {'/ (b) p50':>10} {'/ CURVE':>8}")
    for p in paths:
        flat = [t for ts in p.times for t in ts]
        print(f"{p.label:<38} {ms(flat, 50):>8.3f} {ms(flat, 90):>8.3f} {ratio(p, base):>9.2f}x"
              f" {ratio(p, paths[2]):>7.2f}x")
    by = {p.label: p for p in paths}
    figure, polled = by["(c) pobo, signed, journal normal"], by["(b) on pobo's polling loops"]
    print(f"like for like, both sides of both on pobo's polling loops: (c) / (b) "
          f"{ratio(figure, polled):.2f}x; the flat prototype over CURVE / (b) "
          f"{ratio(by[FLAT_POLLED], polled):.2f}x")

    sign_us, verify_us = ed25519_costs()
    alone = await channel_alone(opening, args.reps * args.block, out)
    commits = await journal_commits(out, args.block, args.reps)
    print("pieces, measured in this process:")
    print(f"  Ed25519: seal+sign a Reward frame {sign_us:.1f} us, open+verify {verify_us:.1f} us;"
          f" a round trip signs twice and verifies twice: {2 * (sign_us + verify_us) / 1e3:.3f} ms")
    print(f"  channel alone (two signed, transcribed Channels over in-process queues, no "
          f"socket): p50 {ms(alone, 50):.3f} ms, p90 {ms(alone, 90):.3f} ms per round trip")
    for d, xs in commits.items():
        what = ("an answer with no charge, durability=normal (its session's answer log)"
                if d == "normal-log" else
                f"journal commit of one answer and its ledger entry, durability={d}")
        print(f"  {what}: p50 {ms(xs, 50):.3f} ms, p90 {ms(xs, 90):.3f} ms")


def cpu_list(text: str) -> set[int]:
    """The CPUs of `--cpus` ("0" or "0,1"), each one this process may run on."""
    try:
        cpus = {int(c) for c in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected CPU numbers like 0 or 0,1")
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise argparse.ArgumentTypeError(f"{text!r}: this process may run on CPUs "
                                         f"{','.join(map(str, sorted(allowed)))} only")
    return cpus


def main() -> None:
    """Parse the options; run a server or the whole measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    parser.add_argument("--block", type=int, default=300, help="round trips per path per rep")
    parser.add_argument("--cpus", type=cpu_list, default=None,
                        help="pin every process to these CPUs (e.g. 0): a diagnostic")
    parser.add_argument("--serve", choices=("rep", "router", "router-curve", "hub", "flat",
                                                   "flat-curve", "router-spin",
                                                   "flat-curve-spin"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--keys", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.keys)
        return
    if args.cpus is not None:
        os.sched_setaffinity(0, args.cpus)  # before any thread or server starts: inherited
    with tempfile.TemporaryDirectory() as out:
        asyncio.run(measure(args, Path(out)))


if __name__ == "__main__":
    main()
