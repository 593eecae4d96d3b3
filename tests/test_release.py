"""DP release of the result (Kusner et al.) and the privacy ledger."""
import asyncio
import itertools
import math
import os

import numpy as np
import pytest
from scipy import stats
from scipy.special import softmax

from pobo.parties.kernels import squared_exponential
from pobo.parties.noise import NoiseSource
from pobo.parties.release import (
    exponential_mechanism, gamma_bound, greedy_information_gain, kusner_q, lipschitz_release,
    lipschitz_sensitivity, noise_free_release, noisy_release, similarity_term, ucb_replay,
)
from pobo.protocol.errors import ErrorCode, PolicyViolation, ProtocolError
from pobo.protocol.ledger import LOCAL, Budget, Entry, Ledger, PrivacyBudgetExceeded
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, Hello, Query, Release, ReleaseRequest, Reward, Welcome,
)
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary


def _source(seed=0):
    return NoiseSource(np.random.default_rng(seed))


@pytest.mark.slow
def test_exponential_mechanism_frequencies_match_the_softmax():
    """20,000 draws over 6 candidates (5,000 without pytest --full: each draw is an exact
    sampler's); chi-square against softmax(eps s / 2 Delta) at 1%, and the same draws are
    rejected against uniform (the test has power)."""
    scores = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 4.0])
    src = _source(1)
    draws_n = 20000 if os.environ.get("POBO_FULL") else 5000
    draws = [exponential_mechanism(scores, 2.0, 1.0, src) for _ in range(draws_n)]
    counts = np.bincount(draws, minlength=6)
    expected = softmax(2.0 * scores / 2.0) * draws_n
    assert stats.chisquare(counts, expected).pvalue > 0.01
    assert stats.chisquare(counts, np.full(6, draws_n / 6)).pvalue < 1e-10


def test_noisy_release_uses_the_papers_scales():
    """Algorithm 1 of the full paper, by hand: q = sigma sqrt(8 log(3/delta)) (line 10 and
    Theorem 3's proof, |2 alpha^| <= q), C1 = 8/log(1 + sigma^-2), c with log(3|X|/delta)."""
    n, T, eps, delta, gamma, sigma = 50, 20, 0.7, 1e-3, 12.0, 0.1
    mean = np.linspace(0, 1, n)
    res = noisy_release(mean, np.array([0.2, 0.9, 0.5]), T, eps, delta, gamma, sigma, _source())
    c = 2 * math.sqrt(0.1 * math.log(3 * n / delta))  # default k(D, D') = 0.9
    q = 0.1 * math.sqrt(8 * math.log(3000.0))  # sigma sqrt(8 log(3/delta)), delta = 1e-3
    C1 = 8 / math.log(1 + 100.0)  # sigma^-2 = 100
    beta_T = 2 * math.log(50 * 400 * math.pi**2 / 3e-3)  # |X| T^2 pi^2 / (3 delta)
    beta_T1 = 2 * math.log(50 * 441 * math.pi**2 / 3e-3)
    expected = math.sqrt(C1 * beta_T * gamma) / (eps * math.sqrt(T)) + c / eps + q / eps
    assert res.laplace_scale == pytest.approx(expected, rel=1e-12)
    assert res.em_sensitivity == pytest.approx(2 * math.sqrt(beta_T1) + c, rel=1e-12)
    assert kusner_q(0.1, 1e-3) == pytest.approx(q, rel=1e-12)
    assert similarity_term(n, delta, 1.0, 3) == 0.0


def test_noise_free_release_is_the_last_sample_with_the_bound_at_T():
    """Algorithm 2 of the full paper: f(x_T) (line 5, not the maximum) plus
    Lap(A e^{-T tau/(log T)^{d/4}}/eps + c/eps) (line 4), c with log(2|X|/delta) (line 3)."""
    observed = np.array([5.0, 3.0, 2.0])  # T = 3: max 5, max over t >= 2 is 3, last is 2
    res = noise_free_release(observed, 100, 2, 0.5, 1e-3, A=2.0, tau=0.3, source=_source())
    c = 2 * math.sqrt(0.1 * math.log(2 * 100 / 1e-3))
    bound = 2.0 * math.exp(-3 * 0.3 / math.sqrt(math.log(3)))  # (log T)^{d/4}, d = 2
    assert res.laplace_scale == pytest.approx((bound + c) / 0.5, rel=1e-12)
    exact = noise_free_release(observed, 100, 2, 1e9, 1e-3, 2.0, 0.3, _source(5))
    assert exact.value == pytest.approx(2.0, abs=1e-6)  # the last sample, not 5 or 3
    with pytest.raises(ValueError, match="T >= 2"):
        noise_free_release(np.array([1.0]), 100, 2, 0.5, 1e-3, 2.0, 0.3, _source())


def test_noise_free_noise_shrinks_with_T_as_de_freitas_bound():
    """The Laplace scale minus c/eps is A e^{-T tau/(log T)^{d/4}}/eps at each T: strictly
    decreasing in T (d = 2, T >= 2 > e^{d/4}) towards the c/eps floor."""
    A, tau, d, n, eps, delta = 50.0, 0.2, 2, 100, 0.5, 1e-3
    c = 2 * math.sqrt(0.1 * math.log(2 * n / delta))
    scales = []
    for T in range(2, 41):
        res = noise_free_release(np.zeros(T), n, d, eps, delta, A, tau, _source())
        hand = (A * math.exp(-T * tau / math.log(T) ** (d / 4)) + c) / eps
        assert res.laplace_scale == pytest.approx(hand, rel=1e-12)
        scales.append(res.laplace_scale)
    assert all(b < a for a, b in zip(scales, scales[1:]))
    assert scales[0] - scales[-1] > 50.0  # a real decrease, not round-off
    assert scales[-1] > c / eps


def test_lipschitz_scales():
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
    ledger = Ledger(Budget(5.0, 1e-2))
    ledger.charge(Entry("po-gp-ucb-projection", 3.0, 1e-5))
    for row in (4, 4, 7):
        ledger.charge(Entry("ctl-laplace", 1.0, 0.0, LOCAL, row))
    ledger.charge(Entry("release:noisy", 1.5, 2e-3))
    assert ledger.central() == (4.5, pytest.approx(2.01e-3))
    loc = ledger.local()
    assert (loc["reports"], loc["rows"], loc["worst_row"], loc["max_row_epsilon_basic"]) == (3, 2, 4, 2.0)
    assert 1.99 < loc["max_row_epsilon"] <= 2.0  # the accountant at the row delta
    with pytest.raises(PrivacyBudgetExceeded):
        ledger.charge(Entry("release:noise-free", 1.0, 0.0))
    assert ledger.central()[0] == 4.5  # the refused charge left nothing behind
    assert ledger.to_dict()["central"]["epsilon_basic"] == 4.5
    assert ledger.to_dict()["central"]["epsilon"] <= 4.5  # the accountant at delta 1e-2


def test_run_ledger_with_projection_ldp_and_release(tmp_path):
    from pobo.session import RunConfig, run_inproc

    cfg = RunConfig(T=6, options={"grid": 12}, ldp_epsilon=2.0, release="noisy",
                    release_epsilon=0.5, release_delta=1e-8)
    result = asyncio.run(run_inproc(cfg, tmp_path))
    ledger = result["ledger"]
    assert [e["mechanism"] for e in ledger["entries"]] == [
        "gaussian-rows", "release:noisy"]
    assert ledger["central"]["epsilon_basic"] == pytest.approx(math.exp(1.1) + 2 * 0.5)
    assert ledger["central"]["epsilon"] <= ledger["central"]["epsilon_basic"] + 1e-12
    assert ledger["central"]["delta_basic"] == pytest.approx(1e-5 + 2e-8)
    assert ledger["local"]["reports"] == 6
    assert ledger["local"]["max_row_epsilon_basic"] == pytest.approx(
        2.0 * ledger["local"]["worst_row_reports"])
    assert ledger["local"]["max_row_epsilon"] <= ledger["local"]["max_row_epsilon_basic"]
    assert ledger["session"]["central"] == ledger["central"]  # the default budget, both
    assert ledger["central"]["budget_epsilon"] == pytest.approx(math.exp(1.1) + 2.0)
    assert result["release"]["algorithm"] == "noisy"
    assert result["modeler"]["release"]["value"] == result["release"]["value"]


def test_budget_refuses_a_release_before_noise_and_a_session_that_cannot_start(tmp_path):
    from pobo.session import RunConfig, prepare_curator, run_inproc

    cfg = RunConfig(T=4, options={"grid": 10}, release="noisy", budget_epsilon=3.5)
    result = asyncio.run(run_inproc(cfg, tmp_path))
    assert result["release"] is None and "privacy_budget" in result["modeler"]["release_error"]
    assert [e["mechanism"] for e in result["ledger"]["entries"]] == ["gaussian-rows"]
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
    from pobo.session import RunConfig, run_inproc

    result = asyncio.run(run_inproc(RunConfig("tuning", T=8, release="lipschitz"), tmp_path))
    rel = result["release"]
    assert rel["algorithm"] == "lipschitz" and rel["delta"] == 0.0
    assert rel["laplace_scale"] == pytest.approx(lipschitz_sensitivity(0.1, 1.0, 1.0, 1.0, 500))
    assert 0.0 <= max(result["measured"]) <= 1.0


# --- Algorithm 1 is granted only after GP-UCB with Kusner's beta_t (its proofs' premise) ---

DELTA = 1e-3


def _problem(noise_var=1e-5):
    from dataclasses import replace

    from pobo.scenarios.synthetic import build
    problem = build(0, grid=6)  # n = 36 on the max-norm-25 grid, SE l = 6.25
    return replace(problem, noise_var=noise_var,
                   kernel=replace(problem.kernel, noise_var=max(noise_var, 1e-5)))


def _params(problem, T, ldp=None):
    from pobo.protocol.messages import Mechanism, SessionParams
    mechanisms = () if ldp is None else (Mechanism("ctl-laplace", ldp.epsilon, ldp.delta),)
    return SessionParams(problem.name, problem.X.shape[0], problem.X.shape[1], T, "non-private",
                         mechanisms, problem.kernel, "seeded", reward_bound=4.0,
                         noise_bound=0.0 if ldp is None else ldp.R)


def _curator(problem, T, rows=(), ldp=None, seed=1):
    """A curator whose record holds `rows` answered (y = f + N(0, noise_var))."""
    from pobo.parties.curator import Curator, Oracle
    curator = Curator(Oracle(problem.f, problem.noise_var), T, np.random.default_rng(seed), ldp)
    rng = np.random.default_rng(seed + 100)
    for seq, row in enumerate(rows, start=1):
        y = float(problem.f[row] + math.sqrt(problem.noise_var) * rng.standard_normal())
        curator.replay(seq, int(row), y, y)
    return curator


def _kusner_record(problem, T, delta=DELTA, seed=1):
    """A curator record and modeler after T rounds of the modeler's Kusner GP-UCB."""
    from pobo.parties.modeler import Modeler
    from pobo.parties.projection import identity_release
    from pobo.parties.strategies import KusnerUCB
    curator = _curator(problem, T, seed=seed)
    modeler = Modeler(_params(problem, T), identity_release(problem.X), KusnerUCB(delta),
                      np.random.default_rng(seed + 1))
    rng = np.random.default_rng(seed + 2)
    for seq in range(1, T + 1):
        row = modeler.next_index()
        y = float(problem.f[row] + math.sqrt(problem.noise_var) * rng.standard_normal())
        curator.replay(seq, row, y, y)
        modeler.observe(row, y)
    return curator, modeler


def _handle(problem, curator, hello, request, ledger):
    from pobo.releases import release_handler
    return release_handler(problem, problem.X, problem.kernel, curator, ledger, _source(7),
                           hello=hello)(request)


def _kusner_hello(delta=DELTA):
    return Hello(PROTOCOL_VERSION, "t", "", "gp-ucb", delta)


def _refused(problem, curator, hello, request):
    """The POLICY refusal of `request`, after checking the ledger was left empty."""
    ledger = Ledger()
    with pytest.raises(ProtocolError) as info:
        _handle(problem, curator, hello, request, ledger)
    assert info.value.code is ErrorCode.POLICY and ledger.entries == []
    return str(info.value)


def test_noisy_release_after_random_rows_is_refused_and_charges_nothing():
    problem, T = _problem(), 8
    rows = np.random.default_rng(3).integers(problem.X.shape[0], size=T)
    curator = _curator(problem, T, rows)
    request = ReleaseRequest("noisy", 1.0, DELTA)
    # even when the Hello claims Kusner's GP-UCB, the replay finds a non-maximiser
    assert "was not a maximiser" in _refused(problem, curator, _kusner_hello(), request)
    # a session that declared random rows, or nothing at all, is refused before any replay
    assert "'random'" in _refused(problem, curator, Hello(PROTOCOL_VERSION, "t", "", "random"),
                                  request)
    assert "no Hello" in _refused(problem, curator, None, request)


def test_noisy_release_after_srinivas_beta_gp_ucb_is_refused():
    problem, T = _problem(), 6
    curator, _ = _kusner_record(problem, T)
    srinivas = Hello(PROTOCOL_VERSION, "t", "", "gp-ucb", 0.0)  # GP-UCB, not Kusner's beta
    assert "not Kusner's beta" in _refused(problem, curator, srinivas,
                                           ReleaseRequest("noisy", 1.0, DELTA))


def test_noisy_release_after_a_kusner_gp_ucb_session_is_granted():
    problem, T = _problem(), 8
    curator, modeler = _kusner_record(problem, T)
    request = modeler.with_kernel(ReleaseRequest("noisy", 1.0, DELTA))
    assert (request.kernel, request.lengthscale, request.signal_var, request.noise_var) == (
        "se", 6.25, 1.0, 1e-5)
    ledger = Ledger()
    reply = _handle(problem, curator, _kusner_hello(), request, ledger)
    assert reply.algorithm == "noisy" and 0 <= reply.index < problem.X.shape[0]
    assert [(e.mechanism, e.epsilon, e.delta) for e in ledger.entries] == [
        ("release:noisy", 2.0, 2 * DELTA)]


def test_a_noisy_release_past_the_budget_says_it_is_charged_twice_what_was_asked():
    """Issue 49: a request for (1, 0.01) was refused as "(eps=2, delta=0.02)" with no word
    of why. Algorithm 1 releases a row and a value, each (eps, delta)-DP: the ledger is
    charged (2 eps, 2 delta), and the refusal says so."""
    problem, T = _problem(), 8
    curator, modeler = _kusner_record(problem, T)
    request = modeler.with_kernel(ReleaseRequest("noisy", 1.0, DELTA))
    ledger = Ledger(Budget(epsilon=1.5, delta=1.0))  # 1 asked fits, the 2 charged does not
    with pytest.raises(PrivacyBudgetExceeded) as info:
        _handle(problem, curator, _kusner_hello(), request, ledger)
    assert f"release of (eps=1, delta={DELTA:g})" in str(info.value)
    assert f"charged (eps=2, delta={2 * DELTA:g})" in str(info.value) and not ledger.entries


def test_a_request_whose_delta_differs_from_the_declared_one_is_refused():
    problem, T = _problem(), 6
    curator, modeler = _kusner_record(problem, T)
    request = modeler.with_kernel(ReleaseRequest("noisy", 1.0, 1e-2))
    why = _refused(problem, curator, _kusner_hello(DELTA), request)
    assert "delta 0.001" in why and "delta 0.01" in why


def test_a_request_kernel_other_than_the_sessions_fails_the_replay_or_the_noise_floor():
    problem, T = _problem(), 8
    curator, modeler = _kusner_record(problem, T)
    from dataclasses import replace
    request = modeler.with_kernel(ReleaseRequest("noisy", 1.0, DELTA))
    # a GP noise below the declared measurement noise would shrink q: refused
    assert "q = sigma" in _refused(problem, curator, _kusner_hello(),
                                   replace(request, noise_var=1e-9))
    # a declared public kernel cannot be swapped for the release (a tiny signal variance
    # would shrink the information gain and with it the noise)
    assert "declared its kernel public" in _refused(problem, curator, _kusner_hello(),
                                                    replace(request, signal_var=1e-8))
    # with initial hyperparameters another length-scale (25, not the session's 6.25)
    # makes other rows the UCB maximisers: the replay refuses
    initial = replace(problem, kernel=replace(problem.kernel, status="initial"))
    assert "was not a maximiser" in _refused(initial, curator, _kusner_hello(),
                                             replace(request, lengthscale=25.0))


def test_fitted_hyperparameters_never_shrink_the_release_noise():
    """With initial hyperparameters the modeler may send the ones it used; the noise is
    then sized with the larger information gain of its kernel and the declared one."""
    from dataclasses import replace
    problem, T = _problem(), 8
    curator, modeler = _kusner_record(problem, T)
    from pobo.parties.noise import NoiseSource
    from pobo.releases import compute
    request = modeler.with_kernel(ReleaseRequest("noisy", 1.0, DELTA))
    Z, kp = problem.X, replace(problem.kernel, status="initial")

    def scale(req):
        return compute(req, problem, Z, kp, curator, NoiseSource(np.random.default_rng(0)),
                       0.9).laplace_scale

    assert scale(replace(request, signal_var=1e-8)) >= scale(request) * (1 - 1e-9)
    assert scale(replace(request, lengthscale=1e3)) >= scale(request) * (1 - 1e-9)


def test_ucb_replay_accepts_ties_and_refuses_a_dominated_row_within_the_tolerance():
    from pobo.parties.release import UCB_RTOL
    Z = np.array([[0.0], [0.0], [10.0]])  # rows 0 and 1 are the same point
    kern, noise = squared_exponential(1.0), 1e-4
    # t = 1: every row ties; t = 2: rows 0 and 1 tie (argmax says 0): 1 is a maximiser too
    assert ucb_replay(Z, kern, noise, [2, 1], [0.0, 0.0], DELTA) is None
    miss = ucb_replay(Z, kern, noise, [2, 2], [0.0, 0.0], DELTA)  # row 2 is now known
    assert (miss.t, miss.index, miss.best_index) == (2, 2, 0)
    assert miss.ucb < miss.best_ucb - UCB_RTOL * (1 + abs(miss.best_ucb))
    assert ucb_replay(Z, kern, noise, [2, 2], [0.0, 0.0], DELTA, rtol=10.0) is None


@pytest.mark.parametrize("ldp_eps", [None, 2.0])
def test_a_whole_kusner_session_over_the_protocol_is_granted(ldp_eps):
    """run_modeler asked for a noisy release switches GP-UCB to Kusner's beta (the LDP
    session replayed on the noisy rewards the modeler saw, with its inflated noise)."""
    from pobo.parties.ldp import ConvertToLaplace
    from pobo.parties.strategies import make_strategy
    ldp = None if ldp_eps is None else ConvertToLaplace(ldp_eps, 4.0, 0.1)
    hello, modeler, ledger, sent = asyncio.run(_session(make_strategy("gp-ucb", 0.3), ldp))
    assert (hello.strategy, hello.release_delta) == ("gp-ucb", DELTA)
    assert modeler.release_error is None and modeler.release.algorithm == "noisy"
    assert [e.mechanism for e in ledger.entries] == ["release:noisy"]
    assert sent.kernel == "se" and sent.noise_var == pytest.approx(
        1e-5 + (0.0 if ldp is None else 2 * ldp.scale**2))
    assert modeler.hyper.mode == "fixed" and not modeler.fits


async def _session(strategy, ldp=None, T=8):
    """One in-process session: run_modeler against serve_session with this release
    handler, which is handed the Hello the curator received."""
    from pobo.parties.projection import identity_release
    from pobo.parties.runners import receive_hello, run_modeler, serve_session
    from pobo.protocol.channel import Channel
    from pobo.protocol.policy import NON_PRIVATE
    from pobo.releases import release_handler
    from pobo.transport.inproc import pipe_pair
    problem = _problem()
    release, params = identity_release(problem.X), _params(problem, T, ldp)
    cpipe, mpipe = pipe_pair()
    cchan = Channel(cpipe, Boundary(NON_PRIVATE, CURATOR), timeout=20)
    mchan = Channel(mpipe, Boundary(NON_PRIVATE, MODELER), timeout=20)
    curator = _curator(problem, T, ldp=ldp)
    ledger, sent = Ledger(), []

    async def curate():
        hello = await receive_hello(cchan)
        handle = release_handler(problem, release.Z, problem.kernel, curator, ledger,
                                 _source(7), hello=hello)
        await serve_session(cchan, curator, params, release, "s", hello=hello,
                            on_release=lambda r: (sent.append(r), handle(r))[1])
        return hello

    hello, modeler = await asyncio.gather(curate(), run_modeler(
        mchan, strategy, np.random.default_rng(4), release=ReleaseRequest("noisy", 1.0, DELTA)))
    return hello, modeler, ledger, sent[0]


def test_the_modeler_runs_kusner_gp_ucb_only_for_a_noisy_release():
    from pobo.parties.strategies import GPUCB, KusnerUCB, declaration, for_release, make_strategy
    ucb = make_strategy("gp-ucb", 0.3)
    assert for_release(ucb, "noisy", DELTA) == KusnerUCB(DELTA)  # no beta scale
    assert declaration(KusnerUCB(DELTA)) == ("gp-ucb", DELTA)
    assert isinstance(for_release(ucb, "noise-free", DELTA), GPUCB)
    assert declaration(for_release(make_strategy("random"), "noisy", DELTA)) == ("random", 0.0)
    from pobo.parties.gp import IncrementalGP
    rng, Z, disagree = np.random.default_rng(0), np.array([[0.0], [1.0], [3.0]]), 0
    kusner = math.sqrt(2 * math.log(3 * 4 * math.pi**2 / (3 * DELTA)))  # beta_2, |X| = 3
    srinivas = math.sqrt(2 * math.log(3 * 4 * math.pi**2 / (6 * DELTA)))
    for y in np.linspace(0.5, 10.0, 400):  # a posterior after one reward y at row 0
        gp = IncrementalGP(Z, squared_exponential(1.0), 0.01, 2)
        gp.add(0, float(y))
        want = int(np.argmax(gp.mean + kusner * gp.std))
        disagree += want != int(np.argmax(gp.mean + srinivas * gp.std))
        assert KusnerUCB(DELTA).select(gp, 2, rng) == want
    assert disagree > 0  # the two betas choose differently somewhere on this scan


def test_initial_hyperparameters_stay_fixed_under_kusner_gp_ucb():
    from dataclasses import replace

    from pobo.parties.modeler import HyperFit, Modeler
    from pobo.parties.projection import identity_release
    from pobo.parties.strategies import KusnerUCB
    problem = _problem()
    params = _params(problem, 6)
    params = replace(params, kernel=replace(params.kernel, status="initial"))
    modeler = Modeler(params, identity_release(problem.X), KusnerUCB(DELTA),
                      np.random.default_rng(0), HyperFit("every", kernel="ard-se"))
    assert modeler.hyper.mode == "fixed" and not modeler.gp.kernel.ard


# --- Algorithm 2: noise-free observations (Theorem 5 rests on de Freitas et al.) ---

def test_noise_free_release_needs_exact_observations_seen_without_ldp():
    from pobo.parties.ldp import ConvertToLaplace
    from dataclasses import replace
    undeclared, T = _problem(noise_var=0.0), 5
    rows = np.random.default_rng(5).integers(undeclared.X.shape[0], size=T)
    request = ReleaseRequest("noise-free", 1.0, DELTA)
    assert "declares none" in _refused(undeclared, _curator(undeclared, T, rows), None, request)
    exact = replace(undeclared, release={"A": 2.0, "tau": 0.3})  # the scenario's assumption
    ledger = Ledger()  # any query rule: the curator cannot check de Freitas' method
    reply = _handle(exact, _curator(exact, T, rows), None, request, ledger)
    assert reply.algorithm == "noise-free" and len(ledger.entries) == 1
    noisy = _problem(noise_var=1e-2)
    assert "noise-free observations" in _refused(noisy, _curator(noisy, T, rows), None, request)
    ldp = _curator(exact, T, rows, ldp=ConvertToLaplace(1.0, 4.0, 0.1))
    assert "local-DP" in _refused(exact, ldp, None, request)


# --- the new Hello and ReleaseRequest fields on the wire and at the boundary ---

def test_new_fields_round_trip_and_the_policy_checks_them(params, release):
    from dataclasses import replace

    from pobo.parties.strategies import STRATEGIES
    from pobo.protocol.codec import decode, encode
    from pobo.protocol.policy import DECLARED_STRATEGIES
    assert set(STRATEGIES) | {""} == DECLARED_STRATEGIES
    full = ReleaseRequest("noisy", 1.0, DELTA, "matern52", 2.5, 1.5, 1e-3)
    for message in (_kusner_hello(), full, ReleaseRequest("noisy", 1.0, DELTA)):
        assert decode(encode(message)) == message
    for bad in (Hello(PROTOCOL_VERSION, "t", "", "ei"),
                Hello(PROTOCOL_VERSION, "t", "", "random", DELTA),
                Hello(PROTOCOL_VERSION, "t", "", "gp-ucb", 1.5)):
        with pytest.raises(ProtocolError):
            Boundary(PRIVATE, CURATOR).incoming(bad)
    Boundary(PRIVATE, CURATOR).incoming(_kusner_hello())
    for bad in (replace(full, kernel="ard-se"), replace(full, lengthscale=-1.0),
                replace(full, noise_var=float("inf")), replace(full, signal_var=float("nan"))):
        cur = Boundary(PRIVATE, CURATOR)
        cur.incoming(Hello(PROTOCOL_VERSION, "t"))
        for msg in (Welcome(PROTOCOL_VERSION, "s", params), Dataset(release)):
            cur.outgoing(msg)
        for seq in range(1, params.T + 1):
            cur.incoming(Query(seq, seq))
            cur.outgoing(Reward(seq, seq, 0.5))
        with pytest.raises(ProtocolError):
            cur.incoming(bad)
