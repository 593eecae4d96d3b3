"""Issue 21 item 4: the exponential mechanism sampled exactly, lattice rounding half up,
and LDP noise drawn ahead of the request."""
import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from pobo.parties import noise as noise_module
from pobo.parties.ldp import ConvertToLaplace, NoisePool
from pobo.parties.noise import (
    NoiseSource, bernoulli_exp, discrete_exponential, discrete_laplace, lattice_laplace,
    lattice_step,
)
from pobo.parties.release import exponential_mechanism
from pobo.protocol.accounting import LAPLACE_GRAIN

SCORES = np.array([0.0, 1.0, 2.0, 3.0, 0.5, 2.5, -4.0])


def _frequencies(draw, n: int, draws: int) -> np.ndarray:
    return np.bincount([draw() for _ in range(draws)], minlength=n)


def test_exponential_mechanism_frequencies_match_the_exact_distribution():
    """20,000 draws (fixed seed) against Pr[i] ~ exp(eps s_i / (2 Delta)): chi-square
    p-value above 1e-3; the same counts reject a distribution with eps 10% off (p < 1e-6)."""
    eps, sens = 2.0, 1.0
    source = NoiseSource(np.random.default_rng(2021))
    counts = _frequencies(lambda: exponential_mechanism(SCORES, eps, sens, source),
                          len(SCORES), 20_000)

    def expected(e: float) -> np.ndarray:
        w = np.exp(e * SCORES / (2 * sens) - np.max(e * SCORES / (2 * sens)))
        return w / w.sum() * counts.sum()

    assert expected(eps).min() >= 5  # chi-square wants >= 5 expected per cell

    def chi2(e: float) -> float:
        return stats.chisquare(counts, expected(e)).pvalue

    assert chi2(eps) > 1e-3
    assert chi2(1.1 * eps) < 1e-6


def test_discrete_exponential_is_exact_on_rational_exponents():
    """P(i) ~ exp(-gamma_i) with gammas 0, 1/2, 3, 7/3; chi-square at a fixed seed."""
    gammas = [Fraction(0), Fraction(1, 2), Fraction(3), Fraction(7, 3)]
    source = NoiseSource(np.random.default_rng(7))
    counts = _frequencies(lambda: discrete_exponential(gammas, source), 4, 20_000)
    w = np.exp(-np.array([float(g) for g in gammas]))
    assert stats.chisquare(counts, w / w.sum() * counts.sum()).pvalue > 1e-3
    with pytest.raises(ValueError):
        discrete_exponential([Fraction(0), Fraction(-1)], source)  # exp(1): not a weight <= 1


def test_lattice_rounding_is_half_up_so_k_steps_stay_k_steps(monkeypatch):
    """Two values exactly k lattice steps apart (k odd, both on half points) must land k
    steps apart, not k + 1 (round-half-to-even would send 0.5 to 0 and k + 0.5 to k + 1);
    and the noise's sensitivity in steps is a multiple of LAPLACE_GRAIN covering Delta/g."""
    scales = []

    def no_noise(scale, source):
        scales.append(scale)
        return 0

    monkeypatch.setattr(noise_module, "discrete_laplace", no_noise)
    sens, eps = 2.0, 1.0
    g = lattice_step(sens / eps)
    for k in (1, 3, 5, 1025):
        a = noise_module.lattice_laplace(0.5 * g, sens, eps, NoiseSource())
        b = noise_module.lattice_laplace((k + 0.5) * g, sens, eps, NoiseSource())
        assert (b - a) / g == k
    steps = scales[0] * Fraction(eps)
    assert steps.denominator == 1 and steps.numerator % LAPLACE_GRAIN == 0
    assert math.ceil(sens / g) <= steps.numerator < math.ceil(sens / g) + LAPLACE_GRAIN


def test_a_pool_gives_the_draw_on_request_sequence_and_takes_no_draw_on_the_answer():
    """Seeded, the pool's releases equal the draw-on-request ones in order; an answer
    with a full pool draws nothing from the source (the refill does, afterwards)."""
    ctl = ConvertToLaplace(1.0, 1.0, 0.5)
    ys = [0.3, -2.0, 1.1, 0.0, 0.7] * 10
    direct_source = NoiseSource(np.random.default_rng(5))
    direct = [ctl.privatise(y, direct_source) for y in ys]

    class Counting(NoiseSource):
        draws = 0

        def randbelow(self, n):
            Counting.draws += 1
            return super().randbelow(n)

    pool = NoisePool(ctl, Counting(np.random.default_rng(5)), size=4)
    pooled = []
    for y in ys:
        before = Counting.draws
        pooled.append(pool.privatise(y))
        assert Counting.draws == before  # the answer path drew nothing
        pool.refill()
    assert pooled == direct


def test_levels_are_drawn_exactly_by_lazy_inversion():
    """P(k) ~ c_k e^-k for counts (5, 0, 3, 1, 0, 2): 40,000 draws, chi-square p > 1e-3;
    the empty levels never come out; a peaked exponential mechanism over 10^5 rows (one
    row 30 nats above the rest) returns that row in a handful of trials."""
    from pobo.parties.noise import _pick_level
    counts = [5, 0, 3, 1, 0, 2]
    source = NoiseSource(np.random.default_rng(11))
    seen = np.bincount([_pick_level(counts, source) for _ in range(40_000)], minlength=6)
    w = np.array([c * math.exp(-k) for k, c in enumerate(counts)])
    assert seen[1] == seen[4] == 0
    keep = w > 0
    assert stats.chisquare(seen[keep], w[keep] / w.sum() * seen.sum()).pvalue > 1e-3
    scores = np.zeros(100_000)
    scores[123] = 60.0  # eps / (2 Delta) = 1/2: 30 nats above every other row
    assert exponential_mechanism(scores, 1.0, 1.0, source) == 123


def test_a_forked_child_never_releases_its_parents_pooled_noise():
    """A pool filled before a fork held the same noises in parent and child: both would
    release them. The child drops them at its first use and draws its own."""
    ctl = ConvertToLaplace(1.0, 1.0, 0.5)
    pool = NoisePool(ctl, NoiseSource(), size=3)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, repr(pool.privatise(0.0)).encode())
        finally:
            os._exit(0)
    os.close(write)
    theirs = float(os.read(read, 64).decode())
    os.close(read)
    os.waitpid(pid, 0)
    assert theirs != pool.privatise(0.0)  # equal by chance: ~2^-30


def test_exponents_far_past_the_last_level_are_drawn_without_hanging():
    """Every exponent at or past level 64 used to leave each trial an acceptance of
    ~e^-(gamma - 64): [1000] never returned. The lowest level is shifted to 0 first
    (exp(-gamma_i) normalised is unchanged): [1000] returns 0 at once, and [100, 101, 100]
    has the law of [0, 1, 0] (20,000 draws, chi-square p > 1e-3)."""
    source = NoiseSource(np.random.default_rng(3))
    assert discrete_exponential([Fraction(1000)], source) == 0
    seen = np.bincount([discrete_exponential([Fraction(100), 101, Fraction(100)], source)
                        for _ in range(20_000)], minlength=3)
    w = np.exp(-np.array([0.0, 1.0, 0.0]))
    assert stats.chisquare(seen, w / w.sum() * seen.sum()).pvalue > 1e-3


@pytest.mark.parametrize("call", [
    lambda s: bernoulli_exp(Fraction(-1), s),
    lambda s: discrete_laplace(float("nan"), s),
    lambda s: discrete_laplace(Fraction(0), s),
    lambda s: lattice_laplace(0.0, 1e-320, 1.0, s),
    lambda s: lattice_laplace(0.0, 1.0, float("inf"), s),
    lambda s: lattice_laplace(float("nan"), 1.0, 1.0, s),
    lambda s: discrete_exponential([Fraction(-1), Fraction(2)], s),
], ids=["negative-gamma", "nan-scale", "zero-scale", "subnormal-scale", "infinite-eps",
        "nan-value", "negative-exponent"])
def test_bad_sampler_input_is_a_value_error(call):
    """Each used to be silently wrong (bernoulli_exp(-1) was True) or another exception
    (AttributeError, ZeroDivisionError, OverflowError)."""
    with pytest.raises(ValueError):
        call(NoiseSource(np.random.default_rng(0)))


def test_a_float_scale_is_taken_exactly():
    """discrete_laplace(0.5) is discrete_laplace(Fraction(1, 2)), draw for draw."""
    a, b = NoiseSource(np.random.default_rng(9)), NoiseSource(np.random.default_rng(9))
    assert ([discrete_laplace(0.5, a) for _ in range(200)]
            == [discrete_laplace(Fraction(1, 2), b) for _ in range(200)])
