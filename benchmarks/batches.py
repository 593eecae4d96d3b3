"""Batches that pay: queries/s of `--batch Q` against `--batch 1`, with a slow objective.

    python benchmarks/batches.py [--objective command|function|both] [--T 48] [--batch 4]
                                 [--sleep 0.01] [--reps 3] [--durability normal]
                                 [--grid 30] [--sessions 16|0]

Each run is `pobo run` over loopback tcp (two processes) on the synthetic scenario's
rows (`--grid`), the curator's journal on disk at `--durability`, with the objective
measured on demand, each way `--objective` names (default both, in every repetition):

- command: `pobo run synthetic --objective-cmd "/bin/sh -c 'sleep S; echo 0.5' {index}"`,
  a command that sleeps `--sleep` seconds and prints a number: two process starts a query;
- function: `pobo run benchmarks/sleepy_objective.py`, a scenario script whose
  `evaluate(index)` sleeps `--sleep` seconds and returns the row's value, run by the
  curator in a worker thread (parties.objective.FunctionObjective): no process start.

The baseline is the same run with --batch 1, alternated with the batch runs over
`--reps` repetitions. Prints each run's queries/s (T over the time from the first query
to the last reward in the modeler's transcript: the handshake, the dataset and start-up
are left out) and, for each objective, the median of the per-repetition ratios and of
--batch 1's queries/s. Targets (issue 47): >= 3x at --batch 4 with a 10 ms objective,
and --batch 1 at >= 70 queries/s on the project's 2-core machine (a 10 ms sleep alone
allows 100).

An objective costs more than its sleep (the command: a shell started, which starts
`sleep`; the function: a thread started), and on a machine shared with other work far
more: each repetition also runs it T times with no protocol, as the curator does
(`parties.objective.run_command`, `FunctionObjective.measure`), one at a time and Q at
a time -- the most each pobo run could reach then -- and prints the machine's load
average. Once, first (with the command): the curator's CPU per command, watched through
a pidfd as the curator runs it on Linux, and by asyncio's subprocess support (a thread
per command in Python 3.11), Q at a time. Last, for each objective, where a --batch 1
query's time goes, from both parties' transcripts.

Then (`--sessions 0` skips it) `--sessions` (16) concurrent sessions in one process
(curator service and modelers over in-process pipes, T = `--session-T` each, tabulated f)
against one journal at
--durability full, with group commit and without it (`Journal(group_commit=False)`:
one COMMIT, so one fsync, per answer), alternated over --reps: answers per COMMIT and
answers/s of each, and their ratio.

The runs' key store and ledger heads are kept in a temporary $POBO_HOME, not the user's.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sleepy_objective import SLEEP_ENV, sleepy  # noqa: E402
from pobo.parties import objective  # noqa: E402
from pobo.parties.journal import Journal  # noqa: E402
from pobo.protocol.codec import decode  # noqa: E402
from pobo.protocol.signing import body_of  # noqa: E402
from pobo.protocol.transcript import read_transcript  # noqa: E402
from pobo.launch import run  # noqa: E402
from pobo.runspec import RunConfig  # noqa: E402
from pobo.scenarios.synthetic import build as synthetic  # noqa: E402
from pobo.session import curate, open_channel, optimise, prepare_service  # noqa: E402
from pobo.transport import spin  # noqa: E402
from pobo.transport.inproc import pipe_pair  # noqa: E402


SCRIPT = Path(__file__).resolve().parent / "sleepy_objective.py"
OBJECTIVES = ("command", "function")


def command(args: argparse.Namespace) -> str:
    """The objective command: a shell that sleeps `--sleep` s and prints a number."""
    return f"/bin/sh -c 'sleep {args.sleep}; echo 0.5' {{index}}"


def run_config(args: argparse.Namespace, kind: str, batch: int, journal: Path) -> RunConfig:
    """The run of objective `kind` at `batch`: synthetic with the command, or the
    sleepy scenario script (its sleep from $POBO_SLEEPY_S, set in `main`)."""
    common = dict(T=args.T, seed=1, options={"grid": args.grid}, batch=batch,
                  max_batch=batch, journal=str(journal), durability=args.durability,
                  timeout=120)
    if kind == "command":
        return RunConfig("synthetic", objective_cmd=command(args), **common)
    return RunConfig(str(SCRIPT), **common)


STAGES = ("modeler -> curator", "query in -> Pending out", "Pending out -> Reward out",
          "curator -> modeler", "Reward in -> next query out")


def stages(run_dir: Path) -> dict[str, float]:
    """Median ms of each stage of a --batch 1 query, from both parties' transcripts (the
    time each record was written; one clock, one machine): the query's trip, the
    curator's reservation and Pending, the evaluation with the answer's commit, the
    reward's trip, and the modeler's step to its next query."""
    at: dict[tuple[str, str, str, int], float] = {}
    for party in ("modeler", "curator"):
        for r in read_transcript(run_dir / f"{party}.transcript"):
            if r.kind in ("query", "pending", "reward"):
                at.setdefault((party, r.kind, r.dir, decode(body_of(r.frame)).seq), r.time)
    seqs = sorted(seq for (party, kind, way, seq) in at
                  if (party, kind, way) == ("modeler", "reward", "recv"))
    spans = {name: [] for name in STAGES}
    for seq in seqs[1:-1]:  # (the first and the last have no step on either side)
        for name, (a, b) in zip(STAGES, (
                (("modeler", "query", "sent", seq), ("curator", "query", "recv", seq)),
                (("curator", "query", "recv", seq), ("curator", "pending", "sent", seq)),
                (("curator", "pending", "sent", seq), ("curator", "reward", "sent", seq)),
                (("curator", "reward", "sent", seq), ("modeler", "reward", "recv", seq)),
                (("modeler", "reward", "recv", seq), ("modeler", "query", "sent", seq + 1)))):
            spans[name].append((at[b] - at[a]) * 1e3)
    return {name: statistics.median(v) for name, v in spans.items()}


def queries_per_second(args: argparse.Namespace, kind: str, batch: int,
                       split: dict[str, list[float]] | None = None) -> float:
    """T over the modeler's seconds of one session of objective `kind` at `batch` (with
    `split`, each of its `stages` appended to it)."""
    with tempfile.TemporaryDirectory() as out:
        config = run_config(args, kind, batch, Path(out) / "journal.db")
        result = run(config, Path(out) / "run", verbose=False)
        if result.get("status") != "ok" or result.get("objective") != kind:
            raise SystemExit(f"run failed: {result.get('status')} {result.get('objective')} "
                             f"{result.get('error')}")
        times = [(r.kind, r.time) for r in read_transcript(Path(out) / "run" / "modeler.transcript")
                 if r.kind in ("query", "reward")]
        if split is not None:
            for name, ms in stages(Path(out) / "run").items():
                split.setdefault(name, []).append(ms)
    first = min(t for kind, t in times if kind == "query")
    last = max(t for kind, t in times if kind == "reward")
    return args.T / (last - first)


async def alone(args: argparse.Namespace, at_once: int, kind: str = "command",
                runner=objective.run_command) -> tuple[float, float]:
    """(evaluations/s, this process's CPU ms per evaluation) of T evaluations of objective
    `kind`, `at_once` at a time, on the curator's event loop, with no protocol around
    them: the command by `runner` (the curator's `run_command`), the function by the
    curator's `FunctionObjective` (a thread per call)."""
    argv = [word.format(index=3) for word in shlex.split(command(args))]
    f = synthetic(1, grid=args.grid).f
    function = objective.FunctionObjective(sleepy(f, args.sleep))
    queue = list(range(args.T))

    async def worker() -> None:
        while queue:
            index = queue.pop()
            if kind == "function":
                value = await function.measure(objective.EvaluationRequest("s", 1, index, None))
                if value != float(f[index]):
                    raise SystemExit(f"the function gave {value} at row {index}")
                continue
            code, out, _ = await runner(argv, 60.0)
            if code != 0 or float(out) != 0.5:
                raise SystemExit(f"the command failed: exit {code}, printed {out!r}")

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(at_once)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return args.T / wall, cpu / args.T * 1e3


def curator_cpu(args: argparse.Namespace) -> None:
    """Print the curator's CPU per command run --batch at a time, by pidfd and by asyncio's
    subprocess support, alternated over --reps (medians)."""
    if not objective.pidfd_usable():
        print("no pidfd here: the curator runs commands by asyncio's subprocess support")
        return
    cpu: dict[str, list[float]] = {"pidfd": [], "asyncio": []}
    for rep in range(args.reps):
        for name in (("pidfd", "asyncio") if rep % 2 == 0 else ("asyncio", "pidfd")):
            runner = objective._run_watched if name == "pidfd" else objective._run_asyncio
            cpu[name].append(spin.run(alone(args, args.batch, "command", runner),
                                      spin.SPIN)[1])
    print(f"the curator's CPU per command, {args.batch} at a time, median of {args.reps}: "
          f"watched through a pidfd {statistics.median(cpu['pidfd']):.2f} ms, by asyncio's "
          f"subprocess support {statistics.median(cpu['asyncio']):.2f} ms", flush=True)


def load() -> str:
    """The machine's load averages (1, 5, 15 min), for the record."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


async def concurrent(sessions: int, T: int, grouped: bool) -> tuple[float, float]:
    """(answers per COMMIT, answers/s) of `sessions` concurrent in-process sessions on
    one journal at durability full. The COMMITs of a session's own life (its opening, its
    statuses) are not counted: as many as one session of one query makes besides that
    query's own COMMIT, measured first."""
    lifecycle = (await sessions_run(1, 1, grouped=False))[0] - 1
    commits, wall = await sessions_run(sessions, T, grouped)
    answers = sessions * T
    return answers / max(commits - lifecycle * sessions, 1), answers / wall


async def sessions_run(sessions: int, T: int, grouped: bool) -> tuple[int, float]:
    """(COMMITs, seconds) of `sessions` concurrent in-process sessions of T queries on one
    journal at durability full, from their opening to their end."""
    with tempfile.TemporaryDirectory() as out:
        journal = Journal(Path(out) / "journal.db", durability="full", group_commit=grouped)
        service = prepare_service(RunConfig("synthetic", T=T, seed=1, options={"grid": 20},
                                            timeout=120), journal=journal)
        channels = []

        async def one(k: int) -> None:
            folder = Path(out) / str(k)
            session = service.new_session()
            cpipe, mpipe = pipe_pair()
            cchan = open_channel(cpipe, "curator", False, folder, 120.0)
            mchan = open_channel(mpipe, "modeler", False, folder, 120.0)
            channels.extend((cchan, mchan))
            await asyncio.gather(curate(cchan, session, folder, verbose=False),
                                 optimise(mchan, k, out=folder))

        commits, start = journal.commits, time.perf_counter()
        await asyncio.gather(*(one(k) for k in range(sessions)))
        wall, commits = time.perf_counter() - start, journal.commits - commits
        for channel in channels:
            channel.close()
        journal.close()
    return commits, wall


def batches(args: argparse.Namespace, kinds: tuple[str, ...]) -> None:
    """Print, for each objective in `kinds`, --batch Q against --batch 1 alternated over
    --reps, the objective alone in each repetition, and a --batch 1 query's stages."""
    ratios = {k: [] for k in kinds}
    singles = {k: [] for k in kinds}
    shares = {k: [] for k in kinds}
    split = {k: {} for k in kinds}
    for rep in range(args.reps):
        for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
            bare = {q: spin.run(alone(args, q, kind), spin.SPIN)[0] for q in (1, args.batch)}
            order = (1, args.batch) if rep % 2 == 0 else (args.batch, 1)
            qps = {q: queries_per_second(args, kind, q, split[kind] if q == 1 else None)
                   for q in order}
            ratios[kind].append(qps[args.batch] / qps[1])
            singles[kind].append(qps[1])
            shares[kind].append(qps[1] / bare[1])
            print(f"rep {rep}, {kind}: --batch 1 {qps[1]:6.1f} queries/s, --batch {args.batch} "
                  f"{qps[args.batch]:6.1f} queries/s: {ratios[kind][-1]:.2f}x; the {kind} alone "
                  f"{bare[1]:6.1f}/s one at a time, {bare[args.batch]:6.1f}/s {args.batch} at a "
                  f"time; load average {load()}", flush=True)
    for kind in kinds:
        print(f"{kind} objective ({args.sleep * 1e3:g} ms sleep), --batch {args.batch} / "
              f"--batch 1 queries/s, journal {args.durability}, median of {args.reps}: "
              f"{statistics.median(ratios[kind]):.2f}x (target >= 3x); --batch 1 "
              f"{statistics.median(singles[kind]):.1f} queries/s (target >= 70), "
              f"{statistics.median(shares[kind]):.0%} of the {kind}'s own rate one at a time",
              flush=True)
        print(f"{kind} objective, a --batch 1 query, median ms (over its queries, then the "
              "repetitions): " + "; ".join(f"{name} {statistics.median(ms):.2f}"
                                           for name, ms in split[kind].items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=48)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=0.01)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--durability", default="normal", choices=("normal", "full"))
    parser.add_argument("--grid", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--session-T", type=int, default=30)
    parser.add_argument("--objective", default="both", choices=(*OBJECTIVES, "both"))
    args = parser.parse_args()
    kinds = OBJECTIVES if args.objective == "both" else (args.objective,)
    os.environ[SLEEP_ENV] = repr(args.sleep)  # the script's sleep, in the curator's process
    with tempfile.TemporaryDirectory() as home:
        os.environ["POBO_HOME"] = home  # the runs' keys and ledger heads: not the user's
        print(f"load average {load()}", flush=True)
        if "command" in kinds:
            curator_cpu(args)
        batches(args, kinds)
        if args.sessions > 0:
            group_commit(args)


def group_commit(args: argparse.Namespace) -> None:
    """Print --sessions concurrent sessions at durability full, with group commit and
    with one COMMIT per answer, alternated over --reps."""
    ratios = []
    for rep in range(args.reps):
        runs = {g: asyncio.run(concurrent(args.sessions, args.session_T, g))
                for g in ((False, True) if rep % 2 == 0 else (True, False))}
        ratios.append(runs[True][1] / runs[False][1])
        print(f"rep {rep}: {args.sessions} sessions, durability full: one commit per answer "
              f"{runs[False][0]:.2f} answers/COMMIT, {runs[False][1]:6.1f} answers/s; group "
              f"commit {runs[True][0]:.2f} answers/COMMIT, {runs[True][1]:6.1f} answers/s: "
              f"{ratios[-1]:.2f}x", flush=True)
    print(f"{args.sessions} concurrent sessions at durability full, group commit / one commit "
          f"per answer, answers/s, median of {args.reps}: {statistics.median(ratios):.2f}x")

if __name__ == "__main__":
    main()
