"""The curator's differentially private release of its dataset (PO-GP-UCB Algorithm 1).

The default release is not the paper's. `lift` = "gaussian" (mechanism "gaussian-rows") is
the Gaussian mechanism on the centred rows, calibrated exactly, then a random orthonormal
map into r >= d dimensions (an isometry, post-processing), or a Gaussian JL map when
r < d (post-processing too; distances then kept only approximately). `lift` = "jl"
(mechanism "gaussian-sketch") is the lifted release Z = (X_c M + omega G)/sqrt(r) with
omega calibrated by the chi^2-mixture bound. Both proofs are in parties/gaussian.py. The
rows' noise is drawn exactly, on a lattice (parties/discrete_gaussian.py: the rows
rounded to gamma Z, plus the Gaussian rounded to it, a post-processing of the continuous
mechanism), so its profile holds of the sampler; the sketch's noise and map are still
floating-point normals (Box-Muller on 53-bit uniforms, |g| <= 8.5717), and the privacy
unit says so.

Below, the modes kept for comparison and reproduction ("private", "always": Blocki et
al.'s constant; "paper": as published, not DP), with their analysis.

Setting. X is n x d (n and d public), after the curator's preprocessing; the release
Z (n x r) keeps one row per data point. Neighbouring relation (paper Definition 1): X
and X' differ in one row, X' = X + e_i v^T with |v| <= 1, before centring. Centring
maps that change to X'_c - X_c = u v^T with u = e_i - 1/n 1, |u| = sqrt(1 - 1/n): rank
one, spectral norm <= 1, so by Weyl's inequality every singular value of the centred
matrix moves by at most 1. w = omega(r, eps, delta) = 16 sqrt(r ln(2/delta))
ln(16 r/delta) / eps is Algorithm 1's threshold (line 5), the constant of Blocki et al.
2012, Theorem 3.1 (BT3.1): a Gaussian sketch R A of a matrix A (rows = the units that
change, R with i.i.d. N(0, 1) entries and r rows) is (eps, delta)-DP for neighbours A,
A' that differ in one row by a vector of norm <= 1 when every singular value of both
A and A' is at least w (A tall: as many rows as columns, at least).

`project` takes Algorithm 1's branch (line 6) by `lift`:

- "paper":   as published: Z = r^-1/2 X_c M if sigma_min(X_c) >= w, else r^-1/2 X~ M with
             X~ = U sqrt(S^2 + w^2) V^T (line 9). sigma_min is the smallest of the
             min(n, d) singular values; M is d x r, N(0, 1).
- "always":  the full lift Z = r^-1/2 (X_c M + w G), G an n x r N(0, 1) matrix drawn from
             the same source after M: (eps, delta)-DP for every n, d and dataset.
- "private": the unlifted r^-1/2 X_c M or the full lift, by a propose-test-release test
             on s = sigma_{n-1}(X_c) when n - 1 <= d; the full lift, with no test and no
             test budget, when n - 1 > d (`lift_test_needed`).

The full lift is DP (for "always", and the lifted branch of "private"). Write
Z^T = r^-1/2 R B with R = [M; G]^T (r x (d + n), i.i.d. N(0, 1)) and B = [X_c^T; w I_n]
((d + n) x n). B^T B = X_c X_c^T + w^2 I_n, so every singular value of B is >= w, for
every dataset. For neighbours, B' - B = [v; 0] u^T. Let Q be an orthogonal
(d + n) x (d + n) matrix with Q [v; 0] = |v| e_1 (a reflection; it depends on v only):
QB' - QB = e_1 (|v| u)^T changes one row of QB by a vector of norm |v| |u| <= 1; QB and
QB' have the singular values of B and B' (all >= w); and R B = (R Q^T)(Q B) where R Q^T
has the law of R. So the pair (Z | X, Z | X') has the law of the pair BT3.1 covers, and
Z is (eps, delta)-DP for every neighbouring pair (the factor r^-1/2 is post-processing).
This is the assumption "B-lift" of earlier versions, now proved for this release.

The unlifted release r^-1/2 X_c M, and when it is DP. Every dataset has X_c^T 1 = 0, so
X_c^T = A P^T with P (n x (n - 1)) a fixed orthonormal basis of the complement of the
all-ones vector and A = X_c^T P (d x (n - 1)); Z^T P = r^-1/2 M^T A and Z^T = (Z^T P) P^T,
so the release is equivalent to the sketch M^T A. Neighbours change A by v (P^T u)^T with
|P^T u| = |u| <= 1; a reflection Q (d x d) with Q v = |v| e_1 makes that one row of QA,
and M^T Q^T has the law of M^T. BT3.1 then covers the pair when A and A' are tall,
n - 1 <= d, with all n - 1 singular values >= w: their singular values are the n - 1
largest of X_c, so the condition is s = sigma_{n-1}(X_c) >= w on both ("B-unlift",
proved for that case). For n - 1 > d, A is wide (rank <= d < n - 1) and the release is
not DP at all, for any data: see "paper" below. Note s is not the paper's sigma_min
unless n - 1 = d; for n <= d, sigma_min = sigma_n(X_c) = 0 always.

lift="private", n - 1 <= d: the release -- Z together with the noisy s, and the chosen r
under r="auto" -- is (eps + te, delta + td)-DP for every neighbouring pair, te and td
being the test's budget (defaults 0.1 eps and delta). The test: s~ = s + Laplace(1/te)
(te-DP, s has sensitivity 1 by Weyl), released unlifted iff s~ >= w +
lift_test_margin(te, td). Proof: fix neighbours X, X' and an output set O. Anything
computed from s~ alone (the pass bit, r) is te-DP. (i) Both s >= w: conditioned on s~,
both branches are (eps, delta)-close (B-unlift and B-lift above), so integrating over s~
gives P(X -> O) <= e^(eps + te) P(X' -> O) + delta (sequential composition). (ii)
Otherwise, by the sensitivity, both s < w + 1, the gap to the threshold w + 1 +
ln(1/(2 td))/te exceeds ln(1/(2 td))/te, and the Laplace tail 1/2 exp(-te t) gives
P(pass) < td on both; then P(X -> O) <= td + sum over the failing s~ of the lifted
branch <= td + delta + e^(eps + te) P(X' -> O). The two cases give (eps + te, delta +
td); the ledger's two entries (projection and lift test) compose to the same total.

lift="private", n - 1 > d: the unlifted release is never DP, so the decision "lift" is
a function of the public n and d alone. No statistic is computed, no noise drawn and no
test budget spent (the report has test_epsilon = test_delta = 0 and says why in
`test_reason`): the release is the full lift's, (eps, delta)-DP. The curator asks
`lift_test_needed(n, d, lift)` before projecting to know whether to charge the lift
test's ledger entry. Under r="auto" no r can pass, so it is lifted at r_fallback.

lift="paper" is outside the DP claim; plainly:
- n - 1 > d (the usual shape, many points in few dimensions): NEITHER branch is DP.
  Both are Z = X_c T with T (d x r) = M / sqrt(r) or, lifted, V diag(sqrt(s^2 + w^2)/s)
  V^T M / sqrt(r) (lifting keeps U). Every column of Z lies in col(X_c), a subspace of
  dimension <= d < n - 1 that a neighbour moves: the event "Z's columns lie in col(X_c)"
  has probability 1 under X and 0 under such a neighbour. And an adversary who knows the
  other n - 1 (uncentred) rows reconstructs the last one: z_j - z_1 = (x_j - x_1)^T T for
  j >= 2 gives T by least squares (the differences span R^d), then z_0 - z_1 = (x_0 -
  x_1)^T T gives x_0 exactly when r >= d (when r < d, the r projections x_0^T T exactly).
  tests/test_lift_privacy.py measures errors at the level of rounding in both branches.
  Blocki et al. lift the d x d Gram A^T A of a matrix whose rows are the units; here M
  mixes the d columns, and the n x n Gram X_c X_c^T (each column of Z is
  N(0, X~ X~^T / r)) keeps n - d zero eigenvalues that no singular-value lift reaches.
- n - 1 = d: the branch is decided on the exact sigma_min = s, so neighbours on either
  side of w are released by different branches (not DP). Each branch alone is DP on the
  pairs above (the lifted one, when rank X_c = d, has the law of the full lift restricted
  to the complement of the all-ones vector).
- n <= d: sigma_min = 0 < w, so the lift is always taken; U is then n x n orthogonal,
  X~ X~^T = X_c X_c^T + w^2 I_n, and Z has the law of the full lift: DP.
r="auto" with "paper" picks r on the exact sigma_min: not covered either.

Not covered here: (1) data-dependent preprocessing (length-scale fit, scaling to max
norm 25): the relation is defined on preprocessed rows. (2) Floating point in the
sketch's and the lifts' Gaussian noise (the rows' noise and the Laplace test use exact
lattice samplers). (3) lift="paper", as above.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Protocol, Union

import numpy as np  # numpy.linalg, not scipy.linalg: the same LAPACK drivers (geqrf, gesdd),
# and a curator process then imports no scipy at all (~150 ms at every start)

from pobo.parties.choices import GAUSSIAN_LIFTS, LIFT_MODES
from pobo.parties.discrete_gaussian import exact_gaussian_rows, rows_calibration
from pobo.parties.gaussian import gaussian_sigma, sketch_omega
from pobo.parties.noise import NoiseSource, lattice_laplace, lattice_step
from pobo.protocol.messages import ProjectedDataset
from pobo.protocol.policy import DP_PROJECTION, GAUSSIAN_ROWS, GAUSSIAN_SKETCH, IDENTITY

TEST_EPSILON_SHARE = 0.1  # default test_epsilon = 0.1 * epsilon; default test_delta = delta
R_MAX = 1000  # the largest r that r="auto" considers
NOISE_ROWS = 1 << 16  # rows of a release's Gaussian noise drawn and added at a time


class NormalSource(Protocol):
    """Anything that draws the projection matrix: a NoiseSource or a numpy Generator."""

    def standard_normal(self, size): ...


Source = Union[NoiseSource, np.random.Generator, NormalSource]


@dataclass(frozen=True)
class ProjectionReport:
    """What the curator learns about its own projection (Algorithm 1's branch and r).

    `sigma_min` is the paper's sigma_min, the smallest of the min(n, d) singular values of
    the centred X: exact, it stays with the curator. `statistic` is the exact value the
    private lift test is run on, s = sigma_{n-1}(X_c) (only when the test runs; also
    curator-private), and `noisy_sigma_min` its noisy version s + Laplace(1/te), a DP
    output that may be shown (the name is historical: it is sigma_min only when
    n - 1 = d). `test_epsilon`/`test_delta` are what the test cost: 0 when no test ran.
    `test_reason` says why the branch was taken as it was. `dp_covers_branch` says
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
    statistic: float | None = None  # sigma_{n-1}(X_c), when the private test runs
    test_reason: str = ""


REASON_GAUSSIAN = "gaussian: the Gaussian mechanism on the centred rows, then rotated"
REASON_SKETCH = "jl: (X_c M + omega G)/sqrt(r), omega by the chi^2-mixture bound"
REASON_PAPER = "paper: branch on the exact sigma_min, outside the DP claim"
REASON_ALWAYS = "always: full lift, no statistic"
REASON_TEST = "private: n - 1 <= d, noisy test on sigma_{n-1}(X_c)"
REASON_NO_TEST = ("private: n - 1 > d, the unlifted release is never DP: lifted, no test "
                  "drawn and no test budget charged")


def release_mechanism(lift: str) -> str:
    """The mechanism name a release by this `lift` carries (and its ledger entry)."""
    _check_lift(lift)
    return {"gaussian": GAUSSIAN_ROWS, "jl": GAUSSIAN_SKETCH}.get(lift, DP_PROJECTION)


def lift_test_needed(n: int, d: int, lift: str) -> bool:
    """Whether `project`/`choose_projection` run (and charge) the private lift test.

    True only for lift="private" with n - 1 <= d: then the unlifted release can be DP
    (module docstring) and a noisy sigma_{n-1}(X_c) decides. For n - 1 > d the release
    is lifted without a test, and "paper"/"always" never test. n and d are public, so the
    answer reveals nothing: the curator asks it to decide whether to charge the lift
    test's ledger entry before projecting.
    """
    _check_lift(lift)
    n, d = int(n), int(d)
    if n < 2 or d < 1:
        raise ValueError(f"dataset must be n x d with n >= 2 and d >= 1, got {n} x {d}")
    return lift == "private" and n - 1 <= d


def omega(r: int, epsilon: float, delta: float) -> float:
    """Singular-value threshold of Algorithm 1, line 5: 16 sqrt(r ln(2/d)) ln(16r/d) / eps."""
    _check_privacy(epsilon, delta)
    return 16.0 * math.sqrt(r * math.log(2.0 / delta)) * math.log(16.0 * r / delta) / epsilon


def singular_values(X: np.ndarray) -> np.ndarray:
    """Singular values of the column-centred dataset, descending (min(n, d) of them)."""
    Xc = np.asarray(X, dtype=float) - np.mean(X, axis=0)
    if not np.all(np.isfinite(Xc)):
        raise ValueError("array must not contain infs or NaNs")
    return np.linalg.svd(Xc, compute_uv=False)


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
    """How far above omega the noisy statistic must be to skip the lift (Algorithm 1, line 6).

    1 + ln(1/(2 td))/te: the "+1" is the sensitivity of s = sigma_{n-1}(X_c), so that a
    dataset with a neighbour below omega passes with probability < td (one-sided Laplace
    tail). Plus two lattice steps g of the sampler (g <= 2^-29 / te), which absorb its
    rounding of s to the lattice and its discrete tail (together <= 1.5 te g nats).
    """
    g = _lattice_step_of_test(test_epsilon, test_delta)
    return 1.0 + math.log(1.0 / (2.0 * test_delta)) / test_epsilon + 2.0 * g


def noisy_sigma_min(sigma_min: float, test_epsilon: float, source: NoiseSource) -> float:
    """statistic + Laplace(1/te) on the exact lattice: te-DP for a statistic of sensitivity 1.

    `project` passes s = sigma_{n-1}(X_c) (n - 1 <= d), which has sensitivity 1 by Weyl;
    the name is historical (for n - 1 = d, s is the paper's sigma_min).
    """
    return lattice_laplace(float(sigma_min), 1.0, test_epsilon, source)


def passes_lift_test(sigma_noisy: float, w: float, test_epsilon: float,
                     test_delta: float) -> bool:
    """The private branch of Algorithm 1, line 6: skip the lift iff s~ >= omega + margin."""
    return sigma_noisy >= w + lift_test_margin(test_epsilon, test_delta)


def private_r(sigma_noisy: float, epsilon: float, delta: float, test_epsilon: float,
              test_delta: float, r_max: int = R_MAX) -> int:
    """The largest r <= r_max whose omega(r) passes the private lift test on s~, or 0.

    The paper's guideline (largest r with sigma_min >= omega(r)) on the one noisy draw
    s~ of s = sigma_{n-1}(X_c): a post-processing of it, so it costs nothing beyond the
    test's (te, td). Why the td bound survives choosing r: omega(r) increases with r and
    the margin does not depend on r, so the tests for r = 1, 2, ... pass on a down-set
    {r <= r*}. For a neighbouring pair let r_safe be the largest r with both s >=
    omega(r). "Passed at some r unsafe for the pair" is then the single tail event
    s~ >= omega(r_safe + 1) + margin, and since both s < omega(r_safe + 1) + 1 it has
    probability < td -- not a union of td's over r. For every r <= r_safe the release
    at r is covered by case (i) of the module docstring, conditioned on s~.
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
            additive_lift: bool = False) -> tuple[ProjectedDataset, ProjectionReport]:
    """PO-GP-UCB Algorithm 1 with the branch of line 6 taken by `lift`.

    Centre the columns and draw M (d x r) ~ N(0, 1) from `rng`. Unlifted: Z = r^-1/2 X_c M.
    lift="paper" lifts iff sigma_min < omega, as published: Z = r^-1/2 X~ M (line 9).
    lift="always" and "private" lift with the full lift Z = r^-1/2 (X_c M + omega G), G
    (n x r) ~ N(0, 1) drawn from `rng` after M; "always" unconditionally, "private"
    always when n - 1 > d (no test, no test budget: `lift_test_needed`), otherwise unless
    s + Laplace(1/te) >= omega + lift_test_margin(te, td) with s = sigma_{n-1}(X_c), the
    Laplace draw coming from `test_source` (built from `rng` if that is a Generator)
    before M is drawn. Defaults te = 0.1 epsilon, td = delta; the release is then
    (epsilon + te, delta + td)-DP (module docstring), and the ProjectedDataset records
    the projection's own (epsilon, delta) -- the test is a separate ledger entry, and
    the report's test_epsilon/test_delta are 0 when no test ran. Under "paper", when
    n >= d and X has full column rank, X~ M is computed as X V diag(lifted / sigma)
    V^T M from the SVD of the d x d factor R of X = QR, which never forms U.
    `additive_lift` (lift="paper" only) lifts as the authors' code does, sigma + omega
    instead of line 9's sqrt(sigma^2 + omega^2): a reproduction switch (FIDELITY.md).
    """
    X = _check_matrix(X)
    _check_r(r)
    mode = _check_additive(_check_lift(lift), additive_lift)
    if mode in GAUSSIAN_LIFTS:
        if test_epsilon is not None or test_delta is not None:
            raise ValueError(f"test_epsilon/test_delta apply to lift='private', not {mode!r}")
        return gaussian_projection(X, epsilon, delta, r, rng, sketch=mode == "jl")
    n, d = X.shape
    w = omega(r, epsilon, delta)
    needed = lift_test_needed(n, d, mode)
    te, td, tsource = _test_settings(mode, needed, epsilon, delta, test_epsilon,
                                     test_delta, test_source, rng)
    decomposition = _decompose(X)
    sigma_min = decomposition.sigma_min
    noisy = threshold = statistic = None
    if needed:
        statistic = decomposition.statistic
        noisy = noisy_sigma_min(statistic, te, tsource)
        threshold = w + lift_test_margin(te, td)
        lifted = not noisy >= threshold
    else:
        lifted = mode != "paper" or sigma_min < w
    Z = _projected(decomposition, w, r, lifted, mode != "paper", rng, additive_lift)
    release = _blocki_release(epsilon, delta, w, Z, lifted, mode)
    return release, ProjectionReport(sigma_min, w, lifted, mode, int(r), te, td, noisy,
                                     threshold, mode != "paper", statistic,
                                     _reason(mode, needed))


def choose_projection(X: np.ndarray, epsilon: float, delta: float, r: int | str,
                      rng: Source, *, lift: str = "paper", test_epsilon: float | None = None,
                      test_delta: float | None = None, test_source: NoiseSource | None = None,
                      r_fallback: int | None = None, r_max: int = R_MAX,
                      additive_lift: bool = False) -> tuple[ProjectedDataset, ProjectionReport]:
    """Algorithm 1 at a given r, or with r = "auto" by the paper's guideline (sec. 3.4).

    "auto" under lift="private" with n - 1 <= d: r = private_r on one noisy
    s = sigma_{n-1}(X_c), released unlifted (it passed the test at that r); if no r
    passes, lifted at `r_fallback`. With n - 1 > d no r can pass (the unlifted release
    is never DP): lifted at `r_fallback`, nothing drawn for the test, te = td = 0. Under
    lift="paper": r = largest_admissible_r on the exact sigma_min (not covered by the DP
    claim), lifted at `r_fallback` if none is admissible. lift="always" has no test to
    choose r with: ValueError. `r_fallback` must be given for "auto" whether or not it
    is used, so that refusing reveals nothing about the data. `additive_lift`: as in
    `project`.
    """
    if not (isinstance(r, str) and r == "auto"):
        return project(X, epsilon, delta, r, rng, lift=lift, test_epsilon=test_epsilon,
                       test_delta=test_delta, test_source=test_source,
                       additive_lift=additive_lift)
    mode = _check_additive(_check_lift(lift), additive_lift)
    if mode in ("always", *GAUSSIAN_LIFTS):
        raise ValueError("--r auto needs --lift private or paper (it chooses r by the "
                         "sigma_min test of Algorithm 1)")
    if r_fallback is None:
        raise ValueError("--r auto needs a fallback r for the lifted release")
    X = _check_matrix(X)
    _check_r(r_fallback)
    _check_privacy(epsilon, delta)
    n, d = X.shape
    needed = lift_test_needed(n, d, mode)
    te, td, tsource = _test_settings(mode, needed, epsilon, delta, test_epsilon,
                                     test_delta, test_source, rng)
    decomposition = _decompose(X)
    sigma_min = decomposition.sigma_min
    noisy = statistic = None
    if needed:
        statistic = decomposition.statistic
        noisy = noisy_sigma_min(statistic, te, tsource)
        chosen = private_r(noisy, epsilon, delta, te, td, r_max)
    elif mode == "private":
        chosen = 0  # n - 1 > d: no r passes, whatever the data
    else:
        chosen = largest_admissible_r(sigma_min, epsilon, delta, r_max)
    lifted = chosen == 0
    r_used = int(r_fallback) if lifted else chosen
    w = omega(r_used, epsilon, delta)
    threshold = None  # the test that decided: at the chosen r, or at r = 1 that failed
    if needed:
        threshold = omega(max(chosen, 1), epsilon, delta) + lift_test_margin(te, td)
    Z = _projected(decomposition, w, r_used, lifted, mode != "paper", rng, additive_lift)
    release = _blocki_release(epsilon, delta, w, Z, lifted, mode)
    return release, ProjectionReport(sigma_min, w, lifted, mode, r_used, te, td, noisy,
                                     threshold, mode == "private", statistic,
                                     _reason(mode, needed))


def gaussian_projection(X: np.ndarray, epsilon: float, delta: float, r: int, rng: Source, *,
                        sketch: bool = False) -> tuple[ProjectedDataset, ProjectionReport]:
    """The Gaussian releases of parties/gaussian.py, calibrated exactly for one row moved
    by at most 1 (the centred matrix then moves by sqrt(1 - 1/n)).

    Rows (default): Z = C(X_r + N) Q: X_r is X rounded to the lattice gamma Z, N the
    Gaussian rounded to that lattice drawn exactly (parties/discrete_gaussian.py), C
    centres the columns (post-processing), sigma = gaussian_sigma(eps, delta,
    1 + gamma sqrt(d)) (`rows_calibration`), then Q (d x r) drawn after N: orthonormal rows
    (QR of a Gaussian matrix) when r >= d, which keeps every distance, else M / sqrt(r)
    with M ~ N(0, 1) (a JL map). Sketch: Z = (X_c M + omega G) / sqrt(r), omega =
    sketch_omega(eps, delta, r, sqrt(1 - 1/n)), M (d x r) then G (n x r). The release
    announces the per-coordinate noise std of its rows (sigma, or omega / sqrt(r)).
    """
    X = _check_matrix(X)
    _check_r(r)
    _check_privacy(epsilon, delta)
    n, d = X.shape
    sensitivity = math.sqrt(1.0 - 1.0 / n)
    Xc = X - X.mean(axis=0)
    sigma_min = float(np.linalg.svd(Xc, compute_uv=False)[-1]) if n >= d else 0.0
    if sketch:
        w = sketch_omega(epsilon, delta, r, sensitivity)
        M = np.asarray(rng.standard_normal((d, r)), dtype=float)
        Z = add_gaussian(Xc @ M, w, rng)
        Z /= math.sqrt(r)
        std, mechanism, reason = w / math.sqrt(r), GAUSSIAN_SKETCH, REASON_SKETCH
    else:  # the exact lattice noise, then centred (post-processing: parties/discrete_gaussian.py)
        w, gamma = rows_calibration(epsilon, delta, d)
        source = rng if isinstance(rng, NoiseSource) else NoiseSource(rng)
        noisy = exact_gaussian_rows(X, w, gamma, source, out=Xc)  # (Xc: done with it)
        noisy -= noisy.mean(axis=0)
        Z = noisy @ release_map(d, r, rng)
        std, mechanism, reason = w, GAUSSIAN_ROWS, REASON_GAUSSIAN
    release = ProjectedDataset(mechanism, float(epsilon), float(delta), float(w), Z,
                               noise_std=float(std))
    return release, ProjectionReport(sigma_min, float(w), True, "jl" if sketch else "gaussian",
                                     int(r), dp_covers_branch=True, test_reason=reason)


def add_gaussian(Z: np.ndarray, scale: float, rng: Source) -> np.ndarray:
    """Z + scale G, G i.i.d. N(0, 1) of Z's shape, written into Z (which it returns): G is
    drawn NOISE_ROWS rows at a time, so an n x r release needs no n x r scratch (1.6 GB
    at n = 1e7, r = 20). A numpy Generator gives the very draws of one
    standard_normal(Z.shape) call (it fills row by row), and each element is Z + (scale
    g) as before: a seeded release is the same to the bit; the OS CSPRNG's draws are
    i.i.d. N(0, 1) whatever the blocks."""
    for start in range(0, Z.shape[0], NOISE_ROWS):
        block = Z[start:start + NOISE_ROWS]
        noise = np.asarray(rng.standard_normal(block.shape), dtype=float)
        noise *= scale
        block += noise
    return Z


def release_map(d: int, r: int, rng: Source) -> np.ndarray:
    """The data-independent d x r map applied after the noise: orthonormal rows (an
    isometry of R^d into R^r) when r >= d, else a Gaussian JL map M / sqrt(r)."""
    A = np.asarray(rng.standard_normal((max(d, r), min(d, r))), dtype=float)
    if r < d:
        return A / math.sqrt(r)  # d x r
    Q, R = np.linalg.qr(A)  # r x d, orthonormal columns; signs fixed so Q is Haar
    return (Q * np.sign(np.diag(R))).T


def _blocki_release(epsilon: float, delta: float, w: float, Z: np.ndarray, lifted: bool,
                    mode: str) -> ProjectedDataset:
    """The release of the Blocki-constant and paper modes: its noise std is omega/sqrt(r)
    when fully lifted ("always"/"private"); the paper's branches are outside the DP claim."""
    r = Z.shape[1]
    std = w / math.sqrt(r) if lifted and mode != "paper" else 0.0
    return ProjectedDataset(DP_PROJECTION, float(epsilon), float(delta), w, Z,
                            noise_std=float(std), dp=mode != "paper")


def lifted_dataset(X: np.ndarray, w: float, additive: bool = False) -> np.ndarray:
    """X~ = U sqrt(Sigma^2 + w^2 I) V^T (Algorithm 1, line 9): every singular value lifted;
    `additive`: U (Sigma + w I) V^T, the authors' code's lift (a reproduction switch).

    The paper's lift, used by lift="paper" only. Dense textbook form (full SVD of the
    n x d matrix, as in the paper), so that the min(n, d) singular values of X~ are all
    at least w; `project` uses a cheaper equivalent when X has full column rank. It keeps
    U, hence the column space of X when n > d (module docstring: not DP for n - 1 > d).
    """
    U, s, Vt = np.linalg.svd(np.asarray(X, dtype=float), full_matrices=False)
    return (U * _lifted_values(s, w, additive)) @ Vt


def identity_release(X: np.ndarray) -> ProjectedDataset:
    """The original X itself, for the non-private GP-UCB baseline: a vacuous (0, 1)-DP release."""
    return ProjectedDataset(IDENTITY, 0.0, 1.0, 0.0, _check_matrix(X).copy())


class _Decomposition(NamedTuple):
    """The centred X, its singular values (descending), V^T (None if n < d), sigma_min."""

    Xc: np.ndarray
    s: np.ndarray
    Vt: np.ndarray | None
    sigma_min: float

    @property
    def statistic(self) -> float:
        """s = sigma_{n-1}(X_c), the private test's statistic (defined when n - 1 <= d)."""
        n, d = self.Xc.shape
        if n - 1 > d:
            raise ValueError("sigma_{n-1} is the test statistic only when n - 1 <= d")
        return float(self.s[n - 2])


def _decompose(X: np.ndarray) -> _Decomposition:
    """Algorithm 1, lines 2 and 4: centre, and the singular values via QR + a d x d SVD."""
    n, d = X.shape
    Xc = X - X.mean(axis=0)
    if n >= d:
        R = np.linalg.qr(Xc, mode="r")[:d]
        _, s, Vt = np.linalg.svd(R)
        return _Decomposition(Xc, s, Vt, float(s[-1]))
    s = np.linalg.svd(Xc, compute_uv=False)
    return _Decomposition(Xc, s, None, 0.0)  # rank(Xc) <= n - 1 < min(n, d): sigma_min is exactly 0


def _projected(decomposition: _Decomposition, w: float, r: int, lifted: bool,
               full_lift: bool, rng: Source, additive: bool = False) -> np.ndarray:
    """Draw M (d x r); return r^-1/2 X_c M, or lifted: r^-1/2 (X_c M + w G) with G (n x r)
    drawn after M (`full_lift`), or the paper's r^-1/2 X~ M (Algorithm 1, lines 3, 7, 9-10)."""
    Xc, s, Vt, sigma_min = decomposition
    n, d = Xc.shape
    M = np.asarray(rng.standard_normal((d, r)), dtype=float)
    if not lifted:
        Z = Xc @ M
    elif full_lift:
        Z = add_gaussian(Xc @ M, w, rng)
    elif Vt is not None and sigma_min > max(n, d) * np.finfo(float).eps * s[0]:
        scale = _lifted_values(s, w, additive) / s
        Z = Xc @ (Vt.T @ (scale[:, None] * (Vt @ M)))
    else:  # rank-deficient: the lifted null directions need U itself
        Z = lifted_dataset(Xc, w, additive) @ M
    Z /= math.sqrt(r)
    return Z


def _lifted_values(s: np.ndarray, w: float, additive: bool) -> np.ndarray:
    """The lifted singular values: sqrt(s^2 + w^2) (line 9), or s + w (the authors' code)."""
    return s + w if additive else np.sqrt(s**2 + w**2)


def _check_additive(mode: str, additive: bool) -> str:
    if additive and mode != "paper":
        raise ValueError(f"the authors' additive lift applies to lift='paper', not {mode!r}")
    return mode


def _reason(mode: str, needed: bool) -> str:
    if mode == "paper":
        return REASON_PAPER
    if mode == "always":
        return REASON_ALWAYS
    return REASON_TEST if needed else REASON_NO_TEST


def _test_settings(mode: str, needed: bool, epsilon: float, delta: float,
                   test_epsilon: float | None, test_delta: float | None,
                   test_source: NoiseSource | None, rng: Source,
                   ) -> tuple[float, float, NoiseSource | None]:
    """(te, td, source) of the private lift test; (0, 0, None) when no test runs.

    Under "private" the given te, td are validated even when n - 1 > d makes the test
    unnecessary (a caller error is one whatever the shape), but are then not charged.
    """
    if mode != "private":
        if test_epsilon is not None or test_delta is not None:
            raise ValueError(f"test_epsilon/test_delta apply to lift='private', not {mode!r}")
        return 0.0, 0.0, None
    _check_privacy(epsilon, delta)
    te = TEST_EPSILON_SHARE * float(epsilon) if test_epsilon is None else float(test_epsilon)
    td = float(delta) if test_delta is None else float(test_delta)
    _lattice_step_of_test(te, td)  # validates both
    if not needed:
        return 0.0, 0.0, None
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
