"""Randomness that protects privacy: a CSPRNG or a seeded Generator, and lattice Laplace noise.

`NoiseSource` draws from the operating system's CSPRNG (`secrets`, deployment) or
from a seeded `numpy.random.Generator` (simulation, reproducible); results record
which. Laplace noise is sampled on a power-of-two lattice with the exact discrete
Laplace sampler of Canonne, Kamath & Steinke (2020, Algorithm 2), which uses only
integer arithmetic and uniform integers. This closes the floating-point attack on
the textbook sampler (Mironov 2012): a float Laplace sample -scale * log(U) can
only reach a y-dependent, porous set of doubles, so an output can reveal its input;
here every output is y_grid + g * Z with Z an exactly distributed integer, the same
lattice whatever y was. Google's DP library and OpenDP take the same approach.
"""
from __future__ import annotations

import math
import secrets
import zlib
from fractions import Fraction

import numpy as np

from pobo.protocol.accounting import LAPLACE_GRAIN

SECURE, SEEDED = "os-csprng", "seeded"
LATTICE_BITS = 30  # the lattice step is about scale / 2^30


def rng_for(seed: int | None, stream: str) -> np.random.Generator:
    """An independent Generator for one named use of the run seed (OS entropy if None)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), zlib.crc32(stream.encode())])


class NoiseSource:
    """Uniform integers and normals from the OS CSPRNG (rng=None) or a seeded Generator."""

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self._rng = rng

    @property
    def mode(self) -> str:
        """'os-csprng' (deployment) or 'seeded' (simulation)."""
        return SECURE if self._rng is None else SEEDED

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), exactly, for any positive Python int n."""
        if n <= 0:
            raise ValueError(f"randbelow needs n > 0, got {n}")
        if self._rng is None:
            return secrets.randbelow(n)
        bits = (n - 1).bit_length() or 1
        nbytes = (bits + 7) // 8
        while True:  # rejection sampling on whole bytes, masked to `bits`
            value = int.from_bytes(self._rng.bytes(nbytes), "little") & ((1 << bits) - 1)
            if value < n:
                return value

    def uniform(self, size: int) -> np.ndarray:
        """Uniform doubles in (0, 1) with 53 random bits each."""
        if self._rng is not None:
            return self._rng.random(size)
        ints = np.array([self.randbelow(1 << 53) for _ in range(size)], dtype=np.float64)
        return (ints + 0.5) / float(1 << 53)

    def standard_normal(self, size) -> np.ndarray:
        """Standard normal draws (Box-Muller on `uniform`), e.g. a projection matrix."""
        shape = (size,) if isinstance(size, int) else tuple(size)
        if self._rng is not None:
            return self._rng.standard_normal(shape)
        count = math.prod(shape)
        u1, u2 = self.uniform(count), self.uniform(count)
        return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)).reshape(shape)


def bernoulli(p: Fraction, source: NoiseSource) -> bool:
    """Exact Bernoulli(p) for a rational p in [0, 1]."""
    return source.randbelow(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction, source: NoiseSource) -> bool:
    """Exact Bernoulli(exp(-gamma)) for a rational gamma >= 0 (CKS20, Algorithm 1)."""
    while gamma > 1:
        if not bernoulli_exp(Fraction(1), source):
            return False
        gamma -= 1
    k = 1
    while bernoulli(gamma / k, source):
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction, source: NoiseSource) -> int:
    """An integer Z with P(Z = z) proportional to exp(-|z| / scale) (CKS20, Algorithm 2)."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    s, t = scale.denominator, scale.numerator  # scale = t / s
    while True:
        u = source.randbelow(t)
        if not bernoulli_exp(Fraction(u, t), source):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), source):
            v += 1
        y = (u + t * v) // s
        negative = source.randbelow(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def lattice_step(scale: float) -> float:
    """The power-of-two lattice step for Laplace noise of this scale (about scale / 2^30)."""
    return math.ldexp(1.0, math.frexp(scale)[1] - LATTICE_BITS)


def lattice_laplace(value: float, sensitivity: float, epsilon: float,
                    source: NoiseSource) -> float:
    """value + Laplace noise giving epsilon-DP for `sensitivity`, on a power-of-two lattice.

    The value is rounded half up to the lattice (step g): floor(u + 1/2) - floor(v + 1/2)
    <= ceil(u - v), so two values within `sensitivity` are at most ceil(sensitivity / g)
    steps apart. (Python's round() rounds half to even: two values exactly k steps apart,
    k odd, could land k + 1 steps apart, a factor (k + 1)/k ~ 1 + 2^-29 in epsilon.) That
    count is rounded up to `steps`, a multiple of LAPLACE_GRAIN, and discrete Laplace noise
    of scale steps / epsilon is epsilon-DP; the scale is sensitivity / epsilon enlarged by
    at most LAPLACE_GRAIN / 2^29 / epsilon relative. The multiple lets the ledger's
    accountant bound the composition of such reports exactly (protocol.accounting).
    """
    return lattice_point(value, sensitivity, epsilon, lattice_noise(sensitivity, epsilon, source))


def lattice_noise(sensitivity: float, epsilon: float, source: NoiseSource) -> int:
    """The integer noise Z (in lattice steps) of `lattice_laplace`: it does not depend on
    the value, so it may be drawn ahead of the request (parties.ldp.NoisePool)."""
    if not (sensitivity > 0 and epsilon > 0 and math.isfinite(sensitivity / epsilon)):
        raise ValueError("lattice_laplace needs sensitivity > 0 and epsilon > 0")
    _, steps = _lattice(sensitivity, epsilon)
    return discrete_laplace(Fraction(steps) / Fraction(epsilon), source)


def lattice_point(value: float, sensitivity: float, epsilon: float, z: int) -> float:
    """(value rounded half up to the lattice + z steps) * g: `lattice_laplace` with its
    noise z given (a few exact integer operations, whatever z is)."""
    if not (math.isfinite(value) and sensitivity > 0 and epsilon > 0):
        raise ValueError("lattice_laplace needs a finite value, sensitivity > 0, epsilon > 0")
    g, _ = _lattice(sensitivity, epsilon)
    return float((math.floor(Fraction(value) / g + Fraction(1, 2)) + z) * g)


def _lattice(sensitivity: float, epsilon: float) -> tuple[Fraction, int]:
    """(g, steps): the lattice step and the noise's sensitivity in steps (a multiple of
    LAPLACE_GRAIN, at least ceil(sensitivity / g))."""
    g = Fraction(lattice_step(sensitivity / epsilon))
    return g, LAPLACE_GRAIN * math.ceil(Fraction(sensitivity) / (g * LAPLACE_GRAIN))


def discrete_exponential(gammas: list[Fraction], source: NoiseSource) -> int:
    """An index i drawn with probability exactly proportional to exp(-gamma_i), for
    rationals gamma_i >= 0 of which at least one is 0.

    Rejection sampling: propose i uniformly (randbelow), accept with probability
    exp(-gamma_i) by the exact Bernoulli of CKS20 Algorithm 1. A trial returns i with
    probability exp(-gamma_i) / n, so the accepted index has exactly the target law; no
    floating-point CDF is formed. Each trial costs O(1) expected uniform draws; the
    number of trials is geometric with mean n / sum_i exp(-gamma_i) <= n.
    """
    if not gammas or min(gammas) != 0 or any(g < 0 for g in gammas):
        raise ValueError("discrete_exponential needs gammas >= 0 with a minimum of 0")
    n = len(gammas)
    while True:
        i = source.randbelow(n)
        if gammas[i] == 0 or bernoulli_exp(gammas[i], source):
            return i
