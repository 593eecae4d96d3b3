"""What the protocol costs a sweep: `pobo sweep --preset table1` on one worker against a
minimal protocol-free PO-GP-UCB loop on the same seeds, on one core (issue 16 item 11,
issue 23 item 6).

    python benchmarks/sweep_overhead.py [--seeds 3] [--rs 3 6 8 10 15 20] [--reps 6] [--split]
                                        [--lines]

The sweep is `run_sweep` with `workers=1` (the code path of `pobo sweep --preset table1
--workers 1`, with fewer seeds and optionally fewer r): every run a real session --
curator and modeler over an in-process pipe, every message encoded, policed and
linked, every answer committed to the curator's journal, result files written -- in a
fresh output folder each repetition. The reference does the same mathematics and
nothing else, in this process: per seed the scenario's dataset; per r the curator's
projection (`choose_projection`, the preset's lift, the same seeded stream), then T
rounds of GP-UCB on Z with `IncrementalGP` (the declared kernel and noise, beta_t of
Srinivas et al.), a reward f + noise per round drawn from the curator's own noise
stream, and the simple regret. Like-for-like is checked, not assumed: the reference,
the parties and the sweep must query the same rows in every run (the script fails
otherwise). Both run with one BLAS thread (the sweep's workers are started so) and, as
`pobo sweep` runs its one worker, with glibc keeping freed memory between runs
(pobo.allocator.keep_freed_memory: the reference in this process gets it too);
`--glibc-defaults` measures the library call `run_sweep` in a process left alone.
Repetitions interleave them, the reference and the sweep side by side, in the reverse
order on every other repetition; the figure is the median of the per-repetition ratios
sweep/reference, printed with the middle half of them (on a shared machine a single
repetition's ratio moves by 10% or more). Target: <= 2, goal <= 1.5.

A third line times the sweep's own curator and modeler objects called directly, with no
channel between them, to show how much of the ratio is the protocol path (encode, seal,
police, link, queue and the event loop) and the run's result file. The flat prototype
runs twice: as the smallest code that does a sweep's protocol work, and `checked`, with
the boundary's per-frame checks (fields, envelope, link, acknowledgement, the policy's
rules for a query and a reward) written flat in its loop, to show what those checks
cost without pobo's layers. `--split` then runs
each path at T = 1 too and prints its fixed cost a run and its cost a step, and the GP's
own time a step in the sweep and in the reference (the same calls, timed in place).
`--lines` counts the Python lines each path executes a step and a run (sys.settrace): a
figure the machine's noise does not move, to judge a change smaller than that noise.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core, before numpy starts its thread pool

import argparse  # noqa: E402
import asyncio  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: another tree may be measured

from pobo.allocator import keep_freed_memory  # noqa: E402
from pobo.parties.gp import IncrementalGP  # noqa: E402
from pobo.parties.kernels import kernel_by_name  # noqa: E402
from pobo.parties.modeler import HyperFit, Modeler  # noqa: E402
from pobo.parties.noise import NoiseSource, rng_for  # noqa: E402
from pobo.parties.projection import choose_projection  # noqa: E402
from pobo.parties.strategies import beta_gp_ucb, make_strategy  # noqa: E402
from pobo.scenarios.presets import PRESETS  # noqa: E402
from pobo.scenarios.registry import build_problem  # noqa: E402
from pobo.session import prepare_curator  # noqa: E402
from pobo.sweep import SweepSpec, run_sweep  # noqa: E402

PRESET = PRESETS["table1"]


def reference(seeds: int, rs: tuple[int, ...], epsilon: float, T: int) -> list[list[int]]:
    """The protocol-free loop; the rows queried in every run, seed-major (its simple
    regret is tracked as it goes, as a loop would that reports it)."""
    runs, regrets = [], []
    for seed in range(seeds):
        problem = build_problem(PRESET.scenario, seed)
        X, f, kp = problem.X, problem.f, problem.kernel
        for r in rs:
            release, _ = choose_projection(
                X, epsilon, problem.delta, r, NoiseSource(rng_for(seed, "projection")),
                lift="paper", r_fallback=problem.r)
            Z = release.Z
            gp = IncrementalGP(Z, kernel_by_name(kp.kernel, kp.lengthscale, kp.signal_var,
                                                 dims=Z.shape[1]), kp.noise_var, capacity=T)
            # the streams the parties draw from (the modeler's choices, the curator's
            # measurement noise): the same queries, so the same regrets, checked in main
            choose, noise = rng_for(seed, "modeler"), rng_for(seed, "measurement-noise")
            sd, best, queries = math.sqrt(problem.noise_var), -math.inf, []
            for t in range(1, T + 1):
                i = gp.ucb_argmax(beta_gp_ucb(t, gp.n), choose)
                gp.add(i, float(f[i] + sd * noise.standard_normal()))
                best = max(best, float(f[i]))
                queries.append(i)
            regrets.append(float(np.max(f)) - best)
            runs.append(queries)
    return runs


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _checked_fields(message: dict) -> None:
    """The codec's field checks on a query's or reward's map, written flat: seq and index
    int64 ints, a reward's value a finite float and its noise tag a string (AssertionError
    otherwise: the prototype's one failure, never raised by an honest run)."""
    seq, index = message["seq"], message["index"]
    assert type(seq) is int and type(index) is int and _INT64[0] <= seq <= _INT64[1] \
        and _INT64[0] <= index <= _INT64[1], "malformed query fields"
    if message["kind"] == "reward":
        value = message["value"]
        assert type(value) is float and math.isfinite(value) and type(message["noise"]) is str, \
            "malformed reward fields"


async def _flat_run(Z: np.ndarray, f: np.ndarray, kp, noise_var: float, seed: int, T: int,
                    folder: Path, checked: bool = False) -> list[int]:
    """One run of the flat prototype: a curator task and a modeler task in one event loop,
    exchanging msgpack frames (each in an envelope linked to the previous frame's SHA-256)
    over two asyncio queues; the Dataset frame carries Z; every answer is inserted into an
    in-memory SQLite journal (autocommit) before its reward is sent; result.json written
    atomically in the run's own folder. The rows queried.

    `checked` adds, written flat in the same loop, the per-frame checks pobo's boundary
    makes (PROTOCOL.md 4 and 7): each side checks a query or reward it sends and one it
    receives (fields by type and range, as the codec; a query's seq in [1, T], new, its
    row in [0, n), at most one outstanding; a reward's noise tag and that it answers the
    outstanding query, as the policy), and opens every envelope as pobo does (msgpack's
    limits, the envelope's and the link's keys and types, the session, a record number
    that never goes back, an acknowledgement of a frame it sent)."""
    import hashlib
    import sqlite3

    import msgpack

    to_curator, to_modeler = asyncio.Queue(), asyncio.Queue()
    session, n = "flat-session", Z.shape[0]

    def sealed(message: dict, prev: bytes, seq: int, peer: bytes) -> tuple[bytes, bytes]:
        body = msgpack.packb(message, use_bin_type=True)
        envelope = ({"body": body, "link": {"session": session, "seq": seq, "prev": prev,
                                            "peer": peer}, "sig": b""} if checked
                    else {"body": body, "prev": prev})
        frame = msgpack.packb(envelope, use_bin_type=True)
        return frame, hashlib.sha256(frame).digest()

    def opened(frame: bytes, prev: bytes, state: dict) -> tuple[dict, bytes]:
        if not checked:
            envelope = msgpack.unpackb(frame, raw=False)
            assert envelope["prev"] == prev, "broken link"
            return msgpack.unpackb(envelope["body"], raw=False), hashlib.sha256(frame).digest()
        envelope = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_map_len=8,
                                   max_array_len=0, max_str_len=1 << 16,
                                   max_bin_len=max(len(frame), 1), max_ext_len=0)
        link, body = envelope["link"], envelope["body"]
        assert envelope.keys() == {"body", "link", "sig"} and type(body) is bytes \
            and type(envelope["sig"]) is bytes and type(link) is dict \
            and link.keys() == {"session", "seq", "prev", "peer"}, "malformed envelope"
        assert link["session"] == session and type(link["seq"]) is int \
            and link["seq"] >= state["peer_seq"] and len(link["prev"]) == 32 \
            and len(link["peer"]) == 32, "malformed or broken link"
        assert link["peer"] in state["sent"], "acknowledges a frame never sent"
        state["peer_seq"] = link["seq"]
        message = msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=True,
                                  max_str_len=1 << 16, max_bin_len=1 << 10,
                                  max_array_len=1 << 12, max_map_len=64,
                                  max_ext_len=len(frame))
        return message, hashlib.sha256(frame).digest()

    def policed(message: dict, asked: dict, outstanding: dict) -> None:
        """The boundary's checks on a query or a reward (either side, either way)."""
        _checked_fields(message)
        seq, index = message["seq"], message["index"]
        if message["kind"] == "query":
            assert 1 <= seq <= T and seq not in asked and 0 <= index < n \
                and not outstanding, "query refused"
            asked[seq] = outstanding[seq] = index
        else:
            assert message["noise"] == "" and outstanding.get(seq) == index, "reward refused"
            del outstanding[seq]

    async def curator() -> None:
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.execute("CREATE TABLE answers (seq INTEGER PRIMARY KEY, row INTEGER, value REAL)")
        noise, sd = rng_for(seed, "measurement-noise"), math.sqrt(noise_var)
        asked, outstanding, state = {}, {}, {"peer_seq": 0, "sent": {bytes(32)}}
        frame, mine = sealed({"kind": "dataset", "Z": msgpack.ExtType(1, Z.tobytes()),
                              "rows": Z.shape[0], "r": Z.shape[1]}, bytes(32), 0, bytes(32))
        state["sent"].add(mine)
        await to_modeler.put(frame)
        peer = bytes(32)  # the SHA-256 of the modeler's last frame
        for t in range(1, T + 1):
            query, peer = opened(await to_curator.get(), peer, state)
            if checked:
                policed(query, asked, outstanding)
            value = float(f[query["index"]] + sd * noise.standard_normal())
            db.execute("INSERT INTO answers VALUES (?, ?, ?)", (query["seq"], query["index"], value))
            reward = {"seq": query["seq"], "index": query["index"], "value": value,
                      "noise": "", "kind": "reward"}
            if checked:
                policed(reward, {}, outstanding)
            frame, mine = sealed(reward, mine, t, peer)
            state["sent"].add(mine)
            await to_modeler.put(frame)

    async def modeler() -> list[int]:
        state = {"peer_seq": 0, "sent": {bytes(32)}}
        dataset, peer = opened(await to_modeler.get(), bytes(32), state)
        Zm = np.frombuffer(dataset["Z"].data, dtype=np.float64).reshape(dataset["rows"], dataset["r"])
        gp = IncrementalGP(Zm.copy(), kernel_by_name(kp.kernel, kp.lengthscale, kp.signal_var,
                                                     dims=Zm.shape[1]), kp.noise_var, capacity=T)
        choose, mine, queries = rng_for(seed, "modeler"), bytes(32), []
        asked, outstanding = {}, {}
        for t in range(1, T + 1):
            i = gp.ucb_argmax(beta_gp_ucb(t, gp.n), choose)
            query = {"seq": t, "index": i, "kind": "query"}
            if checked:
                policed(query, asked, outstanding)
            frame, mine = sealed(query, mine, t, peer)
            state["sent"].add(mine)
            await to_curator.put(frame)
            reward, peer = opened(await to_modeler.get(), peer, state)
            if checked:
                policed(reward, {}, outstanding)
            gp.add(i, reward["value"])
            queries.append(i)
        return queries

    _, queries = await asyncio.gather(curator(), modeler())
    folder.mkdir(parents=True)
    regret = float(np.max(f)) - float(np.max(f[queries]))
    tmp = folder / "result.json.tmp"
    tmp.write_text(json.dumps({"queries": queries, "simple_regret": regret}))
    tmp.replace(folder / "result.json")
    return queries


def flat(seeds: int, rs: tuple[int, ...], epsilon: float, T: int, out: Path,
         checked: bool = False) -> list[list[int]]:
    """The smallest prototype of what a sweep does, outside pobo (`_flat_run` per run):
    the same mathematics as the reference plus the work a sweep's protocol adds (frames
    encoded and linked by SHA-256, a journal commit before every reward, an event loop
    between two parties, a result file per run), with none of pobo's layers; `checked`:
    with the boundary's per-frame checks too. The rows queried in every run."""
    runs = []
    for seed in range(seeds):
        problem = build_problem(PRESET.scenario, seed)
        for r in rs:
            release, _ = choose_projection(
                problem.X, epsilon, problem.delta, r, NoiseSource(rng_for(seed, "projection")),
                lift="paper", r_fallback=problem.r)
            runs.append(asyncio.run(_flat_run(release.Z, problem.f, problem.kernel,
                                              problem.noise_var, seed, T,
                                              out / f"seed{seed}-r{r}", checked)))
    return runs


def parties(seeds: int, rs: tuple[int, ...], T: int) -> list[list[int]]:
    """The sweep's own curator and modeler objects, called directly with no channel,
    codec, policy or event loop between them: where the sweep's time goes that is not
    the protocol (the curator's service and journal, the modeler's strategy). The rows
    queried in every run."""
    runs, problems = [], {}
    for _, cfg in sweep_spec(seeds, rs).runs():
        if cfg.seed not in problems:  # one dataset per seed, as the sweep shares it
            problems[cfg.seed] = build_problem(PRESET.scenario, cfg.seed)
        problem = problems[cfg.seed]
        session = prepare_curator(cfg, problem)
        curator = session.curator()
        modeler = Modeler(session.params, session.release, make_strategy(cfg.strategy_spec),
                          rng_for(cfg.seed, "modeler"), HyperFit())
        for seq in range(1, T + 1):
            modeler.tell(seq - 1, curator.start(seq, modeler.ask()))
        runs.append(list(modeler.queries))
    return runs


def sweep_spec(seeds: int, rs: tuple[int, ...], T: int = PRESET.T) -> SweepSpec:
    """`pobo sweep --preset table1` with `seeds` seeds, these r (and T)."""
    return SweepSpec(PRESET.scenario, PRESET.epsilons, rs, seeds=seeds, T=T, lift="paper")


def sweep(seeds: int, rs: tuple[int, ...], out: Path, T: int = PRESET.T) -> list[dict]:
    """`pobo sweep --preset table1 --workers 1` with `seeds` seeds, these r (and T)."""
    return run_sweep(sweep_spec(seeds, rs, T), out, workers=1, progress=None)


def path_runs(seeds: int, rs: tuple[int, ...], epsilon: float,
              tmp: Path) -> dict[str, Callable[[int, str], object]]:
    """Each path as a call of (T, a tag naming its output folders in `tmp`), in the order
    `main` times them (the reference and the sweep side by side). Each returns the rows
    queried in every run, except the sweep: (its summary rows, its folder), whose
    result files `swept_queries` reads, outside the time."""
    def swept(T: int, tag: str) -> tuple[list[dict], Path]:
        folder = tmp / f"sweep-{tag}"
        return sweep(seeds, rs, folder, T), folder

    return {"flat prototype": lambda T, tag: flat(seeds, rs, epsilon, T, tmp / f"flat-{tag}"),
            "flat, checked": lambda T, tag: flat(seeds, rs, epsilon, T, tmp / f"checked-{tag}",
                                                 checked=True),
            "parties, no channel": lambda T, tag: parties(seeds, rs, T),
            "reference": lambda T, tag: reference(seeds, rs, epsilon, T),
            "sweep": swept}


def split(seeds: int, rs: tuple[int, ...], epsilon: float, reps: int, tmp: Path,
          at_T: dict[str, float]) -> None:
    """Print each path's fixed cost a run (its median time at T = 1) and its cost a step
    (from that and `at_T`, its median at the preset's T), and the GP's own time a step
    in the sweep and in the reference (IncrementalGP.add and ucb_argmax timed in place):
    what of a step is the protocol's own work and what is the GP slowed by it."""
    paths = path_runs(seeds, rs, epsilon, tmp)
    once: dict[str, list[float]] = {name: [] for name in paths}
    for rep in range(reps):
        for name, run in paths.items():
            start = time.perf_counter()
            run(1, f"split{rep}")
            once[name].append(time.perf_counter() - start)
    runs, T = seeds * len(rs), PRESET.T
    fixed = {name: statistics.median(t) / runs for name, t in once.items()}
    step = {name: (at_T[name] / runs - fixed[name]) / (T - 1) for name in paths}
    print(f"  split (T = 1 and T = {T}; medians of {reps}):")
    for name in paths:
        print(f"    {name:<20} fixed {fixed[name] * 1e3:6.2f} ms a run "
              f"({(fixed[name] - fixed['reference']) * 1e3:+.2f}), a step "
              f"{step[name] * 1e6:6.1f} us ({(step[name] - step['reference']) * 1e6:+.1f})")
    spent = {"add": [0.0, 0], "ucb_argmax": [0.0, 0]}
    originals = {name: getattr(IncrementalGP, name) for name in spent}

    def timed(name):
        def call(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return originals[name](self, *args, **kwargs)
            finally:
                spent[name][0] += time.perf_counter() - start
                spent[name][1] += 1
        return call

    gp_step = {}
    try:
        for name in spent:
            setattr(IncrementalGP, name, timed(name))
        for label, run in (("sweep", lambda: sweep(seeds, rs, tmp / "split-gp")),
                           ("reference", lambda: reference(seeds, rs, epsilon, T))):
            for name in spent:
                spent[name] = [0.0, 0]
            run()
            gp_step[label] = {name: total / max(1, n) for name, (total, n) in spent.items()}
    finally:
        for name, method in originals.items():
            setattr(IncrementalGP, name, method)
    print("    the GP's own time a step (IncrementalGP.add + ucb_argmax): sweep "
          + ", reference ".join(f"{gp_step[k]['add'] * 1e6:.0f} + "
                                f"{gp_step[k]['ucb_argmax'] * 1e6:.0f} us"
                                for k in ("sweep", "reference"))
          + " (the same calls, slower where the protocol's work ran between them)")


def counted_lines(run) -> collections.Counter:
    """The Python lines `run()` executes, by (file, function): `sys.settrace`'s line
    events, coroutine frames included (a count, the same on any machine and any load)."""
    counts: collections.Counter = collections.Counter()

    def local(frame, event, arg):
        if event == "line":
            counts[frame.f_code] += 1
        return local

    sys.settrace(lambda frame, event, arg: local)
    try:
        run()
    finally:
        sys.settrace(None)
    named: collections.Counter = collections.Counter()
    for code, n in counts.items():
        named[(Path(code.co_filename).name, code.co_name)] += n
    return named


def lines(seeds: int, rs: tuple[int, ...], epsilon: float, tmp: Path, top: int = 8) -> None:
    """Print the Python lines each path executes a step and a run's fixed part (from its
    counts at T = 1 and at the preset's T), and the sweep's functions that execute the
    most lines a step: the work itself, where a time on a shared machine moves by ±5%
    from one run to the next."""
    T, runs = PRESET.T, seeds * len(rs)
    print(f"  Python lines executed (sys.settrace; T = 1 and T = {T}):")
    for name, run in path_runs(seeds, rs, epsilon, tmp).items():
        once, whole = (counted_lines(lambda: run(t, f"lines{t}")) for t in (1, T))
        per_step = (sum(whole.values()) - sum(once.values())) / ((T - 1) * runs)
        print(f"    {name:<20} {per_step:6.0f} a step, "
              f"{sum(once.values()) / runs - per_step:8.0f} a run's fixed part")
        if name == "sweep":
            steps = {key: (whole[key] - once.get(key, 0)) / ((T - 1) * runs) for key in whole}
    busiest = sorted(steps.items(), key=lambda item: -item[1])[:top]
    print("    the sweep's most a step: " + ", ".join(
        f"{file}:{function} {n:.0f}" for (file, function), n in busiest))


def swept_queries(rows: list[dict], out: Path) -> list[list[int]]:
    """The rows queried in every run of a sweep in `out`, from its result.json files."""
    return [json.loads((out / "runs" / row["run"] / "result.json").read_text())["queries"]
            for row in rows]


def main(argv: list[str] | None = None) -> None:
    """Time the five paths, interleaved, check that they queried the same rows, print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (the preset: 50)")
    parser.add_argument("--rs", type=int, nargs="+", default=list(PRESET.rs),
                        help=f"projection dimensions (the preset: {PRESET.rs})")
    parser.add_argument("--reps", type=int, default=6,
                        help="repetitions (the median of their ratios)")
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's allocator alone (pobo sweep keeps freed memory)")
    parser.add_argument("--split", action="store_true",
                        help="also print each path's fixed cost a run and cost a step, and "
                        "the GP's own time a step in the sweep and the reference")
    parser.add_argument("--lines", action="store_true",
                        help="also print the Python lines each path executes a step and "
                        "a run (a count: the same on any machine)")
    args = parser.parse_args(argv)
    kept = not args.glibc_defaults and keep_freed_memory()  # what `pobo sweep` does
    rs, (epsilon,), T = tuple(args.rs), PRESET.epsilons, PRESET.T
    ratios, same, rows = [], True, []
    with tempfile.TemporaryDirectory(prefix="pobo-sweep-overhead-") as tmp:
        paths = path_runs(args.seeds, rs, epsilon, Path(tmp))
        took: dict[str, list[float]] = {name: [] for name in paths}
        for rep in range(args.reps):
            # the reference and the sweep run next to each other, their order (and every
            # path's place) reversed on odd repetitions: a machine that slows down or
            # speeds up over a repetition moves both alike, and neither always runs
            # after the other's code has warmed the caches
            queried = {}
            for name in paths if rep % 2 == 0 else reversed(paths):
                start = time.perf_counter()
                queried[name] = paths[name](T, str(rep))
                took[name].append(time.perf_counter() - start)
            rows, folder = queried["sweep"]
            queried["sweep"] = swept_queries(rows, folder)
            same &= all(q == queried["reference"] for q in queried.values())
            ratios.append(took["sweep"][-1] / took["reference"][-1])
    sweeps, refs, direct, flats, checks = (took[name] for name in
                                           ("sweep", "reference", "parties, no channel",
                                            "flat prototype", "flat, checked"))
    runs = len(rows)
    med = statistics.median
    print(f"table1 subset: {args.seeds} seeds x r in {list(rs)} = {runs} runs, T = {T}, "
          f"eps = {epsilon:.4g}, one worker, one BLAS thread; {args.reps} repetitions; "
          f"allocator: {'freed memory kept, as pobo sweep runs' if kept else 'glibc defaults'}")
    print(f"  sweep (run_sweep, workers=1): {med(sweeps):.3f} s "
          f"({med(sweeps) / runs * 1e3:.1f} ms a run)")
    print(f"  protocol-free reference:      {med(refs):.3f} s "
          f"({med(refs) / runs * 1e3:.1f} ms a run)")
    print(f"  the parties, no channel:      {med(direct):.3f} s "
          f"({med(direct) / runs * 1e3:.1f} ms a run; {med(direct) / med(refs):.2f}x the "
          f"reference): the rest of the sweep's time is the protocol path, the event "
          f"loop and each run's result.json")
    print(f"  flat prototype, no pobo:      {med(flats):.3f} s "
          f"({med(flats) / runs * 1e3:.1f} ms a run; {med(flats) / med(refs):.2f}x the "
          f"reference): the same work as the sweep written flat outside pobo (frames "
          f"encoded and linked, a journal commit before every reward, two tasks, result.json)")
    print(f"  flat prototype, checked:      {med(checks):.3f} s "
          f"({med(checks) / runs * 1e3:.1f} ms a run; {med(checks) / med(refs):.2f}x the "
          f"reference): the same, with the boundary's per-frame checks written flat (fields, "
          f"envelope, link, acknowledgement, the policy's query and reward rules)")
    print(f"  the same rows queried by all five in every run: {'yes' if same else 'NO'}; "
          f"mean S_T {np.mean([r['simple_regret'] for r in rows]):.4f}")
    ratio = med(ratios)
    spread = (f" (the middle half of the {len(ratios)} repetitions' ratios: "
              f"{statistics.quantiles(ratios, n=4)[0]:.2f}-"
              f"{statistics.quantiles(ratios, n=4)[2]:.2f})" if len(ratios) > 1 else "")
    print(f"  ratio sweep/reference: {ratio:.2f}{spread} (target <= 2: "
          f"{'met' if ratio <= 2 else 'NOT met'}; goal <= 1.5: "
          f"{'met' if ratio <= 1.5 else 'NOT met'})")
    if args.split:
        with tempfile.TemporaryDirectory(prefix="pobo-sweep-split-") as tmp:
            split(args.seeds, rs, epsilon, args.reps, Path(tmp),
                  {"sweep": med(sweeps), "reference": med(refs), "flat prototype": med(flats),
                   "flat, checked": med(checks), "parties, no channel": med(direct)})
    if args.lines:
        with tempfile.TemporaryDirectory(prefix="pobo-sweep-lines-") as tmp:
            lines(args.seeds, rs, epsilon, Path(tmp))
    if not same:
        raise SystemExit("the sweep and the reference queried different rows: the "
                         "comparison is not like-for-like")


if __name__ == "__main__":
    main()
