"""Differentially private release of the result of BO (Kusner et al., ICML 2015).

Formulas as printed in the full paper (ICML version, papers/003_...; the short
workshop version, papers/002_..., has two older forms, noted where they differ):

Algorithm 1 (noisy observations): queries by GP-UCB with beta_t = 2 log(|X| t^2 pi^2 /
(3 delta)) (line 3); the row by the exponential mechanism,
Pr[x] ~ exp(eps mu_T(x) / (2 (2 sqrt(beta_{T+1}) + c))) (line 12), and the value
y~ = max_t y_t + Laplace(sqrt(C1 beta_T gamma_T)/(eps sqrt T) + c/eps + q/eps) (line 14),
with c = 2 sqrt((1 - k(D, D')) log(3|X|/delta)) (line 9), q = sigma sqrt(8 log(3/delta))
(line 10, and the proof of Theorem 3: |2 alpha^| <= sigma sqrt(8 log(3/delta)); the short
version prints sqrt(4 ...)), C1 = 8 / log(1 + sigma^-2) (line 11). gamma_T is bounded by
the greedy information gain divided by (1 - 1/e) (greedy maximisation of the submodular
1/2 log det(I + sigma^-2 K) is within 1 - 1/e of the maximum; Krause & Guestrin).
The sensitivity proofs (Theorems 1 and 3) hold only for queries chosen by that GP-UCB:
`ucb_replay` checks a query sequence against it.
Algorithm 2 (noise-free): f~ = f(x_T) + Laplace(A e^{-T tau/(log T)^{d/4}}/eps + c/eps),
the LAST sample (line 5) and de Freitas et al.'s regret bound at T (line 4, Theorem 5),
c = 2 sqrt((1 - k(D, D')) log(2|X|/delta)) (line 3); the short version prints the max over
2 <= t <= T with the bound at t = 2.
Algorithm 3 (Lipschitz, convex): f~ = max_t f(x_t) + Laplace(Delta/eps),
Delta = (lam_max - lam_min) L / (lam_max lam_min) + min(g*/m, L/(m lam_min)); pure eps-DP.

Logarithms are natural (the paper's Gaussian tails e^{-gamma^2/2}). k(D, D') is the
declared dataset similarity of neighbouring datasets (the multi-task kernel's k1);
DEFAULT_SIMILARITY documents the default. All noise comes from a `NoiseSource`: lattice
Laplace, and the exponential mechanism sampled exactly (parties.noise.discrete_exponential:
rejection with the exact Bernoulli(exp(-gamma)) of Canonne, Kamath & Steinke).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pobo.parties.gp import IncrementalGP
from pobo.parties.kernels import Kernel
from pobo.parties.noise import Exponents, NoiseSource, discrete_exponential, lattice_laplace

DEFAULT_SIMILARITY = 0.9  # k(D, D') for datasets differing in one record
# A replayed query passes when ucb(x_t) >= max ucb - UCB_RTOL (1 + |max ucb|): float64
# round-off between two builds of the same engine is ~1e-12 relative, the engine matches
# the textbook posterior to 1e-8; a genuinely different choice misses by far more.
UCB_RTOL = 1e-8


@dataclass(frozen=True)
class ReleaseResult:
    """What a release mechanism outputs, with the parameters that set its noise."""

    algorithm: str
    epsilon: float
    delta: float
    index: int  # -1 when no row is released
    value: float
    laplace_scale: float
    em_sensitivity: float = 0.0


def beta_kusner(t: int, n: int, delta: float) -> float:
    """beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) (Kusner et al., Algorithm 1 line 3)."""
    return 2.0 * math.log(n * t * t * math.pi**2 / (3.0 * delta))


# the release epsilons a curator computes: past the maximum a release protects nothing (and
# no exponential-mechanism score overflows); below the minimum no noise scale is a number
MIN_RELEASE_EPSILON, MAX_RELEASE_EPSILON = 1e-12, 1e3


def kusner_q(noise_std: float, delta: float) -> float:
    """q = sigma sqrt(8 log(3/delta)) (Algorithm 1 line 10; proof of Theorem 3)."""
    return noise_std * math.sqrt(8.0 * math.log(3.0 / delta))


def kusner_c1(noise_std: float) -> float:
    """C1 = 8 / log(1 + sigma^-2) (Algorithm 1 line 11; Srinivas et al. Theorem 1)."""
    return 8.0 / math.log1p(noise_std**-2)


def de_freitas_bound(T: int, d: int, A: float, tau: float) -> float:
    """A e^{-T tau / (log T)^{d/4}}: de Freitas et al.'s regret bound at the last sample
    (Kusner et al. Algorithm 2 line 4, Theorems 5 and 6); needs T >= 2 (log 1 = 0)."""
    if T < 2:
        raise ValueError(f"Algorithm 2's bound A e^(-T tau/(log T)^(d/4)) needs T >= 2, got {T}")
    if not (A >= 0 and tau > 0):
        raise ValueError(f"de Freitas et al.'s constants need A >= 0 and tau > 0, got {A}, {tau}")
    return A * math.exp(-T * tau / math.log(T) ** (d / 4.0))


def similarity_term(n: int, delta: float, similarity: float, parts: int) -> float:
    """c = 2 sqrt((1 - k(D, D')) log(parts |X| / delta)); parts = 3 (Alg. 1) or 2 (Alg. 2)."""
    if not 0 <= similarity <= 1:
        raise ValueError(f"dataset similarity k(D, D') must lie in [0, 1], got {similarity}")
    return 2.0 * math.sqrt((1.0 - similarity) * math.log(parts * n / delta))


def greedy_information_gain(Z: np.ndarray, kernel: Kernel, noise_var: float, T: int) -> float:
    """Greedy 1/2 sum log(1 + sigma^-2 sigma_{t-1}^2(x_t)) over T picks of the most
    uncertain candidate: within (1 - 1/e) of gamma_T. O(n T) with the engine."""
    gp = IncrementalGP(Z, kernel, noise_var, T)
    gain = 0.0
    for _ in range(T):
        i = int(np.argmax(gp.var))
        gain += 0.5 * math.log1p(gp.var[i] / noise_var)
        gp.add(i, 0.0)
    return gain


def gamma_bound(Z: np.ndarray, kernel: Kernel, noise_var: float, T: int) -> float:
    """An upper bound on gamma_T: the greedy gain / (1 - 1/e)."""
    return greedy_information_gain(Z, kernel, noise_var, T) / (1.0 - 1.0 / math.e)


def exponential_mechanism(scores: np.ndarray, epsilon: float, sensitivity: float,
                          source: NoiseSource) -> int:
    """An index drawn with Pr[i] ~ exp(epsilon scores_i / (2 sensitivity)), exactly.

    The exponents u_i = epsilon scores_i / (2 sensitivity) are computed in float64 and
    then taken as the exact rationals they are; the index is drawn with probability
    exactly proportional to exp(u_i - max u) by `discrete_exponential` (integer
    arithmetic only). The one rounding left is that of u_i itself (relative 2^-53), which
    moves the guarantee by at most 2^-52 max |u_i| nats."""
    u = epsilon * np.asarray(scores, dtype=float) / (2.0 * sensitivity)
    if not np.all(np.isfinite(u)):
        raise ValueError("the exponential mechanism needs finite scores")
    exponents = Exponents(u)
    return discrete_exponential(exponents, source, exponents.levels)


def noisy_release(mean_T: np.ndarray, observed: np.ndarray, T: int, epsilon: float,
                  delta: float, gamma_T: float, noise_std: float, source: NoiseSource,
                  similarity: float = DEFAULT_SIMILARITY) -> ReleaseResult:
    """Kusner et al. Algorithm 1: (x~, y~), each (epsilon, delta)-DP."""
    if noise_std <= 0:
        raise ValueError("Algorithm 1 needs observation noise sigma > 0 (use noise-free)")
    n = len(mean_T)
    c = similarity_term(n, delta, similarity, 3)
    em_sensitivity = 2.0 * math.sqrt(beta_kusner(T + 1, n, delta)) + c
    index = exponential_mechanism(mean_T, epsilon, em_sensitivity, source)
    q = kusner_q(noise_std, delta)
    sensitivity = math.sqrt(kusner_c1(noise_std) * beta_kusner(T, n, delta) * gamma_T / T) + c + q
    value = lattice_laplace(float(np.max(observed)), sensitivity, epsilon, source)
    return ReleaseResult("noisy", epsilon, delta, index, value, sensitivity / epsilon,
                         em_sensitivity)


def noise_free_release(observed: np.ndarray, n: int, d: int, epsilon: float, delta: float,
                       A: float, tau: float, source: NoiseSource,
                       similarity: float = DEFAULT_SIMILARITY) -> ReleaseResult:
    """Kusner et al. Algorithm 2: f~ = f(x_T) + Lap(A e^{-T tau/(log T)^{d/4}}/eps + c/eps),
    the last of T noise-free samples (line 5), (epsilon, delta)-DP (Corollary 3)."""
    T = len(observed)
    c = similarity_term(n, delta, similarity, 2)  # line 3
    sensitivity = de_freitas_bound(T, d, A, tau) + c  # Theorem 5
    value = lattice_laplace(float(observed[-1]), sensitivity, epsilon, source)
    return ReleaseResult("noise-free", epsilon, delta, -1, value, sensitivity / epsilon)


def lipschitz_sensitivity(lam_min: float, lam_max: float, L: float, g_star: float, m: int) -> float:
    """Delta = (lam_max - lam_min) L / (lam_max lam_min) + min(g*/m, L/(m lam_min)) (Thm 7)."""
    if not 0 < lam_min <= lam_max:
        raise ValueError("need 0 < lam_min <= lam_max")
    return (lam_max - lam_min) * L / (lam_max * lam_min) + min(g_star / m, L / (m * lam_min))


def lipschitz_release(observed: np.ndarray, epsilon: float, lam_min: float, lam_max: float,
                      L: float, g_star: float, m: int, source: NoiseSource) -> ReleaseResult:
    """Kusner et al. Algorithm 3: f~ = max_t f_V(w_lambda_t) + Laplace(Delta/eps), eps-DP."""
    sensitivity = lipschitz_sensitivity(lam_min, lam_max, L, g_star, m)
    value = lattice_laplace(float(np.max(observed)), sensitivity, epsilon, source)
    return ReleaseResult("lipschitz", epsilon, 0.0, -1, value, sensitivity / epsilon)


@dataclass(frozen=True)
class UCBViolation:
    """A replayed round whose query was not a GP-UCB maximiser (within the tolerance)."""

    t: int
    index: int
    ucb: float
    best_index: int
    best_ucb: float


def ucb_scores(gp: IncrementalGP, t: int, delta: float) -> np.ndarray:
    """mu_{t-1}(x) + sqrt(beta_t) sigma_{t-1}(x), beta_t of Algorithm 1 line 3 (eq. (3))."""
    return gp.mean + math.sqrt(beta_kusner(t, gp.n, delta)) * gp.std


def ucb_replay(Z: np.ndarray, kernel: Kernel, noise_var: float, queries: list[int],
               rewards: list[float], delta: float, rtol: float = UCB_RTOL) -> UCBViolation | None:
    """Replay Algorithm 1 lines 2-7 over Z: the first round t whose query x_t has
    ucb(x_t) < max ucb - rtol (1 + |max ucb|), or None when every query was a maximiser
    (at t = 1 every row ties). O(n T^2) with the incremental engine."""
    gp = IncrementalGP(Z, kernel, noise_var, max(len(queries), 1))
    for t, (index, y) in enumerate(zip(queries, rewards), start=1):
        score = ucb_scores(gp, t, delta)
        best = int(np.argmax(score))
        if score[index] < score[best] - rtol * (1.0 + abs(score[best])):
            return UCBViolation(t, int(index), float(score[index]), best, float(score[best]))
        gp.add(int(index), float(y))
    return None
