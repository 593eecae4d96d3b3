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
import operator
import os
import threading
import weakref
import zlib
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

import numpy as np

from pobo.protocol.accounting import LAPLACE_GRAIN

SECURE, SEEDED = "os-csprng", "seeded"
LATTICE_BITS = 30  # the lattice step is about scale / 2^30
POOL_BYTES = 4096  # CSPRNG bytes read at once for randbelow
NORMAL_CHUNK = 1 << 20  # CSPRNG normals drawn per os.urandom read (16 MB of scratch)


def _integer(value, what: str) -> int:
    """`value` as an int (numpy integers too); ValueError for anything else."""
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} needs an integer, got {value!r}") from None


def _count(value, what: str) -> int:
    """`value` as a non-negative int; ValueError otherwise: a negative count would rewind
    the CSPRNG pool and hand out its bytes again."""
    value = _integer(value, what)
    if value < 0:
        raise ValueError(f"{what} needs a count >= 0, got {value}")
    return value


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
    (no two draws share a byte) and is dropped in a forked child, with the lock, as the
    fork returns in it, before any of its threads draws (a parent and its child never
    draw the same bytes, and two threads of a child never race to drop them). Exactness
    is unchanged: `randbelow` is rejection sampling on whole random bytes, and `uniform`
    returns k / 2^53 for k exactly uniform on 1..2^53 - 1 (53 uniform bits, zeros
    redrawn).
    """

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self._rng = rng
        self._pool, self._at = b"", 0
        self._lock = threading.Lock()
        if rng is None:
            _POOLED.add(self)  # dropped in a forked child (_after_fork)

    @property
    def mode(self) -> str:
        """'os-csprng' (deployment) or 'seeded' (simulation)."""
        return SECURE if self._rng is None else SEEDED

    def random_bytes(self, count: int) -> bytes:
        """`count` uniform random bytes: the seeded Generator's, or the OS CSPRNG's."""
        count = _count(count, "random_bytes")
        if self._rng is not None:
            return self._rng.bytes(count)
        if count > POOL_BYTES:
            return os.urandom(count)
        with self._lock:
            if self._at + count > len(self._pool):
                self._pool, self._at = os.urandom(POOL_BYTES), 0
            start, self._at = self._at, self._at + count
            return self._pool[start:self._at]

    def _forked(self) -> None:
        """Drop what a forked child inherited: the parent's unused bytes and its lock
        (held in the child if another thread held it at the fork)."""
        self._pool, self._at = b"", 0
        self._lock = threading.Lock()

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), exactly, for any positive Python int n."""
        n = _integer(n, "randbelow")
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
        size = _count(size, "uniform")
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


# every CSPRNG source with a pool, so that a forked child drops their pools as the fork
# returns in it (one thread then): a check at the child's first draw let two of its
# threads both drop the pool and lock, then draw under two different locks (a review)
_POOLED: "weakref.WeakSet[NoiseSource]" = weakref.WeakSet()


def _after_fork() -> None:
    """Drop every pooled source's bytes and lock in a child the moment it is forked."""
    for source in list(_POOLED):
        source._forked()


if hasattr(os, "register_at_fork"):  # (POSIX; there is no fork elsewhere)
    os.register_at_fork(after_in_child=_after_fork)


def bernoulli(p: Fraction, source: NoiseSource) -> bool:
    """Exact Bernoulli(p) for a rational p in [0, 1]."""
    return source.randbelow(p.denominator) < p.numerator


def bernoulli_exp(gamma: Fraction, source: NoiseSource) -> bool:
    """Exact Bernoulli(exp(-gamma)) for a rational gamma >= 0 (CKS20, Algorithm 1)."""
    if gamma < 0:
        raise ValueError(f"bernoulli_exp needs gamma >= 0, got {gamma}")
    while gamma > 1:
        if not bernoulli_exp(Fraction(1), source):
            return False
        gamma -= 1
    k = 1
    while bernoulli(gamma / k, source):
        k += 1
    return k % 2 == 1


def discrete_laplace(scale: Fraction, source: NoiseSource) -> int:
    """An integer Z with P(Z = z) proportional to exp(-|z| / scale) (CKS20, Algorithm 2);
    a float scale is taken exactly (Fraction(float))."""
    scale = _rational(scale, "discrete_laplace's scale")
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


def _rational(value, what: str) -> Fraction:
    """`value` (an int, a finite float or a Fraction) as an exact Fraction; ValueError else."""
    try:
        return value if isinstance(value, Fraction) else Fraction(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what} must be a finite number, got {value!r}") from None


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
    _, steps = _lattice(sensitivity, epsilon)
    return discrete_laplace(Fraction(steps) / Fraction(epsilon), source)


def lattice_point(value: float, sensitivity: float, epsilon: float, z: int) -> float:
    """(value rounded half up to the lattice + z steps) * g: `lattice_laplace` with its
    noise z given (a few exact integer operations, whatever z is)."""
    if not math.isfinite(value):
        raise ValueError(f"lattice_laplace needs a finite value, got {value}")
    g, _ = _lattice(sensitivity, epsilon)
    return float((math.floor(Fraction(value) / g + Fraction(1, 2)) + z) * g)


def _lattice(sensitivity: float, epsilon: float) -> tuple[Fraction, int]:
    """(g, steps): the lattice step and the noise's sensitivity in steps (a multiple of
    LAPLACE_GRAIN, at least ceil(sensitivity / g)); ValueError unless sensitivity and
    epsilon are finite and positive with a lattice step a double can hold."""
    if not (0 < sensitivity < math.inf and 0 < epsilon < math.inf
            and lattice_step(sensitivity / epsilon) > 0):
        raise ValueError("lattice_laplace needs finite sensitivity > 0 and epsilon > 0 "
                         "whose lattice step a double can hold (sensitivity / epsilon > "
                         f"~2^-1044; got {sensitivity}, {epsilon})")
    g = Fraction(lattice_step(sensitivity / epsilon))
    return g, LAPLACE_GRAIN * math.ceil(Fraction(sensitivity) / (g * LAPLACE_GRAIN))


LEVELS = 64  # exponent levels of discrete_exponential's proposal (the last holds the rest)


def discrete_exponential(gammas: Sequence[Fraction], source: NoiseSource,
                         levels: np.ndarray | None = None) -> int:
    """An index i drawn with probability exactly proportional to exp(-gamma_i), for
    rationals gamma_i >= 0 (a Sequence: only the proposed ones are read).

    Rejection sampling from a level proposal. Row i sits at an integer level
    k_i <= gamma_i (`levels`; default floor(gamma_i), capped at LEVELS). A trial draws a
    level k with probability proportional to c_k exp(-k) (c_k rows at level k) by exact
    inversion (`_pick_level`), a row i uniformly among that level's, and accepts it with
    probability exp(-(gamma_i - k_i)) by the exact Bernoulli of Canonne, Kamath & Steinke
    (2020, Algorithm 1). A trial thus returns i with probability proportional to
    exp(-k_i) exp(-(gamma_i - k_i)) = exp(-gamma_i): the accepted index has exactly the
    target law, and no floating-point CDF is formed. Below the cap a trial accepts with
    probability >= 1/e, so a peaked distribution over a million rows costs a few trials.
    """
    n = len(gammas)
    if n == 0:
        raise ValueError("discrete_exponential needs at least one exponent")
    if levels is None:
        levels = [math.floor(g) for g in gammas]
    # exp(-gamma_i) / sum_j exp(-gamma_j) is unchanged when every gamma_i and level k_i
    # lose the same integer: the lowest level goes to 0, so a trial accepts with
    # probability >= 1/e whatever the exponents (all of them past the cap would never end)
    levels = np.asarray(levels)  # (object dtype for a list holding huge ints)
    shift = int(levels.min())
    if shift < 0:
        raise ValueError(f"discrete_exponential needs exponents >= 0 (a level {shift})")
    levels = np.minimum(levels - shift if shift else levels, LEVELS).astype(np.int64)
    order = np.argsort(levels, kind="stable")
    counts = np.bincount(levels, minlength=LEVELS + 1)
    starts = np.concatenate(([0], np.cumsum(counts)))
    while True:
        k = _pick_level([int(c) for c in counts], source)
        i = int(order[starts[k] + source.randbelow(int(counts[k]))])
        rest = _rational(gammas[i], "an exponent") - (shift + k)
        if rest < 0:
            raise ValueError(f"row {i}: level {k} above its exponent {gammas[i]}")
        if bernoulli_exp(rest, source):
            return i


def _pick_level(counts: list[int], source: NoiseSource) -> int:
    """A level k drawn with probability exactly c_k e^-k / sum_j c_j e^-j: inversion of a
    uniform U revealed bit by bit against rational enclosures of the CDF, both refined
    until U's interval lies between two enclosed CDF values (a lazy comparison in the
    manner of Knuth & Yao; it ends with probability 1, after one round almost always)."""
    top = max(k for k, c in enumerate(counts) if c)
    m, u, bits = 64, source.randbelow(1 << 64), 64
    while True:
        lows, highs = _level_weights(bits, top)  # integers over one common denominator
        cum_low, cum_high, low, high = [], [], 0, 0
        for k in range(top + 1):
            low += counts[k] * lows[k]
            high += counts[k] * highs[k]
            cum_low.append(low)
            cum_high.append(high)
        for k in range(top + 1):
            if counts[k] and (u + 1) * high <= cum_low[k] << m:  # U T < F_k for sure
                if k == 0 or u * low >= cum_high[k - 1] << m:  # and U T >= F_(k-1)
                    return k
                break
        u, m, bits = (u << 32) | source.randbelow(1 << 32), m + 32, bits + 32


@lru_cache(maxsize=64)
def _level_weights(bits: int, top: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Integers lo_k <= e^-k D <= hi_k for k = 0..top, D = 2^((bits + 2) top): powers of
    a dyadic enclosure of e^-1 from the alternating series 1 - 1 + 1/2 - 1/6 + ..."""
    total, term, j = Fraction(1), Fraction(1), 0
    while abs(term) >= Fraction(1, 1 << (bits + 2)):
        j += 1
        term /= -j
        total += term
    scale = 1 << (bits + 2)  # e^-1 lies between the last two partial sums
    a = math.floor(min(total, total - term) * scale)
    b = math.ceil(max(total, total - term) * scale)
    shift = bits + 2
    return (tuple(a**k << (shift * (top - k)) for k in range(top + 1)),
            tuple(b**k << (shift * (top - k)) for k in range(top + 1)))


class Exponents(Sequence):
    """gamma_i = max(u) - u_i as exact rationals, computed when read (u float64), and
    `levels`: integers k_i <= gamma_i for discrete_exponential's proposal, from the
    float64 differences shrunk by 2^-50 relative (more than their rounding error)."""

    def __init__(self, u: np.ndarray) -> None:
        self._u, self._top = u, Fraction(float(np.max(u)))
        diff = (float(np.max(u)) - u) * (1.0 - 2.0**-50)
        self.levels = np.minimum(np.floor(np.maximum(diff, 0.0)), LEVELS).astype(np.int64)

    def __len__(self) -> int:
        return len(self._u)

    def __getitem__(self, i: int) -> Fraction:
        return self._top - Fraction(float(self._u[i]))
