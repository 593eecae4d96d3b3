"""Where one round trip's time goes inside each party: stamps at every hand-over, live.

    python benchmarks/stages.py [--rounds 3000] [--spin 500] [--durability normal]

A diagnostic for `benchmarks/round_trip.py`'s figure "(c) pobo, signed, journal normal"
(issue 23 item 4), not a target: it prints medians, not a ratio. It runs that path as
the benchmark does -- `pobo curator synthetic` over CURVE with signatures, transcripts and
a journal on disk, in a process of its own, and a signed, transcribed modeler Channel on
pobo's polling loop (`pobo.transport.spin`) in this one -- with `time.perf_counter`
stamps (CLOCK_MONOTONIC) wrapped around the functions where a frame changes hands. Each
side prints the median over `--rounds` round trips of each stamp, in microseconds:

- the curator's, from the moment its hub takes the query off the ZeroMQ socket: the
  session's task holding the frame, the query opened, checked and recorded, the answer
  evaluated and committed, the reward sealed, signed and recorded, and the ZeroMQ send;
- the modeler's, from the moment its party calls `Channel.send(Query)`: the query sealed,
  signed and recorded, the ZeroMQ send, the reward's frame in hand (the wait: the
  curator's work and both transports), and the reward opened, checked and recorded.

The wrappers cost ~0.3 us each, so the stamps add ~5 us a round trip. Compare the
same stages of a loop (`round_trip.py`'s "channel alone"): each call here is 2-4x slower
than in a loop, because each process waits between two frames (docs/performance.md,
"The round trip").
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TIMEOUT = 120.0


class Stamps:
    """Named stamps of the current round (reset by the first) and the finished rounds."""

    def __init__(self) -> None:
        self.now: dict[str, float] = {}
        self.rounds: list[dict[str, float]] = []

    def wrap(self, owner, name: str, label: str, first: bool = False, last: bool = False,
             enter: bool = True) -> None:
        """Stamp `label >` when owner.name is called (with `enter`) and `label <` when it
        returns (sync or async alike); `first` starts a round, `last` ends it."""
        function = getattr(owner, name)
        now = self.now

        def before() -> None:
            if first:
                now.clear()
            if enter:
                now[label + " >"] = time.perf_counter()

        def after() -> None:
            now[label + " <"] = time.perf_counter()
            if last and now:
                self.rounds.append(dict(now))
                now.clear()

        if asyncio.iscoroutinefunction(function):
            async def wrapper(*args, **kwargs):
                before()
                result = await function(*args, **kwargs)
                after()
                return result
        else:
            def wrapper(*args, **kwargs):
                before()
                result = function(*args, **kwargs)
                after()
                return result
        setattr(owner, name, functools.wraps(function)(wrapper))

    def medians(self, skip: int = 100) -> list[tuple[str, float]]:
        """(stamp, median us after the round's first stamp), in time order, over the
        rounds after the first `skip` that hold every stamp."""
        rounds = self.rounds[skip:]
        labels = max(rounds, key=len) if rounds else {}
        complete = [r for r in rounds if r.keys() == labels.keys()]
        if not complete:
            return []
        offsets = {k: 1e6 * np.array([r[k] - min(r.values()) for r in complete])
                   for k in labels}
        return sorted(((k, float(np.median(v))) for k, v in offsets.items()),
                      key=lambda item: item[1])


def curator_stamps() -> Stamps:
    """Stamps in the curator: frame in (hub) ... ZeroMQ send of the reply."""
    from pobo.parties.curator import Curator
    from pobo.protocol.channel import Channel
    from pobo.transport import router
    from pobo.transport.router import RouterHub

    stamps = Stamps()
    stamps.wrap(RouterHub, "_take_one", "hub takes the frame off the socket", first=True)
    stamps.wrap(RouterHub, "_recv", "the session's task has it", enter=False)
    stamps.wrap(Channel, "_open", "open the envelope, decode the query")
    stamps.wrap(Channel, "recv", "query checked and recorded", enter=False)
    stamps.wrap(Curator, "start", "evaluate f and commit the answer (journal)")
    stamps.wrap(Channel, "_send", "reward encoded, sealed, signed, recorded")
    stamps.wrap(router, "_send_parts", "ZeroMQ send", last=True)  # where RouterHub reads it
    return stamps


def modeler_stamps() -> Stamps:
    """Stamps in the modeler: Channel.send(Query) ... Channel.recv returning the Reward."""
    from pobo.protocol.channel import Channel
    from pobo.transport.dealer import DealerPipe

    stamps = Stamps()
    stamps.wrap(Channel, "send", "Channel.send(Query)", first=True)
    stamps.wrap(Channel, "_send", "query encoded, sealed, signed, recorded")
    stamps.wrap(DealerPipe, "send", "ZeroMQ send")
    stamps.wrap(Channel, "verify_accepted", "verify the last reward (after the send)")
    stamps.wrap(DealerPipe, "recv", "wait for the reward's frame")
    stamps.wrap(Channel, "_open", "open the envelope, decode the reward")
    stamps.wrap(Channel, "recv", "reward checked and recorded", enter=False, last=True)
    return stamps


def serve_curator(report: Path, rounds: int, argv: list[str]) -> None:
    """Run `pobo curator` with stamps (this is the curator's process); write the medians
    to `report` once `rounds` round trips are in, and again at exit."""
    stamps = curator_stamps()
    from pobo.transport import router

    send = router._send_parts

    def written(*args, **kwargs):
        result = send(*args, **kwargs)
        if len(stamps.rounds) == rounds + 100:
            report.write_text(json.dumps(stamps.medians()))
        return result
    router._send_parts = written
    from pobo.cli import main
    sys.argv = ["pobo", *argv]
    main()


def table(title: str, medians: list[tuple[str, float]]) -> str:
    """The medians as lines: each stamp's time after the first, and the step to it."""
    lines, last = [title], 0.0
    for label, us in medians:
        lines.append(f"  {us:8.1f} us  (+{us - last:6.1f})  {label}")
        last = us
    return "\n".join(lines)


async def modeler(endpoint: str, keys: Path, out: Path, rounds: int) -> list[float]:
    """Round trips of a signed, transcribed modeler Channel over CURVE; their times."""
    import zmq.asyncio

    from round_trip import pobo_session  # noqa: E402  (benchmarks/ is this script's folder)

    ctx = zmq.asyncio.Context()
    channel, _, trip = await pobo_session(ctx, endpoint, keys, out / "modeler.transcript",
                                          np.random.default_rng(0), curve=True)
    times = []
    try:
        for _ in range(rounds + 100):
            start = time.perf_counter()
            await trip()
            times.append(time.perf_counter() - start)
    finally:
        channel.close()
        ctx.term()
    return times[100:]


def main() -> None:
    """Parse the options; run the curator (a child) or the whole measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000, help="round trips stamped")
    parser.add_argument("--spin", type=int, default=500,
                        help="both loops' polling window in us (0: plain asyncio)")
    parser.add_argument("--durability", choices=("normal", "full"), default="normal")
    parser.add_argument("--serve-curator", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_curator:
        report, rounds, *argv = args.serve_curator
        serve_curator(Path(report), int(rounds), argv)
        return
    from round_trip import curator_argv, start  # noqa: E402

    from pobo.transport import spin
    from pobo.transport.security import make_keys

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        keys = out / "keys"
        make_keys(keys)
        (out / "c").mkdir()
        argv = curator_argv(out / "c", args.durability, keys, args.rounds + 200, curve=True)
        report = out / "curator-stages.json"
        child = [sys.executable, __file__, "--serve-curator", str(report), str(args.rounds),
                 *argv[3:], "--spin", str(args.spin)]
        proc, endpoint = start(child, out / "curator.log")
        try:
            stamps = modeler_stamps()
            times = spin.run(asyncio.wait_for(modeler(endpoint, keys, out, args.rounds),
                                              TIMEOUT), args.spin * 1e-6)
            deadline = time.monotonic() + 10
            while not report.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait(10)
        print(f"{args.rounds} round trips, signed, over CURVE, journal {args.durability}, "
              f"--spin {args.spin}; round trip p50 {1e3 * np.median(times):.3f} ms; load "
              f"average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; medians in us")
        print(table("modeler (this process), from Channel.send(Query):", stamps.medians()))
        if report.exists():
            print(table("curator (pobo curator), from the query's frame in:",
                        [tuple(x) for x in json.loads(report.read_text())]))
        else:
            print("curator: no stamps came back (see its log)", file=sys.stderr)
            raise SystemExit(1)


if __name__ == "__main__":
    main()
