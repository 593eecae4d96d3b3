"""The modeler's side of PO-GP-UCB (Algorithm 2): BO over the released rows of Z."""
from __future__ import annotations

import numpy as np

from parties.gp import IncrementalGP, SquaredExponential
from parties.strategies import Strategy
from protocol.messages import ProjectedDataset, SessionParams


class Modeler:
    """Synchronous modeler state: the GP over Z, the strategy, and what it observed."""

    def __init__(self, params: SessionParams, release: ProjectedDataset,
                 strategy: Strategy, rng: np.random.Generator) -> None:
        kp = params.kernel
        self.params = params
        self.strategy = strategy
        self.rng = rng
        self.gp = IncrementalGP(release.Z, SquaredExponential(kp.lengthscale, kp.signal_var),
                                kp.noise_var, capacity=params.T)
        self.queries: list[int] = []
        self.rewards: list[float] = []

    @property
    def t(self) -> int:
        """Number of rewards observed so far."""
        return len(self.rewards)

    def next_index(self) -> int:
        """The row to query in the next round."""
        return self.strategy.select(self.gp, self.t + 1, self.rng)

    def observe(self, index: int, value: float) -> None:
        """Condition the GP on the reward received for row `index`."""
        self.gp.add(index, value)
        self.queries.append(int(index))
        self.rewards.append(float(value))

    def best(self) -> tuple[int, float]:
        """The queried row with the highest observed reward, and that reward."""
        i = int(np.argmax(self.rewards))
        return self.queries[i], self.rewards[i]
