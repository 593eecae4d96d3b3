"""GP-BUCB (Desautels, Krause & Burdick 2014): hallucinated pending observations in the
engine are exact, ask/tell one at a time is the sequential loop to the bit, a batch is
diverse, and batches of 4 find optima about as well as sequential GP-UCB."""
import math
import os

import numpy as np
import pytest

from pobo.parties.gp import IncrementalGP, posterior_dense
from pobo.parties.kernels import matern52, squared_exponential
from pobo.parties.modeler import HyperFit, Modeler
from pobo.parties.projection import identity_release
from pobo.parties.strategies import GPUCB, KusnerUCB, RandomChoice, Robust
from pobo.protocol.messages import KernelParams, Mechanism, ProjectedDataset, SessionParams
from pobo.protocol.policy import LDP_REWARD
from pobo.scenarios.synthetic import build

REDUCED = not os.environ.get("POBO_FULL")  # pytest --full: the full-length checks
NOISE = 0.01


def _engine(kernel, real=6, seed=0):
    """An engine over 300 random candidates holding `real` observations of sin(sum z)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(300, 3))
    f = np.sin(Z.sum(axis=1))
    gp = IncrementalGP(Z, kernel, NOISE, capacity=20, prior_mean=0.3)
    for i in rng.choice(300, size=real, replace=False):
        gp.add(int(i), float(f[i]))
    return gp, f


def _dense(gp, indices, y):
    return posterior_dense(gp.Z, np.asarray(indices), np.asarray(y), gp.kernel, NOISE,
                           prior_mean=0.3)


@pytest.mark.parametrize("kernel", [squared_exponential(1.3, 2.0), matern52(1.1, 1.7)])
def test_pending_keeps_the_mean_and_resolving_out_of_order_gives_the_dense_posterior(kernel):
    """After each hallucination: mean unchanged (1e-12 relative), variance that of the dense
    posterior with the pending rows included; after each resolve, in the order 2, 0, 3, 1:
    mean of the dense posterior of the real values, variance of all rows (1e-9)."""
    gp, f = _engine(kernel)
    real_idx, real_y = (list(a) for a in gp.observations())
    rows = [17, 203, 17 + 1, 99]
    slots = []
    for k, i in enumerate(rows):
        before = gp.mean.copy()
        slots.append(gp.add_pending(i))
        assert np.allclose(gp.mean, before, rtol=1e-12, atol=0)
        _, var = _dense(gp, real_idx + rows[:k + 1], real_y + [0.0] * (k + 1))
        assert np.allclose(gp.var, var, rtol=1e-9, atol=1e-12)
    assert gp.has_pending and len(gp.observations()[0]) == len(real_idx)
    all_var = var
    for k in (2, 0, 3, 1):
        gp.resolve(slots[k], float(f[rows[k]]))
        real_idx.append(rows[k])
        real_y.append(float(f[rows[k]]))
        mean, _ = _dense(gp, real_idx, real_y)
        assert np.allclose(gp.mean, mean, rtol=1e-9, atol=1e-12)
        assert np.allclose(gp.var, all_var, rtol=1e-9, atol=1e-12)
    assert not gp.has_pending
    mean, var = _dense(gp, real_idx, real_y)
    assert np.allclose(gp.mean, mean, rtol=1e-9) and np.allclose(gp.var, var, rtol=1e-9, atol=1e-12)
    assert list(gp.observations()[0]) == real_idx  # in the order they became real


def test_pending_then_resolve_in_order_is_add_to_the_bit_and_the_engine_guards_its_slots():
    kernel = squared_exponential(1.3, 2.0)
    gp, f = _engine(kernel)
    ref, _ = _engine(kernel)
    for i in (5, 77, 140):
        gp.resolve(gp.add_pending(i), float(f[i]))
        ref.add(i, float(f[i]))
    assert np.array_equal(gp.mean, ref.mean) and np.array_equal(gp.var, ref.var)
    assert np.array_equal(gp.alpha[:gp.t], ref.alpha[:ref.t])
    slot = gp.add_pending(8)
    with pytest.raises(ValueError, match="pending"):
        gp.rebuilt(kernel, NOISE, 0.3)
    with pytest.raises(ValueError, match="not pending"):
        gp.resolve(slot + 1, 0.0)
    with pytest.raises(ValueError, match="finite"):
        gp.resolve(slot, float("nan"))
    gp.add(9, float(f[9]))  # a real value while a slot is pending: it goes before it
    mean, _ = _dense(gp, *gp.observations())
    assert np.allclose(gp.mean, mean, rtol=1e-9, atol=1e-12) and gp.has_pending


def _session(n, T, mechanisms=(), **extra):
    return SessionParams("t", n, 2, T, "private", mechanisms,
                         KernelParams("se", 1.0, 1.0, 1e-4), "seeded", **extra)


def _modeler(strategy, hyper, seed=1, n=300, T=24):
    Z = np.random.default_rng(6).uniform(-2, 2, size=(n, 2))
    return Modeler(_session(n, T), ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), strategy,
                   np.random.default_rng(seed), hyper), np.sin(Z[:, 0]) * np.cos(Z[:, 1])


@pytest.mark.parametrize("strategy, mode", [(GPUCB(), "every"), (GPUCB(), "fixed"),
                                            (RandomChoice(), "fixed")])
def test_ask_tell_one_at_a_time_is_the_sequential_loop_to_the_bit(strategy, mode):
    """Same rows, same fits, same engine state and the same rng stream afterwards."""
    hyper = HyperFit(mode, n_init=5, every=4)
    old, f = _modeler(strategy, hyper)
    new, _ = _modeler(strategy, hyper)
    noise_old, noise_new = np.random.default_rng(2), np.random.default_rng(2)
    for slot in range(24):
        i = old.next_index()
        old.observe(i, float(f[i] + 0.01 * noise_old.standard_normal()))
        j = new.ask()
        assert new.pending == (slot,)
        new.tell(slot, float(f[j] + 0.01 * noise_new.standard_normal()))
    assert new.queries == old.queries and new.rewards == old.rewards
    assert len(new.fits) == len(old.fits) == (5 if mode == "every" else 0)  # after 5, 9, ..., 21
    for a, b in zip(new.fits, old.fits):
        assert a.kernel == b.kernel and a.noise_var == b.noise_var
    assert np.array_equal(new.gp.mean, old.gp.mean) and np.array_equal(new.gp.var, old.gp.var)
    assert new.rng.bit_generator.state == old.rng.bit_generator.state


def test_a_batch_of_four_is_four_distinct_rows_where_plain_ucb_repeats_one():
    modeler, f = _modeler(GPUCB(), HyperFit("fixed"), seed=3)
    for _ in range(5):
        i = modeler.next_index()
        modeler.observe(i, float(f[i]))
    assert len({modeler.next_index() for _ in range(4)}) == 1  # no hallucination: one row
    batch = [modeler.ask() for _ in range(4)]
    assert len(set(batch)) == 4 and modeler.pending == (5, 6, 7, 8)


def test_batches_start_with_the_initial_design_and_defer_refits_until_the_batch_clears():
    """n_init = 5, every = 2: the fit due after the 5th reward waits for slot 5 to be told;
    rewards told out of order are filed in slot order."""
    modeler, f = _modeler(GPUCB(), HyperFit("every", n_init=5, every=2))
    design = [int(i) for i in modeler._design]
    first = [modeler.ask() for _ in range(4)]
    assert first == design[:4] and modeler.pending == (0, 1, 2, 3)
    for slot in (3, 1, 0, 2):
        modeler.tell(slot, float(f[first[slot]]))
    assert modeler.queries == first and not modeler.fits
    second = [modeler.ask() for _ in range(4)]
    assert second[0] == design[4] and len(set(second)) == 4
    for slot in (4, 6, 5):
        modeler.tell(slot, float(f[second[slot - 4]]))
        assert not modeler.fits  # due after 5 and 7 rewards, but slot 7 is pending
    modeler.tell(7, float(f[second[3]]))
    assert len(modeler.fits) == 1 and modeler.queries == first + second
    fit = modeler.fits[0]
    fresh = IncrementalGP(modeler.gp.Z, fit.kernel, fit.noise_var, 24, prior_mean=fit.prior_mean)
    for i, y in zip(modeler.queries, modeler.rewards):
        fresh.add(i, y)
    assert np.allclose(modeler.gp.mean, fresh.mean, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="not pending"):
        modeler.tell(7, 0.0)


def test_a_resume_replay_can_observe_between_pending_slots_and_ask_a_given_row():
    """What a resumed batch session does: queries in flight asked again as they were
    (`ask(row)`, the rng advanced as by a choice) with answered ones observed among them;
    the posterior is that of the real values, the variance that of every row asked."""
    modeler, f = _modeler(RandomChoice(), HyperFit("fixed"))
    twin, _ = _modeler(RandomChoice(), HyperFit("fixed"))
    assert modeler.ask(7) == 7 and twin.ask() != 7
    assert modeler.rng.bit_generator.state == twin.rng.bit_generator.state
    modeler.observe(11, float(f[11]))
    assert modeler.ask(12) == 12 and modeler.pending == (0, 2)
    modeler.observe(40, float(f[40]))
    gp = modeler.gp
    mean, _ = posterior_dense(gp.Z, [11, 40], f[[11, 40]], gp.kernel, gp.noise_var)
    _, var = posterior_dense(gp.Z, [7, 11, 12, 40], f[[7, 11, 12, 40]], gp.kernel, gp.noise_var)
    assert np.allclose(gp.mean, mean, rtol=1e-9, atol=1e-12)
    assert np.allclose(gp.var, var, rtol=1e-9, atol=1e-12)
    modeler.tell(2, float(f[12]))
    modeler.tell(0, float(f[7]))
    assert modeler.queries == [7, 11, 12, 40] and modeler.pending == ()


def test_sequential_only_strategies_refuse_a_second_outstanding_query():
    n, T = 50, 10
    Z = np.random.default_rng(0).uniform(-2, 2, size=(n, 2))
    kusner = Modeler(_session(n, T), ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), KusnerUCB(0.1),
                     np.random.default_rng(1))
    ldp = _session(n, T, mechanisms=(Mechanism(LDP_REWARD, 1.0, 0.0),), reward_bound=1.0,
                   noise_bound=0.1)
    robust = Modeler(ldp, ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), Robust("tgp-ucb", 0.03),
                     np.random.default_rng(1))
    for modeler, name in ((kusner, "Kusner"), (robust, "tgp-ucb")):
        assert modeler.max_outstanding == 1
        modeler.ask()
        with pytest.raises(ValueError, match=name):
            modeler.ask()
        modeler.tell(0, 0.5)
        modeler.ask()
        assert modeler.queries and modeler.pending == (1,)
    assert _modeler(GPUCB(), HyperFit("fixed"))[0].max_outstanding == 24


def _simple_regret(problem, T, q, seed, hallucinate=True):
    """GP-UCB on the synthetic X itself (declared kernel, fixed), q queries a round."""
    n, d = problem.X.shape
    params = SessionParams(problem.name, n, d, T, "non-private", (), problem.kernel, "seeded")
    modeler = Modeler(params, identity_release(problem.X), GPUCB(), np.random.default_rng(seed),
                      HyperFit("fixed"))
    noise, sd = np.random.default_rng(seed + 1000), math.sqrt(problem.noise_var)
    while modeler.t < T:
        q_now = min(q, T - modeler.t)
        if hallucinate:
            start = modeler.t
            rows = [modeler.ask() for _ in range(q_now)]
            for slot, i in enumerate(rows, start=start):
                modeler.tell(slot, float(problem.f[i] + sd * noise.standard_normal()))
        else:  # plain UCB asked q times on the same posterior: one row q times
            i = modeler.next_index()
            for _ in range(q_now):
                modeler.observe(i, float(problem.f[i] + sd * noise.standard_normal()))
    return float(problem.f.max() - problem.f[modeler.queries].max())


def _regret_gap(seeds, T=30, hallucinate=True):
    """Paired (q = 4) - (q = 1) simple regret on synthetic seeds: mean, standard error."""
    gaps = []
    for seed in seeds:
        problem = build(seed)
        gaps.append(_simple_regret(problem, T, 4, seed, hallucinate)
                    - _simple_regret(problem, T, 1, seed))
    gaps = np.array(gaps)
    return float(gaps.mean()), float(gaps.std(ddof=1) / math.sqrt(len(gaps)))


@pytest.mark.slow
def test_batches_of_four_find_the_optimum_about_as_well_as_sequential_gp_ucb():
    """Synthetic (100 x 100 grid, sigma_f = 1), T = 30, seeds 0-29: mean simple regret of
    q = 4 <= q = 1 + 2 standard errors of the paired difference + 0.05 (5% of sigma_f:
    Desautels et al. bound the batch's regret by a constant factor, not equality; measured
    q1 0.076, q4 0.085, gap 0.009 +- 0.015). The test has power: plain UCB asked 4 times
    (no hallucination) is 0.74 worse and fails the same criterion. Without pytest --full,
    seeds 0-19 (the standard error widens accordingly)."""
    seeds = range(20 if REDUCED else 30)
    mean, se = _regret_gap(seeds)
    assert mean <= 2 * se + 0.05, (mean, se)
    broken, se_broken = _regret_gap(seeds, hallucinate=False)
    assert broken > 2 * se_broken + 0.05, (broken, se_broken)


@pytest.mark.slow
@pytest.mark.full  # reduced, it was the test above on 10 more seeds: pytest --full
def test_batches_of_four_match_sequential_gp_ucb_on_many_seeds():
    """As above on seeds 0-119 with slack 0.02 (measured: q1 0.093, q4 0.099, gap 0.006 +-
    0.008); reduced: seeds 0-39, slack 0.05."""
    seeds, slack = (range(40), 0.05) if REDUCED else (range(120), 0.02)
    mean, se = _regret_gap(seeds)
    assert mean <= 2 * se + slack, (mean, se)


def _ask_tell(modeler: Modeler, f: np.ndarray, steps: list, eager: bool) -> None:
    """Run `steps` ('ask', or a slot to tell) on `modeler`; `eager` reads the engine
    after every ask (every hallucination in at once)."""
    for step in steps:
        if step == "ask":
            modeler.ask()
            if eager:
                modeler.gp  # noqa: B018 -- reading the engine puts the hallucination in
        else:
            modeler.tell(step, float(f[modeler._asked[step]]))


@pytest.mark.parametrize("steps", [
    ["ask", 0, "ask", 1],  # sequential: each tell is the deferred slot's own
    ["ask", "ask", "ask", 1, 0, 2],  # a middle slot told while the last is deferred
    ["ask", "ask", "ask", 2, "ask", 0, 3, 1],  # the deferred one first, then out of order
])
def test_a_deferred_hallucination_gives_the_eager_numbers_in_these_orders(steps):
    """The orders where a deferred hallucination could change the rounding: telling
    another slot must put the deferred one in first, as the eager engine had it."""
    lazy, f = _modeler(GPUCB(), HyperFit("fixed"), seed=4)
    eager, _ = _modeler(GPUCB(), HyperFit("fixed"), seed=4)
    _ask_tell(lazy, f, steps, eager=False)
    _ask_tell(eager, f, steps, eager=True)
    assert lazy.queries == eager.queries
    assert np.array_equal(lazy.gp.mean, eager.gp.mean)
    assert np.array_equal(lazy.gp.var, eager.gp.var)
    assert np.array_equal(lazy.gp.L, eager.gp.L)


@pytest.mark.parametrize("seed", range(6))
def test_a_deferred_hallucination_gives_the_eager_numbers_to_the_bit(seed):
    """ask() leaves the last slot's hallucinated observation out of the engine until
    something else uses it (or its own tell puts the real value in directly, one update
    instead of two). A twin that reads its engine after every ask (so every hallucination
    goes in at once, as before) must choose the same rows and end in the same state, bit
    for bit, whatever the mix of batches, out-of-order tells, replays and refits."""
    hyper = HyperFit("every", n_init=3, every=5)
    lazy, f = _modeler(GPUCB(), hyper, seed=seed)
    eager, _ = _modeler(GPUCB(), hyper, seed=seed)
    plan = np.random.default_rng(100 + seed)
    pending: list[int] = []
    asked = 0
    while asked < 24 or pending:
        if asked < 24 and (not pending or plan.random() < 0.5) and len(pending) < 4:
            i, j = lazy.ask(), eager.ask()
            eager.gp  # noqa: B018 -- reading the engine puts the hallucination in at once
            assert i == j
            pending.append(asked)
            asked += 1
        else:
            slot = pending.pop(int(plan.integers(len(pending))) if plan.random() < 0.3 else -1)
            y = float(f[lazy._asked[slot]])
            lazy.tell(slot, y)
            eager.tell(slot, y)
    assert lazy.queries == eager.queries and len(lazy.fits) == len(eager.fits)
    assert np.array_equal(lazy.gp.mean, eager.gp.mean)
    assert np.array_equal(lazy.gp.var, eager.gp.var)


def test_the_engine_read_right_after_an_ask_holds_that_slot_hallucinated():
    """`modeler.gp` is the engine with every asked slot in it: read right after ask() it
    has the new row's variance shrunk (its hallucination is added on that read)."""
    modeler, f = _modeler(GPUCB(), HyperFit("fixed"))
    i = modeler.ask()
    before = modeler._gp.var[i]  # the engine itself, before anything used it
    assert modeler.gp.var[i] < before and modeler.gp.t == 1
    modeler.tell(0, float(f[i]))
    assert modeler.gp.t == 1 and modeler.pending == ()


def _pivot_modeler(noise_var: float, signal_var: float):
    """A modeler whose engine loses a Cholesky pivot when a row is asked again (no
    noise, a large signal variance: the table scenarios declare noise 0)."""
    Z = np.random.default_rng(6).uniform(-2, 2, size=(50, 2))
    params = SessionParams("t", 50, 2, 8, "private", (),
                           KernelParams("se", 1.0, signal_var, noise_var), "seeded")
    return Modeler(params, ProjectedDataset("x", 1.0, 1e-5, 0.0, Z), GPUCB(),
                   np.random.default_rng(1), HyperFit("fixed"))


def test_an_engine_refusal_still_comes_from_ask_and_leaves_nothing_pending():
    """A deferred hallucination must not move the engine's refusal past the query's
    send: ask() checks the row the engine would append (a lost pivot, a row out of
    range) and refuses it with nothing pending, as when it hallucinated at once."""
    from pobo.parties.gp import NumericalError

    modeler = _pivot_modeler(noise_var=0.0, signal_var=1e4)
    i = modeler.ask()
    modeler.tell(0, 0.5)
    with pytest.raises(NumericalError, match="pivot"):
        modeler.ask(i)
    assert modeler.pending == () and modeler.gp.t == 1
    with pytest.raises(ValueError, match="not pending"):
        modeler.tell(1, 0.5)
    with pytest.raises(IndexError):
        modeler.ask(50)
    assert modeler.pending == ()


def test_a_refused_reward_for_the_deferred_slot_leaves_it_pending():
    """tell() of the slot just asked with a non-finite value is refused and changes
    nothing: the slot stays pending and its real reward is taken afterwards."""
    modeler = _pivot_modeler(noise_var=1e-4, signal_var=1.0)
    modeler.ask()
    with pytest.raises(ValueError, match="finite"):
        modeler.tell(0, float("nan"))
    assert modeler.pending == (0,)
    modeler.tell(0, 0.5)
    assert modeler.pending == () and modeler.gp.t == 1
