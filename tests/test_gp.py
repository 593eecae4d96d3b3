"""The GP engine: incremental O(n t) updates equal the textbook formula for every kernel;
the likelihood gradient is right; maximum likelihood recovers a known length-scale."""
import math

import numpy as np
import pytest

from pobo.parties.gp import IncrementalGP, NumericalError, posterior_dense
from pobo.parties.kernels import (
    Kernel, ard_squared_exponential, kernel_by_name, matern52, squared_exponential,
)
from pobo.parties.likelihood import fit_hyperparameters, log_marginal_likelihood
from pobo.parties.modeler import HyperFit, Modeler
from pobo.parties.strategies import GPUCB, beta_gp_ucb
from pobo.protocol.messages import KernelParams, ProjectedDataset, SessionParams

KERNELS = {
    "se": squared_exponential(1.3, 2.0),
    "ard-se": ard_squared_exponential([0.7, 1.5, 3.0], 0.5),
    "matern52": matern52(1.1, 1.7),
}


def _textbook(Z, idx, y, kern, noise, m=0.0):
    """R&W eq. 2.25-2.26 with an explicit inverse, written independently of the engine."""
    Xt = Z[idx]
    K = kern(Xt, Xt) + noise * np.eye(len(idx))
    Ks = kern(Z, Xt)
    Kinv = np.linalg.inv(K)
    return m + Ks @ Kinv @ (y - m), kern.diag(Z) - np.einsum("ij,jk,ik->i", Ks, Kinv, Ks)


def test_kernel_values_match_their_closed_forms():
    a, b = np.array([[0.3, -1.0, 2.0]]), np.array([[1.0, 0.5, 2.5]])
    d = float(np.linalg.norm(a - b))
    assert KERNELS["se"](a, b)[0, 0] == pytest.approx(2.0 * math.exp(-d**2 / (2 * 1.3**2)))
    r = d / 1.1
    assert KERNELS["matern52"](a, b)[0, 0] == pytest.approx(
        1.7 * (1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(-math.sqrt(5) * r))
    u = sum(((a - b)[0] / np.array([0.7, 1.5, 3.0])) ** 2)
    assert KERNELS["ard-se"](a, b)[0, 0] == pytest.approx(0.5 * math.exp(-u / 2))
    with pytest.raises(ValueError):
        Kernel("rbf", (1.0,))
    with pytest.raises(ValueError):
        squared_exponential(-1.0)
    assert kernel_by_name("ard-matern52", 2.0, 1.0, dims=3).lengthscales == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_incremental_posterior_equals_the_textbook_formula_at_every_step(name):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(300, 3))
    kern = KERNELS[name]
    gp = IncrementalGP(Z, kern, 0.01, capacity=40, prior_mean=0.3)
    idx, ys = [], []
    for t in range(40):
        i = int(rng.integers(300)) if t % 5 else (idx[-1] if idx else 0)  # repeated rows
        y = float(np.sin(Z[i]).sum() + 0.1 * rng.normal())
        gp.add(i, y)
        idx.append(i)
        ys.append(y)
        mean, var = _textbook(Z, idx, np.array(ys), kern, 0.01 + 1e-10, 0.3)
        assert np.allclose(gp.mean, mean, rtol=1e-8, atol=1e-10 * np.abs(mean).max())
        assert np.allclose(gp.var, var, rtol=1e-8, atol=1e-10 * kern.variance)
    dmean, dvar = posterior_dense(Z, np.array(idx), np.array(ys), kern, 0.01, prior_mean=0.3,
                                  chunk=64)
    assert np.allclose(gp.mean, dmean, rtol=1e-9) and np.allclose(gp.var, dvar, rtol=1e-8, atol=1e-12)


def test_engine_preallocates_its_cache_and_refuses_past_capacity():
    Z = np.random.default_rng(1).normal(size=(50, 2))
    gp = IncrementalGP(Z, squared_exponential(1.0), 0.1, capacity=3)
    assert gp.V.shape == (3, 50) and gp.V.nbytes == 8 * 50 * 3
    for i in range(3):
        gp.add(i, 1.0)
    with pytest.raises(ValueError, match="capacity"):
        gp.add(4, 1.0)
    with pytest.raises(IndexError):
        IncrementalGP(Z, squared_exponential(1.0), 0.1, 2).add(50, 1.0)
    with pytest.raises(ValueError):
        IncrementalGP(Z, squared_exponential(1.0), 0.1, 2).add(0, float("nan"))


def test_noise_free_repeat_raises_a_clear_error_not_nan():
    Z = np.random.default_rng(1).normal(size=(10, 2))
    gp = IncrementalGP(Z, squared_exponential(1.0), 0.0, capacity=3, jitter=0.0)
    gp.add(2, 1.0)
    mean = gp.mean.copy()
    with pytest.raises(NumericalError, match="pivot"):
        gp.add(2, 1.0)
    assert gp.t == 1 and np.array_equal(gp.mean, mean)  # left as it was


@pytest.mark.parametrize("cache", ["float64", "float32"])
def test_a_kept_next_row_is_the_row_worked_out_afresh(cache):
    """next_row keeps the row it worked out (a modeler checks a row when it asks and the
    engine appends it when the reward comes): through pending slots, out-of-order
    resolves (which swap rows of L and V) and plain adds, an engine that may reuse it
    ends bit for bit where one that always works it out afresh does."""
    rng = np.random.default_rng(3)
    Z = rng.uniform(-2, 2, size=(120, 3))
    kern = squared_exponential(1.0, 1.0)
    kept, fresh = (IncrementalGP(Z, kern, 1e-3, capacity=80, cache=cache) for _ in range(2))
    slots: list[int] = []
    for _ in range(60):
        i = int(rng.integers(120))
        kept.next_row(i)  # asked: worked out and kept (the fresh engine never keeps one)
        op = rng.random()
        if op < 0.25:
            slots.append(kept.add_pending(i))
            fresh._next = None
            assert fresh.add_pending(i) == slots[-1]
        elif op < 0.6 or not slots:
            fresh._next = None
            kept.add(i, float(np.sin(Z[i, 0])))
            fresh.add(i, float(np.sin(Z[i, 0])))
        else:
            slot = slots.pop(int(rng.integers(len(slots))))
            kept.resolve(slot, 0.5)
            fresh.resolve(slot, 0.5)
    assert kept.t == fresh.t > 30
    # a row worked out, then a resolve that swaps rows of L and V, then that row added
    for gp in (kept, fresh):
        pending = [gp.add_pending(j) for j in (7, 8, 9)]
        gp.next_row(11)
        gp.resolve(pending[1], 0.25)  # swaps the middle slot to the front of the pending
        if gp is fresh:
            gp._next = None  # worked out afresh
        gp.add_pending(11)
    t = kept.t
    for name, a, b in (("mean", kept.mean, fresh.mean), ("var", kept.var, fresh.var),
                       ("L", kept.L, fresh.L), ("alpha", kept.alpha[:t], fresh.alpha[:t]),
                       ("rows", kept.indices[:t], fresh.indices[:t])):
        assert np.array_equal(a, b), name


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_log_marginal_likelihood_gradient_matches_finite_differences(name):
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(25, 3)), rng.normal(size=25)
    kern, noise = KERNELS[name], 0.05
    _, grad = log_marginal_likelihood(kern, noise, X, y, 0.1)
    p = np.append(kern.theta, math.log(noise))
    h = 1e-6
    for j in range(len(p)):
        up, dn = p.copy(), p.copy()
        up[j] += h
        dn[j] -= h
        f = [log_marginal_likelihood(kern.with_theta(q[:-1]), math.exp(q[-1]), X, y, 0.1)[0]
             for q in (up, dn)]
        assert grad[j] == pytest.approx((f[0] - f[1]) / (2 * h), rel=1e-5, abs=1e-6)


def test_log_marginal_likelihood_value_matches_the_gaussian_density():
    from scipy.stats import multivariate_normal
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(10, 2)), rng.normal(size=10)
    kern = matern52(0.8, 1.3)
    value, _ = log_marginal_likelihood(kern, 0.2, X, y, 0.5, jitter=0.0)
    cov = kern(X, X) + 0.2 * np.eye(10)
    assert value == pytest.approx(multivariate_normal(np.full(10, 0.5), cov).logpdf(y))


@pytest.mark.parametrize("family, true_l", [("se", 0.6), ("matern52", 0.9)])
def test_maximum_likelihood_recovers_a_known_lengthscale(family, true_l):
    """300 points sampled from a GP with known l; the fit is within 20% of it (fixed seed)."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-3, 3, size=(300, 2))
    truth = Kernel(family, (true_l,), 1.5)
    K = truth(X, X) + 0.01 * np.eye(300)
    y = np.linalg.cholesky(K) @ rng.standard_normal(300)
    start = Kernel(family, (3.0,), 0.3)
    fit = fit_hyperparameters(start, 0.5, X, y, np.random.default_rng(0), restarts=3)
    assert fit.kernel.lengthscales[0] == pytest.approx(true_l, rel=0.2)
    assert fit.noise_var == pytest.approx(0.01, rel=0.5)
    assert fit.log_likelihood >= log_marginal_likelihood(truth, 0.01, X, y, fit.prior_mean)[0] - 1e-6


def test_ard_fit_finds_the_irrelevant_dimension():
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, size=(200, 2))
    y = np.sin(2 * X[:, 0]) + 0.05 * rng.standard_normal(200)  # only dimension 0 matters
    fit = fit_hyperparameters(ard_squared_exponential([1.0, 1.0]), 0.1, X, y,
                              np.random.default_rng(1))
    l0, l1 = fit.kernel.lengthscales
    assert l1 > 5 * l0


def _session(n, r, T, kernel="se"):
    return SessionParams("t", n, r, T, "private", (), KernelParams(kernel, 1.0, 1.0, 1e-4), "seeded")


def test_refit_every_m_gives_the_posterior_of_a_fresh_engine_with_those_hyperparameters():
    rng = np.random.default_rng(6)
    n, T = 400, 16
    Z = rng.uniform(-2, 2, size=(n, 2))
    f = np.sin(Z[:, 0]) * np.cos(Z[:, 1])
    modeler = Modeler(_session(n, 2, T), ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), GPUCB(),
                      np.random.default_rng(1), HyperFit("every", n_init=6, every=4))
    for _ in range(T):
        i = modeler.next_index()
        modeler.observe(i, float(f[i] + 0.01 * rng.standard_normal()))
    assert len(modeler.fits) == 3  # after 6, 10 and 14 observations
    fit = modeler.fits[-1]
    fresh = IncrementalGP(Z, fit.kernel, fit.noise_var, T, prior_mean=fit.prior_mean)
    for i, y in zip(modeler.queries, modeler.rewards):
        fresh.add(i, y)
    assert np.allclose(modeler.gp.mean, fresh.mean, rtol=1e-10, atol=1e-12)
    assert np.allclose(modeler.gp.var, fresh.var, rtol=1e-10, atol=1e-14)
    assert len(set(modeler.queries[:6])) == 6  # the initial design: distinct random rows


def test_modeler_queries_the_ucb_argmax_of_the_dense_posterior():
    """Algorithm 2: z_t = argmax mu_{t-1} + beta_t^1/2 sigma_{t-1}, beta_t = 2 ln(n t^2 pi^2/(6 delta))."""
    rng = np.random.default_rng(4)
    n, T = 200, 15
    Z = rng.normal(size=(n, 2)) * 2
    f = np.cos(Z[:, 0]) + Z[:, 1] / 3
    modeler = Modeler(_session(n, 2, T), ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), GPUCB(), rng)
    kern = squared_exponential(1.0, 1.0)
    for t in range(1, T + 1):
        i = modeler.next_index()
        if t > 1:
            mean, var = posterior_dense(Z, np.array(modeler.queries), np.array(modeler.rewards),
                                        kern, 1e-4)
            ucb = mean + math.sqrt(beta_gp_ucb(t, n, 0.05)) * np.sqrt(var)
            assert ucb[i] == pytest.approx(ucb.max(), rel=1e-9)
        modeler.observe(i, float(f[i]))
    assert beta_gp_ucb(3, 100, 0.05) == pytest.approx(2 * math.log(100 * 9 * math.pi**2 / 0.3))


def test_curator_preparation_makes_an_isotropic_kernel_fit():
    from pobo.parties.preparation import fit_ard_lengthscales, rescale_by_lengthscales
    rng = np.random.default_rng(8)
    X = rng.uniform(0, 1, size=(400, 2)) * np.array([100.0, 1.0])  # wildly different units
    y = np.sin(X[:, 0] / 20) + np.cos(3 * X[:, 1]) + 0.05 * rng.standard_normal(400)
    ls = fit_ard_lengthscales(X, y, np.random.default_rng(0), sample=200)
    assert 5 < ls[0] / ls[1] < 500  # dimension 0 varies ~60x more slowly in its own units
    Xr = rescale_by_lengthscales(X, ls)
    k_ard = ard_squared_exponential(ls, 1.0)
    assert np.allclose(k_ard(X[:20], X[:20]), squared_exponential(1.0)(Xr[:20], Xr[:20]))
    with pytest.raises(ValueError):
        rescale_by_lengthscales(X, [1.0])
