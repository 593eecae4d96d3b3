"""The curator's side: answers queries with noisy evaluations of f, within budget T."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protocol.errors import ErrorCode, ProtocolError


@dataclass(frozen=True)
class Oracle:
    """Noisy measurement y = f(x_i) + N(0, noise_var) of a tabulated objective f."""

    f: np.ndarray
    noise_var: float

    def measure(self, index: int, rng: np.random.Generator) -> float:
        """One fresh noisy evaluation at row `index`."""
        return float(self.f[index] + np.sqrt(self.noise_var) * rng.standard_normal())


def regret_traces(f: np.ndarray, queried: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(simple, cumulative) regret per iteration of maximising f: r_t = max f - f(x_t)."""
    inst = float(np.max(f)) - np.asarray(f)[np.asarray(queried, dtype=np.int64)]
    return np.minimum.accumulate(inst), np.cumsum(inst)


class Curator:
    """Synchronous curator state: the oracle, the budget, and the record of answers."""

    def __init__(self, oracle: Oracle, budget: int, rng: np.random.Generator) -> None:
        self.oracle = oracle
        self.budget = int(budget)
        self.rng = rng
        self.queries: list[int] = []
        self.rewards: list[float] = []

    @property
    def n(self) -> int:
        """Number of candidate rows."""
        return self.oracle.f.shape[0]

    def answer(self, index: int) -> float:
        """Evaluate f at row `index` (plus noise), refusing out-of-range rows and overspend."""
        if not 0 <= index < self.n:
            raise ProtocolError(f"row index {index} out of range [0, {self.n})",
                                ErrorCode.INDEX_OUT_OF_RANGE)
        if len(self.queries) >= self.budget:
            raise ProtocolError(f"the budget of {self.budget} evaluations is spent",
                                ErrorCode.BUDGET_EXHAUSTED)
        value = self.oracle.measure(index, self.rng)
        self.queries.append(int(index))
        self.rewards.append(value)
        return value

    def regret(self) -> tuple[np.ndarray, np.ndarray]:
        """(simple, cumulative) regret so far, from the true f (simulation only)."""
        return regret_traces(self.oracle.f, np.asarray(self.queries, dtype=np.int64))
