"""PO-GP-UCB Algorithm 1: the threshold omega, the branch, lifting, and distance preservation."""
import math

import numpy as np
import pytest

from parties.projection import (
    identity_release, largest_admissible_r, lifted_dataset, omega, project, singular_values,
)
from scenarios.synthetic import grid_points


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
