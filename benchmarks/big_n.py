"""Ten million candidates: `pobo run synthetic --grid G --r 20 --T 100`, time and memory.

    python benchmarks/big_n.py [--grid 3163] [--compare 1000] [--r 20] [--T 100] [--steps]

Runs `pobo run synthetic --grid G --r R --T T` (two party processes over loopback tcp;
n = G^2 candidates; seeded, as `pobo run` is) first at the --compare grid (default
1000: n = 1e6; 0 skips it), then at --grid (default 3163: n ~ 1.0e7), one after the
other (never two big runs at once). While each runs it reads both parties' resident
high-water mark (VmHWM in /proc/PID/status: the kernel's own peak, so sampling every
--interval s misses only what a party allocates in its last interval before it exits).

Prints per run: wall time, the modeler's preparation (handshake, Dataset, GP set-up)
and time per step (the modeler's record: its T queries' wall time / T), each party's
peak RSS and their sum against --target-gb (issue 23: 16 GB at n = 1e7), and the floor
the parties cannot go below: Z (n r float64, held by each party) plus the modeler's GP
cache (T n float64, float32 past 2 GiB: parties/gp.py). The last lines give the ratios
of the big run to the comparison row: n, time per step and peak memory (linear scaling
keeps them near the n ratio).

Per step (the modeler's `step_times`: wall time from one reward told to the next), each
run's 'late / first': the median of its last 10 steps over that of its first 10 (a step
costs O(n t): the ratio grows with T, not with n), the big run's against the comparison
run's (the baseline, measured in the same benchmark), and its largest jump: a step over
the median of the 10 before it. Issue 47: at n = 1e7, T = 100 steps 89-100 took 11-25 s
against 2.8-3.9 s before them (every float32 block product forked a second BLAS thread
past t = 88). Targets: the big run's late / first within 2x of the baseline's, no jump
above 2x. --steps prints every step's time of the big run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GB = 1e9

from pobo.parties.gp import cache_dtype  # noqa: E402


def vm_hwm(pid: int) -> int:
    """The resident high-water mark of a process in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def party_role(pid: int) -> str | None:
    """'curator' or 'modeler' for a `python -m pobo curator|modeler ...` process."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for i, arg in enumerate(argv[:-1]):
        if arg == b"pobo" and argv[i + 1] in (b"curator", b"modeler"):
            return argv[i + 1].decode()
    return None


def children(pid: int) -> list[int]:
    """The direct children of a process (from /proc/PID/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


class PeakWatcher(threading.Thread):
    """Keeps the largest VmHWM seen of each party process under `pid`."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peaks: dict[str, int] = {"curator": 0, "modeler": 0}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for child in children(self.pid):
                role = party_role(child)
                if role is not None:
                    self.peaks[role] = max(self.peaks[role], vm_hwm(child))
            self.done.wait(self.interval)


def run_once(grid: int, r: int, T: int, out: Path, interval: float,
             timeout: float) -> dict:
    """One `pobo run synthetic` at `grid`: wall time, the modeler's timings, both peaks."""
    argv = [sys.executable, "-m", "pobo", "run", "synthetic", "--grid", str(grid),
            "--r", str(r), "--T", str(T), "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    watcher = PeakWatcher(process.pid, interval)
    watcher.start()
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        watcher.done.set()
        watcher.join()
        if process.poll() is None:
            process.kill()
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"pobo run --grid {grid} failed ({process.returncode}):\n"
                         + output[-3000:])
    modeler = json.loads((out / "modeler.json").read_text())
    n = grid * grid
    return {"grid": grid, "n": n, "wall": wall,
            "prepare": modeler.get("prepare_seconds"), "step": modeler.get("step_seconds"),
            "steps": modeler.get("step_times") or [],
            "curator": watcher.peaks["curator"], "modeler": watcher.peaks["modeler"],
            "floor": 2 * n * r * 8 + T * n * cache_dtype("auto", n, T).itemsize}


def show(row: dict, target: float) -> None:
    total = row["curator"] + row["modeler"]
    prepare = "?" if row["prepare"] is None else f"{row['prepare']:.1f}"
    step = "?" if row["step"] is None else f"{row['step']:.3f}"
    print(f"{row['n']:>10,d} {row['wall']:>8.1f} {prepare:>9} {step:>9} "
          f"{row['curator'] / GB:>8.2f} {row['modeler'] / GB:>8.2f} {total / GB:>7.2f} "
          f"{total / (target * GB):>9.2f} {total / row['floor']:>8.2f}", flush=True)


def late_over_first(steps: list[float], k: int = 10) -> float:
    """The median of the last k steps' times over the median of the first k."""
    k = max(1, min(k, len(steps) // 2))
    return float(statistics.median(steps[-k:]) / statistics.median(steps[:k]))


def largest_jump(steps: list[float], k: int = 10) -> tuple[float, int]:
    """(ratio, step): the largest time of a step over the median of the k steps before it
    (1-based step number; from step k + 1 on)."""
    jumps = [(steps[i] / statistics.median(steps[i - k:i]), i + 1)
             for i in range(k, len(steps))]
    return max(jumps, default=(float("nan"), 0))


def show_steps(row: dict, per_line: int = 10) -> None:
    """Every step's wall time, `per_line` a line, each line headed by its first step."""
    steps = row["steps"]
    print(f"n = {row['n']:,}: seconds per step")
    for start in range(0, len(steps), per_line):
        print(f"  {start + 1:>4}: " + " ".join(f"{s:7.3g}" for s in steps[start:start + per_line]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", type=int, default=3163, help="grid side (n = grid^2)")
    parser.add_argument("--compare", type=int, default=1000,
                        help="grid of the comparison row run first (0: none)")
    parser.add_argument("--r", type=int, default=20)
    parser.add_argument("--T", type=int, default=100)
    parser.add_argument("--target-gb", type=float, default=16.0)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between peak reads")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the runs' records (default: a temporary one)")
    parser.add_argument("--steps", action="store_true", help="print every step's time")
    args = parser.parse_args(argv)
    grids = [g for g in (args.compare, args.grid) if g]
    print(f"pobo run synthetic --r {args.r} --T {args.T}: grids {grids}; target: both "
          f"parties' peaks <= {args.target_gb:g} GB; floor = 2 n r 8 B (Z in each party) "
          f"+ the GP cache (T n 8 B, or 4 B past 2 GiB)")
    print(f"{'n':>10} {'wall s':>8} {'prepare':>9} {'s/step':>9} {'cur GB':>8} "
          f"{'mod GB':>8} {'sum GB':>7} {'/target':>9} {'/floor':>8}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="pobo-big-n-") as scratch:
        base = args.out or Path(scratch)
        for grid in grids:
            rows.append(run_once(grid, args.r, args.T, base / f"grid{grid}", args.interval,
                                 args.timeout))
            show(rows[-1], args.target_gb)
    if len(rows) == 2 and rows[0]["step"] and rows[1]["step"]:
        small, big = rows
        mem = lambda row: row["curator"] + row["modeler"]  # noqa: E731
        print(f"n x{big['n'] / small['n']:.1f}: time per step x{big['step'] / small['step']:.1f}, "
              f"preparation x{big['prepare'] / small['prepare']:.1f}, "
              f"peak memory x{mem(big) / mem(small):.1f}")
    big = rows[-1]
    if args.steps and big["steps"]:
        show_steps(big)
    steady = True
    for row in rows:
        if len(row["steps"]) < 20:
            continue
        jump, at = largest_jump(row["steps"])
        print(f"n = {row['n']:,}: late / first steps x{late_over_first(row['steps']):.2f} "
              f"(median of the last 10 over the first 10); largest jump x{jump:.2f} at step "
              f"{at} (over the median of the 10 before)")
        steady &= jump <= 2.0 or row is not big  # (the baseline's short steps: noise)
    if len(rows) == 2 and min(len(row["steps"]) for row in rows) >= 20:
        ratio = late_over_first(big["steps"]) / late_over_first(rows[0]["steps"])
        print(f"late / first of n = {big['n']:,} over the baseline's (n = {rows[0]['n']:,}): "
              f"x{ratio:.2f} (target <= 2)")
        steady &= ratio <= 2.0
    met = big["curator"] + big["modeler"] <= args.target_gb * GB
    print(f"n = {big['n']:,}: peaks sum to {(big['curator'] + big['modeler']) / GB:.2f} GB "
          f"({'within' if met else 'OVER'} the {args.target_gb:g} GB target); steps "
          f"{'steady' if steady else 'NOT steady'} (no jump above x2, late / first within "
          f"x2 of the baseline's)")
    return 0 if met and steady else 1


if __name__ == "__main__":
    sys.exit(main())
