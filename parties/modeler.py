"""The modeler's side of PO-GP-UCB (Algorithm 2): BO over the released rows of Z.

Hyperparameters are the curator's declared public ones (`fixed`), or the modeler
fits them itself on what it has -- Z and the rewards: by default (`map`, what `auto`
means for values declared 'initial') a maximum-a-posteriori fit around the declared
values every m rounds once enough rewards are told, kept only while its evidence beats
the declared kernel's at that kernel's best constant mean (parties/fitting.py), the
declared kernel held at that mean otherwise; or by maximum likelihood once after an
initial design of uniformly random rows (`once`), or again every m rounds (`every`).
Every fit scores the release's widened model (the input-noise widening applies on top
of what is fitted), none is made on rewards that are all equal, and the engine is
rebuilt (O(n t^2), BLAS-3) only when the model changes. A Gaussian sketch (`--lift jl`)
is first projected on its principal directions above the noise (`principal_sketch`). Under Kusner et al.'s GP-UCB
(the noisy release, Algorithm 1) they stay fixed for the whole session: its proofs
assume one known kernel, and the curator replays the queries with it.

Batches (GP-BUCB, Desautels, Krause & Burdick 2014): `ask()` chooses a row given the
real rewards and the pending queries, hallucinated at the posterior mean, and `tell(slot,
value)` gives a slot its real reward, in any order. One query at a time, ask/tell is
the sequential loop (`next_index()` then `observe()`) to the bit.
"""
from __future__ import annotations

import math
import time
from bisect import bisect
from dataclasses import replace

import numpy as np

from pobo.parties.choices import FIT_MODES, HyperFit  # noqa: F401  (re-exported)
from pobo.parties.gp import IncrementalGP
from pobo.parties.fitting import (
    InputNoise, declared_prior, evidence, gls_mean, map_fit, widened,
)
from pobo.parties.kernels import kernel_by_name
from pobo.parties.likelihood import Fit, one_blas_thread
from pobo.parties.robust import ROBUST, RewardModel
from pobo.parties.strategies import KusnerUCB, Robust, Strategy, avoiding, chooses_around
from pobo.protocol.messages import ProjectedDataset, Release, ReleaseRequest, SessionParams
from pobo.protocol.policy import GAUSSIAN_SKETCH, LDP_REWARD


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


def noise_dims(Z: np.ndarray) -> int:
    """The dimension of the subspace Z's rows (and a Gaussian release's noise) span: d for
    the Gaussian rows rotated into r >= d, r for a sketch (numerical rank of a sample)."""
    sample = Z[: min(Z.shape[0], 4 * Z.shape[1] + 16)]
    return max(1, int(np.linalg.matrix_rank(sample)))


REBUILD_TOLERANCE = 0.1  # a fit this close to the held one leaves the engine as it is
EVIDENCE_MARGIN = 1.0  # nats per fitted kernel parameter a fit must beat the declared kernel by


def close_fits(new: Fit, held: Fit, tolerance: float = REBUILD_TOLERANCE) -> bool:
    """Whether `new` is the held model to `tolerance`: every length-scale, the signal and
    the noise variance within a factor e^tolerance (~10%), and the prior means within
    `tolerance` signal standard deviations. Rebuilding the engine for it (O(n t^2))
    would move the posterior by about as little."""
    logs = np.log(np.r_[new.kernel.lengthscales, new.kernel.variance, new.noise_var]
                  / np.r_[held.kernel.lengthscales, held.kernel.variance, held.noise_var])
    return bool(np.all(np.abs(logs) <= tolerance)
                and abs(new.prior_mean - held.prior_mean)
                <= tolerance * np.sqrt(held.kernel.variance))


SKETCH_PCA = True  # project a Gaussian sketch on its principal directions (post-processing)
MP_MARGIN = 0.1  # above the Marchenko-Pastur edge: a direction kept is signal, not noise


def principal_sketch(Z: np.ndarray, noise_std: float) -> np.ndarray:
    """A Gaussian sketch Z = (X_c M + omega G) / sqrt(r) on its top-k principal directions,
    k the directions whose variance clears the noise's Marchenko-Pastur edge
    noise_std^2 ((1 + sqrt(r / n))^2 + MP_MARGIN): the rows' signal spans at most d of
    the r directions, the noise all r; the projection (post-processing of the release)
    keeps the signal and the noise of k directions only, and the widening then counts
    k noisy dimensions (`noise_dims`). O(n r^2); Z itself if every direction is kept."""
    n, r = Z.shape
    cov = Z.T @ Z / n
    values, vectors = np.linalg.eigh(cov)  # ascending
    edge = noise_std**2 * ((1.0 + math.sqrt(r / n)) ** 2 + MP_MARGIN)
    k = max(1, int(np.count_nonzero(values > edge)))
    if k >= r:
        return Z
    return Z @ vectors[:, ::-1][:, :k]


_DEFERRED = -2  # the engine slot of a slot asked but not hallucinated yet (Modeler._deferred)


class Modeler:
    """Synchronous modeler state: the GP over Z (or a robust learner), the strategy, and
    what it observed.

    In a session with local-DP rewards, plain GP-UCB models the Laplace noise as part
    of its observation noise (variance 2 L^2 added to the declared noise variance).

    Slot k is the (k+1)-th query of the session (protocol seq k + 1), asked by `ask()`
    or recorded by `observe()`. `queries` and `rewards` hold the row and reward of every
    slot told so far, in slot order (a late reward is inserted in its place), so `best()`
    and the results read the same whatever order the rewards came in. A refit that falls
    due while slots are pending waits until none is (hyperparameters are fitted to real
    rewards only, and the engine cannot be rebuilt around hallucinated ones); it then
    fits once, to all rewards told. `max_outstanding` is 1 for the robust learners and
    Kusner et al.'s GP-UCB (their proofs and the noisy release replay sequential UCB
    maximisers), T otherwise.
    """

    def __init__(self, params: SessionParams, release: ProjectedDataset, strategy: Strategy,
                 rng: np.random.Generator, hyper: HyperFit = HyperFit()) -> None:
        kp = params.kernel
        model = reward_model(params)
        Z = release.Z
        if (release.mechanism == GAUSSIAN_SKETCH and release.noise_std > 0
                and not isinstance(strategy, KusnerUCB) and SKETCH_PCA):
            Z = principal_sketch(Z, release.noise_std)
        robust = isinstance(strategy, Robust)
        if isinstance(strategy, KusnerUCB):
            hyper = kusner_hyper(hyper, kp.kernel)
        hyper = HyperFit("fixed", kernel=hyper.kernel) if robust else hyper.resolved(kp.status)
        self.params, self.strategy, self.rng, self.hyper = params, strategy, rng, hyper
        # the release's input noise widens the declared kernel (not for Kusner's GP-UCB,
        # whose noisy release is sized with the declared kernel itself)
        input_noise = 0.0 if isinstance(strategy, KusnerUCB) else release.noise_std
        self.input_noise = InputNoise(input_noise, noise_dims(Z) if input_noise > 0 else 0,
                                      2 * model.laplace_scale**2)  # (a rank: only with noise)
        # the declared base values, and the widened model the engine starts from
        self.declared = (kernel_by_name(hyper.kernel or kp.kernel, kp.lengthscale,
                                        kp.signal_var, dims=Z.shape[1]), kp.noise_var)
        kernel, noise = widened(*self.declared, self.input_noise)
        self._gp = IncrementalGP(Z, kernel, noise, capacity=params.T)
        self._fitted: Fit | None = None  # the fit the engine holds (None: the declared values)
        self._declared_mean = 0.0  # the prior mean the declared values are held at
        self.learner = None
        if robust:
            cls = ROBUST[strategy.name]
            extra = {} if cls.name == "tgp-ucb" else {"rng": rng}
            if cls.name == "moma-gp-ucb" and strategy.moma_k is not None:
                extra["k"] = strategy.moma_k
            self.learner = cls(Z, kernel, params.T, model, lam=strategy.lam,
                               delta=strategy.delta, scale=strategy.beta_scale, **extra)
        self.fits: list[Fit] = []
        self.fit_seconds = 0.0  # CPU time of the fits and the rebuilds they caused
        self.release: Release | None = None
        self.release_error: str | None = None
        self.ledger_head = None  # the curator's closing checkpoint (protocol.checkpoint)
        # the session's wall times, set by the runner: preparation (handshake, Dataset, GP
        # set-up, a resume's replay) and per step (query to reward, the choice included)
        self.timing: dict | None = None
        self.queries: list[int] = []
        self.rewards: list[float] = []
        self._design = (rng.permutation(self._gp.n)[:hyper.design]
                        if hyper.design else np.empty(0, dtype=np.int64))
        self._asked: list[int] = []  # row per slot, in slot order
        self._told: list[int] = []  # slots told, sorted (parallel to queries and rewards)
        self._engine_slot: dict[int, int] = {}  # pending slot -> the engine's slot
        # the slot asked last, whose hallucinated observation is not in the engine yet:
        # added (GP-BUCB) before anything else uses the engine, or, told first, its
        # real value goes in directly: one update instead of two (the same numbers)
        self._deferred: int | None = None
        self._refit_waiting = False
        sequential = robust or isinstance(strategy, KusnerUCB)
        self.max_outstanding = 1 if sequential else params.T
        self.spent: set[int] = set()  # rows the curator refused for their privacy budget

    @property
    def gp(self) -> IncrementalGP:
        """The GP engine, with every slot asked in it (the last one's hallucinated
        observation is added on first use: `_hallucinate`)."""
        self._hallucinate()
        return self._gp

    @property
    def t(self) -> int:
        """Number of rewards observed so far."""
        return len(self.rewards)

    @property
    def pending(self) -> tuple[int, ...]:
        """The slots asked but not yet told, in slot order."""
        return tuple(sorted(self._engine_slot))

    def next_index(self) -> int:
        """The row to query in the next round (initial design first, when fitting), given
        the rewards told and the pending queries hallucinated (GP-BUCB)."""
        asked = len(self._asked)
        if self.learner is not None:  # (never given a spent row: `withdraw` refuses)
            return self.learner.next_index(self.rng)
        self._hallucinate()
        if asked < self._design.size and int(self._design[asked]) not in self.spent:
            return int(self._design[asked])
        chosen = self.strategy.select(self._gp, asked + 1, self.rng)
        if chosen in self.spent:
            chosen = avoiding(self.strategy, self._gp, asked + 1, self.rng, self.spent)
        return chosen

    def withdraw(self, slot: int) -> int:
        """Take back pending `slot`, which the curator refused for its row's privacy
        budget (PROTOCOL.md 7.1: a refused query is not asked; its seq is asked again),
        and never choose that row again; returns the row. Only the slot asked last, not
        yet hallucinated into the GP (every slot of a session with one query
        outstanding), of a strategy that can choose around a row (GP-UCB, random), can be
        taken back: ValueError otherwise."""
        last = len(self._asked) - 1
        if self.learner is not None or not chooses_around(self.strategy):
            raise ValueError(f"{self._name()} cannot choose around a row")
        if slot != last or slot not in self._engine_slot or self._deferred != slot:
            raise ValueError(f"slot {slot} cannot be taken back (only the slot asked last, "
                             "before another query is chosen)")
        row = self._asked.pop()
        del self._engine_slot[slot]
        self._deferred = None
        self.spent.add(int(row))
        return row

    def ask(self, index: int | None = None) -> int:
        """Choose the next row, register it as pending (slot = queries asked so far) and
        return it; a given `index` (a query in flight when a session stopped, asked again
        on resume) is registered instead, after the choice is made all the same so the
        rng stream stays that of the session. beta_t is sequential GP-UCB's at t = slots
        asked + 1: Desautels et al.'s regret bound needs it inflated (their exp(C)
        factor); like their experiments we keep the sequential schedule."""
        if len(self._engine_slot) >= self.max_outstanding:
            raise ValueError(f"{self._name()} takes at most {self.max_outstanding} outstanding "
                             f"{'query' if self.max_outstanding == 1 else 'queries'}; "
                             f"slots {list(self.pending)} are pending")
        if len(self._asked) >= self.params.T:
            raise ValueError(f"all T = {self.params.T} queries of the session are asked")
        chosen = self.next_index()
        index = chosen if index is None else int(index)
        slot = len(self._asked)
        if self.learner is not None:
            self._engine_slot[slot] = -1
        else:
            self._gp.next_row(index)  # refused now (range, pivot), as add_pending would
            self._engine_slot[slot] = _DEFERRED
            self._deferred = slot
        self._asked.append(index)
        return index

    def _hallucinate(self) -> None:
        """Put the deferred slot's hallucinated observation (y = posterior mean; GP-BUCB,
        Desautels et al. 2014) into the engine. Every use of the engine other than that
        slot's own `tell` comes after this, so the numbers are those of hallucinating
        at `ask` itself."""
        slot = self._deferred
        if slot is not None:
            self._engine_slot[slot] = self._gp.add_pending(self._asked[slot])
            self._deferred = None  # (only once it is in: a failure leaves it deferred)

    def tell(self, slot: int, value: float) -> None:
        """The real reward of pending `slot` (in any order); refit when due and no slot
        is pending."""
        if slot not in self._engine_slot:
            raise ValueError(f"slot {slot} is not pending (pending: {list(self.pending)})")
        index = self._asked[slot]
        if self.learner is not None:
            self.learner.observe(index, value)
        elif slot == self._deferred:  # asked last, nothing used the engine since
            self._gp.add(index, value)  # = resolve(add_pending(index), value)
            self._deferred = None
        else:
            self._hallucinate()
            self._gp.resolve(self._engine_slot[slot], value)
        del self._engine_slot[slot]
        self._record(slot, index, value)

    def observe(self, index: int, value: float) -> None:
        """Condition on the reward for row `index` as the next slot, asked and told at
        once (a replay); refit when the mode says so. With nothing pending this is the
        sequential loop's step; with slots pending the engine puts the real value before
        them (`IncrementalGP.add`), which a sequential-only learner refuses."""
        if self.learner is not None and self._engine_slot:
            raise ValueError(f"{self._name()} is sequential; slots {list(self.pending)} "
                             "are pending")
        if self.learner is not None:
            self.learner.observe(index, value)
        else:
            self._hallucinate()
            self._gp.add(index, value)
        self._asked.append(int(index))
        self._record(len(self._asked) - 1, index, value)

    def _record(self, slot: int, index: int, value: float) -> None:
        """File a told reward in slot order; refit when one is due and none is pending."""
        at = bisect(self._told, slot)
        self._told.insert(at, slot)
        self.queries.insert(at, int(index))
        self.rewards.insert(at, float(value))
        if self.learner is not None:
            return
        self._refit_waiting |= self.hyper.refit_due(self.t)
        if self._refit_waiting and not self._engine_slot:
            self._refit_waiting = False
            self._refit()

    def _refit(self) -> None:
        """Fit the hyperparameters to the rewards told: MAP around the declared values
        (`map`), held only if its evidence beats the declared kernel's at its best
        constant mean (`gls_mean`) by more than one nat per fitted kernel parameter
        (Akaike's penalty), otherwise the declared kernel is held at that mean; a fit
        within REBUILD_TOLERANCE of the held one leaves the engine as it is. Or maximum
        likelihood (`once`, `every`), held as fitted. Nothing is fitted
        on rewards that are all equal (no evidence about any length-scale), nor after
        the session's last reward (no query left to use it)."""
        y = np.asarray(self.rewards)
        if self.t >= self.params.T or not np.ptp(y) > 0:
            return
        started = time.process_time()
        with one_blas_thread():  # small factorisations: threads only spin (and same bits)
            self._fit_and_hold(y)
        self.fit_seconds += time.process_time() - started

    def _fit_and_hold(self, y: np.ndarray) -> None:
        """`_refit`'s work: the fit, the evidence test, the engine rebuilt if the model
        changes."""
        X = self._gp.Z[np.asarray(self.queries)]
        kernel, noise = self.declared
        prior, bounds = declared_prior(kernel, noise) if self.hyper.mode == "map" else (None, None)
        starts = () if self._fitted is None else (
            np.append(self._fitted.base.theta, np.log(self._fitted.base_noise_var)),)
        # MAP starts from the declared values and the fit held, no random point: in its
        # small box random starts only jump between optima (realestate, 20 seeds: top-1%
        # rows 3.05 +- 0.28 without them, 2.95 +- 0.25 with one)
        fit = map_fit(kernel, noise, self.input_noise, X, y, self.rng, prior=prior,
                      bounds=bounds, starts=starts,
                      restarts=0 if self.hyper.mode == "map" else self.hyper.restarts)
        # The declared values say nothing of the mean: the declared kernel is scored at
        # its best constant mean (GLS), so the test weighs the kernel alone (at prior
        # mean 0 any objective far from 0, real estate's -9.5, passed it on the mean),
        # and the fit must beat it by the kernel parameters it chose (Akaike: one nat
        # each: length-scales, signal and noise variance)
        mean = gls_mean(kernel, noise, self.input_noise, X, y)
        declared = evidence(kernel, noise, self.input_noise, X, y, mean)
        margin = EVIDENCE_MARGIN * (len(kernel.lengthscales) + 2)
        guarded = self.hyper.mode == "map"  # once / every: plain ML, held as fitted
        fit = replace(fit, declared_log_likelihood=declared,
                      kept=fit.log_likelihood > declared + margin or not guarded)
        if guarded and fit.kept and self._fitted is not None and close_fits(fit, self._fitted):
            fit = replace(fit, rebuilt=False)  # the held model, to REBUILD_TOLERANCE: kept
        self.fits.append(fit)
        if fit.kept:
            if fit.rebuilt:
                self._gp = self._gp.rebuilt(fit.kernel, fit.noise_var, fit.prior_mean,
                                            in_place=True)
                self._fitted = fit
        elif self._fitted is not None or self._declared_mean != mean:
            # the declared kernel, at the mean it was scored at
            self._gp = self._gp.rebuilt(*widened(kernel, noise, self.input_noise), mean,
                                        in_place=True)
            self._fitted, self._declared_mean = None, mean

    @property
    def held(self) -> Fit | None:
        """The fit the engine holds (None: the declared values, at `declared_mean`)."""
        return self._fitted

    @property
    def declared_mean(self) -> float:
        """The prior mean the engine holds the declared values at: 0 until a fit round
        holds them, then the declared kernel's GLS mean of the last round that did."""
        return self._declared_mean

    def _name(self) -> str:
        """The strategy's name as the sequential-only refusal gives it."""
        if isinstance(self.strategy, KusnerUCB):
            return "Kusner et al.'s gp-ucb (noisy release)"
        return self.strategy.name

    def with_kernel(self, request: ReleaseRequest) -> ReleaseRequest:
        """`request` carrying the kernel the GP used for the whole session (family,
        length-scale, signal and noise variance), when it was fixed throughout at prior
        mean 0 (no fit made: a fit round moves even a declared kernel held to its GLS
        mean) and isotropic; otherwise unchanged (zeros: the curator's declared kernel)."""
        k = self._gp.kernel
        if self.learner is not None or self.hyper.design or self.fits or k.ard:
            return request
        return replace(request, kernel=k.family, lengthscale=k.lengthscales[0],
                       signal_var=k.variance, noise_var=self._gp.noise_var)

    def best(self) -> tuple[int, float]:
        """The queried row with the highest observed reward, and that reward."""
        i = int(np.argmax(self.rewards))
        return self.queries[i], self.rewards[i]
