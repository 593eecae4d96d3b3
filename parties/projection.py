"""The curator's differentially private random projection (PO-GP-UCB Algorithm 1).

Algorithm 1 lifts the singular values only if sigma_min(X) < omega (line 6). That
branch is decided on the exact sigma_min, so it is not itself DP: two neighbouring
datasets on either side of omega get one unlifted and one lifted release, and those
can be told apart far beyond e^eps (tests/test_lift_privacy.py). `project` offers three
ways of taking the branch (`lift`):

- "paper":   Algorithm 1 as published; the branch is outside the DP claim.
- "always":  lift unconditionally (Blocki et al. 2012, Algorithm 3); no data-dependent branch.
- "private": a propose-test-release decision on a Laplace-noised sigma_min, below.

Neighbouring relation (paper Definition 1): X and X' (n x d, n and d public, after the
curator's preprocessing and before centring) differ in one row, by at most 1 in l2 norm.
Centring maps that change to the rank-one (e_i - 1/n 1) v^T of spectral norm
sqrt(1 - 1/n) |v| <= 1, so by Weyl's inequality every singular value of the centred
matrix, sigma_min included, moves by at most 1: sigma_min has sensitivity 1.

Guarantee of lift="private" (test (te, td) on top of the projection's (eps, delta)):
the release -- Z together with the noisy sigma_min, and the chosen r under r="auto" --
is (eps + te, delta + td)-DP for every neighbouring pair, GIVEN the two per-branch
claims that Theorem 1 rests on (Blocki et al., Theorem 3.1), taken here as assumptions:
(B-lift) the lifted release is (eps, delta)-DP on every neighbouring pair; (B-unlift)
the unlifted release is (eps, delta)-DP on every pair whose members both have
sigma_min >= omega. Proof: fix neighbours X, X' and an output set O. The noisy value
s~ = sigma_min + Laplace(1/te) is te-DP, and so is anything computed from it alone
(the pass bit, r). (i) Both sigma_min >= omega: conditioned on s~ both branches are
(eps, delta)-close, so integrating over s~ gives P(X -> O) <= e^(eps + te) P(X' -> O)
+ delta (sequential composition). (ii) Otherwise, by the sensitivity, both sigma_min
< omega + 1, the gap to the threshold omega + 1 + ln(1/(2 td))/te exceeds
ln(1/(2 td))/te, and the Laplace tail 1/2 exp(-te t) gives P(pass) < td on both; then
P(X -> O) <= td + sum over the failing s~ of the lifted branch <= td + delta +
e^(eps + te) P(X' -> O). The two cases give (eps + te, delta + td); the ledger's two
entries (projection and lift test) compose to the same total.

Not covered here: (1) the assumptions B-lift and B-unlift themselves. For this
row-keeping release Z = r^-1/2 X~ M with n > d they do not hold as stated: every column
of Z lies in the column space of the centred X (lifting keeps U), and a neighbour moves
that d-dimensional subspace of R^n, so an event such as "Z's columns lie in col(X)"
has probability 1 under X and 0 under X' (tests/test_lift_privacy.py marks this as a
strict xfail). Blocki et al. mix the n rows (R X, whose Gram X^T X is d x d and lifted
to full rank); here M mixes the d columns, and the n x n Gram X X^T has n - d zero
eigenvalues that no singular-value lift reaches. (2) Data-dependent preprocessing
(length-scale fit, scaling to max norm 25): the relation is defined on preprocessed
rows. (3) Floating point in the Gaussian projection (the Laplace test itself uses the
exact lattice sampler of parties.noise). (4) lift="paper", and r="auto" with it: the
branch and the chosen r are functions of the exact sigma_min.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol, Union

import numpy as np
import scipy.linalg

from parties.noise import NoiseSource, lattice_laplace, lattice_step
from protocol.messages import ProjectedDataset
from protocol.policy import DP_PROJECTION, IDENTITY

LIFT_MODES = ("paper", "always", "private")
TEST_EPSILON_SHARE = 0.1  # default test_epsilon = 0.1 * epsilon; default test_delta = delta
R_MAX = 1000  # the largest r that r="auto" considers


class NormalSource(Protocol):
    """Anything that draws the projection matrix: a NoiseSource or a numpy Generator."""

    def standard_normal(self, size): ...


Source = Union[NoiseSource, np.random.Generator, NormalSource]


@dataclass(frozen=True)
class ProjectionReport:
    """What the curator learns about its own projection (Algorithm 1's branch and r).

    `sigma_min` is the exact value and stays with the curator; `noisy_sigma_min` (only
    under lift="private") is a DP output that may be shown. `dp_covers_branch` says
    whether the branch (and, under r="auto", the choice of r) is inside the DP claim.
    """

    sigma_min: float
    omega: float
    lifted: bool
    lift: str = "paper"
    r: int = 0
    test_epsilon: float = 0.0
    test_delta: float = 0.0
    noisy_sigma_min: float | None = None
    test_threshold: float | None = None  # omega + lift_test_margin (lift="private" only)
    dp_covers_branch: bool = False


def omega(r: int, epsilon: float, delta: float) -> float:
    """Singular-value threshold of Algorithm 1, line 5: 16 sqrt(r ln(2/d)) ln(16r/d) / eps."""
    _check_privacy(epsilon, delta)
    return 16.0 * math.sqrt(r * math.log(2.0 / delta)) * math.log(16.0 * r / delta) / epsilon


def singular_values(X: np.ndarray) -> np.ndarray:
    """Singular values of the column-centred dataset, descending (min(n, d) of them)."""
    Xc = np.asarray(X, dtype=float) - np.mean(X, axis=0)
    return scipy.linalg.svd(Xc, compute_uv=False)


def largest_admissible_r(sigma_min: float, epsilon: float, delta: float,
                         r_max: int = R_MAX) -> int:
    """The largest r with sigma_min >= omega(r) -- the paper's guideline (sec. 3.4) -- or 0."""
    best = 0
    for r in range(1, r_max + 1):
        if omega(r, epsilon, delta) > sigma_min:
            break
        best = r
    return best


def lift_test_margin(test_epsilon: float, test_delta: float) -> float:
    """How far above omega the noisy sigma_min must be to skip the lift (Algorithm 1, line 6).

    1 + ln(1/(2 td))/te: the "+1" is sigma_min's sensitivity, so that a dataset with a
    neighbour below omega passes with probability < td (one-sided Laplace tail). Plus
    two lattice steps g of the sampler (g <= 2^-29 / te), which absorb its rounding of
    sigma_min to the lattice and its discrete tail (together <= 1.5 te g nats).
    """
    g = _lattice_step_of_test(test_epsilon, test_delta)
    return 1.0 + math.log(1.0 / (2.0 * test_delta)) / test_epsilon + 2.0 * g


def noisy_sigma_min(sigma_min: float, test_epsilon: float, source: NoiseSource) -> float:
    """sigma_min + Laplace(1/te) on the exact lattice: te-DP, since sigma_min has sensitivity 1."""
    return lattice_laplace(float(sigma_min), 1.0, test_epsilon, source)


def passes_lift_test(sigma_noisy: float, w: float, test_epsilon: float,
                     test_delta: float) -> bool:
    """The private branch of Algorithm 1, line 6: skip the lift iff s~ >= omega + margin."""
    return sigma_noisy >= w + lift_test_margin(test_epsilon, test_delta)


def private_r(sigma_noisy: float, epsilon: float, delta: float, test_epsilon: float,
              test_delta: float, r_max: int = R_MAX) -> int:
    """The largest r <= r_max whose omega(r) passes the private lift test on s~, or 0.

    The paper's guideline (largest r with sigma_min >= omega(r)) on the one noisy draw
    s~: a post-processing of it, so it costs nothing beyond the test's (te, td). Why the
    td bound survives choosing r: omega(r) increases with r and the margin does not
    depend on r, so the tests for r = 1, 2, ... pass on a down-set {r <= r*}. For a
    neighbouring pair let r_safe be the largest r with both sigma_min >= omega(r).
    "Passed at some r unsafe for the pair" is then the single tail event
    s~ >= omega(r_safe + 1) + margin, and since both sigma_min < omega(r_safe + 1) + 1
    it has probability < td -- not a union of td's over r. For every r <= r_safe the
    release at r is covered by case (i) of the module docstring, conditioned on s~.
    """
    threshold = sigma_noisy - lift_test_margin(test_epsilon, test_delta)
    _check_privacy(epsilon, delta)
    best = 0
    for r in range(1, int(r_max) + 1):
        if omega(r, epsilon, delta) > threshold:
            break
        best = r
    return best


def project(X: np.ndarray, epsilon: float, delta: float, r: int, rng: Source, *,
            lift: str = "paper", test_epsilon: float | None = None,
            test_delta: float | None = None, test_source: NoiseSource | None = None,
            ) -> tuple[ProjectedDataset, ProjectionReport]:
    """Z = r^-1/2 X~ M: PO-GP-UCB Algorithm 1, with the branch of line 6 taken by `lift`.

    Centre the columns; draw M (d x r) ~ N(0, 1) from `rng`; lift every singular value
    to sqrt(sigma^2 + omega^2) (line 9) when `lift` says so: "paper" iff sigma_min <
    omega; "always" unconditionally; "private" unless sigma_min + Laplace(1/te) >=
    omega + lift_test_margin(te, td), the Laplace draw coming from `test_source` (built
    from `rng` if that is a Generator) before M is drawn. Defaults te = 0.1 epsilon,
    td = delta; the release is then (epsilon + te, delta + td)-DP under the assumptions
    of the module docstring, and the ProjectedDataset records the projection's own
    (epsilon, delta) -- the test is a separate ledger entry. When n >= d and X has full
    column rank, X~ M is computed as X V diag(lifted / sigma) V^T M from the SVD of the
    d x d factor R of X = QR, which never forms the n x d matrix U.
    """
    X = _check_matrix(X)
    _check_r(r)
    mode = _check_lift(lift)
    w = omega(r, epsilon, delta)
    te, td, tsource = _test_settings(mode, epsilon, delta, test_epsilon, test_delta,
                                     test_source, rng)
    decomposition = _decompose(X)
    sigma_min = decomposition.sigma_min
    noisy = threshold = None
    if mode == "private":
        noisy = noisy_sigma_min(sigma_min, te, tsource)
        threshold = w + lift_test_margin(te, td)
        lifted = not noisy >= threshold
    else:
        lifted = mode == "always" or sigma_min < w
    Z = _projected(decomposition, w, r, lifted, rng)
    release = ProjectedDataset(DP_PROJECTION, float(epsilon), float(delta), w, Z)
    return release, ProjectionReport(sigma_min, w, lifted, mode, int(r), te, td, noisy,
                                     threshold, mode != "paper")


def choose_projection(X: np.ndarray, epsilon: float, delta: float, r: int | str,
                      rng: Source, *, lift: str = "paper", test_epsilon: float | None = None,
                      test_delta: float | None = None, test_source: NoiseSource | None = None,
                      r_fallback: int | None = None, r_max: int = R_MAX,
                      ) -> tuple[ProjectedDataset, ProjectionReport]:
    """Algorithm 1 at a given r, or with r = "auto" by the paper's guideline (sec. 3.4).

    "auto" under lift="private": r = private_r on one noisy sigma_min, released unlifted
    (it passed the test at that r); if no r passes, lifted at `r_fallback`. Under
    lift="paper": r = largest_admissible_r on the exact sigma_min (not covered by the DP
    claim), lifted at `r_fallback` if none is admissible. lift="always" has no test to
    choose r with: ValueError. `r_fallback` must be given for "auto" whether or not it
    is used, so that refusing reveals nothing about the data.
    """
    if not (isinstance(r, str) and r == "auto"):
        return project(X, epsilon, delta, r, rng, lift=lift, test_epsilon=test_epsilon,
                       test_delta=test_delta, test_source=test_source)
    mode = _check_lift(lift)
    if mode == "always":
        raise ValueError("--r auto needs --lift private or paper")
    if r_fallback is None:
        raise ValueError("--r auto needs a fallback r for the lifted release")
    X = _check_matrix(X)
    _check_r(r_fallback)
    _check_privacy(epsilon, delta)
    te, td, tsource = _test_settings(mode, epsilon, delta, test_epsilon, test_delta,
                                     test_source, rng)
    decomposition = _decompose(X)
    sigma_min = decomposition.sigma_min
    noisy = None
    if mode == "private":
        noisy = noisy_sigma_min(sigma_min, te, tsource)
        chosen = private_r(noisy, epsilon, delta, te, td, r_max)
    else:
        chosen = largest_admissible_r(sigma_min, epsilon, delta, r_max)
    lifted = chosen == 0
    r_used = int(r_fallback) if lifted else chosen
    w = omega(r_used, epsilon, delta)
    threshold = None  # the test that decided: at the chosen r, or at r = 1 that failed
    if mode == "private":
        threshold = omega(max(chosen, 1), epsilon, delta) + lift_test_margin(te, td)
    Z = _projected(decomposition, w, r_used, lifted, rng)
    release = ProjectedDataset(DP_PROJECTION, float(epsilon), float(delta), w, Z)
    return release, ProjectionReport(sigma_min, w, lifted, mode, r_used, te, td, noisy,
                                     threshold, mode == "private")


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


class _Decomposition(NamedTuple):
    """The centred X, its singular values (descending), V^T (None if n < d), sigma_min."""

    Xc: np.ndarray
    s: np.ndarray
    Vt: np.ndarray | None
    sigma_min: float


def _decompose(X: np.ndarray) -> _Decomposition:
    """Algorithm 1, lines 2 and 4: centre, and the singular values via QR + a d x d SVD."""
    n, d = X.shape
    Xc = X - X.mean(axis=0)
    if n >= d:
        R = scipy.linalg.qr(Xc, mode="r", check_finite=False)[0][:d]
        _, s, Vt = scipy.linalg.svd(R, check_finite=False)
        return _Decomposition(Xc, s, Vt, float(s[-1]))
    s = scipy.linalg.svd(Xc, compute_uv=False, check_finite=False)
    return _Decomposition(Xc, s, None, 0.0)  # rank(Xc) <= n - 1 < min(n, d): sigma_min is exactly 0


def _projected(decomposition: _Decomposition, w: float, r: int, lifted: bool,
               rng: Source) -> np.ndarray:
    """Algorithm 1, lines 3, 7 and 9-10: draw M (d x r) and return r^-1/2 X M or X~ M."""
    Xc, s, Vt, sigma_min = decomposition
    n, d = Xc.shape
    M = np.asarray(rng.standard_normal((d, r)), dtype=float)
    if not lifted:
        Z = Xc @ M
    elif Vt is not None and sigma_min > max(n, d) * np.finfo(float).eps * s[0]:
        scale = np.sqrt(s**2 + w**2) / s
        Z = Xc @ (Vt.T @ (scale[:, None] * (Vt @ M)))
    else:  # rank-deficient: the lifted null directions need U itself
        Z = lifted_dataset(Xc, w) @ M
    Z /= math.sqrt(r)
    return Z


def _test_settings(mode: str, epsilon: float, delta: float, test_epsilon: float | None,
                   test_delta: float | None, test_source: NoiseSource | None,
                   rng: Source) -> tuple[float, float, NoiseSource | None]:
    """(te, td, source) of the private lift test; (0, 0, None) for paper and always."""
    if mode != "private":
        if test_epsilon is not None or test_delta is not None:
            raise ValueError(f"test_epsilon/test_delta apply to lift='private', not {mode!r}")
        return 0.0, 0.0, None
    _check_privacy(epsilon, delta)
    te = TEST_EPSILON_SHARE * float(epsilon) if test_epsilon is None else float(test_epsilon)
    td = float(delta) if test_delta is None else float(test_delta)
    _lattice_step_of_test(te, td)  # validates both
    if test_source is None:
        if not isinstance(rng, np.random.Generator):
            raise ValueError("lift='private' needs a test_source (a NoiseSource) unless rng "
                             "is a numpy Generator; it never uses the global np.random")
        test_source = NoiseSource(rng)
    return te, td, test_source


def _lattice_step_of_test(test_epsilon: float, test_delta: float) -> float:
    """The lattice step g of lattice_laplace(., 1, te, .), checking its scale is exactly 1/te."""
    if not (math.isfinite(test_epsilon) and test_epsilon > 0):
        raise ValueError(f"test_epsilon must be a positive finite number, got {test_epsilon}")
    if not 0 < test_delta < 0.5:
        raise ValueError(f"test_delta must lie in (0, 1/2), got {test_delta}")
    g = lattice_step(1.0 / test_epsilon)  # as lattice_laplace computes it, sensitivity 1
    if math.ceil(1.0 / g) * g != 1.0:  # 1/te >= 2^30: the sampler would widen its scale
        raise ValueError(f"test_epsilon {test_epsilon} is too small for the lattice sampler")
    return g


def _check_lift(lift: str) -> str:
    if lift not in LIFT_MODES:
        raise ValueError(f"lift must be one of {LIFT_MODES}, got {lift!r}")
    return lift


def _check_r(r: object) -> None:
    if isinstance(r, bool) or not (isinstance(r, (int, np.integer)) and r >= 1):
        raise ValueError(f"projection dimension r must be a positive integer, got {r!r}")


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
