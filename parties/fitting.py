"""The modeler's hyperparameter fit on a release: maximum a posteriori around the
declared values, under the release's input-noise widening, kept only where it wins.

A Gaussian release shows the modeler z = x P + noise, N(0, s^2) per coordinate over
`dims` dimensions. The kernel between released rows is then the declared one widened
(`kernels.noisy_input_kernel`, Girard et al. 2003): l_z^2 = l^2 + 2 s^2 and a nugget
(1 - c) s_f^2, c = (l^2 / l_z^2)^(dims / 2), added to the observation noise. A fit here
chooses the *base* hyperparameters theta = (log l_1..l_k, log s_f^2, log s_n^2) and the
model it scores is always the widened one, so the widening applies on top of whatever is
fitted and the effective noise never drops below the nugget (plus 2 L^2 under LDP
rewards).

`map_fit` maximises log p(y | theta) + log p(theta) in log space (L-BFGS-B within
bounds, analytic gradients by the chain rule through the widening). The prior
(`declared_prior`) is log-normal on every parameter, centred on the scenario's public
declared values -- as BoTorch puts log-normal priors on its length-scales -- with the
length-scales held within x2 of the declared ones. `prior=None` is plain type-II
maximum likelihood (`--fit once/every`). The modeler keeps a fit only where its
evidence log p(y | theta) beats the declared values' on the same rewards, each at its
constant mean: the declared kernel at its best one (`gls_mean`), so the test weighs the
kernel, not the mean (parties/modeler.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pobo.parties.gp import DEFAULT_JITTER
from pobo.parties.kernels import Kernel
from pobo.parties.likelihood import Fit, default_bounds, log_marginal_likelihood, one_blas_thread

LENGTHSCALE_RANGE = 2.0  # the MAP length-scales stay within x2 of the declared ones
LENGTHSCALE_SD = math.log(2.0) / 2  # log-normal sd: the bound is two sd away
VARIANCE_RANGE = 100.0  # signal and noise variance within x100 of the declared ones
VARIANCE_SD = math.log(10.0)  # log-normal sd of both variances (x10 is one sd)


@dataclass(frozen=True)
class InputNoise:
    """What the release adds to the model: N(0, std^2) per coordinate over `dims`
    dimensions of the rows, and `extra` observation-noise variance (2 L^2 for Laplace
    LDP rewards)."""

    std: float = 0.0
    dims: int = 0
    extra: float = 0.0


@dataclass(frozen=True)
class Prior:
    """Independent normal priors on the log-parameters (log-normal on the values)."""

    centre: np.ndarray
    sd: np.ndarray

    def log_density(self, p: np.ndarray) -> tuple[float, np.ndarray]:
        """log p(theta) (up to a constant) and its gradient."""
        z = (p - self.centre) / self.sd
        return -0.5 * float(z @ z), -z / self.sd


def base_theta(kernel: Kernel, noise_var: float) -> np.ndarray:
    """(log l_1..l_k, log s_f^2, log s_n^2) of a base kernel and noise."""
    return np.append(kernel.theta, math.log(max(noise_var, 1e-300)))


def widened(kernel: Kernel, noise_var: float, noise: InputNoise) -> tuple[Kernel, float]:
    """The kernel and observation noise between released rows, from base values: the
    declared-kernel arithmetic of `noisy_input_kernel`, one length-scale per dimension."""
    if noise.std <= 0:
        return kernel, noise_var + noise.extra
    ls = np.asarray(kernel.lengthscales, dtype=float)
    lz2 = ls**2 + 2.0 * noise.std**2
    q = ls**2 / lz2
    # one length-scale (or all equal): noisy_input_kernel's arithmetic to the bit
    c = (float(q[0]) ** (noise.dims / 2.0) if (ls == ls[0]).all()
         else float(np.prod(q)) ** (noise.dims / (2.0 * ls.size)))
    wide = Kernel(kernel.family, tuple(np.sqrt(lz2)), kernel.variance)
    return wide, noise_var + noise.extra + (1.0 - c) * kernel.variance


def _evidence(p: np.ndarray, family: str, noise: InputNoise, X: np.ndarray, y: np.ndarray,
              mean: float) -> tuple[float, np.ndarray]:
    """log p(y | X) of the widened model of base parameters p, and its gradient in p."""
    k = p.size - 2
    base = Kernel(family, tuple(np.exp(p[:k])), math.exp(p[k]))
    sn2 = math.exp(p[-1])
    kernel, total = widened(base, sn2, noise)
    value, g = log_marginal_likelihood(kernel, total, X, y, mean)
    if not math.isfinite(value):
        return value, np.zeros_like(p)
    g_noise = g[-1] / total  # d/d(effective noise variance)
    ls = np.asarray(base.lengthscales)
    if noise.std > 0:
        q = ls**2 / (ls**2 + 2.0 * noise.std**2)  # d log l_z / d log l
        c = float(np.prod(q)) ** (noise.dims / (2.0 * k))
        g_l = g[:k] * q - g_noise * base.variance * c * (noise.dims / k) * (1 - q)
        g_v = g[k] + g_noise * (1.0 - c) * base.variance
    else:
        g_l, g_v = g[:k], g[k]
    return value, np.concatenate([g_l, [g_v, g_noise * sn2]])


def evidence(kernel: Kernel, noise_var: float, noise: InputNoise, X: np.ndarray, y: np.ndarray,
             mean: float) -> float:
    """log p(y | X) under the widened model of base `kernel` and `noise_var`."""
    with one_blas_thread():
        return _evidence(base_theta(kernel, noise_var), kernel.family, noise,
                         np.asarray(X, dtype=float), np.asarray(y, dtype=float), mean)[0]


def gls_mean(kernel: Kernel, noise_var: float, noise: InputNoise, X: np.ndarray,
             y: np.ndarray) -> float:
    """The constant prior mean that maximises log p(y | X) under the widened model of base
    `kernel` and `noise_var`: the generalised least-squares mean 1'K^-1 y / 1'K^-1 1
    (ordinary kriging's). Not the rewards' plain mean: GP-UCB's queries crowd where
    rewards are high, and correlated rewards count for less than independent ones."""
    import scipy.linalg  # here, not at import: only a fit needs scipy
    wide, total = widened(kernel, noise_var, noise)
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    factor = scipy.linalg.cho_factor(wide(X, X) + (total + DEFAULT_JITTER) * np.eye(len(y)),
                                     lower=True, check_finite=False)
    weights = scipy.linalg.cho_solve(factor, np.ones(len(y)), check_finite=False)
    return float(weights @ y / weights.sum())


def declared_prior(kernel: Kernel, noise_var: float) -> tuple[Prior, np.ndarray]:
    """The log-normal prior centred on declared base values and its log-space bounds:
    length-scales within x2 (sd log 2 / 2), signal and noise variance within x100 (sd
    log 10). The noise is the *base* noise: the nugget and LDP noise come on top."""
    centre = base_theta(kernel, max(noise_var, 1e-6 * kernel.variance))
    k = len(kernel.lengthscales)
    sd = np.array([LENGTHSCALE_SD] * k + [VARIANCE_SD, VARIANCE_SD])
    half = np.log([LENGTHSCALE_RANGE] * k + [VARIANCE_RANGE, VARIANCE_RANGE])
    return Prior(centre, sd), np.column_stack([centre - half, centre + half])


def map_fit(kernel: Kernel, noise_var: float, noise: InputNoise, X: np.ndarray, y: np.ndarray,
            rng: np.random.Generator, *, prior: Prior | None, bounds: np.ndarray | None = None,
            starts: tuple[np.ndarray, ...] = (), restarts: int = 1) -> Fit:
    """Base hyperparameters maximising log p(y | theta) + log p(theta) under the widened
    model (no prior: maximum likelihood), from the declared values, the given `starts`
    and random points of the box up to `restarts` starts in all; the constant mean is
    the rewards' mean. The Fit holds the *widened* kernel and noise (what the engine
    uses), the base ones, and the evidence log p(y | theta) alone."""
    import scipy.optimize  # here, not at import: only a fit needs scipy
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    if len(y) < 2:
        raise ValueError("a fit needs at least two observations")
    m = float(np.mean(y))
    box = default_bounds(kernel, X, y) if bounds is None else np.asarray(bounds, dtype=float)
    points = [base_theta(kernel, noise_var), *starts]
    points += [rng.uniform(box[:, 0], box[:, 1]) for _ in range(restarts - len(points))]

    def objective(p: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = _evidence(p, kernel.family, noise, X, y, m)
        if not math.isfinite(value):
            return 1e300, np.zeros_like(p)
        if prior is not None:
            lp, lg = prior.log_density(p)
            value, grad = value + lp, grad + lg
        return -value, -grad

    best = None
    with one_blas_thread():  # (the modeler's refit holds one already: this one is cheap)
        for p0 in points:
            res = scipy.optimize.minimize(objective, np.clip(p0, box[:, 0], box[:, 1]),
                                          jac=True, method="L-BFGS-B", bounds=box)
            if best is None or res.fun < best.fun:
                best = res
        p = best.x
        value = _evidence(p, kernel.family, noise, X, y, m)[0]
    k = len(kernel.lengthscales)
    base = Kernel(kernel.family, tuple(np.exp(p[:k])), math.exp(p[k]))
    wide, total = widened(base, math.exp(p[-1]), noise)
    return Fit(wide, total, m, value, base=base, base_noise_var=math.exp(p[-1]))
