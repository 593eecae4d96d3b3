"""GP engine step against its O(n t) floor and a full recompute; projection time.

    python benchmarks/gp_step.py            # n in {1e4, 1e5, 1e6}, t in {50, 200}
    python benchmarks/gp_step.py --quick    # n in {1e4, 1e5}, a smoke run

Each (n, t) runs in a fresh subprocess so its peak resident memory is its own. Per
case it prints the median time of one engine step (add an observation, update mean
and variance over all n candidates, argmax of UCB), the median time of the bare floor
measured in the same process on the same arrays (the new kernel column, one t x n
vector-matrix product, and the O(n) updates and argmax in plain numpy), and the time
of a full recompute (Cholesky of K_t plus the dense posterior over all n, as a library
that refits each round does) where it is expected to fit in a minute. Targets:
engine/floor <= 1.2; full/engine >= 30 at n = 1e5, t = 200; peak <= 2.5 GB at
n = 1e6, t = 200.
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pobo.parties.gp import IncrementalGP, posterior_dense  # noqa: E402
from pobo.parties.kernels import squared_exponential  # noqa: E402
from pobo.parties.projection import project  # noqa: E402

R = 10  # projection dimension of the candidates (the paper's synthetic r)
STEPS = 9  # timed steps per case; the median is reported
FULL_BUDGET_S = 60.0


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def floor_step(gp: IncrementalGP, index: int, beta: float, l_row: np.ndarray,
               d: float, a: float, mean: np.ndarray, var: np.ndarray) -> int:
    """The bare O(n t) work of one step in plain numpy, on the engine's own arrays."""
    Z, z = gp.Z, gp.Z[index]
    k = np.exp(-0.5 * (gp._zz + gp._zz[index] - 2.0 * (Z @ z)) / gp.kernel.lengthscales[0] ** 2)
    v = (k - l_row @ gp.V[:len(l_row)]) / d
    mean += a * v
    var -= v * v
    return int(np.argmax(mean + math.sqrt(beta) * np.sqrt(var)))


def run_case(n: int, t: int, full_estimate_s: float | None) -> dict:
    """Time engine, floor and full recompute at (n, t) in this process."""
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(n, R)) * 3.0
    f = np.sin(Z[:, 0]) + np.cos(Z[:, 1])
    kernel = squared_exponential(3.0, 1.0)
    base_mb = peak_rss_mb()
    gp = IncrementalGP(Z, kernel, 1e-4, capacity=t + STEPS)
    beta = 2 * math.log(n * t * t * math.pi**2 / 0.3)
    for _ in range(t):
        i = int(rng.integers(n))
        gp.add(i, float(f[i]))
    engine, floor = [], []
    mean, var = gp.mean.copy(), gp.var.copy()
    for _ in range(STEPS):
        i = int(rng.integers(n))
        l_row = gp.V[:gp.t, i].copy()
        start = time.perf_counter()
        floor_step(gp, i, beta, l_row, 1.0, 0.1, mean, var)
        floor.append(time.perf_counter() - start)
        start = time.perf_counter()
        gp.add(i, float(f[i]))
        gp.ucb_argmax(beta, rng)
        engine.append(time.perf_counter() - start)
    peak_engine = peak_rss_mb()
    full = None
    if full_estimate_s is None or full_estimate_s <= FULL_BUDGET_S:
        idx, y = gp.observations()
        start = time.perf_counter()
        mu, s2 = posterior_dense(Z, idx[:t], y[:t], kernel, 1e-4)
        int(np.argmax(mu + math.sqrt(beta) * np.sqrt(s2)))
        full = time.perf_counter() - start
    return {"n": n, "t": t, "engine_s": float(np.median(engine)),
            "floor_s": float(np.median(floor)), "full_s": full,
            "engine_peak_mb": peak_engine, "interpreter_mb": base_mb,
            "cache_mb": gp.V.nbytes / 2**20}


def run_projection(n: int, d: int, r: int) -> dict:
    """Time PO-GP-UCB Algorithm 1 on an n x d dataset against the bare X M product."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, d)) * np.linspace(1, 5, d)
    M = rng.standard_normal((d, r))
    start = time.perf_counter()
    X @ M
    floor = time.perf_counter() - start
    start = time.perf_counter()
    _, rep = project(X, 1.0, 1.0 / n, r, np.random.default_rng(2))
    took = time.perf_counter() - start
    return {"n": n, "d": d, "r": r, "projection_s": took, "product_s": floor,
            "lifted": rep.lifted, "peak_mb": peak_rss_mb()}


def in_subprocess(args: list[str]) -> dict:
    """Run this script on one case in a fresh interpreter; its JSON answer."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          timeout=1800, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Print the table of every case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 1e5 only")
    parser.add_argument("--case", nargs=3, type=float, help=argparse.SUPPRESS)
    parser.add_argument("--projection", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        n, t, est = args.case
        print(json.dumps(run_case(int(n), int(t), None if est < 0 else est)))
        return
    if args.projection:
        print(json.dumps(run_projection(*args.projection)))
        return
    sizes = (10**4, 10**5) if args.quick else (10**4, 10**5, 10**6)
    print(f"GP-UCB step over n candidates in R^{R}, SE kernel; median of {STEPS} steps")
    print(f"{'n':>9} {'t':>4} {'engine ms':>10} {'floor ms':>9} {'full ms':>10} "
          f"{'eng/floor':>9} {'full/eng':>9} {'cache MB':>9} {'peak MB':>8}")
    full_per_nt2: float | None = None
    for n in sizes:
        for t in (50, 200):
            estimate = -1.0 if full_per_nt2 is None else full_per_nt2 * n * t * t
            res = in_subprocess(["--case", str(n), str(t), str(estimate)])
            if res["full_s"] is not None:
                full_per_nt2 = res["full_s"] / (n * t * t)
            full, eng = res["full_s"], res["engine_s"]
            print(f"{n:>9} {t:>4} {1e3 * res['engine_s']:>10.2f} {1e3 * res['floor_s']:>9.2f} "
                  f"{'skipped' if full is None else f'{1e3 * full:.1f}':>10} "
                  f"{res['engine_s'] / res['floor_s']:>9.2f} "
                  f"{'-' if full is None else f'{full / eng:.0f}':>9} "
                  f"{res['cache_mb']:>9.0f} {res['engine_peak_mb']:>8.0f}", flush=True)
    n = 10**5 if args.quick else 10**6
    res = in_subprocess(["--projection", str(n), "50", "20"])
    print(f"projection (Algorithm 1) n={res['n']} d={res['d']} r={res['r']}: "
          f"{res['projection_s']:.2f} s, {res['projection_s'] / res['product_s']:.1f}x the bare "
          f"X M product ({res['product_s']:.3f} s); lifted={res['lifted']}; "
          f"peak {res['peak_mb']:.0f} MB")


if __name__ == "__main__":
    main()
