"""GP engine step against its O(n t) floor, the bare t x n product and a full recompute.

    python benchmarks/gp_step.py                # n in {1e4, 1e5, 1e6}, t in {50, 200}
    python benchmarks/gp_step.py --quick        # n in {1e4, 1e5}, a smoke run
    python benchmarks/gp_step.py --threads 2    # BLAS threads (default 1)

Each (n, t) runs in a fresh subprocess so its peak resident memory is its own, with
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS set to --threads before numpy
is imported (printed in the header). Per case, in each of STEPS steps on the same state
(the engine's after t observations, then one more per step): the floor, the bare product
and the engine step, timed one after the other; their medians are printed. The engine
step adds an observation, updates mean and variance over all n candidates and takes the
argmax of UCB. The floor is the same exact math in plain numpy with preallocated buffers,
on a fresh copy of the state each step (the new row of L, the SE kernel column as
exp(-|z - z_i|^2 / 2 l^2) from precomputed squared norms, one t x n vector-matrix
product, the mean and variance updates and the argmax), checked against the engine's
result. The bare product is l^T V[:t] alone, the one O(n t) operation neither can avoid.
The full recompute (Cholesky of K_t plus the dense posterior over all n, as a library
that refits each round does) runs where it is expected to fit in a minute. Targets:
engine/floor <= 1.2; full/engine >= 30 at n = 1e5, t = 200; peak <= 2.5 GB at
n = 1e6, t = 200.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _set_threads(argv: list[str]) -> str:
    """Set every BLAS thread variable to --threads (default 1) before numpy is imported."""
    threads = "1"
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            threads = argv[i + 1]
        elif arg.startswith("--threads="):
            threads = arg.split("=", 1)[1]
    for var in THREAD_VARS:
        os.environ[var] = threads
    return threads


_set_threads(sys.argv)

import numpy as np  # noqa: E402  (after the thread variables)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pobo.parties.gp import DEFAULT_JITTER, IncrementalGP, posterior_dense  # noqa: E402
from pobo.parties.kernels import squared_exponential  # noqa: E402
from pobo.parties.projection import project  # noqa: E402

R = 10  # projection dimension of the candidates (the paper's synthetic r)
STEPS = 15  # timed steps per case; the median is reported
FULL_BUDGET_S = 60.0


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Floor:
    """One GP-UCB step in plain numpy, the exact math of the engine on buffers allocated
    once: mean and var are a fresh copy of the state the step starts from, V (t x n) and
    alpha the engine's own rows, only read (the new row goes to a buffer of its own)."""

    def __init__(self, Z: np.ndarray, lengthscale: float, variance: float, noise: float) -> None:
        self.Z = Z / lengthscale  # SE: k = exp(Z z_i - |Z|^2 / 2 - |z_i|^2 / 2 + log variance)
        self.half = 0.5 * np.einsum("ij,ij->i", self.Z, self.Z)
        self.h = math.log(variance) - self.half
        self.diag = variance + noise + DEFAULT_JITTER
        n = len(Z)
        self.k, self.v, self.buf = np.empty(n), np.empty(n), np.empty(n)
        self.mean, self.var = np.empty(n), np.empty(n)

    def load(self, gp: IncrementalGP) -> None:
        """Take a fresh copy of the engine's state (outside the timing)."""
        self.V, self.alpha = gp.V[:gp.t], gp.alpha[:gp.t]
        np.copyto(self.mean, gp.mean)
        np.copyto(self.var, gp.var)

    def step(self, index: int, y: float, beta: float) -> int:
        """Condition on y at candidate `index`, update mean and variance, argmax of UCB."""
        V, k, v, buf = self.V, self.k, self.v, self.buf
        l_row = V[:, index].copy()
        d = math.sqrt(self.diag - l_row @ l_row)
        np.dot(self.Z, self.Z[index], out=k)  # the SE kernel column
        k += self.h
        k -= self.half[index]
        np.exp(k, out=k)
        np.dot(l_row, V, out=v)
        np.subtract(k, v, out=v)
        v *= 1.0 / d
        a = (y - l_row @ self.alpha) / d
        self.mean += np.multiply(v, a, out=buf)
        self.var -= np.multiply(v, v, out=buf)
        np.maximum(self.var, 0.0, out=self.var)
        np.sqrt(self.var, out=buf)
        buf *= math.sqrt(beta)
        buf += self.mean
        return int(np.argmax(buf))


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
    engine, floor, matvec = [], [], []
    base = Floor(Z, kernel.lengthscales[0], kernel.variance, 1e-4)
    out = np.empty(n)
    for _ in range(STEPS):
        i = int(rng.integers(n))
        base.load(gp)
        l_row = gp.V[:gp.t, i].copy()
        start = time.perf_counter()
        chose = base.step(i, float(f[i]), beta)
        floor.append(time.perf_counter() - start)
        start = time.perf_counter()
        np.dot(l_row, base.V, out=out)
        matvec.append(time.perf_counter() - start)
        start = time.perf_counter()
        gp.add(i, float(f[i]))
        engine_chose = gp.ucb_argmax(beta, rng)
        engine.append(time.perf_counter() - start)
        assert np.allclose(base.mean, gp.mean, atol=1e-8) and \
            np.allclose(base.var, gp.var, atol=1e-8), "the floor is not the engine's math"
        assert np.isfinite(base.mean).all() and chose == engine_chose, (chose, engine_chose)
    peak_engine = peak_rss_mb()
    full = None
    if full_estimate_s is None or full_estimate_s <= FULL_BUDGET_S:
        idx, y = gp.observations()
        start = time.perf_counter()
        mu, s2 = posterior_dense(Z, idx[:t], y[:t], kernel, 1e-4)
        int(np.argmax(mu + math.sqrt(beta) * np.sqrt(s2)))
        full = time.perf_counter() - start
    return {"n": n, "t": t, "engine_s": float(np.median(engine)),
            "floor_s": float(np.median(floor)), "matvec_s": float(np.median(matvec)),
            "full_s": full,
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
                          timeout=1800, check=True, env=os.environ.copy())
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Print the table of every case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 1e5 only")
    parser.add_argument("--threads", type=int, default=1,
                        help="OPENBLAS/OMP/MKL_NUM_THREADS for every case (default 1)")
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
    print(f"GP-UCB step over n candidates in R^{R}, SE kernel; median of {STEPS} steps; "
          + ", ".join(f"{v}={os.environ[v]}" for v in THREAD_VARS))
    print(f"{'n':>9} {'t':>4} {'engine ms':>10} {'floor ms':>9} {'matvec ms':>10} "
          f"{'full ms':>10} {'eng/floor':>9} {'eng/mv':>7} {'full/eng':>9} {'cache MB':>9} "
          f"{'peak MB':>8}")
    full_per_nt2: float | None = None
    for n in sizes:
        for t in (50, 200):
            estimate = -1.0 if full_per_nt2 is None else full_per_nt2 * n * t * t
            res = in_subprocess(["--case", str(n), str(t), str(estimate)])
            if res["full_s"] is not None:
                full_per_nt2 = res["full_s"] / (n * t * t)
            full, eng = res["full_s"], res["engine_s"]
            print(f"{n:>9} {t:>4} {1e3 * res['engine_s']:>10.2f} {1e3 * res['floor_s']:>9.2f} "
                  f"{1e3 * res['matvec_s']:>10.2f} "
                  f"{'skipped' if full is None else f'{1e3 * full:.1f}':>10} "
                  f"{res['engine_s'] / res['floor_s']:>9.2f} "
                  f"{res['engine_s'] / res['matvec_s']:>7.2f} "
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
