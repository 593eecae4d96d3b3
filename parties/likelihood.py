"""Type-II maximum likelihood for GP hyperparameters (Rasmussen & Williams sec. 5.4.1).

log p(y | X) = -1/2 (y - m)^T K_y^-1 (y - m) - sum log diag L - t/2 log 2 pi, with
K_y = K + s_n^2 I = L L^T, and d/dtheta_j = 1/2 tr((alpha alpha^T - K_y^-1) dK_y/dtheta_j)
(eq. 5.8 and 5.9). The parameters are the kernel's log length-scales and log variance,
then log s_n^2; the fit is `scipy.optimize.minimize(method="L-BFGS-B")` in log space
within bounds, from the current values and a few restarts drawn from a seeded Generator.
The constant mean m is the sample mean of y.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pobo.parties.gp import DEFAULT_JITTER, one_blas_thread
from pobo.parties.kernels import Kernel


@dataclass(frozen=True)
class Fit:
    """Fitted hyperparameters and the log marginal likelihood they reach. A modeler's
    fit (parties/fitting.py) also gives the base values before the release's widening
    (`kernel` and `noise_var` are then the widened ones the engine uses) and whether it
    was kept (its evidence beat the declared values')."""

    kernel: Kernel
    noise_var: float
    prior_mean: float
    log_likelihood: float
    base: Kernel | None = None
    base_noise_var: float | None = None
    declared_log_likelihood: float | None = None
    kept: bool = True
    rebuilt: bool = True  # False: kept, but so close to the held fit that the engine stayed


def log_marginal_likelihood(kernel: Kernel, noise_var: float, X: np.ndarray, y: np.ndarray,
                            prior_mean: float = 0.0,
                            jitter: float = DEFAULT_JITTER) -> tuple[float, np.ndarray]:
    """log p(y | X) and its gradient with respect to (kernel.theta, log noise_var)."""
    import scipy.linalg  # here, not at import: only a fit needs scipy
    X, r = np.asarray(X, dtype=float), np.asarray(y, dtype=float) - prior_mean
    K, dKs = kernel.gradients(X)
    t = len(r)
    Ky = K + (noise_var + jitter) * np.eye(t)
    try:
        L = scipy.linalg.cholesky(Ky, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return -math.inf, np.zeros(len(dKs) + 1)
    alpha = scipy.linalg.cho_solve((L, True), r, check_finite=False)
    value = -0.5 * r @ alpha - np.log(np.diag(L)).sum() - 0.5 * t * math.log(2 * math.pi)
    # the lower triangle P of K_y^-1 from its factor (LAPACK potri: a third of the work
    # of solving against I; L's upper triangle is zero, so is P's). For a symmetric dK,
    # tr(K_y^-1 dK) = 2 sum(P * dK) - sum(diag P * diag dK): no full inverse is formed
    P, info = scipy.linalg.lapack.dpotri(L, lower=1)
    if info:
        return -math.inf, np.zeros(len(dKs) + 1)
    dP = np.diag(P)
    grad = [0.5 * (alpha @ dK @ alpha - 2.0 * np.vdot(P, dK) + dP @ np.diag(dK)) for dK in dKs]
    grad.append(0.5 * noise_var * (alpha @ alpha - dP.sum()))
    return float(value), np.asarray(grad)


def default_bounds(kernel: Kernel, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Log-space bounds: length-scales 1e-2..1e2 x the input range, variance 1e-2..1e2 x
    var(y), noise 1e-8..10 x var(y). Rows follow (kernel.theta, log noise)."""
    X = np.asarray(X, dtype=float)
    ranges = np.ptp(X, axis=0) if X.shape[0] > 1 else np.ones(X.shape[1])
    spread = ranges if kernel.ard else np.array([np.linalg.norm(ranges)])
    spread = np.where(spread > 0, spread, 1.0)
    vy = float(np.var(y)) if len(y) > 1 and np.var(y) > 0 else 1.0
    rows = [(math.log(1e-2 * s), math.log(1e2 * s)) for s in spread]
    rows += [(math.log(1e-2 * vy), math.log(1e2 * vy)), (math.log(1e-8 * vy), math.log(10 * vy))]
    return np.array(rows)


def fit_hyperparameters(kernel: Kernel, noise_var: float, X: np.ndarray, y: np.ndarray,
                        rng: np.random.Generator, restarts: int = 3,
                        bounds: np.ndarray | None = None) -> Fit:
    """Maximise the log marginal likelihood over the kernel's parameters and the noise.

    Starts from the given values (clipped into `bounds`) and from `restarts` - 1 points
    drawn uniformly in the log-space box with `rng`; returns the best local optimum.
    Runs on one BLAS thread (`one_blas_thread`): the same bits on every thread setting.
    """
    import scipy.optimize  # here, not at import: only a fit needs scipy
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    if len(y) < 2:
        raise ValueError("maximum likelihood needs at least two observations")
    m = float(np.mean(y))
    box = default_bounds(kernel, X, y) if bounds is None else np.asarray(bounds, dtype=float)
    start = np.clip(np.append(kernel.theta, math.log(max(noise_var, 1e-300))), box[:, 0], box[:, 1])
    starts = [start] + [rng.uniform(box[:, 0], box[:, 1]) for _ in range(max(restarts, 1) - 1)]

    def objective(p: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = log_marginal_likelihood(kernel.with_theta(p[:-1]), math.exp(p[-1]), X, y, m)
        if not math.isfinite(value):
            return 1e300, np.zeros_like(p)
        return -value, -grad

    best = None
    with one_blas_thread():
        for p0 in starts:
            res = scipy.optimize.minimize(objective, p0, jac=True, method="L-BFGS-B",
                                          bounds=box)
            if best is None or res.fun < best.fun:
                best = res
    p = best.x
    return Fit(kernel.with_theta(p[:-1]), math.exp(p[-1]), m, -float(best.fun))
