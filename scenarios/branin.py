"""The Branin-Hoo benchmark (PO-GP-UCB appendix A): maximise -Branin on a grid.

Branin(x1, x2) = (x2 - 5.1 x1^2/(4 pi^2) + 5 x1/pi - 6)^2 + 10 (1 - 1/(8 pi)) cos x1 + 10
on [-5, 10] x [0, 15], minimum 0.397887 at three points. The grid (100 x 100 by default)
is centred and scaled to max norm 25, which makes it the synthetic scenario's grid, so
the same defaults apply (epsilon = e^1.1, r = 10 with sigma_min >= omega, delta = 1e-5,
T = 50). Branin is public, but its GP hyperparameters are not given: the modeler fits.
"""
from __future__ import annotations

import math

import numpy as np

from pobo.parties.preparation import scale_to_max_norm
from pobo.scenarios.problem import MAX_NORM, Problem, fitted_prior

BRANIN_MIN = 0.397887


def branin(x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """The Branin-Hoo function."""
    return ((x2 - 5.1 * x1**2 / (4 * math.pi**2) + 5 * x1 / math.pi - 6) ** 2
            + 10 * (1 - 1 / (8 * math.pi)) * np.cos(x1) + 10)


def build(seed: int | None, grid: int = 100) -> Problem:
    """-Branin on a grid x grid lattice of [-5, 10] x [0, 15] (the seed is not needed)."""
    if grid < 2:
        raise ValueError(f"grid must be at least 2, got {grid}")
    a, b = np.meshgrid(np.linspace(-5, 10, grid), np.linspace(0, 15, grid), indexing="ij")
    raw = np.column_stack([a.ravel(), b.ravel()])
    X = scale_to_max_norm(raw - raw.mean(axis=0), MAX_NORM)
    return Problem("branin", X, -branin(raw[:, 0], raw[:, 1]), fitted_prior(),
                   epsilon=math.exp(1.1), delta=1e-5, r=10, T=50, noise_var=1e-6, B=310.0,
                   source=f"Branin-Hoo on a {grid}x{grid} grid")
