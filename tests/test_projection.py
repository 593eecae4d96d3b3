"""PO-GP-UCB Algorithm 1: the threshold omega, the branch, lifting, and distance preservation."""
import math

import numpy as np
import pytest
import scipy.linalg

from pobo.parties.noise import NoiseSource, lattice_step
from pobo.parties.projection import (
    LIFT_MODES, REASON_ALWAYS, REASON_NO_TEST, REASON_PAPER, REASON_TEST, choose_projection,
    identity_release, largest_admissible_r, lift_test_margin, lift_test_needed,
    lifted_dataset, omega, passes_lift_test, private_r, project, singular_values,
)
from pobo.scenarios.synthetic import grid_points


def test_omega_matches_the_formula_by_hand():
    # 16 sqrt(r ln(2/delta)) ln(16 r / delta) / eps, natural logs
    assert omega(10, math.exp(1.1), 1e-5) == pytest.approx(
        16 * math.sqrt(10 * 12.206072645530174) * 16.588099280204055 / 3.0041660239464334,
        rel=1e-12)
    assert omega(1, 1.0, 0.5) == pytest.approx(16 * math.sqrt(math.log(4)) * math.log(32))
    # omega grows with r and shrinks with epsilon
    assert omega(20, 1.0, 1e-5) > omega(10, 1.0, 1e-5)
    assert omega(10, 2.0, 1e-5) == pytest.approx(omega(10, 1.0, 1e-5) / 2)


@pytest.mark.parametrize("eps, delta", [(0.0, 1e-5), (-1.0, 1e-5), (1.0, 0.0), (1.0, 1.0),
                                        (float("nan"), 1e-5)])
def test_omega_rejects_invalid_privacy_parameters(eps, delta):
    with pytest.raises(ValueError):
        omega(10, eps, delta)


def test_synthetic_grid_admits_the_paper_largest_r():
    """Tables 1 and 2: of r in {3, 6, 8, 10, 15, 20}, the largest with sigma_min >= omega
    is 10 at eps = e^1.1 and 15 at eps = e^1.3 (sigma_min = 1030.9; omega(11) = 1030.2)."""
    sigma_min = singular_values(grid_points(100))[-1]
    paper_rs = (3, 6, 8, 10, 15, 20)
    for log_eps, expected in ((1.1, 10), (1.3, 15)):
        ok = [r for r in paper_rs if omega(r, math.exp(log_eps), 1e-5) <= sigma_min]
        assert max(ok) == expected
    assert largest_admissible_r(sigma_min, math.exp(1.1), 1e-5) == 11


def test_branch_choice_follows_sigma_min_against_omega():
    X = grid_points(30)
    sigma_min = singular_values(X)[-1]
    rng = np.random.default_rng(0)
    small_eps = 2 * omega(4, 1.0, 1e-5) / sigma_min  # omega(eps) = sigma_min / 2: no lift
    _, rep = project(X, small_eps, 1e-5, 4, rng)
    assert not rep.lifted and rep.sigma_min == pytest.approx(sigma_min)
    _, rep = project(X, 0.5 * omega(4, 1.0, 1e-5) / sigma_min, 1e-5, 4, rng)  # omega = 2 sigma_min
    assert rep.lifted


def test_unlifted_release_is_the_scaled_projection_of_the_centred_data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 5)) * 1e4
    release, rep = project(X, 10.0, 1e-5, 7, np.random.default_rng(11))
    assert not rep.lifted
    M = np.random.default_rng(11).standard_normal((5, 7))
    assert np.allclose(release.Z, (X - X.mean(0)) @ M / math.sqrt(7), rtol=1e-10)


@pytest.mark.parametrize("shape", [(300, 4), (6, 20)])  # full column rank, and n < d
def test_lifted_release_lifts_every_singular_value_to_at_least_omega(shape):
    rng = np.random.default_rng(5)
    X = rng.normal(size=shape)
    release, rep = project(X, 1.0, 1e-5, 6, np.random.default_rng(2))
    assert rep.lifted
    Xc = X - X.mean(0)
    Xt = lifted_dataset(Xc, rep.omega)
    s = np.linalg.svd(Xt, compute_uv=False)
    assert s.min() >= rep.omega * (1 - 1e-12)
    assert np.allclose(s, np.sqrt(np.linalg.svd(Xc, compute_uv=False) ** 2 + rep.omega**2))
    M = np.random.default_rng(2).standard_normal((shape[1], 6))
    assert np.allclose(release.Z, Xt @ M / math.sqrt(6), rtol=1e-9, atol=1e-9 * rep.omega)


def test_pairwise_distances_stay_in_the_johnson_lindenstrauss_band():
    """Theorem 2 with sigma_min >= omega: r >= 8 ln(n^2/mu)/nu^2 keeps every squared
    distance within (1 +- nu) with probability >= 1 - mu. n = 40, mu = 0.01, r = 1200
    gives nu = 0.30; checked over 20 seeds, all must hold (failure chance <= 0.2 overall
    by the union bound, far less in practice: the bound is loose)."""
    n, r, mu = 40, 1200, 0.01
    nu = math.sqrt(8 * math.log(n * n / mu) / r)
    rng = np.random.default_rng(7)
    X = rng.normal(size=(n, 6)) * 1e6  # sigma_min far above omega at eps = 1
    iu = np.triu_indices(n, 1)
    worst = 0.0
    for seed in range(20):
        release, rep = project(X, 1.0, 1e-5, r, np.random.default_rng(seed))
        assert not rep.lifted
        dx = ((X[:, None] - X[None]) ** 2).sum(-1)[iu]
        dz = ((release.Z[:, None] - release.Z[None]) ** 2).sum(-1)[iu]
        worst = max(worst, np.abs(dz / dx - 1).max())
    assert worst <= nu, (worst, nu)
    assert worst > 0.02  # it is a random projection, not the identity


def test_projection_is_reproducible_from_the_generator_and_validates_input():
    X = np.random.default_rng(0).normal(size=(50, 3))
    a, _ = project(X, 1.0, 1e-5, 4, np.random.default_rng(9))
    b, _ = project(X, 1.0, 1e-5, 4, np.random.default_rng(9))
    c, _ = project(X, 1.0, 1e-5, 4, np.random.default_rng(10))
    assert a == b and not np.array_equal(a.Z, c.Z)
    assert not a.Z.flags.writeable
    with pytest.raises(ValueError):
        project(np.array([[np.nan, 1.0], [0.0, 1.0]]), 1.0, 1e-5, 2, np.random.default_rng(0))
    with pytest.raises(ValueError):
        project(X, 1.0, 1e-5, 0, np.random.default_rng(0))
    assert identity_release(X).mechanism == "identity"


# --- the lift branch: paper, always, private (propose-test-release) ----------------------

def _far_above() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(200, 5)) * 1e4  # sigma_min ~ 1e5; n - 1 > d


def _far_below() -> np.ndarray:
    return np.random.default_rng(4).normal(size=(300, 4))  # sigma_min ~ 16 << omega ~ 2000


def _wide_above() -> np.ndarray:
    """n = 5, d = 8 (n - 1 <= d: the private test runs): sigma_{n-1} = 1.24e6, sigma_min 0."""
    return np.random.default_rng(3).normal(size=(5, 8)) * 1e6


def _wide_below() -> np.ndarray:
    """n = 5, d = 8: sigma_{n-1} = 1.56 << omega ~ 2200."""
    return np.random.default_rng(4).normal(size=(5, 8))


class _CountingSource(NoiseSource):
    """A NoiseSource that counts every draw made from it."""

    def __init__(self, rng=None):
        super().__init__(rng)
        self.calls = 0

    def randbelow(self, n):
        self.calls += 1
        return super().randbelow(n)

    def uniform(self, size):
        self.calls += 1
        return super().uniform(size)

    def standard_normal(self, size):
        self.calls += 1
        return super().standard_normal(size)


def _full_lift(X: np.ndarray, w: float, r: int, seed: int) -> np.ndarray:
    """r^-1/2 (X_c M + w G), M (d x r) then G (n x r) from default_rng(seed)."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((X.shape[1], r))
    G = rng.standard_normal((X.shape[0], r))
    return ((X - X.mean(0)) @ M + w * G) / math.sqrt(r)


def test_private_test_keeps_a_dataset_far_above_omega_unlifted():
    """n = 5, d = 8: the test runs on s = sigma_4(X_c) ~ 1.24e6, ~1.2e6 above the threshold
    omega + margin ~ 2500 while the Laplace scale is 1/te = 10: the lift test fails with
    probability ~exp(-1e5), so all 20 seeds must pass. The paper's sigma_min is 0 here."""
    X = _wide_above()
    s = singular_values(X)
    for seed in range(20):
        release, rep = project(X, 1.0, 1e-5, 7, np.random.default_rng(seed), lift="private",
                               test_source=NoiseSource(np.random.default_rng(100 + seed)))
        assert not rep.lifted and rep.lift == "private" and rep.dp_covers_branch
        assert (rep.test_epsilon, rep.test_delta) == (0.1, 1e-5)  # defaults 0.1 eps, delta
        assert rep.test_threshold == rep.omega + lift_test_margin(0.1, 1e-5)
        assert rep.statistic == pytest.approx(s[3], rel=1e-12) and rep.sigma_min == 0.0
        assert abs(rep.noisy_sigma_min - s[3]) < 200  # P(|Laplace(10)| > 200) = e^-20
        assert rep.test_reason == REASON_TEST
        M = np.random.default_rng(seed).standard_normal((8, 7))  # M alone from rng
        assert np.allclose(release.Z, (X - X.mean(0)) @ M / math.sqrt(7), rtol=1e-10)
        assert (release.epsilon, release.delta) == (1.0, 1e-5)  # the test is its own entry


def test_private_test_always_lifts_a_dataset_far_below_omega():
    """s = sigma_4 = 1.56, omega(6, 1, 1e-5) ~ 2200: P(pass) = td exp(-te (omega + 1 - s))
    ~ 1e-5 e^-220, so all 20 seeds must lift, with the full lift."""
    X = _wide_below()
    for seed in range(20):
        release, rep = project(X, 1.0, 1e-5, 6, np.random.default_rng(seed), lift="private",
                               test_source=NoiseSource(np.random.default_rng(100 + seed)))
        assert rep.lifted and rep.noisy_sigma_min < rep.test_threshold
        assert rep.test_epsilon == 0.1 and rep.statistic == pytest.approx(1.5576, abs=1e-4)
        assert np.allclose(release.Z, _full_lift(X, rep.omega, 6, seed), rtol=1e-12)
    _, rep = project(X, 1.0, 1e-5, 6, np.random.default_rng(0), lift="paper")
    assert rep.lifted  # the published branch agrees here (sigma_min = 0)


def test_private_with_n_minus_1_above_d_lifts_without_drawing_a_test():
    """n - 1 > d: the unlifted release is never DP, so "private" lifts whatever the data --
    even with sigma_min ~ 1e5 >> omega, where the old test would have passed -- draws
    nothing from the test source, and charges no test budget."""
    X = _far_above()
    for seed in range(3):
        source = _CountingSource(np.random.default_rng(100 + seed))
        release, rep = project(X, 1.0, 1e-5, 7, np.random.default_rng(seed), lift="private",
                               test_source=source)
        assert source.calls == 0
        assert rep.lifted and rep.dp_covers_branch and rep.sigma_min > 10 * rep.omega
        assert (rep.test_epsilon, rep.test_delta) == (0.0, 0.0)
        assert rep.noisy_sigma_min is None and rep.test_threshold is None
        assert rep.statistic is None and rep.test_reason == REASON_NO_TEST
        always, _ = project(X, 1.0, 1e-5, 7, np.random.default_rng(seed), lift="always")
        assert np.array_equal(release.Z, always.Z)  # exactly the full lift
    # the same under r = "auto" (no r can pass), and with explicit test parameters
    source = _CountingSource(np.random.default_rng(0))
    release, rep = choose_projection(X, 1.0, 1e-5, "auto", np.random.default_rng(1),
                                     lift="private", test_epsilon=0.5, test_delta=1e-6,
                                     test_source=source, r_fallback=4)
    assert source.calls == 0 and rep.lifted and rep.r == 4 and release.Z.shape == (200, 4)
    assert (rep.test_epsilon, rep.test_delta, rep.noisy_sigma_min) == (0.0, 0.0, None)
    # a NoiseSource as rng and no test_source: fine, no test needs one
    _, rep = project(X, 1.0, 1e-5, 4, NoiseSource(np.random.default_rng(0)), lift="private")
    assert rep.lifted and rep.test_epsilon == 0.0


def test_lift_test_needed_truth_table():
    shapes = [(2, 1), (3, 2), (4, 2), (3, 4), (5, 8), (9, 8), (10, 8), (40, 2), (200, 5)]
    for n, d in shapes:
        for lift in LIFT_MODES:
            expected = lift == "private" and n - 1 <= d
            assert lift_test_needed(n, d, lift) is expected, (n, d, lift)
            X = np.random.default_rng(n * d).normal(size=(n, d)) * 100
            _, rep = project(X, 1.0, 1e-5, 3, np.random.default_rng(0), lift=lift)
            assert (rep.test_epsilon > 0) is expected and (rep.statistic is not None) is expected
    with pytest.raises(ValueError):
        lift_test_needed(5, 3, "sometimes")
    with pytest.raises(ValueError):
        lift_test_needed(1, 3, "private")


def test_always_gram_is_that_of_the_full_lift():
    """E[Z Z^T] = X_c X_c^T + w^2 I_n for Z = r^-1/2 (X_c M + w G) (each of the r columns is
    N(0, C), C = X_c X_c^T + w^2 I). n = 6, d = 2, r = 50, 200 repetitions: entry (a, b) of
    the mean has standard deviation sqrt((C_aa C_bb + C_ab^2) / (200 r)); all within 5 of
    them. The paper's lift would give X_c X_c^T + w^2 U U^T: 4 w^2 less in trace on the
    complement of col(X_c), and columns inside col(X_c) (residual 0, here ~ 0.8)."""
    n, r, reps = 6, 50, 200
    X = np.random.default_rng(12).normal(size=(n, 2)) * 300
    Xc = X - X.mean(0)
    rng = np.random.default_rng(13)
    total = np.zeros((n, n))
    Q = np.linalg.qr(Xc)[0]
    residuals = []
    for _ in range(reps):
        release, rep = project(X, 10.0, 1e-5, r, rng, lift="always")
        Z = release.Z
        total += Z @ Z.T
        residuals.append(np.linalg.norm(Z - Q @ (Q.T @ Z)) / np.linalg.norm(Z))
    w = rep.omega
    C = Xc @ Xc.T + w**2 * np.eye(n)
    sd = np.sqrt((np.outer(np.diag(C), np.diag(C)) + C**2) / (reps * r))
    assert np.max(np.abs(total / reps - C) / sd) < 5
    P = np.eye(n) - Q @ Q.T  # the complement of col(X_c)
    assert np.trace(P @ (total / reps)) == pytest.approx((n - 2) * w**2, rel=0.05)
    assert min(residuals) > 0.5


def test_paper_is_unchanged_byte_for_byte():
    """lift="paper" draws M alone (the generator is left where M leaves it) and returns
    exactly Xc @ M / sqrt(r) unlifted, and lifted_dataset(Xc, w) @ M / sqrt(r) when n < d
    (the dense path); the QR fast path (n >= d, full rank) is byte-for-byte its own
    formula X_c V diag(sqrt(s^2 + w^2)/s) V^T M / sqrt(r) and agrees with the dense one."""
    cases = [(_far_above(), 1.0, 7, False), (np.random.default_rng(5).normal(size=(6, 20)),
                                              1.0, 6, True), (_far_below(), 1.0, 6, True)]
    for X, eps, r, lifts in cases:
        n, d = X.shape
        release, rep = project(X, eps, 1e-5, r, np.random.default_rng(11))
        assert rep.lifted is lifts and rep.test_reason == REASON_PAPER
        check = np.random.default_rng(11)
        M = check.standard_normal((d, r))
        after = check.standard_normal(3)
        rng = np.random.default_rng(11)
        project(X, eps, 1e-5, r, rng)
        assert np.array_equal(rng.standard_normal(3), after)  # no G drawn
        Xc = X - X.mean(axis=0)
        if not lifts:
            assert np.array_equal(release.Z, Xc @ M / math.sqrt(r))
        elif n < d:
            assert np.array_equal(release.Z, lifted_dataset(Xc, rep.omega) @ M / math.sqrt(r))
        else:
            R_ = scipy.linalg.qr(Xc, mode="r", check_finite=False)[0][:d]
            _, s, Vt = scipy.linalg.svd(R_, check_finite=False)
            scale = np.sqrt(s**2 + rep.omega**2) / s
            fast = Xc @ (Vt.T @ (scale[:, None] * (Vt @ M))) / math.sqrt(r)
            assert np.array_equal(release.Z, fast)
            assert np.allclose(release.Z, lifted_dataset(Xc, rep.omega) @ M / math.sqrt(r),
                               rtol=1e-10, atol=1e-10 * rep.omega)


def test_reports_carry_the_lift_mode_and_the_test_budget():
    X = _wide_above()
    _, rep = project(X, 2.0, 1e-6, 3, np.random.default_rng(0), lift="private",
                     test_epsilon=0.5, test_delta=1e-7,
                     test_source=NoiseSource(np.random.default_rng(1)))
    assert (rep.lift, rep.test_epsilon, rep.test_delta, rep.r) == ("private", 0.5, 1e-7, 3)
    assert rep.noisy_sigma_min is not None and rep.dp_covers_branch
    for X in (_wide_above(), _far_above()):
        for lift, covered, reason in (("paper", False, REASON_PAPER),
                                      ("always", True, REASON_ALWAYS)):
            _, rep = project(X, 2.0, 1e-6, 3, np.random.default_rng(0), lift=lift)
            assert (rep.lift, rep.test_epsilon, rep.test_delta) == (lift, 0.0, 0.0)
            assert rep.noisy_sigma_min is None and rep.test_threshold is None
            assert rep.statistic is None and rep.test_reason == reason
            assert rep.dp_covers_branch is covered


def test_lift_test_margin_is_one_plus_the_laplace_tail_quantile():
    """margin = 1 + ln(1/(2 td))/te + 2 lattice steps; the steps are <= 2^-28 / te."""
    for te, td in ((0.3, 1e-5), (1.0, 0.01), (0.01, 1e-9)):
        g = lattice_step(1.0 / te)
        assert g <= 2.0**-28 / te
        assert lift_test_margin(te, td) == 1.0 + math.log(1 / (2 * td)) / te + 2 * g
    w, m = 500.0, lift_test_margin(0.3, 1e-5)
    assert passes_lift_test(w + m, w, 0.3, 1e-5)
    assert not passes_lift_test(math.nextafter(w + m, 0.0), w, 0.3, 1e-5)


def test_always_lifts_even_a_dataset_with_huge_sigma_min():
    X = _far_above() * 100  # sigma_min ~ 1e7 >> omega
    release, rep = project(X, 1.0, 1e-5, 4, np.random.default_rng(5), lift="always")
    assert rep.lifted and rep.sigma_min > 1e3 * rep.omega
    assert np.allclose(release.Z, _full_lift(X, rep.omega, 4, 5), rtol=1e-12)
    Xw = _wide_above() * 100  # and n - 1 <= d
    release, rep = project(Xw, 1.0, 1e-5, 4, np.random.default_rng(5), lift="always")
    assert rep.lifted and np.allclose(release.Z, _full_lift(Xw, rep.omega, 4, 5), rtol=1e-12)


def test_private_r_is_the_largest_r_whose_omega_passes():
    eps, delta, te, td = 2.0, 1e-5, 0.2, 1e-5
    m = lift_test_margin(te, td)
    for noisy in (0.0, omega(1, eps, delta) + m - 1e-9, omega(1, eps, delta) + m,
                  omega(10, eps, delta) + m, omega(11, eps, delta) + m - 1e-6, 1e4, 1e9):
        r = private_r(noisy, eps, delta, te, td, r_max=1000)
        brute = max([k for k in range(1, 1001) if omega(k, eps, delta) <= noisy - m], default=0)
        assert r == brute
        assert r == 0 or omega(r, eps, delta) <= noisy - m
        assert r == 1000 or omega(r + 1, eps, delta) > noisy - m
    assert private_r(omega(10, eps, delta) + m, eps, delta, te, td) == 10
    assert private_r(1e9, eps, delta, te, td, r_max=40) == 40


def test_r_auto_private_picks_the_largest_passing_r_of_the_one_noisy_draw():
    """n = 4, d = 6. te = 0.01 (Laplace scale 100) around s = sigma_3 ~ omega(10) + margin,
    so the chosen r varies over 30 seeds; each must equal private_r of the reported noisy
    value, be released unlifted with r columns, and never have omega(r) > noisy - margin."""
    eps, delta, te, td = 3.0, 1e-5, 0.01, 1e-5
    m = lift_test_margin(te, td)
    X0 = np.random.default_rng(6).normal(size=(4, 6))
    X = X0 * (omega(10, eps, delta) + m) / singular_values(X0)[2]
    chosen = set()
    for seed in range(30):
        release, rep = choose_projection(
            X, eps, delta, "auto", np.random.default_rng(seed), lift="private",
            test_epsilon=te, test_delta=td,
            test_source=NoiseSource(np.random.default_rng(100 + seed)), r_fallback=2)
        assert rep.statistic == pytest.approx(omega(10, eps, delta) + m, rel=1e-12)
        expected = private_r(rep.noisy_sigma_min, eps, delta, te, td)
        if expected == 0:
            assert rep.lifted and rep.r == 2 and release.Z.shape == (4, 2)
            continue
        assert rep.r == expected and not rep.lifted and release.Z.shape == (4, expected)
        assert omega(rep.r, eps, delta) <= rep.noisy_sigma_min - m
        assert rep.omega == omega(rep.r, eps, delta) and rep.dp_covers_branch
        chosen.add(rep.r)
    assert len(chosen) >= 3  # the draw really moves r


def test_r_auto_private_lifts_at_the_fallback_when_no_r_passes():
    release, rep = choose_projection(_wide_below(), 1.0, 1e-5, "auto",
                                     np.random.default_rng(0), lift="private", r_fallback=4,
                                     test_source=NoiseSource(np.random.default_rng(1)))
    assert rep.lifted and rep.r == 4 and release.Z.shape == (5, 4)
    assert rep.omega == omega(4, 1.0, 1e-5) and rep.noisy_sigma_min < rep.test_threshold
    assert rep.test_epsilon == 0.1  # the test ran (n - 1 <= d) and failed
    assert np.allclose(release.Z, _full_lift(_wide_below(), rep.omega, 4, 0), rtol=1e-12)
    release, rep = choose_projection(_far_below(), 1.0, 1e-5, "auto", np.random.default_rng(0),
                                     lift="private", r_fallback=4)
    assert rep.lifted and rep.r == 4 and release.Z.shape == (300, 4)
    assert rep.test_epsilon == 0.0 and rep.noisy_sigma_min is None  # n - 1 > d: no test


def test_r_auto_paper_uses_the_exact_sigma_min_and_says_so():
    X = grid_points(30)
    sigma_min = singular_values(X)[-1]
    eps = 2 * omega(5, 1.0, 1e-5) / sigma_min  # some r >= 5 is admissible
    release, rep = choose_projection(X, eps, 1e-5, "auto", np.random.default_rng(0),
                                     lift="paper", r_fallback=3)
    assert rep.r == largest_admissible_r(sigma_min, eps, 1e-5) >= 5
    assert not rep.lifted and not rep.dp_covers_branch and rep.noisy_sigma_min is None
    assert release.Z.shape == (900, rep.r)


def test_r_auto_with_always_lift_or_without_a_fallback_is_refused():
    X = _far_above()
    with pytest.raises(ValueError, match="--r auto needs --lift private or paper"):
        choose_projection(X, 1.0, 1e-5, "auto", np.random.default_rng(0), lift="always",
                          r_fallback=3)
    for lift in ("private", "paper"):
        with pytest.raises(ValueError, match="fallback"):
            choose_projection(X, 1.0, 1e-5, "auto", np.random.default_rng(0), lift=lift)


def test_choose_projection_with_a_fixed_r_is_project():
    X = _far_above()
    a, ra = choose_projection(X, 1.0, 1e-5, 4, np.random.default_rng(1), lift="always",
                              r_fallback=9)
    b, rb = project(X, 1.0, 1e-5, 4, np.random.default_rng(1), lift="always")
    assert a == b and ra == rb


def test_lift_arguments_are_validated():
    X = _far_above()
    src = NoiseSource(np.random.default_rng(0))
    _, rep = project(X, 1.0, 1e-5, 4, src)  # positional NoiseSource, as the callers do
    assert rep.lift == "paper" and not rep.lifted
    with pytest.raises(ValueError, match="test_source"):  # never the global np.random
        project(_wide_above(), 1.0, 1e-5, 4, src, lift="private")
    with pytest.raises(ValueError):
        project(X, 1.0, 1e-5, 4, src, lift="sometimes")
    with pytest.raises(ValueError):
        project(X, 1.0, 1e-5, 4, src, lift="paper", test_epsilon=0.1)
    for te, td in ((0.0, 1e-5), (float("inf"), 1e-5), (0.1, 0.0), (0.1, 0.5), (1e-10, 1e-5)):
        for data in (X, _wide_above()):  # validated whether or not the test runs
            with pytest.raises(ValueError):
                project(data, 1.0, 1e-5, 4, np.random.default_rng(0), lift="private",
                        test_epsilon=te, test_delta=td)


def test_release_noise_added_in_row_blocks_is_the_one_shot_noise_bit_for_bit(monkeypatch):
    """A seeded release is unchanged by drawing its noise a block of rows at a time."""
    from pobo.parties import projection

    A = np.random.default_rng(3).normal(size=(50, 4))
    expected = A + 2.5 * np.random.default_rng(4).standard_normal(A.shape)
    monkeypatch.setattr(projection, "NOISE_ROWS", 7)  # 8 blocks, the last of 1 row
    assert np.array_equal(projection.add_gaussian(A.copy(), 2.5, np.random.default_rng(4)),
                          expected)


@pytest.mark.parametrize("sketch", [False, True])
def test_a_gaussian_release_holds_no_second_n_by_r_array(sketch):
    """n x r noise is added in blocks: the release's peak is Z plus O(n d), not 4 n x r
    arrays (n = 1e7, r = 20: 1.6 GB each)."""
    import tracemalloc

    from pobo.parties.projection import gaussian_projection

    X = np.random.default_rng(5).normal(size=(400_000, 3))
    tracemalloc.start()
    try:
        release, _ = gaussian_projection(X, 2.0, 1e-5, 10, np.random.default_rng(6),
                                         sketch=sketch)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * release.Z.nbytes, f"{peak / 1e6:.0f} MB for a {release.Z.nbytes / 1e6:.0f} MB Z"
