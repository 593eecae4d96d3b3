"""The modeler's side of PO-GP-UCB (Algorithm 2): BO over the released rows of Z.

Hyperparameters are the curator's declared public ones (`fixed`), or the modeler
fits them itself by maximum likelihood on what it has -- Z and the rewards -- once
after an initial design of uniformly random rows (`once`), or again every m rounds
(`every`), rebuilding the O(n t) cache after each fit. Under Kusner et al.'s GP-UCB
(the noisy release, Algorithm 1) they stay fixed for the whole session: its proofs
assume one known kernel, and the curator replays the queries with it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from parties.gp import IncrementalGP
from parties.kernels import kernel_by_name
from parties.likelihood import Fit, fit_hyperparameters
from parties.robust import ROBUST, RewardModel
from parties.strategies import KusnerUCB, Robust, Strategy
from protocol.messages import ProjectedDataset, Release, ReleaseRequest, SessionParams
from protocol.policy import LDP_REWARD

FIT_MODES = ("auto", "fixed", "once", "every")


@dataclass(frozen=True)
class HyperFit:
    """How the modeler sets its GP hyperparameters (and which kernel it uses).

    `auto` keeps the declared values when the curator marks them 'public' and refits
    every `every` rounds when it marks them 'initial' (starting values only).
    """

    mode: str = "auto"
    n_init: int = 5
    every: int = 10
    restarts: int = 3
    kernel: str | None = None  # None: the kernel the curator declared

    def __post_init__(self) -> None:
        if self.mode not in FIT_MODES:
            raise ValueError(f"unknown fit mode {self.mode!r}; choose from {FIT_MODES}")
        if self.mode != "fixed" and (self.n_init < 2 or self.every < 1):
            raise ValueError("fitting needs n_init >= 2 observations and every >= 1")

    def resolved(self, status: str) -> HyperFit:
        """This policy with `auto` decided by the declared hyperparameters' status."""
        if self.mode != "auto":
            return self
        return replace(self, mode="fixed" if status == "public" else "every")

    def refit_due(self, t: int) -> bool:
        """Whether to fit after the t-th observation."""
        if self.mode in ("fixed", "auto") or t < self.n_init:
            return False
        return t == self.n_init or (self.mode == "every" and (t - self.n_init) % self.every == 0)


def kusner_hyper(hyper: HyperFit, declared: str) -> HyperFit:
    """Fixed declared hyperparameters for Kusner et al.'s GP-UCB (Assumption 1: one known
    kernel). An ARD name becomes its family: with fixed values every dimension has the
    declared length-scale, the same kernel as the isotropic one."""
    return HyperFit("fixed", kernel=(hyper.kernel or declared).removeprefix("ard-"))


def reward_model(params: SessionParams) -> RewardModel:
    """The public reward constants of a session: declared B and R, the CTL epsilon."""
    ldp = [m.epsilon for m in params.mechanisms if m.name == LDP_REWARD]
    return RewardModel(params.reward_bound, params.noise_bound, ldp[0] if ldp else None,
                       params.noise, params.kernel.noise_var)


class Modeler:
    """Synchronous modeler state: the GP over Z (or a robust learner), the strategy, and
    what it observed.

    In a session with local-DP rewards, plain GP-UCB models the Laplace noise as part
    of its observation noise (variance 2 L^2 added to the declared noise variance).
    """

    def __init__(self, params: SessionParams, release: ProjectedDataset, strategy: Strategy,
                 rng: np.random.Generator, hyper: HyperFit = HyperFit()) -> None:
        kp = params.kernel
        model = reward_model(params)
        robust = isinstance(strategy, Robust)
        if isinstance(strategy, KusnerUCB):
            hyper = kusner_hyper(hyper, kp.kernel)
        hyper = HyperFit("fixed", kernel=hyper.kernel) if robust else hyper.resolved(kp.status)
        self.params, self.strategy, self.rng, self.hyper = params, strategy, rng, hyper
        kernel = kernel_by_name(hyper.kernel or kp.kernel, kp.lengthscale, kp.signal_var,
                                dims=release.Z.shape[1])
        noise = kp.noise_var + 2 * model.laplace_scale**2
        self.gp = IncrementalGP(release.Z, kernel, noise, capacity=params.T)
        self.learner = None
        if robust:
            cls = ROBUST[strategy.name]
            extra = {} if cls.name == "tgp-ucb" else {"rng": rng}
            if cls.name == "moma-gp-ucb" and strategy.moma_k is not None:
                extra["k"] = strategy.moma_k
            self.learner = cls(release.Z, kernel, params.T, model, lam=strategy.lam,
                               delta=strategy.delta, scale=strategy.beta_scale, **extra)
        self.fits: list[Fit] = []
        self.release: Release | None = None
        self.release_error: str | None = None
        self.queries: list[int] = []
        self.rewards: list[float] = []
        self._design = (rng.permutation(self.gp.n)[:hyper.n_init]
                        if hyper.mode != "fixed" else np.empty(0, dtype=np.int64))

    @property
    def t(self) -> int:
        """Number of rewards observed so far."""
        return len(self.rewards)

    def next_index(self) -> int:
        """The row to query in the next round (initial design first, when fitting)."""
        if self.learner is not None:
            return self.learner.next_index(self.rng)
        if self.t < self._design.size:
            return int(self._design[self.t])
        return self.strategy.select(self.gp, self.t + 1, self.rng)

    def observe(self, index: int, value: float) -> None:
        """Condition on the reward for row `index`; refit when the mode says so."""
        self.queries.append(int(index))
        self.rewards.append(float(value))
        if self.learner is not None:
            self.learner.observe(index, value)
            return
        self.gp.add(index, value)
        if self.hyper.refit_due(self.t):
            X, y = self.gp.Z[self.gp.indices[:self.t]], self.gp.y[:self.t]
            fit = fit_hyperparameters(self.gp.kernel, self.gp.noise_var, X, y, self.rng,
                                      self.hyper.restarts)
            self.fits.append(fit)
            self.gp = self.gp.rebuilt(fit.kernel, fit.noise_var, fit.prior_mean)

    def with_kernel(self, request: ReleaseRequest) -> ReleaseRequest:
        """`request` carrying the kernel the GP used for the whole session (family,
        length-scale, signal and noise variance), when it was fixed throughout and
        isotropic; otherwise unchanged (zeros: the curator's declared kernel)."""
        k = self.gp.kernel
        if self.learner is not None or self.hyper.mode != "fixed" or self.fits or k.ard:
            return request
        return replace(request, kernel=k.family, lengthscale=k.lengthscales[0],
                       signal_var=k.variance, noise_var=self.gp.noise_var)

    def best(self) -> tuple[int, float]:
        """The queried row with the highest observed reward, and that reward."""
        i = int(np.argmax(self.rewards))
        return self.queries[i], self.rewards[i]
