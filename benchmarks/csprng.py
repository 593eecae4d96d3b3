"""Deployment randomness (the OS CSPRNG) against a seeded Generator: draws and a whole session.

    python benchmarks/csprng.py [--grid 1000] [--r 20] [--T 100] [--reps 3]

(1) Draws, in this process: 1e5 uniforms one `secrets.randbelow(2^53)` call each (what
    NoiseSource did before issue 23) against NoiseSource().uniform (one os.urandom read),
    and an (n, r) standard-normal matrix from NoiseSource() against a seeded
    numpy Generator, with the per-draw ratios.
(2) A whole `pobo run synthetic --grid G --r R --T T` session in this process (inproc
    transport), unseeded (the curator's projection and noise from the OS CSPRNG, as
    deployed) and seeded (--seed 0), alternating over --reps repetitions so that the
    machine's drift hits both alike. Prints each wall time and the median of the
    per-repetition ratios unseeded / seeded. Target (issue 23): <= 1.3 at n = 1e6.
"""
from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pobo.parties.noise import NoiseSource  # noqa: E402
from pobo.scenarios.launch import run  # noqa: E402
from pobo.scenarios.runspec import RunConfig  # noqa: E402


def seconds(work) -> float:
    """Wall seconds of one call of `work`."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def draws(n: int, r: int) -> None:
    """Print the per-draw cost of the old per-number path, the bulk path and a Generator."""
    count = 100_000
    old = seconds(lambda: [secrets.randbelow(1 << 53) for _ in range(count)]) / count
    bulk = seconds(lambda: NoiseSource().uniform(count)) / count
    print(f"uniform: secrets.randbelow per number {old * 1e9:8.1f} ns/draw, "
          f"NoiseSource bulk {bulk * 1e9:6.1f} ns/draw: {old / bulk:5.1f}x faster")
    secure = seconds(lambda: NoiseSource().standard_normal((n, r)))
    seeded = seconds(lambda: np.random.default_rng(0).standard_normal((n, r)))
    print(f"normal ({n} x {r}): os-csprng {secure:.2f} s, seeded {seeded:.2f} s: "
          f"{secure / seeded:.2f}x")


def session(grid: int, r: int, T: int, seed: int | None) -> float:
    """Wall seconds of one inproc synthetic session (seed None: the OS CSPRNG)."""
    config = RunConfig(scenario="synthetic", r=r, T=T, seed=seed, options={"grid": grid})
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        result = run(config, out, transport="inproc", verbose=False)
        wall = time.perf_counter() - start
    want = "seeded" if seed is not None else "os-csprng"
    if result.get("end_reason") != "done" or result.get("randomness") != want:
        raise SystemExit(f"session failed: {result.get('end_reason')} {result.get('error')}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, default=1000)
    parser.add_argument("--r", type=int, default=20)
    parser.add_argument("--T", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    draws(args.grid ** 2, args.r)
    ratios = []
    for rep in range(args.reps):
        order = (None, 0) if rep % 2 == 0 else (0, None)
        walls = {seed: session(args.grid, args.r, args.T, seed) for seed in order}
        ratios.append(walls[None] / walls[0])
        print(f"rep {rep}: n = {args.grid ** 2}, r = {args.r}, T = {args.T}: unseeded "
              f"{walls[None]:.1f} s, seeded {walls[0]:.1f} s, ratio {ratios[-1]:.2f}", flush=True)
    print(f"unseeded / seeded session, median of {args.reps}: {statistics.median(ratios):.2f}x "
          "(target <= 1.3)")


if __name__ == "__main__":
    main()
