"""Differentially private release of the result of BO (Kusner et al., ICML 2015).

Algorithm 1 (noisy observations): the row by the exponential mechanism,
Pr[x] ~ exp(eps mu_T(x) / (2 (2 sqrt(beta_{T+1}) + c))), and the value
y~ = max_t y_t + Laplace(sqrt(C1 beta_T gamma_T)/(eps sqrt T) + c/eps + q/eps), with
beta_t = 2 log(|X| t^2 pi^2 / (3 delta)), c = 2 sqrt((1 - k(D, D')) log(3|X|/delta)),
q = sigma sqrt(4 log(3/delta)), C1 = 8 / log(1 + sigma^-2). gamma_T is bounded by the
greedy information gain divided by (1 - 1/e) (greedy maximisation of the submodular
1/2 log det(I + sigma^-2 K) is within 1 - 1/e of the maximum; Krause & Guestrin).
Algorithm 2 (noise-free): f~ = max_{2<=t<=T} f(x_t) + Laplace(A e^{-2 tau/(log 2)^{d/4}}/eps + c/eps),
c = 2 sqrt((1 - k(D, D')) log(2|X|/delta)), with de Freitas et al.'s A and tau.
Algorithm 3 (Lipschitz, convex): f~ = max_t f(x_t) + Laplace(Delta/eps),
Delta = (lam_max - lam_min) L / (lam_max lam_min) + min(g*/m, L/(m lam_min)); pure eps-DP.

k(D, D') is the declared dataset similarity of neighbouring datasets (the multi-task
kernel's k1); DEFAULT_SIMILARITY documents the default. All noise comes from a
`NoiseSource`: lattice Laplace, and the exponential mechanism by inverse CDF on
log-sum-exp-normalised probabilities with a 53-bit uniform from the same source.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from parties.gp import IncrementalGP
from parties.kernels import Kernel
from parties.noise import NoiseSource, lattice_laplace

DEFAULT_SIMILARITY = 0.9  # k(D, D') for datasets differing in one record


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
    """beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) (Kusner et al., Algorithm 1)."""
    return 2.0 * math.log(n * t * t * math.pi**2 / (3.0 * delta))


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
    """An index drawn with Pr[i] ~ exp(epsilon scores_i / (2 sensitivity))."""
    logits = epsilon * np.asarray(scores, dtype=float) / (2.0 * sensitivity)
    cdf = np.cumsum(np.exp(logits - logsumexp(logits)))
    u = (source.randbelow(1 << 53) + 0.5) / float(1 << 53)
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))


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
    q = noise_std * math.sqrt(4.0 * math.log(3.0 / delta))
    C1 = 8.0 / math.log1p(noise_std**-2)
    sensitivity = math.sqrt(C1 * beta_kusner(T, n, delta) * gamma_T / T) + c + q
    value = lattice_laplace(float(np.max(observed)), sensitivity, epsilon, source)
    return ReleaseResult("noisy", epsilon, delta, index, value, sensitivity / epsilon,
                         em_sensitivity)


def noise_free_release(observed: np.ndarray, n: int, d: int, epsilon: float, delta: float,
                       A: float, tau: float, source: NoiseSource,
                       similarity: float = DEFAULT_SIMILARITY) -> ReleaseResult:
    """Kusner et al. Algorithm 2: f~ = max_{2<=t<=T} f(x_t) + Laplace, (epsilon, delta)-DP."""
    if len(observed) < 2:
        raise ValueError("Algorithm 2 releases the maximum over t >= 2: needs T >= 2")
    c = similarity_term(n, delta, similarity, 2)
    sensitivity = A * math.exp(-2.0 * tau / math.log(2.0) ** (d / 4.0)) + c
    value = lattice_laplace(float(np.max(observed[1:])), sensitivity, epsilon, source)
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
