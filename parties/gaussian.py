"""Exact privacy profiles of the Gaussian releases, and the noise that calibrates them.

Two releases of the preprocessed rows X (n x d, one row per unit; neighbours differ in one
row by a vector v) are analysed here; parties/projection.py draws them.

**The Gaussian mechanism on the centred rows** (mechanism "gaussian-rows"). Centring maps
a neighbour's change to X'_c - X_c = u v^T with u = e_i - 1/n 1, so the whole matrix
moves by |u| |v| = sqrt(1 - 1/n) |v| in Frobenius norm. X_c + sigma G (G i.i.d. N(0, 1))
is then the Gaussian mechanism of L2 sensitivity Delta = sqrt(1 - 1/n) |v|, and its
exact privacy profile is (Balle & Wang 2018, Theorem 8, "analytic Gaussian mechanism")

    delta_G(eps; mu) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2),   mu = Delta/sigma.

It is tight: no smaller delta holds at that eps for that pair. Multiplying by a matrix Q
that does not depend on the data (a random orthonormal d x r map, r >= d, which keeps
every distance; or a Gaussian JL map, r < d) is post-processing.

**The Gaussian sketch** (mechanism "gaussian-sketch", PO-GP-UCB's lifted release
Z = (X_c M + omega G) / sqrt(r), M (d x r) secret and i.i.d. N(0, 1)). Conditioned on M
it is the Gaussian mechanism on X_c M, whose mean moves by u (M^T v)^T, of norm
|u| |M^T v|. M does not depend on the data, so |M^T v|^2 = |v|^2 q with q ~ chi^2_r for a
fixed pair. Couple both datasets on the same M: Z's law is a mixture over M of Gaussians
under X and under X', and the hockey-stick divergence is jointly convex, so

    delta(eps) <= E_{q ~ chi^2_r} [ delta_G(eps; |u| |v| sqrt(q) / omega) ].

No sigma_min condition; any n, d. `sketch_delta` bounds this integral from above: the
integrand increases with q, so on cells [q_k, q_{k+1}) it is at most its value at
q_{k+1} (a monotone upper Riemann sum against the exact chi^2_r cell masses), plus the
mass beyond the last cell (where delta_G <= 1). Rounding in the quadrature can only
overstate delta, never understate it.

**Distances.** Both profiles depend on the pair only through |v|, so one release has an
epsilon for every scale of change: `epsilon_at` gives it at a move of `distance`
preprocessed units (1, one kernel length-scale, or the domain's diameter for replacing
a whole row by any other row of the public domain).

Everything here is plain math (math.erfc, math.lgamma): a curator imports no scipy.
tests/test_gaussian_release.py checks these against dp-accounting's Gaussian privacy
loss and scipy's chi^2 quadrature to 1e-6.
"""
from __future__ import annotations

import math
from functools import lru_cache

_ULP = 2.0 ** -52  # float64's epsilon: the rounding unit of gaussian_delta's bound
SKETCH_CELLS = 8000  # cells of the upper Riemann sum (it overstates delta by < 1 %)
EPS_MAX = 1e9  # a larger epsilon is reported as inf: "> 1e+09", no useful guarantee


def std_normal_cdf(x: float) -> float:
    """Phi(x), accurate in the lower tail (erfc, not 1 - erf)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def log_std_normal_cdf(x: float) -> float:
    """log Phi(x), also where Phi(x) underflows: below -30 by the asymptotic series
    log Phi(x) = -x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - 15/x^6 + 105/x^8),
    whose truncation error is below 945/x^10 < 2e-13 relative there."""
    if x > -30.0:
        return math.log(std_normal_cdf(x))
    u = 1.0 / (x * x)
    series = 1.0 - u * (1.0 - u * (3.0 - u * (15.0 - 105.0 * u)))
    return -0.5 * x * x - math.log(-x * math.sqrt(2.0 * math.pi)) + math.log(series)


def gaussian_delta(epsilon: float, mu: float, upper: bool = False) -> float:
    """delta_G(eps; mu): the exact privacy profile of a Gaussian mechanism whose mean
    moves by mu standard deviations (Balle & Wang 2018, Theorem 8), Phi(a) - e^eps Phi(b).
    With `upper`, an upper bound on it: the two terms' rounding added (a few ulps of
    Phi(a), and of e^eps Phi(b) as many times as its exponent is large, plus the tail
    series' 2e-13 below -30), which decides the calibration where the two nearly cancel
    (a tiny eps with a tiny delta: a review found the true delta 1.0000067 times the
    target at (1e-8, 1e-15))."""
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    a, b = -epsilon / mu + mu / 2, -epsilon / mu - mu / 2
    phi_a, log_b = std_normal_cdf(a), epsilon + log_std_normal_cdf(b)
    delta = max(0.0, phi_a - math.exp(log_b))
    if upper:
        delta += phi_a * (16.0 * (1.0 + abs(log_b)) * _ULP + (2e-13 if b < -30.0 else 0.0))
    return delta


def gaussian_epsilon(delta: float, mu: float) -> float:
    """The smallest eps with delta_G(eps; mu) <= delta (inf past EPS_MAX), rounding
    included (`gaussian_delta(upper=True)`): never stated below the exact one."""
    _check_delta(delta)
    return _smallest_epsilon(lambda e: gaussian_delta(e, mu, upper=True), delta)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest sigma for which the Gaussian mechanism of this L2 sensitivity is
    (eps, delta)-DP (the analytic calibration, Balle & Wang 2018, Algorithm 1)."""
    _check_privacy(epsilon, delta)
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be positive, got {sensitivity}")
    # delta_G grows with mu = sensitivity / sigma: bisect on mu, then sigma = sens / mu
    lo, hi = 0.0, 1.0
    while gaussian_delta(epsilon, hi, upper=True) <= delta:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if gaussian_delta(epsilon, mid, upper=True) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    return sensitivity / lo  # lo satisfies the bound: sigma errs on the large side


def sketch_delta(epsilon: float, omega: float, r: int, distance: float = 1.0) -> float:
    """An upper bound on the delta at `epsilon` of the Gaussian sketch
    (X_c M + omega G)/sqrt(r) for a neighbour whose centred matrix moves by `distance`:
    E_{q ~ chi^2_r} delta_G(eps; distance sqrt(q) / omega), as a monotone upper sum."""
    if distance <= 0:
        return 0.0
    edges, masses, tail = _chi2_cells(int(r))
    c = distance / omega
    total = tail
    for q_hi, mass in zip(edges[1:], masses):
        if mass > 0:
            total += mass * gaussian_delta(epsilon, c * math.sqrt(q_hi), upper=True)
    return min(1.0, total)


@lru_cache(maxsize=1024)
def sketch_omega(epsilon: float, delta: float, r: int, sensitivity: float = 1.0) -> float:
    """The smallest omega (to 1e-9 relative, rounded up) for which the Gaussian sketch at
    dimension r is (eps, delta)-DP for a neighbour of this sensitivity. A pure function,
    remembered: ~0.1-0.3 s of quadrature a call, and a sweep asks every seed the same."""
    _check_privacy(epsilon, delta)
    lo, hi = 1e-6, 1.0
    while sketch_delta(epsilon, hi, r, sensitivity) > delta:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        if sketch_delta(epsilon, mid, r, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=1024)
def sketch_epsilon(delta: float, omega: float, r: int, distance: float) -> float:
    """The smallest eps whose sketch bound at this distance is <= delta (inf past EPS_MAX).
    Pure and remembered, like `sketch_omega` (a release's statement asks three)."""
    _check_delta(delta)
    return _smallest_epsilon(lambda e: sketch_delta(e, omega, r, distance), delta)


def _smallest_epsilon(profile, delta: float) -> float:
    """Bisection for the smallest eps >= 0 with profile(eps) <= delta (profile decreases)."""
    if profile(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while profile(hi) > delta:
        lo, hi = hi, 2 * hi
        if hi > EPS_MAX:
            return math.inf
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = (lo + hi) / 2
        if profile(mid) > delta:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=64)
def _chi2_cells(r: int) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """(edges, masses, tail): SKETCH_CELLS cells on [0, q_max], equal in sqrt(q) (the
    integrand is a function of sqrt(q)), with their exact chi^2_r probabilities, and the
    mass beyond q_max (counted whole in the bound)."""
    if r < 1:
        raise ValueError(f"r must be a positive integer, got {r}")
    root = math.sqrt(r + 60.0 * math.sqrt(2.0 * r) + 400.0)
    edges = tuple((root * k / SKETCH_CELLS) ** 2 for k in range(SKETCH_CELLS + 1))
    cdf = [chi2_cdf(q, r) for q in edges]
    masses = tuple(max(0.0, b - a) for a, b in zip(cdf, cdf[1:]))
    return edges, masses, max(0.0, 1.0 - cdf[-1])


def chi2_cdf(q: float, r: int) -> float:
    """P(chi^2_r <= q): the regularised lower incomplete gamma P(r/2, q/2), by its series
    (x < a + 1) or its continued fraction (Numerical Recipes sec. 6.2, Lentz)."""
    if q <= 0:
        return 0.0
    a, x = r / 2.0, q / 2.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        k = a
        while abs(term) > 1e-17 * abs(total):
            k += 1.0
            term *= x / k
            total += term
        return min(1.0, total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


def _check_privacy(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    _check_delta(delta)
