"""Robust GP-UCB for heavy-tailed rewards: TGP-UCB, ATA-GP-UCB and MoMA-GP-UCB.

Zhou & Tan, *Local Differential Privacy for Bayesian Optimization*: Algorithm 2
(LDP-TGP-UCB: truncate each raw reward once), Algorithm 1 (LDP-ATA-GP-UCB: Nystrom
features, Algorithm 4, plus feature-wise adaptive truncation of all past rewards) and
Algorithm 3 (MoMA-GP-UCB: epochs of k plays of one point, k least-squares estimates,
median of means). With a local-DP reward mechanism in the session they are the LDP
versions (constants from the CTL scale); without, the non-private heavy-tailed
versions of Chowdhury & Gopalan (2019) for, e.g., Student-t noise.

Each learner is stateful: `next_index(rng)` then `observe(index, value)`. `scale`
multiplies the exploration width beta_t of every learner (scale = 1 is the theorem's
value; see DEFAULT_BETA_SCALE for the defaults and why).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pobo.parties.gp import IncrementalGP
from pobo.parties.kernels import Kernel

ACCURACY = 0.5  # the Nystrom accuracy epsilon in (0, 1); rho = (1 + eps) / (1 - eps) = 3


@dataclass(frozen=True)
class RewardModel:
    """The public constants of the reward process: |f| <= B, noise bound R, and either
    CTL(ldp_eps) Laplace noise on top, or heavy-tailed measurement noise."""

    B: float
    R: float
    ldp_eps: float | None = None
    noise: str = "gaussian"  # 'gaussian', 'uniform' or 'student-t' (3 degrees of freedom)
    noise_var: float = 0.0

    @property
    def laplace_scale(self) -> float:
        """L = 2(B + R)/eps, or 0 without LDP."""
        return 0.0 if self.ldp_eps is None else 2 * (self.B + self.R) / self.ldp_eps

    @property
    def second_moment(self) -> float:
        """c, a bound on E|eta|^2 of the total noise (Corollary 1: R^2 + 8(B+R)^2/eps^2)."""
        base = {"student-t": 3.0, "uniform": self.R**2}.get(self.noise, self.noise_var)
        if self.ldp_eps is not None:
            return self.R**2 + 8 * (self.B + self.R) ** 2 / self.ldp_eps**2
        return base

    @property
    def v(self) -> float:
        """v, a bound on E[y^2] (Theorem 2: B^2 + R^2 + 8(B+R)^2/eps^2)."""
        return self.B**2 + self.second_moment + (self.R**2 if self.ldp_eps is not None else 0.0)

    def truncation(self, t: int) -> float:
        """b_t of TGP-UCB: B + R + L ln t under CTL (Algorithm 2, line 4), v^1/2 t^1/4 for
        finite-variance heavy tails (Chowdhury & Gopalan, alpha = 1)."""
        if self.ldp_eps is not None:
            return self.B + self.R + self.laplace_scale * math.log(max(t, 1))
        return math.sqrt(self.v) * max(t, 1) ** 0.25


def information_gain(gp: IncrementalGP) -> float:
    """1/2 log det(I + K_t / lambda) of the points observed so far, from the Cholesky
    diagonal (L_tt^2 = sigma_{t-1}^2(x_t) + lambda): the usual proxy for gamma_t."""
    d = np.diag(gp.L)[:gp.t]
    return float(np.sum(np.log(d)) - 0.5 * gp.t * math.log(gp.noise_var + gp.jitter))


class TruncatedGPUCB:
    """(LDP-)TGP-UCB, Algorithm 2: each reward is zeroed once when |y| > b_t."""

    name = "tgp-ucb"

    def __init__(self, Z: np.ndarray, kernel: Kernel, T: int, model: RewardModel,
                 lam: float = 1.0, delta: float = 0.05, scale: float = 1.0) -> None:
        self.gp = IncrementalGP(Z, kernel, lam, T)
        self.model, self.lam, self.delta, self.scale = model, lam, delta, scale

    def beta(self, t: int) -> float:
        """beta_t = B + 2 sqrt(2/lam) b_{t-1} sqrt(gamma_{t-1} + ln 1/delta)
        + sqrt(K (ln(t-1) + 1) / lam), K = B^2 + R^2 + 2 L^2 (Algorithm 2, line 5)."""
        m = self.model
        K = m.B**2 + m.R**2 + 2 * m.laplace_scale**2 + (m.second_moment if m.ldp_eps is None else 0)
        lt = math.log(t - 1) if t > 1 else 0.0
        return (m.B + 2 * math.sqrt(2 / self.lam) * m.truncation(t - 1)
                * math.sqrt(information_gain(self.gp) + math.log(1 / self.delta))
                + math.sqrt(K * (lt + 1) / self.lam))

    def next_index(self, rng: np.random.Generator) -> int:
        """argmax mu + scale beta_t sigma."""
        return self.gp.ucb_argmax((self.scale * self.beta(self.gp.t + 1)) ** 2, rng)

    def observe(self, index: int, value: float) -> None:
        """Condition on the truncated reward y 1{|y| <= b_t}."""
        b = self.model.truncation(self.gp.t + 1)
        self.gp.add(index, value if abs(value) <= b else 0.0)


def nystrom_embedding(kernel: Kernel, points: np.ndarray, sigma2: np.ndarray, q: float,
                      rng: np.random.Generator, tol: float = 1e-10):
    """Algorithm 4: a dictionary of the points, each kept with probability
    min(q sigma^2, 1), and the map phi(x) = (K_D^1/2)^+ k_D(x) as a function.

    Duplicate points add no direction to the embedding, so the dictionary holds each
    distinct point once; phi(u)^T phi(v) = k(u, v) for u, v in the dictionary.
    """
    import scipy.linalg  # here, not at import: plain GP-UCB never needs scipy
    keep = rng.random(len(points)) < np.minimum(q * np.asarray(sigma2), 1.0)
    D = np.unique(points[keep], axis=0) if keep.any() else points[:1]
    w, Q = scipy.linalg.eigh(kernel(D, D))
    good = w > tol * max(w.max(), 1e-300)
    root_pinv = (Q[:, good] / np.sqrt(w[good])) @ Q[:, good].T  # (K_D^1/2)^+

    def phi(X: np.ndarray) -> np.ndarray:
        return kernel(X, D) @ root_pinv  # rows phi(x)^T, m = |D| columns

    return D, phi


class _FeatureUCB:
    """Shared state of the Nystrom-feature learners: posterior over all candidates."""

    def __init__(self, Z: np.ndarray, kernel: Kernel, T: int, model: RewardModel,
                 lam: float, delta: float, scale: float, rng: np.random.Generator) -> None:
        self.Z, self.kernel, self.T, self.model = np.asarray(Z, float), kernel, T, model
        self.lam, self.delta, self.scale, self.rng = lam, delta, scale, rng
        rho = (1 + ACCURACY) / (1 - ACCURACY)
        self.q = 6 * rho * math.log(4 * T / delta) / ACCURACY**2
        self.mean = np.zeros(len(self.Z))
        self.var = kernel.diag(self.Z).copy()
        self.m = 1

    def _posterior(self, phi, V: np.ndarray, theta: np.ndarray) -> None:
        """mu = phi^T theta; sigma^2 = k(x,x) - phi^T phi + lam phi^T V^-1 phi (Alg. 1/3)."""
        import scipy.linalg  # here, not at import: plain GP-UCB never needs scipy
        F = phi(self.Z)
        self.mean = F @ theta
        Vinv_F = scipy.linalg.solve(V, F.T, assume_a="pos")
        var = self.kernel.diag(self.Z) - np.einsum("ij,ij->i", F, F) + self.lam * np.einsum(
            "ij,ji->i", F, Vinv_F)
        self.var = np.maximum(var, 0.0)

    def _ucb(self, beta: float) -> int:
        score = self.mean + self.scale * beta * np.sqrt(self.var)
        return int(np.argmax(score))


class AdaptiveTruncationGPUCB(_FeatureUCB):
    """(LDP-)ATA-GP-UCB, Algorithm 1: Nystrom features and feature-wise truncation of
    all past rewards, recomputed every round."""

    name = "ata-gp-ucb"

    def __init__(self, Z, kernel, T, model, lam=1.0, delta=0.05, scale=1.0, rng=None):
        super().__init__(Z, kernel, T, model, lam, delta, scale, rng or np.random.default_rng())
        self.idx: list[int] = []
        self.y: list[float] = []

    def _log_term(self) -> float:
        return math.log(2 * self.m * self.T / self.delta)

    def truncation(self) -> float:
        """b = (v / ln(2 m T / delta))^1/2 (alpha = 1, as in Chowdhury & Gopalan's ATA)."""
        return math.sqrt(self.model.v / self._log_term())

    def beta(self) -> float:
        """B (1 + 1/sqrt(1 - eps)) + 4 sqrt(m v ln(2 m T / delta) / lam) (Theorem 2, order-wise)."""
        return (self.model.B * (1 + 1 / math.sqrt(1 - ACCURACY))
                + 4 * math.sqrt(self.m * self.model.v * self._log_term() / self.lam))

    def next_index(self, rng: np.random.Generator) -> int:
        """argmax mu + scale beta sigma (a uniform draw before any data)."""
        if not self.idx:
            return int(rng.integers(len(self.Z)))
        return self._ucb(self.beta())

    def observe(self, index: int, value: float) -> None:
        """Refit the features and the truncated estimate on every reward so far."""
        import scipy.linalg  # here, not at import: plain GP-UCB never needs scipy
        self.idx.append(int(index))
        self.y.append(float(value))
        X = self.Z[self.idx]
        _, phi = nystrom_embedding(self.kernel, X, self.var[self.idx], self.q, self.rng)
        Phi = phi(X)  # t x m
        self.m = Phi.shape[1]
        V = Phi.T @ Phi + self.lam * np.eye(self.m)
        w, Q = scipy.linalg.eigh(V)
        V_inv_half = (Q / np.sqrt(w)) @ Q.T
        U = V_inv_half @ Phi.T  # rows u_i^T, m x t
        terms = U * np.asarray(self.y)[None, :]
        r_hat = np.where(np.abs(terms) <= self.truncation(), terms, 0.0).sum(axis=1)
        self._posterior(phi, V, V_inv_half @ r_hat)


def epoch_length(T: int, delta: float) -> int:
    """k = ceil(24 ln(4eT/delta)), MoMA's epoch length in Theorem 4 (312 at T = 2000,
    delta = 0.05: six epochs)."""
    return math.ceil(24 * math.log(4 * math.e * T / delta))


def median_of_means_index(thetas: np.ndarray, V: np.ndarray) -> int:
    """k* = argmin_j median_{s != j} ||theta_j - theta_s||_V (Algorithm 3, lines 11-12)."""
    diffs = thetas[:, None, :] - thetas[None, :, :]  # k x k x m
    dist = np.sqrt(np.maximum(np.einsum("jsa,ab,jsb->js", diffs, V, diffs), 0.0))
    k = len(thetas)
    r = [np.median(np.delete(dist[j], j)) for j in range(k)]
    return int(np.argmin(r))


class MedianOfMeansGPUCB(_FeatureUCB):
    """(LDP-)MoMA-GP-UCB, Algorithm 3: epochs of k plays of one point; after each epoch,
    k least-squares estimates and the median-of-means pick. k is the theorem's
    ceil(24 ln(4eT/delta)) (`epoch_length`) unless given (`--moma-k`: the paper's
    experiments set parameters order-wise). The T - N k rounds left after the
    N = floor(T/k) epochs replay the epoch's UCB point."""

    name = "moma-gp-ucb"

    def __init__(self, Z, kernel, T, model, lam=1.0, delta=0.05, scale=1.0, rng=None,
                 k: int | None = None):
        super().__init__(Z, kernel, T, model, lam, delta, scale, rng or np.random.default_rng())
        self.k = epoch_length(T, delta) if k is None else int(k)
        if self.k < 2:
            raise ValueError(f"MoMA's k must be an integer >= 2, got {self.k}")
        self.points: list[int] = []
        self.plays: list[list[float]] = []

    def beta(self) -> float:
        """B (1 + 1/sqrt(1 - eps)) + 3 lam^-1/2 (9 m c)^1/2 (Theorem 4 with alpha = 1)."""
        return (self.model.B * (1 + 1 / math.sqrt(1 - ACCURACY))
                + 3 * math.sqrt(9 * self.m * self.model.second_moment / self.lam))

    def next_index(self, rng: np.random.Generator) -> int:
        """The epoch's point, chosen by UCB when a new epoch starts."""
        if not self.points or len(self.plays[-1]) >= self.k:
            i = int(rng.integers(len(self.Z))) if not self.points else self._ucb(self.beta())
            self.points.append(i)
            self.plays.append([])
        return self.points[-1]

    def observe(self, index: int, value: float) -> None:
        """Record one play; at the end of an epoch, update the median-of-means estimate."""
        if not self.points or index != self.points[-1]:
            raise ValueError(f"MoMA expected a play of row {self.points[-1:]} , got {index}")
        self.plays[-1].append(float(value))
        if len(self.plays[-1]) == self.k:
            self._end_epoch()

    def _end_epoch(self) -> None:
        import scipy.linalg  # here, not at import: plain GP-UCB never needs scipy
        X = self.Z[self.points]
        _, phi = nystrom_embedding(self.kernel, X, self.var[self.points], self.q, self.rng)
        Phi = phi(X)  # n x m
        self.m = Phi.shape[1]
        V = Phi.T @ Phi + self.lam * np.eye(self.m)
        Y = np.asarray(self.plays)  # n x k: row i holds the k plays of epoch i
        thetas = scipy.linalg.solve(V, Phi.T @ Y, assume_a="pos").T  # k x m
        self._posterior(phi, V, thetas[median_of_means_index(thetas, V)])


ROBUST = {c.name: c for c in (TruncatedGPUCB, AdaptiveTruncationGPUCB, MedianOfMeansGPUCB)}
