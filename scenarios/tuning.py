"""The `tuning` scenario: private hyper-parameter tuning (Kusner et al. sec. 5, Algorithm 3).

A public training set trains an L2-regularised logistic regression for each candidate
regularisation strength lambda in [lam_min, lam_max] (log-spaced); the curator holds a
sensitive validation set of m records and evaluates the validation gain
f_V(lambda) = 1 - (1/m) sum ramp(y w_lambda^T x), ramp(z) = min(1, max(0, 1 - z)).
With ||x|| <= 1 the logistic training loss is 1-Lipschitz and convex in w and the ramp
loss is L = 1 Lipschitz with g* = 1, so Algorithm 3 releases max_t f_V + Laplace(Delta/eps),
Delta = (lam_max - lam_min) L / (lam_max lam_min) + min(g*/m, L/(m lam_min)). The
candidates cross as log10(lambda): they are public. Data are generated from the seed.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.optimize

from pobo.protocol.messages import KernelParams
from pobo.scenarios.problem import Problem, rng_for

LAM_MIN, LAM_MAX = 0.1, 1.0  # Delta ~ (lam_max - lam_min)/(lam_max lam_min) = 9


def logistic_regression(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """argmin_w lam/2 |w|^2 + mean log(1 + exp(-y w^T x)) (L-BFGS-B, analytic gradient)."""
    def objective(w: np.ndarray) -> tuple[float, np.ndarray]:
        margin = y * (X @ w)
        loss = np.logaddexp(0.0, -margin).mean() + 0.5 * lam * w @ w
        grad = -(X * (y * (1.0 / (1.0 + np.exp(margin))))[:, None]).mean(axis=0) + lam * w
        return float(loss), grad
    return scipy.optimize.minimize(objective, np.zeros(X.shape[1]), jac=True,
                                   method="L-BFGS-B").x


def ramp_gain(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """1 - mean ramp loss of w on (X, y)."""
    return float(1.0 - np.clip(1.0 - y * (X @ w), 0.0, 1.0).mean())


def labelled(rng: np.random.Generator, n: int, d: int, w_true: np.ndarray, flip: float):
    """Points in the unit ball with noisy linear labels."""
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * 1.5
    y = np.sign(X @ w_true + 1e-12)
    y[rng.random(n) < flip] *= -1
    return X, y


def build(seed: int | None, candidates: int = 60, m: int = 500, n_train: int = 400,
          d: int = 8) -> Problem:
    """Validation gain over `candidates` log-spaced lambda in [0.1, 1]."""
    rng = rng_for(seed, "tuning/data")
    w_true = rng.normal(size=d)
    X_tr, y_tr = labelled(rng, n_train, d, w_true, 0.15)  # public
    X_va, y_va = labelled(rng, m, d, w_true, 0.15)  # the curator's sensitive records
    lams = np.logspace(math.log10(LAM_MIN), math.log10(LAM_MAX), candidates)
    f = np.array([ramp_gain(logistic_regression(X_tr, y_tr, lam), X_va, y_va) for lam in lams])
    return Problem("tuning", np.log10(lams)[:, None], f,
                   KernelParams("se", 0.5, 0.01, 1e-6, "initial"), epsilon=1.0, delta=1e-3,
                   r=1, T=15, noise_var=0.0, B=1.0,
                   source=f"logistic regression, {n_train} public training and {m} private "
                          "validation records generated from the seed",
                   release={"lam_min": LAM_MIN, "lam_max": LAM_MAX, "L": 1.0, "g_star": 1.0,
                            "m": m})
