"""The curator's differentially private random projection (PO-GP-UCB Algorithm 1)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from protocol.messages import ProjectedDataset
from protocol.policy import DP_PROJECTION, IDENTITY


@dataclass(frozen=True)
class ProjectionReport:
    """What the curator learns about its own projection (never sent to the modeler)."""

    sigma_min: float
    omega: float
    lifted: bool


def omega(r: int, epsilon: float, delta: float) -> float:
    """Singular-value threshold of Algorithm 1, line 5: 16 sqrt(r ln(2/d)) ln(16r/d) / eps."""
    _check_privacy(epsilon, delta)
    return 16.0 * math.sqrt(r * math.log(2.0 / delta)) * math.log(16.0 * r / delta) / epsilon


def singular_values(X: np.ndarray) -> np.ndarray:
    """Singular values of the column-centred dataset, descending (min(n, d) of them)."""
    Xc = np.asarray(X, dtype=float) - np.mean(X, axis=0)
    return scipy.linalg.svd(Xc, compute_uv=False)


def largest_admissible_r(sigma_min: float, epsilon: float, delta: float,
                         r_max: int = 1000) -> int:
    """The largest r with sigma_min >= omega(r) -- the paper's guideline -- or 0 if none."""
    best = 0
    for r in range(1, r_max + 1):
        if omega(r, epsilon, delta) > sigma_min:
            break
        best = r
    return best


def project(X: np.ndarray, epsilon: float, delta: float, r: int,
            rng: np.random.Generator) -> tuple[ProjectedDataset, ProjectionReport]:
    """Z = r^-1/2 X~ M: the (epsilon, delta)-DP projection of PO-GP-UCB Algorithm 1.

    Centre the columns; draw M (d x r) ~ N(0, 1); if sigma_min(X) < omega, lift every
    singular value to sqrt(sigma^2 + omega^2) (line 9). When n >= d and X has full
    column rank, X~ M is computed as X V diag(lifted / sigma) V^T M from the SVD of
    the d x d factor R of X = QR, which never forms the n x d matrix U.
    """
    X = _check_matrix(X)
    if not (isinstance(r, (int, np.integer)) and r >= 1):
        raise ValueError(f"projection dimension r must be a positive integer, got {r!r}")
    w = omega(r, epsilon, delta)
    n, d = X.shape
    Xc = X - X.mean(axis=0)
    M = rng.standard_normal((d, r))
    if n >= d:
        R = scipy.linalg.qr(Xc, mode="r", check_finite=False)[0][:d]
        _, s, Vt = scipy.linalg.svd(R, check_finite=False)
    else:
        s = scipy.linalg.svd(Xc, compute_uv=False, check_finite=False)
    sigma_min = float(s[-1]) if n >= d else 0.0
    lifted = sigma_min < w
    if not lifted:
        Z = Xc @ M
    elif n >= d and sigma_min > max(n, d) * np.finfo(float).eps * s[0]:
        scale = np.sqrt(s**2 + w**2) / s
        Z = Xc @ (Vt.T @ (scale[:, None] * (Vt @ M)))
    else:  # rank-deficient: the lifted null directions need U itself
        Z = lifted_dataset(Xc, w) @ M
    Z /= math.sqrt(r)
    release = ProjectedDataset(DP_PROJECTION, float(epsilon), float(delta), w, Z)
    return release, ProjectionReport(sigma_min, w, lifted)


def lifted_dataset(X: np.ndarray, w: float) -> np.ndarray:
    """X~ = U sqrt(Sigma^2 + w^2 I) V^T (Algorithm 1, line 9): every singular value lifted.

    Dense textbook form (full SVD of the n x d matrix, as in the paper), so that the
    min(n, d) singular values of X~ are all at least w; `project` uses a cheaper
    equivalent when X has full column rank.
    """
    U, s, Vt = scipy.linalg.svd(np.asarray(X, dtype=float), full_matrices=False,
                                check_finite=False)
    return (U * np.sqrt(s**2 + w**2)) @ Vt


def identity_release(X: np.ndarray) -> ProjectedDataset:
    """The original X itself, for the non-private GP-UCB baseline: a vacuous (0, 1)-DP release."""
    return ProjectedDataset(IDENTITY, 0.0, 1.0, 0.0, _check_matrix(X).copy())


def _check_matrix(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"dataset must be an n x d matrix with n >= 2, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("dataset holds NaN or infinity")
    return X


def _check_privacy(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
