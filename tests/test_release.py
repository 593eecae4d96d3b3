"""DP release of the result (Kusner et al.) and the privacy ledger."""
import asyncio
import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import softmax

from parties.kernels import squared_exponential
from parties.noise import NoiseSource
from parties.release import (
    beta_kusner, exponential_mechanism, gamma_bound, greedy_information_gain,
    lipschitz_release, lipschitz_sensitivity, noise_free_release, noisy_release,
    similarity_term,
)
from protocol.errors import PolicyViolation
from protocol.ledger import CENTRAL, LOCAL, Entry, Ledger, PrivacyBudgetExceeded
from protocol.messages import (
    PROTOCOL_VERSION, Dataset, Hello, Query, Release, ReleaseRequest, Reward, Welcome,
)
from protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
from scenarios.session import RunConfig, prepare_curator, run_inproc


def _source(seed=0):
    return NoiseSource(np.random.default_rng(seed))


def test_exponential_mechanism_frequencies_match_the_softmax():
    """20,000 draws over 6 candidates; chi-square against softmax(eps s / 2 Delta) at 1%,
    and the same draws are rejected against uniform (the test has power)."""
    scores = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 4.0])
    src = _source(1)
    draws = [exponential_mechanism(scores, 2.0, 1.0, src) for _ in range(20000)]
    counts = np.bincount(draws, minlength=6)
    expected = softmax(2.0 * scores / 2.0) * 20000
    assert stats.chisquare(counts, expected).pvalue > 0.01
    assert stats.chisquare(counts, np.full(6, 20000 / 6)).pvalue < 1e-10


def test_noisy_release_uses_the_papers_scales():
    n, T, eps, delta, gamma, sigma = 50, 20, 0.7, 1e-3, 12.0, 0.1
    mean = np.linspace(0, 1, n)
    res = noisy_release(mean, np.array([0.2, 0.9, 0.5]), T, eps, delta, gamma, sigma, _source())
    c = 2 * math.sqrt(0.1 * math.log(3 * n / delta))  # default k(D, D') = 0.9
    q = sigma * math.sqrt(4 * math.log(3 / delta))
    C1 = 8 / math.log(1 + sigma**-2)
    beta_T = 2 * math.log(n * T**2 * math.pi**2 / (3 * delta))
    expected = math.sqrt(C1 * beta_T * gamma) / (eps * math.sqrt(T)) + c / eps + q / eps
    assert res.laplace_scale == pytest.approx(expected, rel=1e-12)
    assert res.em_sensitivity == pytest.approx(2 * math.sqrt(beta_kusner(T + 1, n, delta)) + c)
    assert similarity_term(n, delta, 1.0, 3) == 0.0


def test_noise_free_and_lipschitz_scales():
    res = noise_free_release(np.array([5.0, 1.0, 2.0]), 100, 2, 0.5, 1e-3, A=2.0, tau=3.0,
                             source=_source())
    c = 2 * math.sqrt(0.1 * math.log(2 * 100 / 1e-3))
    assert res.laplace_scale == pytest.approx((2.0 * math.exp(-6.0 / math.log(2) ** 0.5) + c) / 0.5)
    delta_f = (1.0 - 0.1) * 1.0 / (1.0 * 0.1) + min(1.0 / 500, 1.0 / (500 * 0.1))
    assert lipschitz_sensitivity(0.1, 1.0, 1.0, 1.0, 500) == pytest.approx(delta_f)
    res = lipschitz_release(np.array([0.3, 0.6]), 2.0, 0.1, 1.0, 1.0, 1.0, 500, _source())
    assert res.laplace_scale == pytest.approx(delta_f / 2.0) and res.delta == 0.0


def test_large_epsilon_releases_the_non_private_best_and_small_epsilon_spreads():
    mean = np.array([0.1, 0.9, 0.3, 0.2])
    observed = np.array([0.4, 0.85])
    res = noisy_release(mean, observed, 10, 1e6, 1e-3, 5.0, 0.1, _source(2))
    assert res.index == 1 and res.value == pytest.approx(0.85, abs=1e-3)
    src = _source(3)
    small = [noisy_release(mean, observed, 10, 1e-3, 1e-3, 5.0, 0.1, src) for _ in range(3000)]
    idx = np.bincount([r.index for r in small], minlength=4)
    assert stats.chisquare(idx).pvalue > 0.01  # near-uniform, as exp(eps mu / 2 Delta) ~ 1
    values = np.array([r.value for r in small]) - 0.85
    scale = small[0].laplace_scale
    assert stats.kstest(values, stats.laplace(scale=scale).cdf).pvalue > 0.01


def test_greedy_gamma_bound_is_an_upper_bound_on_the_exact_maximum():
    Z = np.random.default_rng(4).uniform(0, 3, size=(9, 1))
    kern, noise, T = squared_exponential(0.7), 0.05, 3
    exact = 0.0
    for subset in itertools.combinations(range(9), T):
        K = kern(Z[list(subset)], Z[list(subset)])
        exact = max(exact, 0.5 * np.linalg.slogdet(np.eye(T) + K / noise)[1])
    greedy = greedy_information_gain(Z, kern, noise, T)
    assert (1 - 1 / math.e) * exact <= greedy + 1e-9 <= exact + 1e-9
    assert gamma_bound(Z, kern, noise, T) >= exact


def test_ledger_composes_central_parts_and_keeps_local_reports_per_row():
    ledger = Ledger(budget_epsilon=5.0, budget_delta=1e-2)
    ledger.charge(Entry("po-gp-ucb-projection", 3.0, 1e-5))
    for row in (4, 4, 7):
        ledger.charge(Entry("ctl-laplace", 1.0, 0.0, LOCAL, row))
    ledger.charge(Entry("release:noisy", 1.5, 2e-3))
    assert ledger.central() == (4.5, pytest.approx(2.01e-3))
    loc = ledger.local()
    assert (loc["reports"], loc["rows"], loc["worst_row"], loc["epsilon"]) == (3, 2, 4, 2.0)
    with pytest.raises(PrivacyBudgetExceeded):
        ledger.charge(Entry("release:noise-free", 1.0, 0.0))
    assert ledger.central()[0] == 4.5  # the refused charge left nothing behind
    assert ledger.to_dict()["central"]["epsilon"] == 4.5


def test_run_ledger_with_projection_ldp_and_release(tmp_path):
    cfg = RunConfig(T=6, options={"grid": 12}, ldp_epsilon=2.0, release="noisy",
                    release_epsilon=0.5, release_delta=1e-3)
    result = asyncio.run(run_inproc(cfg, tmp_path))
    ledger = result["ledger"]
    assert [e["mechanism"] for e in ledger["central_entries"]] == [
        "po-gp-ucb-projection", "release:noisy"]
    assert ledger["central"]["epsilon"] == pytest.approx(math.exp(1.1) + 2 * 0.5)
    assert ledger["central"]["delta"] == pytest.approx(1e-5 + 2e-3)
    assert ledger["local"]["reports"] == 6
    assert ledger["local"]["epsilon"] == pytest.approx(2.0 * ledger["local"]["worst_row_reports"])
    assert result["release"]["algorithm"] == "noisy"
    assert result["modeler"]["release"]["value"] == result["release"]["value"]


def test_budget_refuses_a_release_before_noise_and_a_session_that_cannot_start(tmp_path):
    cfg = RunConfig(T=4, options={"grid": 10}, release="noisy", budget_epsilon=3.5)
    result = asyncio.run(run_inproc(cfg, tmp_path))
    assert result["release"] is None and "privacy_budget" in result["modeler"]["release_error"]
    assert len(result["ledger"]["central_entries"]) == 1
    with pytest.raises(PrivacyBudgetExceeded):
        prepare_curator(RunConfig(T=4, options={"grid": 10}, budget_epsilon=1.0))


def test_a_second_release_request_is_refused_by_the_policy(params, release):
    cur, mod = Boundary(PRIVATE, CURATOR), Boundary(PRIVATE, MODELER)
    steps = [Hello(PROTOCOL_VERSION, "t"), Welcome(PROTOCOL_VERSION, "s", params), Dataset(release)]
    for seq in range(1, params.T + 1):
        steps += [Query(seq, seq), Reward(seq, seq, 0.5)]
    for msg in steps:
        sender, receiver = (mod, cur) if isinstance(msg, (Hello, Query)) else (cur, mod)
        sender.outgoing(msg)
        receiver.incoming(msg)
    request = ReleaseRequest("noisy", 1.0, 1e-3)
    mod.outgoing(request)
    cur.incoming(request)
    with pytest.raises(PolicyViolation):
        mod.outgoing(request)
    with pytest.raises(PolicyViolation):
        cur.incoming(request)
    reply = Release("noisy", 1.0, 1e-3, 2, 0.7, 3.0)
    cur.outgoing(reply)
    mod.incoming(reply)
    with pytest.raises(Exception):
        cur.outgoing(reply)  # and only one release


def test_a_release_request_before_the_last_query_is_refused(params, release):
    cur = Boundary(PRIVATE, CURATOR)
    for msg in (Hello(PROTOCOL_VERSION, "t"),):
        cur.incoming(msg)
    for msg in (Welcome(PROTOCOL_VERSION, "s", params), Dataset(release)):
        cur.outgoing(msg)
    with pytest.raises(PolicyViolation, match="before the last query"):
        cur.incoming(ReleaseRequest("noisy", 1.0, 1e-3))


def test_tuning_scenario_lipschitz_release_end_to_end(tmp_path):
    result = asyncio.run(run_inproc(RunConfig("tuning", T=8, release="lipschitz"), tmp_path))
    rel = result["release"]
    assert rel["algorithm"] == "lipschitz" and rel["delta"] == 0.0
    assert rel["laplace_scale"] == pytest.approx(lipschitz_sensitivity(0.1, 1.0, 1.0, 1.0, 500))
    assert 0.0 <= max(result["measured"]) <= 1.0
