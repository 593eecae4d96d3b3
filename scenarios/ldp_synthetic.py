"""The LDP-BO paper's synthetic setup (Zhou & Tan, sec. 5.1).

100 points on [0, 1]; f = sum_{i<=100} a_i k(., x_i) with a_i ~ U[-1, 1] and support
points drawn from the domain; SE or Matern nu = 5/2 kernel with l = 0.2; B = 10, a
declared constant of the generator (max |f| is below it for 99 % of seeds; never
computed from this instance's f, which would let one individual's value cross); noise
U[-1, 1] so R = 1 (or Student-t with 3 degrees of freedom, `noise="student-t"`, for the
non-private heavy-tailed comparison). Metric: cumulative regret. The inputs are a
public grid, so by default they cross as they are (no projection); rewards are
made locally private with `--ldp-eps` (the paper uses 0.5 and 1). T = 2000.
"""
from __future__ import annotations

import numpy as np

from pobo.parties.kernels import kernel_by_name
from pobo.protocol.messages import KernelParams
from pobo.scenarios.problem import Problem, rng_for

LENGTHSCALE = 0.2
DECLARED_B = 10.0  # max |f| is below 10.4 for 99 % of seeds (SE and Matern, 300 seeds)


def build(seed: int | None, f_kernel: str = "se", noise: str = "uniform",
          points: int = 100) -> Problem:
    """f = sum a_i k(., x_i) on `points` grid points in [0, 1], the paper's objective."""
    kernel = f_kernel
    if kernel not in ("se", "matern52"):
        raise ValueError(f"ldp-synthetic kernel must be se or matern52, got {kernel!r}")
    if noise not in ("uniform", "student-t"):
        raise ValueError(f"ldp-synthetic noise must be uniform or student-t, got {noise!r}")
    rng = rng_for(seed, "ldp-synthetic/f")
    X = np.linspace(0.0, 1.0, points)[:, None]
    k = kernel_by_name(kernel, LENGTHSCALE, 1.0)
    support = X[rng.integers(points, size=100)]
    f = k(X, support) @ rng.uniform(-1.0, 1.0, 100)
    R = 1.0 if noise == "uniform" else 0.0
    return Problem("ldp-synthetic", X, f, KernelParams(kernel, LENGTHSCALE, 1.0, 1.0 / 3.0),
                   epsilon=1.0, delta=1e-3, r=1, T=2000, noise="uniform" if R else "student-t",
                   R=R, B=DECLARED_B, metric="cumulative_regret",
                   source=f"sum of 100 random {kernel} bumps on a {points}-point grid")
