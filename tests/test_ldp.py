"""Locally private rewards (Zhou & Tan): the lattice Laplace noise, CTL, the policy, and
the robust strategies' building blocks."""
import asyncio
import math
import os

import numpy as np
import pytest
from scipy import stats

from pobo.parties.kernels import matern52, squared_exponential
from pobo.parties.ldp import ConvertToLaplace, subweibull_clip
from pobo.parties.noise import NoiseSource, discrete_laplace, lattice_laplace, lattice_step
from pobo.parties.robust import (
    RewardModel, TruncatedGPUCB, median_of_means_index, nystrom_embedding,
)
from pobo.protocol.errors import PolicyViolation
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, Hello, KernelParams, Mechanism, Query, Reward, SessionParams,
    Welcome,
)
from pobo.protocol.policy import CURATOR, DP_PROJECTION, LDP_REWARD, MODELER, PRIVATE, Boundary
from pobo.protocol.transcript import read_transcript
from pobo.protocol.signing import body_of
from pobo.protocol.codec import decode
from pobo.session import RunConfig, run_inproc

REDUCED = not os.environ.get("POBO_FULL")  # pytest --full: the full-length checks


def _draws(scale_sensitivity=2.0, epsilon=1.0, count=4000, seed=0):
    source = NoiseSource(np.random.default_rng(seed))
    return np.array([lattice_laplace(0.3, scale_sensitivity, epsilon, source)
                     for _ in range(count)]) - 0.3


def test_lattice_laplace_has_the_laplace_distribution_and_the_test_has_power():
    """KS at n = 4000: the right scale passes at 1%, scales x0.7 and x1.3 are rejected."""
    x = _draws()  # scale = sensitivity / epsilon = 2
    assert stats.kstest(x, stats.laplace(scale=2.0).cdf).pvalue > 0.01
    assert stats.kstest(x, stats.laplace(scale=1.4).cdf).pvalue < 1e-6
    assert stats.kstest(x, stats.laplace(scale=2.6).cdf).pvalue < 1e-6


def test_lattice_outputs_lie_on_the_power_of_two_grid():
    source = NoiseSource(np.random.default_rng(1))
    g = lattice_step(2.0)
    assert g == 2.0 ** (math.frexp(2.0)[1] - 30)
    for value in (0.1, 0.3333333, -7.25):
        out = lattice_laplace(value, 2.0, 1.0, source)
        assert (out / g) == int(out / g)


def test_discrete_laplace_is_symmetric_with_the_right_decay():
    source = NoiseSource(np.random.default_rng(2))
    from fractions import Fraction
    z = np.array([discrete_laplace(Fraction(3, 2), source) for _ in range(6000)])
    assert abs(z.mean()) < 0.1
    # P(Z = 0) = (1 - e^{-1/t}) / (1 + e^{-1/t}) for scale t = 1.5
    p0 = (1 - math.exp(-1 / 1.5)) / (1 + math.exp(-1 / 1.5))
    assert np.mean(z == 0) == pytest.approx(p0, abs=0.02)


def test_seeded_noise_is_reproducible_and_secure_noise_is_not():
    assert np.array_equal(_draws(count=50, seed=7), _draws(count=50, seed=7))
    secure = NoiseSource()
    a = [lattice_laplace(0.0, 2.0, 1.0, secure) for _ in range(20)]
    b = [lattice_laplace(0.0, 2.0, 1.0, secure) for _ in range(20)]
    assert a != b and secure.mode == "os-csprng"
    assert NoiseSource(np.random.default_rng(0)).mode == "seeded"


def test_ctl_clips_to_the_declared_bound_before_adding_noise():
    ctl = ConvertToLaplace(epsilon=1e6, B=1.0, R=0.5)  # almost no noise: the clip shows
    source = NoiseSource(np.random.default_rng(3))
    assert ctl.scale == pytest.approx(3.0 / 1e6)
    assert ctl.privatise(100.0, source) == pytest.approx(1.5, abs=1e-4)
    assert ctl.privatise(-100.0, source) == pytest.approx(-1.5, abs=1e-4)
    assert ctl.privatise(0.2, source) == pytest.approx(0.2, abs=1e-4)
    assert subweibull_clip(2.0, 0.5, 100, 1e-6) == pytest.approx(2 * math.log(1e8) ** 0.5)
    with pytest.raises(ValueError):
        ConvertToLaplace(epsilon=0.0, B=1.0, R=1.0)


def _ldp_session():
    return SessionParams("t", 5, 2, 3, "private",
                         (Mechanism(DP_PROJECTION, 1.0, 1e-5), Mechanism(LDP_REWARD, 1.0, 0.0)),
                         KernelParams("se", 1.0, 1.0, 1e-4), "seeded", 1.0, 1.0, "uniform")


def test_policy_refuses_a_reward_that_did_not_come_out_of_the_mechanism(release):
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    for msg in (Hello(PROTOCOL_VERSION, "t"), Welcome(PROTOCOL_VERSION, "s", _ldp_session()),
                Dataset(release), Query(1, 2)):
        sender, receiver = (mod, cur) if isinstance(msg, (Hello, Query)) else (cur, mod)
        sender.outgoing(msg)
        receiver.incoming(msg)
    raw = Reward(1, 2, 0.123)  # a raw float: no mechanism tag
    with pytest.raises(PolicyViolation):
        cur.outgoing(raw)
    with pytest.raises(PolicyViolation):
        mod.incoming(raw)
    cur.outgoing(Reward(1, 2, 0.5, LDP_REWARD))
    mod.incoming(Reward(1, 2, 0.5, LDP_REWARD))


def test_an_ldp_session_end_to_end_records_the_mechanism_and_randomness(tmp_path):
    cfg = RunConfig("ldp-synthetic", T=12, seed=4, ldp_epsilon=1.0, strategy="tgp-ucb")
    result = asyncio.run(run_inproc(cfg, tmp_path))
    assert result["ldp_epsilon"] == 1.0 and result["randomness"] == "seeded"
    from pobo.scenarios.ldp_synthetic import DECLARED_B
    # B is the scenario's declared constant, never max |f| of the instance
    assert result["ldp_scale"] == pytest.approx(2 * (DECLARED_B + 1.0) / 1.0)
    frames = [decode(body_of(r.frame)) for r in read_transcript(tmp_path / "modeler.transcript")]
    welcome = next(m for m in frames if isinstance(m, Welcome))
    assert any(m.name == LDP_REWARD for m in welcome.params.mechanisms)
    rewards = [m for m in frames if isinstance(m, Reward)]
    assert len(rewards) == 12 and all(m.noise == LDP_REWARD for m in rewards)
    # what crossed is the privatised value, not the measurement
    assert [m.value for m in rewards] == result["rewards"] != result["measured"]
    again = asyncio.run(run_inproc(cfg, tmp_path / "again"))
    assert again["rewards"] == result["rewards"]  # seeded: reproducible


def test_tgp_truncates_at_b_t():
    model = RewardModel(B=1.0, R=1.0, ldp_eps=1.0)
    assert model.laplace_scale == 4.0
    assert model.truncation(1) == 2.0
    assert model.truncation(10) == pytest.approx(2.0 + 4.0 * math.log(10))
    Z = np.linspace(0, 1, 20)[:, None]
    learner = TruncatedGPUCB(Z, squared_exponential(0.2), 5, model)
    learner.observe(3, 1.9)   # b_1 = 2: kept
    learner.observe(4, 2.1)   # b_2 = 2 + 4 ln 2 = 4.77: kept
    learner.observe(5, -5.0)  # b_3 = 6.39: kept
    learner.observe(6, 8.0)   # b_4 = 7.55: zeroed
    assert learner.gp.y[:4].tolist() == [1.9, 2.1, -5.0, 0.0]
    assert learner.beta(5) > learner.beta(2) > 0


@pytest.mark.parametrize("kernel", [squared_exponential(0.2), matern52(0.3)])
def test_nystrom_embedding_reproduces_the_kernel_on_its_dictionary(kernel):
    rng = np.random.default_rng(5)
    points = rng.uniform(0, 1, size=(30, 2))
    points = np.vstack([points, points[:5]])  # repeats add no direction
    D, phi = nystrom_embedding(kernel, points, np.ones(len(points)), q=10.0, rng=rng)
    assert len(D) == 30  # q sigma^2 >= 1: every distinct point is kept
    F = phi(D)
    assert np.allclose(F @ F.T, kernel(D, D), atol=1e-8)
    x = rng.uniform(0, 1, size=(4, 2))
    assert np.all(np.einsum("ij,ij->i", phi(x), phi(x)) <= kernel.diag(x) + 1e-9)


def test_median_of_means_picks_the_estimate_the_papers_rule_picks():
    """Five estimates on a line in V = I: four cluster near 1, one outlier at 50. The rule
    k* = argmin_j median_{s != j} ||theta_j - theta_s||_V picks the central cluster member."""
    thetas = np.array([[1.0], [1.2], [0.9], [50.0], [1.05]])
    V = np.eye(1)
    # by hand: medians of distances to the others:
    # j=0: {0.2, 0.1, 49, 0.05} -> 0.15; j=1: {0.2, 0.3, 48.8, 0.15} -> 0.25
    # j=2: {0.1, 0.3, 49.1, 0.15} -> 0.225; j=3: ~49; j=4: {0.05, 0.15, 0.15, 48.95} -> 0.15
    # ties between 0 and 4 at 0.15 go to the first index
    assert median_of_means_index(thetas, V) == 0
    # V reweights: a 2-d case where the outlier differs only in a heavily weighted direction
    thetas2 = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 3.0], [0.05, 0.0]])
    assert median_of_means_index(thetas2, np.diag([1.0, 100.0])) in (0, 3)
    assert median_of_means_index(thetas2, np.diag([1.0, 100.0])) != 2


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [
    "tgp-ucb", pytest.param("ata-gp-ucb", marks=pytest.mark.full),  # minutes: pytest --full
    "moma-gp-ucb"])
def test_each_ldp_strategy_beats_random_on_ldp_synthetic(strategy, tmp_path):
    """Cumulative regret at the documented default beta scale, eps = 1, SE kernel, against
    uniform random play on the same seeds. Full: T = 2000, 4 seeds, strategy <= 0.6 x
    random; reduced (no --full): T = 1000, 2 seeds, <= 0.8 x random (MoMA's epochs are ~300
    plays, so a shorter run leaves it only three). ATA-GP-UCB, whose per-round cost grows
    with t (minutes even at T = 500), runs only under --full. MoMA's full margin is 0.7: with the
    declared B = 10 (not the instance's max |f| ~ 4.5, which leaked a value) the Laplace
    scale 2(B + R)/eps doubled, and its theorem-sized epochs got it 0.64 x random
    (4 seeds); issue 15 revisits its k."""
    T, seeds, margin = (1000, 2, 0.8) if REDUCED else (2000, 4, 0.6)
    if strategy == "moma-gp-ucb" and not REDUCED:
        margin = 0.7
    totals = {}
    for name in (strategy, "random"):
        regrets = []
        for seed in range(seeds):
            cfg = RunConfig("ldp-synthetic", T=T, seed=seed, ldp_epsilon=1.0, strategy=name)
            result = asyncio.run(run_inproc(cfg, tmp_path / f"{name}-{seed}",
                                            transcripts=False))
            regrets.append(result["cumulative_regret"][-1])
        totals[name] = float(np.mean(regrets))
    assert totals[strategy] <= margin * totals["random"], totals


def test_ata_gp_ucb_runs_a_short_session_to_its_end(tmp_path):
    """The default suite's run of ATA-GP-UCB (its regret check is --full's): a short
    session on ldp-synthetic completes, every query a row, its regret finite."""
    cfg = RunConfig("ldp-synthetic", T=30, seed=0, ldp_epsilon=1.0, strategy="ata-gp-ucb")
    result = asyncio.run(run_inproc(cfg, tmp_path / "ata", transcripts=False))
    assert result["status"] == "ok" and len(result["queries"]) == 30
    assert np.isfinite(result["cumulative_regret"][-1])
