"""The modeler's default fit (parties/fitting.py, `--fit map`): the rules that keep it
from throwing the release away -- no fit on equal rewards, the declared values held until
enough rewards and until a fit beats them, the fitted values inside their bounds, the
input-noise widening on top of the fit -- and the gradient the fit climbs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pobo.parties.choices import HyperFit
from pobo.parties.fitting import (
    LENGTHSCALE_RANGE, VARIANCE_RANGE, InputNoise, _evidence, declared_prior, evidence, gls_mean,
    map_fit, widened,
)
from pobo.parties.kernels import noisy_input_kernel, squared_exponential
from pobo.parties.gp import IncrementalGP
from pobo.parties.modeler import Modeler, close_fits
from pobo.parties.strategies import GPUCB
from pobo.protocol.messages import KernelParams, ProjectedDataset, SessionParams

N, LS = 400, 1.0


def _modeler(T=40, noise_std=0.0, hyper=HyperFit("auto"), status="initial", seed=1):
    Z = np.random.default_rng(6).uniform(-3, 3, size=(N, 2))
    params = SessionParams("t", N, 2, T, "private", (),
                           KernelParams("se", LS, 1.0, 1e-2, status), "seeded")
    return Modeler(params, ProjectedDataset("x", 1.0, 1e-5, 0.0, Z, noise_std), GPUCB(),
                   np.random.default_rng(seed), hyper)


def _run(modeler, f, T):
    for _ in range(T):
        i = modeler.next_index()
        modeler.observe(i, float(f(modeler.gp.Z[i])))
    return modeler


def test_auto_on_initial_values_is_map_and_on_public_values_fixed():
    assert _modeler().hyper.mode == "map"
    assert _modeler(status="public").hyper.mode == "fixed"
    assert HyperFit("map").design == 0 and HyperFit("every").design == 5


def test_no_fit_on_rewards_that_are_all_equal():
    """A hospital's first rewards are often all 0: nothing to learn a length-scale from."""
    modeler = _run(_modeler(), lambda z: 0.0, 40)
    assert modeler.fits == [] and modeler.gp.kernel == _modeler().gp.kernel


def _declared_draw(scale: float, shift: float):
    """Rewards of the declared model scaled and shifted: f drawn from the declared
    kernel over the rows (seeded), each query's reward with fresh noise of the declared
    variance (x scale^2), so repeated rows are not one fixed draw."""
    Z = _modeler().gp.Z
    f = np.linalg.cholesky(squared_exponential(LS)(Z, Z) + 1e-8 * np.eye(N)) @ \
        np.random.default_rng(3).standard_normal(N)
    rows = {tuple(z): i for i, z in enumerate(Z)}
    noise = np.random.default_rng(101)
    return lambda z: scale * (f[rows[tuple(z)]] + 0.1 * noise.standard_normal()) + shift


def test_the_declared_values_are_held_until_hold_rewards_and_then_until_beaten():
    """Rewards of the declared kernel around a mean of 5: no fit beats the declared
    kernel at its best constant mean by the kernel parameters' worth, so the engine
    holds the declared kernel, moved to that mean (with the declared model's mean 0 as
    the yardstick, the shift alone let every fit through); the same rewards at a tenth of
    the declared signal are not the declared kernel's: a fit wins."""
    held = _run(_modeler(T=45), _declared_draw(1.0, 5.0), 45)
    assert len(held.fits) == 3 and not any(f.kept for f in held.fits)
    assert held.gp.kernel == _modeler().gp.kernel and held.held is None
    X, y = held.gp.Z[held.queries[:40]], np.asarray(held.rewards[:40])
    mean = gls_mean(*held.declared, held.input_noise, X, y)  # the last fit round's (t = 40)
    assert held.declared_mean == mean == held.gp.prior_mean and 4.0 < mean < 6.0
    _holds(held)
    scaled = _modeler(T=45)
    draw = _declared_draw(0.1, 5.0)
    for t in range(45):
        i = scaled.next_index()
        scaled.observe(i, float(draw(scaled.gp.Z[i])))
        if t + 1 < 20:
            assert not scaled.fits  # held until --fit-hold (20) rewards
    assert len(scaled.fits) == 3 and all(f.kept for f in scaled.fits)  # after 20, 30, 40
    assert scaled.held is not None and scaled.held.base.variance < 0.1
    _holds(scaled)


def test_the_declared_kernel_is_scored_at_its_best_constant_mean():
    """`gls_mean` maximises the evidence over the constant mean (its derivative there is
    0), and it is not the rewards' plain mean where the queries crowd: the rows of one
    cluster count for less than one row far away."""
    kernel, noise = squared_exponential(1.0), 1e-2
    X = np.r_[np.zeros((6, 1)) + np.linspace(0, 0.1, 6)[:, None], [[8.0]]]
    y = np.r_[np.full(6, 3.0), 0.0]
    wide = InputNoise(0.3, 1)
    mean = gls_mean(kernel, noise, wide, X, y)
    h = 1e-5
    slope = (evidence(kernel, noise, wide, X, y, mean + h)
             - evidence(kernel, noise, wide, X, y, mean - h)) / (2 * h)
    assert abs(slope) < 1e-6
    assert evidence(kernel, noise, wide, X, y, mean) > evidence(kernel, noise, wide, X, y, y.mean())
    assert 0.5 < mean < 2.0 < y.mean()  # the cluster weighs about one row, not six


def _holds(modeler):
    """The engine is exactly a fresh engine of the held model (declared, or a fit)."""
    held = modeler.held
    kernel, noise, mean = ((held.kernel, held.noise_var, held.prior_mean) if held is not None
                           else (*widened(*modeler.declared, modeler.input_noise),
                                 modeler.declared_mean))
    fresh = IncrementalGP(modeler.gp.Z, kernel, noise, modeler.params.T, prior_mean=mean)
    for i, y in zip(modeler.queries, modeler.rewards):
        fresh.add(i, y)
    assert np.allclose(modeler.gp.mean, fresh.mean, rtol=1e-9, atol=1e-10)
    assert np.allclose(modeler.gp.var, fresh.var, rtol=1e-9, atol=1e-12)


def test_a_fit_close_to_the_held_one_leaves_the_engine_and_a_far_one_rebuilds_it():
    """Fits within REBUILD_TOLERANCE of the held one are kept without a rebuild (the
    engine stays the held model's, exactly); any other kept fit is rebuilt."""
    modeler = _run(_modeler(T=100), lambda z: math.sin(2 * z[0]) + 4.0, 100)
    kept = [f for f in modeler.fits if f.kept]
    assert len(kept) >= 3 and not all(f.rebuilt for f in kept)
    held = None
    for fit in modeler.fits:
        if not fit.kept:  # the declared kernel held again
            held = None
            continue
        assert fit.rebuilt == (held is None or not close_fits(fit, held))
        held = fit if fit.rebuilt else held
    assert modeler.held is held
    _holds(modeler)


def test_fitted_values_stay_within_their_bounds_and_the_noise_above_the_nugget():
    """Rewards that vary on a scale 10x shorter than the declared length-scale, and
    exactly (no noise): maximum likelihood takes the length-scale below the declared
    one's half (or, in its wide box, explains them as noise far above the declared
    noise); the MAP fit stays within x2 of the declared length-scale and x100 of the
    declared variances, and the effective noise never drops below the release's nugget."""
    std = 0.3
    modeler = _run(_modeler(T=60, noise_std=std), lambda z: math.sin(10 * z[0]) * 3, 60)
    assert modeler.fits and any(f.kept for f in modeler.fits)
    dims = modeler.input_noise.dims
    for fit in modeler.fits:
        lo, hi = LS / LENGTHSCALE_RANGE, LS * LENGTHSCALE_RANGE
        assert all(lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9) for v in fit.base.lengthscales)
        assert 1.0 / VARIANCE_RANGE <= fit.base.variance <= VARIANCE_RANGE * (1 + 1e-9)
        assert 1e-2 / VARIANCE_RANGE <= fit.base_noise_var <= 1e-2 * VARIANCE_RANGE * (1 + 1e-9)
        lz, _, nugget = noisy_input_kernel(fit.base.lengthscales[0], fit.base.variance, std, dims)
        assert fit.kernel.lengthscales[0] == pytest.approx(lz)
        assert fit.noise_var >= nugget > 0
    ml = map_fit(*modeler.declared, modeler.input_noise, modeler.gp.Z[modeler.queries],
                 np.asarray(modeler.rewards), np.random.default_rng(0), prior=None)
    assert ml.base.lengthscales[0] < LS / LENGTHSCALE_RANGE  # what the bounds prevent


def test_the_widening_matches_the_declared_kernel_arithmetic_to_the_bit():
    """`widened` of the declared values is the engine's starting kernel (fixed mode's
    numbers do not move)."""
    lz, sf2, nugget = noisy_input_kernel(0.7, 1.3, 0.25, 5)
    kernel, noise = widened(squared_exponential(0.7, 1.3), 1e-2, InputNoise(0.25, 5, 0.5))
    assert kernel.lengthscales == (lz,) and kernel.variance == sf2
    assert noise == 1e-2 + 0.5 + nugget


@pytest.mark.parametrize("k, std", [(1, 0.0), (1, 0.4), (3, 0.4)])
def test_the_evidence_gradient_through_the_widening_is_the_finite_difference(k, std):
    rng = np.random.default_rng(k)
    X, y = rng.normal(size=(25, 3)), rng.normal(size=25)
    noise = InputNoise(std, 3, 0.01)
    p = np.append(rng.normal(size=k + 1) * 0.3, -3.0)
    value, grad = _evidence(p, "se", noise, X, y, 0.1)
    h = 1e-6
    numeric = [(_evidence(p + e, "se", noise, X, y, 0.1)[0]
                - _evidence(p - e, "se", noise, X, y, 0.1)[0]) / (2 * h) for e in np.eye(k + 2) * h]
    assert np.allclose(grad, numeric, rtol=1e-5, atol=1e-6)


def test_the_prior_is_centred_on_the_declared_values_and_its_box_is_relative():
    prior, box = declared_prior(squared_exponential(2.0, 0.5), 1e-3)
    assert np.allclose(np.exp(prior.centre), [2.0, 0.5, 1e-3])
    assert np.allclose(np.exp(box[0]), [1.0, 4.0])
    assert prior.log_density(prior.centre)[0] == 0.0


FULL = bool(__import__("os").environ.get("POBO_FULL"))


@pytest.mark.slow
def test_the_default_fit_keeps_what_the_release_gives_on_hospital(tmp_path):
    """Issue 47: with default flags (--fit auto = map) hospital's GP-UCB finds at least
    1.8x random selection's expected hits, and no fewer than --fit fixed by more than two
    standard errors of the paired difference. On the embedded patients (the real file is
    optional; docs/frontier.md has the real file's figures: 22.6 +- 0.8 hits against
    random's 8.8 and fixed's 19.75 over 40 seeds). 4 seeds here, 20 under --full."""
    from pobo.blocking import run_blocking
    from pobo.runspec import RunConfig
    from pobo.scenarios.hospital import build
    from pobo.session import run_inproc

    problem = build(0)
    seeds = 20 if FULL else 4
    hits: dict[str, list[float]] = {"auto": [], "fixed": []}
    random = None
    for seed in range(seeds):
        for mode in hits:
            result = run_blocking(run_inproc(
                RunConfig("hospital", seed=seed, hyper=HyperFit(mode)), tmp_path / f"{mode}-{seed}",
                problem=problem, transcripts=False))
            hits[mode].append(result["hits"][-1])
            random = result["random_hits_expected"]
    auto, diff = np.mean(hits["auto"]), np.subtract(hits["auto"], hits["fixed"])
    assert auto >= 1.8 * random, (hits, random)
    assert diff.mean() >= -2 * diff.std(ddof=1) / math.sqrt(seeds), hits


def test_a_sketch_is_projected_on_its_signal_directions_and_its_noise_kept_isotropic():
    """Z = (X M + omega G) / sqrt(r), d = 2 of r = 10: principal_sketch keeps 2 directions,
    the signal's distances within a few per cent, and the noise in them of the release's
    std (so the widening counts 2 noisy dimensions, not 10); a modeler of a sketch uses it."""
    from pobo.parties.modeler import noise_dims, principal_sketch
    rng = np.random.default_rng(4)
    n, d, r, omega = 20000, 2, 10, 3.0
    X = rng.uniform(-10, 10, size=(n, d))
    X -= X.mean(axis=0)
    M = rng.standard_normal((d, r))
    signal, noise = X @ M / math.sqrt(r), omega * rng.standard_normal((n, r)) / math.sqrt(r)
    Z = signal + noise
    Zp = principal_sketch(Z, omega / math.sqrt(r))
    assert Zp.shape == (n, 2) and noise_dims(Zp) == 2
    basis = np.linalg.lstsq(Z, Zp, rcond=None)[0]  # the projection Z -> Zp
    assert np.linalg.norm(signal @ basis) / np.linalg.norm(signal) > 0.99
    assert np.std(noise @ basis) == pytest.approx(omega / math.sqrt(r), rel=0.05)
    assert principal_sketch(signal + noise / 1e3, omega / math.sqrt(r) / 1e3).shape == (n, 2)
    full = rng.standard_normal((n, r)) * 5.0  # every direction far above the noise
    assert principal_sketch(full, 1.0) is full
    release = ProjectedDataset("gaussian-sketch", 1.0, 1e-5, omega, Z, omega / math.sqrt(r))
    params = SessionParams("t", n, r, 10, "private", (), KernelParams("se", 1.0, 1.0, 1e-2),
                           "seeded")
    modeler = Modeler(params, release, GPUCB(), np.random.default_rng(0), HyperFit("fixed"))
    assert modeler.gp.Z.shape == (n, 2) and modeler.input_noise.dims == 2
