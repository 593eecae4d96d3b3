"""Randomness that protects privacy: a CSPRNG or a seeded Generator, and lattice Laplace noise.

`NoiseSource` draws from the operating system's CSPRNG (os.urandom, deployment) or
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
import os
import threading
import zlib
from fractions import Fraction

import numpy as np

SECURE, SEEDED = "os-csprng", "seeded"
LATTICE_BITS = 30  # the lattice step is about scale / 2^30
POOL_BYTES = 4096  # CSPRNG bytes read at once for randbelow
NORMAL_CHUNK = 1 << 20  # CSPRNG normals drawn per os.urandom read (16 MB of scratch)


def rng_for(seed: int | None, stream: str) -> np.random.Generator:
    """An independent Generator for one named use of the run seed (OS entropy if None)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), zlib.crc32(stream.encode())])


class NoiseSource:
    """Uniform integers and normals from the OS CSPRNG (rng=None) or a seeded Generator.

    The CSPRNG is read in bulk: one os.urandom call per array (`uniform`, and
    `standard_normal` per chunk of NORMAL_CHUNK draws), and `randbelow` takes its bytes
    from a POOL_BYTES pool refilled by one os.urandom call. The pool is behind a lock
    (no two draws share a byte) and is dropped in a forked child (a parent and its child
    never draw the same bytes). Exactness is unchanged: `randbelow` is rejection
    sampling on whole random bytes, and `uniform` returns k / 2^53 for k exactly uniform
    on 1..2^53 - 1 (53 uniform bits, zeros redrawn).
    """

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self._rng = rng
        self._pool, self._at, self._pid = b"", 0, os.getpid()
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        """'os-csprng' (deployment) or 'seeded' (simulation)."""
        return SECURE if self._rng is None else SEEDED

    def random_bytes(self, count: int) -> bytes:
        """`count` uniform random bytes: the seeded Generator's, or the OS CSPRNG's."""
        if self._rng is not None:
            return self._rng.bytes(count)
        if count > POOL_BYTES:
            return os.urandom(count)
        with self._lock:
            if self._pid != os.getpid() or self._at + count > len(self._pool):
                self._pool, self._at, self._pid = os.urandom(POOL_BYTES), 0, os.getpid()
            start, self._at = self._at, self._at + count
            return self._pool[start:self._at]

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), exactly, for any positive Python int n."""
        if n <= 0:
            raise ValueError(f"randbelow needs n > 0, got {n}")
        bits = (n - 1).bit_length() or 1
        nbytes = (bits + 7) // 8
        while True:  # rejection sampling on whole bytes, masked to `bits`
            value = int.from_bytes(self.random_bytes(nbytes), "little") & ((1 << bits) - 1)
            if value < n:
                return value

    def uniform(self, size: int) -> np.ndarray:
        """Uniform doubles in (0, 1) on the grid k / 2^53 (the seeded Generator's: [0, 1))."""
        if self._rng is not None:
            return self._rng.random(size)
        k = self._uint53(size)
        while (zero := np.flatnonzero(k == 0)).size:  # P = 2^-53 each: redrawn, not nudged
            k[zero] = self._uint53(zero.size)
        u = k.view(np.int64).astype(np.float64)  # exact: k < 2^53 (int64: numpy's fast cast)
        u *= 1.0 / (1 << 53)  # exact: a power-of-two factor
        return u

    def _uint53(self, size: int) -> np.ndarray:
        """`size` integers uniform on [0, 2^53): the top 53 bits of 8 CSPRNG bytes each."""
        return np.frombuffer(self.random_bytes(8 * size), dtype=np.uint64) >> np.uint64(11)

    def standard_normal(self, size) -> np.ndarray:
        """Standard normal draws (Box-Muller on `uniform`, both of each pair), e.g. a
        projection matrix; drawn NORMAL_CHUNK at a time so the scratch stays small."""
        shape = (size,) if isinstance(size, int) else tuple(size)
        if self._rng is not None:
            return self._rng.standard_normal(shape)
        count = math.prod(shape)
        out = np.empty(count)
        for start in range(0, count, NORMAL_CHUNK):
            m = min(NORMAL_CHUNK, count - start)
            pairs = (m + 1) // 2
            u = self.uniform(2 * pairs)
            radius = np.sqrt(-2.0 * np.log(u[:pairs]))
            angle = (2.0 * math.pi) * u[pairs:]
            out[start:start + pairs] = radius * np.cos(angle)
            out[start + pairs:start + m] = (radius * np.sin(angle))[:m - pairs]
        return out.reshape(shape)


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
