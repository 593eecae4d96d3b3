"""Acquisition strategies: which candidate row the modeler queries next."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from parties.gp import IncrementalGP


class Strategy(Protocol):
    """Chooses the next candidate index from the posterior at round t (1-based)."""

    name: str

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """The row index to query at round t."""


def beta_gp_ucb(t: int, n: int, delta: float = 0.05) -> float:
    """beta_t = 2 ln(n t^2 pi^2 / (6 delta)) (Srinivas et al. 2010; PO-GP-UCB Algorithm 2)."""
    return 2.0 * math.log(n * t * t * math.pi**2 / (6.0 * delta))


@dataclass(frozen=True)
class GPUCB:
    """GP-UCB: argmax mu_{t-1}(z) + beta_t^1/2 sigma_{t-1}(z) over the candidates."""

    delta: float = 0.05
    name: str = "gp-ucb"

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """The UCB maximiser at round t (at t = 1 every row ties: a uniform draw)."""
        return gp.ucb_argmax(beta_gp_ucb(t, gp.n, self.delta), rng)


@dataclass(frozen=True)
class RandomChoice:
    """Uniform random rows: the floor every strategy must beat."""

    name: str = "random"

    def select(self, gp: IncrementalGP, t: int, rng: np.random.Generator) -> int:
        """A uniformly random row."""
        return int(rng.integers(gp.n))


STRATEGIES = {"gp-ucb": GPUCB, "random": RandomChoice}


def make_strategy(name: str, **options: float) -> Strategy:
    """The strategy registered under `name`, built with `options`."""
    try:
        return STRATEGIES[name](**options)
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {sorted(STRATEGIES)}") from None
