"""Locally private rewards: Convert-to-Laplace, CTL(epsilon) of Zhou & Tan (Curator 1).

Each reward leaves the curator as y_bar = clip(y, -(B + R), B + R) + Laplace(2(B + R)/eps).
The clip makes the bound the privacy proof assumes (|f| <= B, |noise| <= R) actually
hold, so the release is eps-LDP for the individual behind the row whatever the data.
With unbounded (sub-Weibull) noise, sec. 4.5 clips at R = K ln(T/delta)^theta and calls
the release (eps, delta)-LDP, delta bounding the chance that any of the T noises exceeds R.
Because pobo clips the value itself, the release stays pure eps-LDP even then (the clip,
not the noise, bounds the sensitivity): delta is only the chance that a clip biases a
reward, and no delta is charged (parties.service.ldp_mechanism).
The noise is lattice Laplace (parties.noise), so it resists the floating-point attack.
"""
from __future__ import annotations

import math
import os
from collections import deque
from dataclasses import dataclass

from pobo.parties.noise import NoiseSource, lattice_laplace, lattice_noise, lattice_point

CTL = "ctl-laplace"


@dataclass(frozen=True)
class ConvertToLaplace:
    """CTL(epsilon) with declared bounds B on |f| and R on the measurement noise."""

    epsilon: float
    B: float
    R: float
    delta: float = 0.0  # the privacy delta: 0 (pure eps) for every clipped release

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"LDP epsilon must be positive and finite, got {self.epsilon}")
        if not (self.B >= 0 and self.R >= 0 and self.B + self.R > 0):
            raise ValueError(f"need B >= 0, R >= 0 and B + R > 0, got B={self.B}, R={self.R}")
        if not 0 <= self.delta < 1:
            raise ValueError(f"LDP delta must lie in [0, 1), got {self.delta}")
        if not math.isfinite(self.scale * self.scale):  # (the noise variance too)
            raise ValueError(f"LDP epsilon {self.epsilon:g} with B + R = {self.bound:g} "
                             f"gives a noise scale of {self.scale:g}: no reward could be used "
                             "(every modeler's GP would fail); give a larger epsilon")

    @property
    def bound(self) -> float:
        """B + R: rewards are clipped to [-bound, bound]."""
        return self.B + self.R

    @property
    def scale(self) -> float:
        """The Laplace scale 2(B + R)/epsilon (the paper's calligraphic L)."""
        return 2.0 * self.bound / self.epsilon

    def privatise(self, y: float, source: NoiseSource) -> float:
        """The eps-LDP release of one reward y, its noise drawn now."""
        return lattice_laplace(self.clip(y), 2.0 * self.bound, self.epsilon, source)

    def clip(self, y: float) -> float:
        """y clipped to [-(B + R), B + R]."""
        return min(max(float(y), -self.bound), self.bound)

    def with_noise(self, y: float, z: int) -> float:
        """The eps-LDP release of y with its lattice noise z (drawn by `noise`)."""
        return lattice_point(self.clip(y), 2.0 * self.bound, self.epsilon, z)

    def noise(self, source: NoiseSource) -> int:
        """One lattice noise of this mechanism (independent of the reward)."""
        return lattice_noise(2.0 * self.bound, self.epsilon, source)


POOL_SIZE = 32  # noises kept drawn ahead of the requests


class NoisePool:
    """Noises of one CTL mechanism drawn ahead of the requests, so that the time to answer
    does not depend on the noise the answer carries.

    The exact sampler's running time grows with |noise| (its loops); drawn on the request
    path, an answer's latency would reveal its noise (issue 21). Here an answer takes the
    oldest noise of the pool (a few integer operations), and `refill` -- called after
    the reward is sent -- draws a replacement. Noises are used in the order they were
    drawn, so a seeded source gives exactly the sequence the draw-on-request path gave
    (a journal replay takes them in the same order). What remains: a refill delays a
    query that arrives while it runs, by one draw, whose noise leaves `size` answers
    later; `size` = 0 draws on request (the old path, kept for the benchmark).
    """

    def __init__(self, mechanism: ConvertToLaplace, source: NoiseSource,
                 size: int = POOL_SIZE) -> None:
        self.mechanism, self.source, self.size = mechanism, source, int(size)
        self._ahead: deque[int] = deque()
        self._pid = os.getpid()
        self.refill()

    def privatise(self, y: float) -> float:
        """The eps-LDP release of y with the oldest noise drawn (one drawn now if none:
        only with `size` 0, or more answers between two refills than `size`, which a
        session's pool, as large as its batch, never has)."""
        self._check_fork()
        z = self._ahead.popleft() if self._ahead else self.mechanism.noise(self.source)
        return self.mechanism.with_noise(y, z)

    def refill(self) -> None:
        """Draw noises until `size` are ahead (off the answer path)."""
        self._check_fork()
        while len(self._ahead) < self.size:
            self._ahead.append(self.mechanism.noise(self.source))

    def _check_fork(self) -> None:
        """In a forked child, drop the noises the parent drew: the two processes would
        otherwise release the same noises."""
        if self._pid != os.getpid():
            self._ahead.clear()
            self._pid = os.getpid()


def subweibull_clip(K: float, theta: float, T: int, delta: float) -> float:
    """R = K ln(T/delta)^theta: the clip of sec. 4.5 for sub-Weibull(theta) noise."""
    if not (K > 0 and theta > 0 and T >= 1 and 0 < delta < 1):
        raise ValueError("need K > 0, theta > 0, T >= 1 and 0 < delta < 1")
    return K * math.log(T / delta) ** theta
