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

    The value is rounded to the lattice (step g); two values within `sensitivity` are
    then at most ceil(sensitivity / g) steps apart, so discrete Laplace noise of scale
    ceil(sensitivity / g) / epsilon steps is epsilon-DP, i.e. a continuous scale of
    sensitivity / epsilon enlarged by at most one part in 2^29.
    """
    if not (math.isfinite(value) and sensitivity > 0 and epsilon > 0):
        raise ValueError("lattice_laplace needs a finite value, sensitivity > 0, epsilon > 0")
    g = lattice_step(sensitivity / epsilon)
    steps = math.ceil(Fraction(sensitivity) / Fraction(g))
    z = discrete_laplace(Fraction(steps) / Fraction(epsilon), source)
    return (round(Fraction(value) / Fraction(g)) + z) * g
