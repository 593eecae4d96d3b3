"""Curator-side data preparation before the projection (the PO-GP-UCB paper's recipe).

The paper divides each input dimension by its GP length-scale so that one isotropic
kernel fits the projected data, then scales the rows to a maximal norm of 25. The
length-scales come from an ARD maximum-likelihood fit on a public or curator-held
sample; they stay with the curator (they are not sent across the boundary).
"""
from __future__ import annotations

import numpy as np

from pobo.parties.kernels import ard_squared_exponential, squared_exponential
from pobo.parties.likelihood import fit_hyperparameters


def fit_ard_lengthscales(X: np.ndarray, y: np.ndarray, rng: np.random.Generator,
                         sample: int = 500, restarts: int = 3) -> np.ndarray:
    """One SE length-scale per input dimension, fitted by maximum likelihood on at most
    `sample` rows drawn with `rng` (O(sample^3))."""
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    rows = rng.choice(X.shape[0], size=min(sample, X.shape[0]), replace=False)
    Xs, ys = X[rows], y[rows]
    spread = np.where(np.ptp(Xs, axis=0) > 0, np.ptp(Xs, axis=0), 1.0)
    vy = float(np.var(ys)) or 1.0
    start = (ard_squared_exponential(spread / 2, vy) if X.shape[1] > 1
             else squared_exponential(float(spread[0] / 2), vy))
    fit = fit_hyperparameters(start, 0.1 * vy, Xs, ys, rng, restarts)  # on one BLAS thread
    return np.asarray(fit.kernel.lengthscales * (X.shape[1] if not fit.kernel.ard else 1))



def rescale_by_lengthscales(X: np.ndarray, lengthscales: np.ndarray) -> np.ndarray:
    """X with each column divided by its length-scale: an ARD kernel on X is then an
    isotropic kernel of length-scale 1 on the result."""
    ls = np.asarray(lengthscales, dtype=float)
    if ls.shape != (np.asarray(X).shape[1],) or not (ls > 0).all():
        raise ValueError(f"need one positive length-scale per column, got {ls}")
    return np.asarray(X, dtype=float) / ls


def scale_to_max_norm(X: np.ndarray, max_norm: float = 25.0) -> np.ndarray:
    """X scaled so its largest row norm is `max_norm` (the paper's preprocessing)."""
    return X * (max_norm / np.max(np.linalg.norm(X, axis=1)))
