"""The PO-GP-UCB paper's synthetic GP scenario: a function sampled from a GP on a grid."""
from __future__ import annotations

import math

import numpy as np

from pobo.protocol.messages import KernelParams
from pobo.parties.preparation import scale_to_max_norm
from pobo.scenarios.problem import Problem, PublicDomain, rng_for

LENGTHSCALE = 6.25  # 0.25 x max norm, as in the authors' code (the paper's text says 1.25)
SIGNAL_VAR = 1.0
# the grid's public square [-1, 1]^2, length-scale 0.25 x 25 / (25 / sqrt 2) in its units
DOMAIN = PublicDomain(("x1", "x2"), (-1.0, -1.0), (1.0, 1.0),
                      (LENGTHSCALE * math.sqrt(2) / 25,) * 2, ("", ""),
                      "the grid's square [-1, 1]^2 (public: the grid itself is public)")
NOISE_VAR = 1e-5


def grid_points(side: int, max_norm: float = 25.0) -> np.ndarray:
    """side x side uniform grid on [-1, 1]^2 scaled to max norm `max_norm`, row-major."""
    axis = np.linspace(-1.0, 1.0, side)
    A, B = np.meshgrid(axis, axis, indexing="ij")
    return scale_to_max_norm(np.column_stack([A.ravel(), B.ravel()]), max_norm)


def sample_grid_gp(axis: np.ndarray, lengthscale: float, variance: float,
                   rng: np.random.Generator) -> np.ndarray:
    """A GP sample on the grid axis x axis (row-major), in O(side^3) not O(n^3).

    The SE kernel on a grid is K = K1 (x) K1, so F = A E A^T with K1 = A A^T and E a
    side x side standard normal matrix has exactly covariance variance * K.
    """
    d2 = (axis[:, None] - axis[None, :]) ** 2
    K1 = np.exp(-0.5 * d2 / lengthscale**2)
    w, Q = np.linalg.eigh(K1)
    A = Q * np.sqrt(np.clip(w, 0.0, None))
    E = rng.standard_normal((axis.size, axis.size))
    return math.sqrt(variance) * (A @ E @ A.T).ravel()


def build(seed: int | None, grid: int = 100) -> Problem:
    """The synthetic GP problem: n = grid^2 inputs, f ~ GP(0, SE(l = 6.25, s2 = 1))."""
    if grid < 2:
        raise ValueError(f"grid must be at least 2, got {grid}")
    X = grid_points(grid)
    axis = X[::grid, 0]
    f = sample_grid_gp(axis, LENGTHSCALE, SIGNAL_VAR, rng_for(seed, "synthetic/f"))
    return Problem("synthetic", X, f, KernelParams("se", LENGTHSCALE, SIGNAL_VAR, NOISE_VAR),
                   epsilon=math.exp(1.1), delta=1e-5, r=10, T=50, noise_var=NOISE_VAR, B=4.0,
                   source=f"generated from the seed ({grid}x{grid} grid)", domain=DOMAIN,
                   row_unit="one grid point")
