"""The GP posterior over candidates: incremental O(n t) updates equal the textbook formula."""
import math

import numpy as np
import pytest

from parties.gp import IncrementalGP, NumericalError, SquaredExponential, posterior_dense
from parties.modeler import Modeler
from parties.strategies import GPUCB, beta_gp_ucb
from protocol.messages import KernelParams, ProjectedDataset, SessionParams


def _textbook(Z, idx, y, kern, noise):
    """R&W eq. 2.25-2.26 with explicit inverses, written independently of the engine."""
    Xt = Z[idx]
    K = kern(Xt, Xt) + noise * np.eye(len(idx))
    Ks = kern(Z, Xt)
    Kinv = np.linalg.inv(K)
    return Ks @ Kinv @ y, kern.diag(Z) - np.einsum("ij,jk,ik->i", Ks, Kinv, Ks)


def test_incremental_posterior_equals_the_textbook_formula_at_every_step():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(300, 3))
    kern = SquaredExponential(1.3, 2.0)
    gp = IncrementalGP(Z, kern, 0.01, capacity=40)
    idx, ys = [], []
    for t in range(40):
        i = int(rng.integers(300)) if t % 7 else (idx[-1] if idx else 0)  # some repeats
        y = float(np.sin(Z[i]).sum() + 0.1 * rng.normal())
        gp.add(i, y)
        idx.append(i)
        ys.append(y)
        mean, var = _textbook(Z, idx, np.array(ys), kern, 0.01 + 1e-10)
        assert np.allclose(gp.mean, mean, rtol=1e-8, atol=1e-10 * np.abs(mean).max())
        assert np.allclose(gp.var, var, rtol=1e-8, atol=1e-10 * kern.variance)
    dmean, dvar = posterior_dense(Z, np.array(idx), np.array(ys), kern, 0.01)
    assert np.allclose(gp.mean, dmean, rtol=1e-9) and np.allclose(gp.var, dvar, rtol=1e-8, atol=1e-12)


def test_noise_free_repeat_raises_a_clear_error_not_nan():
    Z = np.random.default_rng(1).normal(size=(10, 2))
    gp = IncrementalGP(Z, SquaredExponential(1.0), 0.0, capacity=3, jitter=0.0)
    gp.add(2, 1.0)
    with pytest.raises(NumericalError, match="pivot"):
        gp.add(2, 1.0)
    assert np.isfinite(gp.mean).all()


def test_modeler_queries_the_ucb_argmax_of_the_dense_posterior():
    """Algorithm 2: z_t = argmax mu_{t-1} + beta_t^1/2 sigma_{t-1}, beta_t = 2 ln(n t^2 pi^2/(6 delta))."""
    rng = np.random.default_rng(4)
    n, T = 200, 15
    Z = rng.normal(size=(n, 2)) * 2
    f = np.cos(Z[:, 0]) + Z[:, 1] / 3
    params = SessionParams("t", n, 2, T, "private", (), KernelParams(1.0, 1.0, 1e-4), "seeded")
    modeler = Modeler(params, ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), GPUCB(), rng)
    kern = SquaredExponential(1.0, 1.0)
    for t in range(1, T + 1):
        i = modeler.next_index()
        if t > 1:
            mean, var = posterior_dense(Z, np.array(modeler.queries), np.array(modeler.rewards),
                                        kern, 1e-4)
            ucb = mean + math.sqrt(beta_gp_ucb(t, n, 0.05)) * np.sqrt(var)
            assert ucb[i] == pytest.approx(ucb.max(), rel=1e-9)
        modeler.observe(i, float(f[i]))
    assert beta_gp_ucb(3, 100, 0.05) == pytest.approx(2 * math.log(100 * 9 * math.pi**2 / 0.3))
