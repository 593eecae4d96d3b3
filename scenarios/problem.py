"""What a scenario hands the curator: the dataset, the objective and public defaults."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from protocol.messages import KernelParams


@dataclass(frozen=True)
class Problem:
    """A curator's private dataset X (n x d) and tabulated objective f (maximised).

    `kernel` holds the hyperparameters the scenario declares public; the other fields
    are the paper's default run parameters for the scenario.
    """

    name: str
    X: np.ndarray
    f: np.ndarray
    kernel: KernelParams
    epsilon: float
    delta: float
    r: int
    T: int

    def __post_init__(self) -> None:
        if self.X.ndim != 2 or self.f.shape != (self.X.shape[0],):
            raise ValueError(f"X {self.X.shape} and f {self.f.shape} do not match")


def rng_for(seed: int | None, stream: str) -> np.random.Generator:
    """An independent Generator for one named use of the run seed (OS entropy if None)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), zlib.crc32(stream.encode())])

