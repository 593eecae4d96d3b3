"""Acquisition strategies: which candidate row the modeler queries next."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pobo.parties.choices import (  # noqa: F401  (re-exported)
    ROBUST_NAMES, STRATEGIES, epoch_length_option, strategy_spec,
)
from pobo.parties.gp import IncrementalGP, argmax_breaking_ties
from pobo.parties.release import beta_kusner


class Strategy(Protocol):
    """Chooses the next candidate index from the posterior at round t (1-based)."""

    name: str

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """The row index to query at round t."""


def beta_gp_ucb(t: int, n: int, delta: float = 0.05) -> float:
    """beta_t = 2 ln(n t^2 pi^2 / (6 delta)) (Srinivas et al. 2010; PO-GP-UCB Algorithm 2)."""
    return 2.0 * math.log(n * t * t * math.pi**2 / (6.0 * delta))


AUTHORS_DELTA = 0.1  # the PO-GP-UCB authors' code's delta_ucb (the paper: 0.05)


@dataclass(frozen=True)
class GPUCB:
    """GP-UCB: argmax mu_{t-1}(z) + S beta_t^1/2 sigma_{t-1}(z) over the candidates,
    S = `beta_scale` (1: Srinivas et al.'s beta_t exactly). `variance` scores
    mu + S beta_{t-1}^1/2 sigma^2 instead, as the PO-GP-UCB authors' code does (with
    delta 0.1: `authors_code_ucb`), a reproduction switch, never a default."""

    delta: float = 0.05
    beta_scale: float = 1.0
    name: str = "gp-ucb"
    variance: bool = False

    def beta(self, t: int, n: int) -> float:
        """S^2 beta at round t over n candidates: beta_t (Algorithm 2); under `variance`
        beta_{t-1}, the authors' code's index (the observations so far; at t = 1, where
        every row ties and no beta is used, beta_1)."""
        index = max(t - 1, 1) if self.variance else t
        return self.beta_scale**2 * beta_gp_ucb(index, n, self.delta)

    def score(self, gp: IncrementalGP, t: int) -> np.ndarray:
        """The UCB score of every candidate at round t (a new array)."""
        width = gp.var if self.variance else np.sqrt(gp.var)
        return gp.mean + math.sqrt(self.beta(t, gp.n)) * width

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """The UCB maximiser at round t (at t = 1 every row ties: a uniform draw)."""
        return gp.ucb_argmax(self.beta(t, gp.n), rng, self.variance)


def authors_code_ucb(beta_scale: float = 1.0) -> GPUCB:
    """GP-UCB as the PO-GP-UCB authors' code runs it: mean + beta_{t-1}^1/2 variance, delta
    0.1 (the paper's text: mean + beta_t^1/2 std, delta 0.05). Their UCB.py weights the
    variance by `_get_beta()`, which returns the square root of beta, indexed by the
    number of observations so far (Algorithm 2's t - 1)."""
    return GPUCB(delta=AUTHORS_DELTA, beta_scale=beta_scale, variance=True)


@dataclass(frozen=True)
class KusnerUCB:
    """GP-UCB as Kusner et al.'s Algorithm 1 runs it (line 3-4): argmax mu_{t-1}(z) +
    beta_t^1/2 sigma_{t-1}(z), beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) at the release's
    delta, unscaled. Only this query rule makes the noisy release's proofs hold."""

    delta: float
    name: str = "gp-ucb"

    def __post_init__(self) -> None:
        if not 0 < self.delta < 1:
            raise ValueError(f"Kusner et al.'s beta_t needs 0 < delta < 1, got {self.delta}")

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """The UCB maximiser at round t (at t = 1 every row ties: a uniform draw)."""
        return gp.ucb_argmax(beta_kusner(t, gp.n, self.delta), rng)


def for_release(strategy: Strategy, algorithm: str | None, delta: float) -> Strategy:
    """The strategy to run when the session ends with a release: GP-UCB becomes Kusner
    et al.'s (their beta_t at the release's delta, no beta scale) when a 'noisy' release
    (Algorithm 1) is asked for; any other strategy or release is left as it is."""
    if algorithm == "noisy" and strategy.name == "gp-ucb" and 0 < delta < 1:
        return KusnerUCB(delta)
    return strategy


def declaration(strategy: Strategy) -> tuple[str, float]:
    """(strategy, release_delta) for the Hello: the registered name of the acquisition
    ('' for an unregistered one) and, for Kusner et al.'s GP-UCB, the delta of its beta_t
    (0: not Kusner's beta)."""
    if isinstance(strategy, KusnerUCB):
        return strategy.name, strategy.delta
    return (strategy.name if strategy.name in STRATEGIES else ""), 0.0


@dataclass(frozen=True)
class RandomChoice:
    """Uniform random rows: the floor every strategy must beat."""

    name: str = "random"

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """A uniformly random row."""
        return int(rng.integers(gp.n))


def under_rules(strategy, params) -> object:
    """`strategy` as the session's public rules require: restricted to rows not queried
    yet when the Welcome says `distinct` (the scenario's rule, e.g. a patient is tested
    once), for the strategies that choose rows freely (GP-UCB, random); unchanged
    otherwise."""
    if getattr(params, "distinct", False) and isinstance(strategy, (GPUCB, RandomChoice)):
        return Distinct(strategy)
    return strategy


@dataclass(frozen=True)
class Distinct:
    """`inner` restricted to rows not queried yet: for a tabulated, noise-free outcome
    (a patient's test result) a second query of a row adds nothing and costs a query."""

    inner: GPUCB | RandomChoice

    @property
    def name(self) -> str:
        """The inner strategy's registered name (what the handshake declares)."""
        return self.inner.name

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """The inner rule's choice among the rows not yet observed (all, once every row is)."""
        seen = np.unique(gp.indices[:gp.t])
        if seen.size >= gp.n or (isinstance(self.inner, GPUCB) and gp.t == 0):
            return self.inner.select(gp, t, rng)
        if isinstance(self.inner, RandomChoice):
            free = np.setdiff1d(np.arange(gp.n), seen, assume_unique=True)
            return int(free[rng.integers(free.size)])
        score = gp.ucb_score(self.inner.beta(t, gp.n), self.inner.variance)  # scratch: no copy
        score[seen] = -np.inf
        return argmax_breaking_ties(score, rng)


def chooses_around(strategy) -> bool:
    """Whether `avoiding` can choose for `strategy` (GP-UCB, Kusner's, random, each under
    a Distinct rule or not); not the robust learners nor a caller's own strategy."""
    inner = strategy.inner if isinstance(strategy, Distinct) else strategy
    return isinstance(inner, (GPUCB, KusnerUCB, RandomChoice))


def avoiding(strategy, gp: IncrementalGP, t: int, rng: np.random.Generator,
             spent: set[int]) -> int:
    """`strategy`'s choice at round t among the rows not in `spent` (rows whose privacy
    budget the curator refused: PROTOCOL.md 7.1, a refused query is asked again with
    another row). GP-UCB (Kusner's too) takes its UCB maximiser over the other rows,
    random a uniform one of them, each keeping a Distinct rule; ValueError for a
    strategy that cannot choose around a row (the robust learners) or no row left."""
    blocked = np.fromiter(spent, dtype=np.int64, count=len(spent))
    inner = strategy.inner if isinstance(strategy, Distinct) else strategy
    if isinstance(strategy, Distinct):
        seen = np.unique(gp.indices[:gp.t])
        if np.union1d(seen, blocked).size < gp.n:  # (once every row is seen: any row)
            blocked = np.union1d(seen, blocked)
    if blocked.size >= gp.n:
        raise ValueError(f"every one of the {gp.n} rows is refused for its privacy budget")
    if isinstance(inner, RandomChoice):
        free = np.setdiff1d(np.arange(gp.n), blocked)
        return int(free[rng.integers(free.size)])
    if isinstance(inner, GPUCB):
        score = gp.ucb_score(inner.beta(t, gp.n), inner.variance)  # scratch: no copy
    elif isinstance(inner, KusnerUCB):
        score = gp.ucb_score(beta_kusner(t, gp.n, inner.delta))
    else:
        raise ValueError(f"{getattr(inner, 'name', inner)} cannot choose around a row "
                         "whose privacy budget is spent")
    score[blocked] = -np.inf
    return argmax_breaking_ties(score, rng)


@dataclass(frozen=True)
class Robust:
    """One of the heavy-tail strategies of parties.robust (stateful learners the modeler
    builds once it knows Z and the session's reward constants)."""

    name: str
    beta_scale: float = 1.0
    lam: float = 1.0
    delta: float = 0.05
    moma_k: int | None = None  # MoMA's epoch length; None: the theorem's ceil(24 ln(4eT/delta))


# Exploration scales S that make each strategy useful at the LDP paper's setting: with
# beta_t exactly as the theorems give it (S = 1; beta_t of 10^2 to 10^4 there) all three
# explore almost uniformly for thousands of rounds. Chosen on ldp-synthetic (SE and
# Matern, eps in {0.5, 1}, T = 2000; see the README) and held fixed.
DEFAULT_BETA_SCALE = {"gp-ucb": 1.0, "tgp-ucb": 0.03, "ata-gp-ucb": 0.01, "moma-gp-ucb": 0.01}


def make_strategy(spec: str, beta_scale: float | None = None
                  ) -> GPUCB | RandomChoice | Robust | Distinct:
    """The strategy a spec names ('gp-ucb', 'moma-gp-ucb+k=8', 'gp-ucb+distinct', see
    `strategy_spec`); beta_scale None means its default."""
    name, *options = spec.split("+")
    scale = DEFAULT_BETA_SCALE.get(name, 1.0) if beta_scale is None else float(beta_scale)
    if not scale > 0:
        raise ValueError(f"beta scale must be positive, got {scale}")
    moma_k, distinct, authors = None, False, False
    for option in options:
        if option == "distinct" and name in ("gp-ucb", "random"):
            distinct = True
        elif option == "authors" and name == "gp-ucb":
            authors = True
        elif option.startswith("k=") and name == "moma-gp-ucb":
            moma_k = epoch_length_option(option[2:])
        else:
            raise ValueError(f"strategy {name!r} takes no option {option!r}")
    if name == "gp-ucb":
        ucb = authors_code_ucb(scale) if authors else GPUCB(beta_scale=scale)
        return Distinct(ucb) if distinct else ucb
    if name == "random":
        return Distinct(RandomChoice()) if distinct else RandomChoice()
    if name in ROBUST_NAMES:
        return Robust(name, scale, moma_k=moma_k)
    raise ValueError(f"unknown strategy {name!r}; choose from {list(STRATEGIES)}")
