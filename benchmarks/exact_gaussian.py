"""The exact lattice Gaussian noise (issue 46 item 1) against the Box-Muller normals it
replaces, in the same run.

    python benchmarks/exact_gaussian.py [--sizes hospital big] [--reps 1]

For each size, the Gaussian rows' noise for an n x d release from the OS CSPRNG, as a
deployed curator draws it: today's sampler (NoiseSource().standard_normal, Box-Muller on
53-bit uniforms, added to the rows) against parties.discrete_gaussian.exact_gaussian_rows
(the rows rounded to the lattice, the rounded Gaussian drawn exactly). Prints both wall
times, the gain (exact - Box-Muller) and the ratio. Sizes: hospital (71,518 x 9 =
643,662 draws) and big (n = 1e6, d = 20: 2e7 draws). Targets on 2 cores (issue 46):
hospital gains <= 2 s, big gains <= 60 s. Alternating the two samplers over --reps
repetitions, so the machine's drift hits both alike; the medians are printed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pobo.parties.discrete_gaussian import exact_gaussian_rows, rows_calibration  # noqa: E402
from pobo.parties.noise import NoiseSource  # noqa: E402
from pobo.parties.projection import add_gaussian  # noqa: E402

SIZES = {"hospital": (71_518, 9, 2.0), "big": (1_000_000, 20, 60.0)}


def seconds(work) -> float:
    """Wall seconds of one call of `work`."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["hospital", "big"])
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    for name in args.sizes:
        n, d, target = SIZES[name]
        X = np.random.default_rng(0).uniform(-10, 10, size=(n, d))
        sigma, gamma = rows_calibration(8.0, 1e-6, d)
        old, new = [], []
        for _ in range(args.reps):
            old.append(seconds(lambda: add_gaussian(X.copy(), sigma, NoiseSource())))
            new.append(seconds(lambda: exact_gaussian_rows(X, sigma, gamma, NoiseSource())))
        o, e = statistics.median(old), statistics.median(new)
        print(f"{name}: n = {n:,}, d = {d} ({n * d:,} draws): Box-Muller {o:.2f} s, exact "
              f"{e:.2f} s: gain {e - o:+.2f} s (target <= {target:g} s), ratio {e / o:.1f}x, "
              f"{1e6 * e / (n * d):.2f} us a draw", flush=True)


if __name__ == "__main__":
    main()
