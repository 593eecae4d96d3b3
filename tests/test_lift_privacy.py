"""Is Algorithm 1's lift branch DP? A statistical check on two neighbouring datasets.

X and X2 (n = 40, d = 2) differ in row 0 by exactly 1 in l2 norm; centred, their
singular values are (omega + 0.937, omega + 0.937) and (omega + 0.937, omega - 0.05)
at omega = omega(r = 5, eps = 3, delta = 1e-5) = 662.3. The paper's branch releases X
unlifted and X2 lifted. Event E: ||Z||_F^2 > 26 omega^2 / r. ||Z||_F^2 is
(sigma^2 / r) chi^2 with 2r = 10 degrees of freedom per singular value sigma, and
lifting doubles sigma^2 here, so P(E | X) ~ chi2_10.sf(26) = 0.004 unlifted against
~ chi2_10.sf(13) = 0.22 lifted: the paper's release violates e^eps by ~0.15, as in the
issue (0.137). Tolerance: each DP inequality P(E|A) <= e^eps P(E|B) + delta is checked
on the estimates with a one-sided 4-sigma binomial bound on p_A - e^eps p_B (normal
approximation; sigma from the estimated proportions).
"""
import math
import os

import numpy as np
import pytest

from parties.noise import NoiseSource
from parties.projection import omega, project, singular_values

REDUCED = bool(os.environ.get("CI") or os.environ.get("POBO_REDUCED"))
N = 4000 if REDUCED else 10000  # repetitions per dataset and mode (~1 ms each for private)
N_ROWS, EPS, DELTA, R = 40, 3.0, 1e-5, 5
TEST_EPS, TEST_DELTA = 0.1 * EPS, 0.01  # the default te; td large enough to see passes
W = omega(R, EPS, DELTA)
THRESHOLD = 26.0 * W**2 / R  # on ||Z||_F^2; near the paper's worst case for chi2_10


def neighbours() -> tuple[np.ndarray, np.ndarray]:
    """X (sigma_min = omega + 0.937) and X2 (omega - 0.05): row 0 moved by 1 along axis 2.

    Column 1 is spread over rows 1..n-1 with x_01 = 0, column 2 is a single outlier in
    row 0, so the centred columns are orthogonal and the centred column 2 is
    a (e_0 - 1/n 1): moving x_02 by 1 moves its singular value by sqrt(1 - 1/n) = 0.987,
    the largest move a neighbour can make.
    """
    shrink = math.sqrt(1.0 - 1.0 / N_ROWS)
    sigma_low = W - 0.05
    a = sigma_low / shrink + 1.0
    c = np.linspace(-1.0, 1.0, N_ROWS - 1)
    c -= c.mean()
    c *= (sigma_low + shrink) / np.linalg.norm(c)
    X = np.zeros((N_ROWS, 2))
    X[1:, 0] = c
    X[0, 1] = a
    X2 = X.copy()
    X2[0, 1] = a - 1.0
    return X, X2


def event_rate(X: np.ndarray, lift: str, seed: int, event=None, reps: int = N,
               **kw) -> tuple[float, float]:
    """(P(E), P(released unlifted)) over `reps` projections of X with fixed seeds."""
    rng = np.random.default_rng(seed)
    source = NoiseSource(np.random.default_rng(seed + 1000)) if lift == "private" else None
    event = event or (lambda Z: float(np.sum(Z * Z)) > THRESHOLD)
    hits = unlifted = 0
    for _ in range(reps):
        release, rep = project(X, EPS, DELTA, R, rng, lift=lift, test_source=source, **kw)
        hits += bool(event(release.Z))
        unlifted += not rep.lifted
    return hits / reps, unlifted / reps


def excess(p_a: float, p_b: float, eps: float, delta: float, reps: int = N,
           ) -> tuple[float, float]:
    """p_a - e^eps p_b - delta and the binomial standard deviation of that estimate."""
    sd = math.sqrt((p_a * (1 - p_a) + math.exp(2 * eps) * p_b * (1 - p_b) + 1.0 / reps) / reps)
    return p_a - math.exp(eps) * p_b - delta, sd


def test_the_datasets_are_neighbours_on_either_side_of_omega():
    X, X2 = neighbours()
    diff = X - X2
    assert np.count_nonzero(np.abs(diff).sum(1)) == 1 and np.linalg.norm(diff) <= 1.0
    centred = (X - X.mean(0)) - (X2 - X2.mean(0))
    assert np.linalg.norm(centred, 2) <= 1.0  # (e_i - 1/n 1) v^T: sqrt(1 - 1/n) |v|
    s, s2 = singular_values(X), singular_values(X2)
    assert s[-1] == pytest.approx(W + 0.937, abs=1e-3) and s2[-1] == pytest.approx(W - 0.05)
    assert np.max(np.abs(s - s2)) <= 1.0  # Weyl


def test_paper_branch_violates_eps_delta_on_a_norm_event():
    """The published branch: P(E | X2) > e^3 P(E | X) + delta by more than 4 sigma."""
    X, X2 = neighbours()
    (p, unl), (p2, unl2) = event_rate(X, "paper", 1), event_rate(X2, "paper", 2)
    assert unl == 1.0 and unl2 == 0.0  # X is released unlifted, X2 lifted
    violation, sd = excess(p2, p, EPS, DELTA)
    assert violation > 4 * sd and violation > 0.1, (p, p2, violation, sd)
    # ... and even the private mode's looser totals: the check on `private` has power
    violation, sd = excess(p2, p, EPS + TEST_EPS, DELTA + TEST_DELTA)
    assert violation > 4 * sd, (p, p2, violation, sd)


def test_always_lift_stays_within_eps_delta_both_ways():
    X, X2 = neighbours()
    (p, unl), (p2, unl2) = event_rate(X, "always", 3), event_rate(X2, "always", 4)
    assert unl == unl2 == 0.0
    for a, b in ((p, p2), (p2, p)):
        over, sd = excess(a, b, EPS, DELTA)
        assert over <= 4 * sd, (p, p2, over, sd)
    assert p > 0.15  # the event is not empty: both are lifted, P(E) ~ 0.22


def test_private_lift_stays_within_its_total_and_passes_at_the_predicted_rate():
    """(eps + te, delta + td) = (3.3, 0.01001) both ways, with te = 0.3, td = 0.01 so that
    the test passes on X about td exp(-te (omega + 1 - sigma_min)) = 0.98% of the time.

    On a pair straddling omega the pass probability is below td on both members (that is
    the design), so the inequality holds with room; a deterministic branch would fail
    it (the paper test checks that its rates violate these totals beyond 4 sigma). The
    pass rates are checked against the Laplace tail (4-sigma binomial): the noise scale
    and ln(1/(2 td))/te (tests/test_projection.py checks the margin's "+1" exactly).
    """
    X, X2 = neighbours()
    kw = dict(test_epsilon=TEST_EPS, test_delta=TEST_DELTA)
    (p, unl), (p2, unl2) = event_rate(X, "private", 5, **kw), event_rate(X2, "private", 6, **kw)
    eps_total, delta_total = EPS + TEST_EPS, DELTA + TEST_DELTA
    for a, b in ((p, p2), (p2, p)):
        over, sd = excess(a, b, eps_total, delta_total)
        assert over <= 4 * sd, (p, p2, over, sd)
    for rate, data in ((unl, X), (unl2, X2)):
        expected = TEST_DELTA * math.exp(-TEST_EPS * (W + 1 - singular_values(data)[-1]))
        assert abs(rate - expected) <= 4 * math.sqrt(expected * (1 - expected) / N), (rate,
                                                                                      expected)
    assert unl * N >= 20  # the test does pass on X: both branches are exercised


@pytest.mark.xfail(strict=True, reason="Theorem 1 gap for n > d: Z = r^-1/2 X~ M keeps the "
                   "column space of the centred X, which a neighbour moves (see "
                   "parties.projection's docstring)")
@pytest.mark.parametrize("lift", ["always", "private"])
def test_row_keeping_release_hides_the_column_space(lift):
    """Event: every column of Z lies in col(X_c) (relative residual < 1e-9). It has
    probability 1 under X and 0 under its neighbour X3 (row 3 moved by 1 along axis 1,
    which turns the centred first column), so no (eps, delta < 1) bound holds."""
    X, _ = neighbours()
    X3 = X.copy()
    X3[3, 0] += 1.0
    Q = np.linalg.qr(X - X.mean(0))[0]

    def in_span(Z: np.ndarray) -> bool:
        return np.linalg.norm(Z - Q @ (Q.T @ Z)) < 1e-9 * np.linalg.norm(Z)

    p, _ = event_rate(X, lift, 7, in_span, reps=200)
    p3, _ = event_rate(X3, lift, 8, in_span, reps=200)
    over, sd = excess(p, p3, EPS, DELTA, reps=200)
    assert over <= 4 * sd, (p, p3)
