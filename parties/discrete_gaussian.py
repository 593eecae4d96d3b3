"""Exact Gaussian noise on a lattice: the continuous Gaussian rounded, sampled exactly.

The Gaussian releases (parties/gaussian.py) are analysed as the continuous Gaussian
mechanism X + sigma G. Floating-point normals only approximate it: Box-Muller on 53-bit
uniforms never exceeds |g| = 8.5717, so two neighbours far enough apart have an event of
probability 0 under one and not under the other (issue 46), whatever epsilon says.

Here the noise is the Gaussian rounded to a lattice, drawn exactly. On the lattice
gamma Z (gamma a power of two, LATTICE_BITS below sigma), in lattice units s = sigma/gamma:

    J = round(T),  T ~ N(0, s^2)   (round half up: J = floor(T + 1/2)),

so P(J = j) = Phi((j + 1/2)/s) - Phi((j - 1/2)/s) exactly. **Why it keeps the analytic
Gaussian profile unchanged.** With the data rounded to the lattice first (X_r =
gamma round(X / gamma)), X_r + gamma J = gamma round(X_r/gamma + T) has the law of
round_gamma(X_r + sigma G): a data-independent post-processing of the continuous Gaussian
mechanism on X_r. So the release is (eps, delta_G(eps; mu))-DP with the exact profile of
Balle & Wang (parties.gaussian.gaussian_delta) at mu = |v_r| / sigma, where v_r, the
change of one rounded row, has |v_r| <= |v| + gamma sqrt(d) (each rounded coordinate is
within gamma/2 of its value). Nothing else is approximated: every (eps, delta) pobo prints
at every distance holds of the sampler that runs, with the move enlarged by gamma sqrt(d)
(~1e-9 sigma sqrt(d) at LATTICE_BITS = 30).

**The sampler** (vectorised numpy integer arithmetic; randomness from a NoiseSource: the
OS CSPRNG in deployment, a seeded Generator in simulation). Canonne, Kamath & Steinke
(2020, "The Discrete Gaussian for Differential Privacy", Algorithm 3) draw the discrete
Gaussian by rejection from the discrete Laplace of their Algorithm 2, accepting with
Bernoulli(exp(-gamma)) of their Algorithm 1. We draw the rounded Gaussian by the same
scheme, one rejection step longer: (J, u), u uniform on [-1/2, 1/2), has the joint
density exp(-(J + u)^2 / (2 s^2)) of (round(T), T - round(T)) when

1. Y ~ DLap(t) (t = a power of two >= s), accepted with probability
   exp(-(|Y| - c)^2 / (2 s^2)), c = 1/2 + s^2 / t: the law exp(-(|Y| - 1/2)^2 / (2 s^2))
   (complete the square: CKS's step with the target shifted by 1/2);
2. u ~ U[-1/2, 1/2), the pair accepted with probability exp(-(2 Y u + u^2 + |Y|)/(2 s^2))
   (<= 1, since 2 Y u >= -|Y|): together exp(-(Y^2 - |Y| + 2 Y u + u^2 + |Y|)/(2 s^2)) =
   exp(-(Y + u)^2 / (2 s^2)).

Every Bernoulli(exp(-a)), a in [0, 1], is CKS Algorithm 1 (K = 1; while Bernoulli(a/K):
K += 1; return K odd), a > 1 split into ceil(a) equal parts. Each Bernoulli(a/K) compares a
uniform U, revealed WORD_BITS bits at a time, with a/K. The vectorised path holds a
rigorous float enclosure [a_lo, a_hi] of a (IEEE-754 +, -, *, / are correctly rounded;
slack 2^-44 relative covers every rounding) and decides when U's interval lies wholly
below a_lo/K or above a_hi/K. Otherwise (probability ~2^-32 a comparison) the comparison
is finished exactly in rational arithmetic (`_resolve`): more bits of U, and of u, which
keeps its bits for the rest of its step, until the intervals separate. Every decision is
thus the exact comparison of real uniforms with the exact exponent: the output law is
exactly the rounded Gaussian. tests/test_discrete_gaussian.py checks it at small s
(where the rounding is visible) and with 6-bit words (where half the comparisons take the
exact path), against the rounded and the unrounded discrete Gaussian.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from pobo.parties.noise import NoiseSource

LATTICE_BITS = 30  # gamma = 2^(floor(log2 sigma) - LATTICE_BITS): s in [2^30, 2^31)
WORD_BITS = 32  # bits of a uniform revealed at once (<= 52: exact as a double)
SLACK = 2.0 ** -44  # relative widening of every float enclosure (rounding is < 2^-50)
MAX_LATTICE_VALUE = 2 ** 52  # |X / gamma| must stay below: float rounding to it is exact
BLOCK = 1 << 16  # draws per vectorised pass (scratch stays a few MB)
HI_BITS = 4  # the discrete Laplace's U: its top 4 bits by inversion, the rest uniform
GEOMETRIC_TABLE = 40  # thresholds e^-1 .. e^-40 held as doubles (past them: exactly)


def lattice_for(sigma: float) -> float:
    """gamma, the power-of-two lattice step for noise of scale sigma (about sigma / 2^30)."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive finite number, got {sigma}")
    return math.ldexp(1.0, math.frexp(sigma)[1] - 1 - LATTICE_BITS)


def round_to_lattice(X: np.ndarray, gamma: float) -> np.ndarray:
    """round(X / gamma) half up, as int64: exact (gamma is a power of two and |X/gamma| <
    2^52); ValueError for values past the lattice's range (a scale far below the data's)."""
    scaled = np.asarray(X, dtype=float) / gamma
    if scaled.size and not np.abs(scaled).max() < MAX_LATTICE_VALUE:
        raise ValueError("the data lie beyond the noise lattice's range (|x| >= 2^52 "
                         f"lattice steps of {gamma:g}): the noise scale is too small for them")
    return np.floor(scaled + 0.5).astype(np.int64)


class RoundedGaussian:
    """Exact draws of round(T), T ~ N(0, s^2), for a scale s in lattice units (s >= 1)."""

    def __init__(self, s: float, source: NoiseSource, word_bits: int = WORD_BITS) -> None:
        if not (math.isfinite(s) and s >= 1):
            raise ValueError(f"the lattice scale s must be finite and >= 1, got {s}")
        if not 2 <= word_bits <= 52:
            raise ValueError(f"word_bits must lie in [2, 52], got {word_bits}")
        self.s, self.source, self.bits = float(s), source, int(word_bits)
        self.t = 1 << max(0, math.ceil(math.log2(s)))  # DLap's scale: a power of two >= s
        self.S2 = Fraction(self.s) ** 2  # exact s^2
        self.s2 = self.s * self.s  # its double (within 2^-53 relative)
        self.c = Fraction(1, 2) + self.S2 / self.t  # step 1's centre, exact
        self.c_float = 0.5 + self.s2 / self.t

    def sample(self, size: int) -> np.ndarray:
        """`size` independent draws of round(T), as int64."""
        out = np.empty(int(size), dtype=np.int64)
        for start in range(0, out.size, BLOCK):
            block = out[start:start + BLOCK]
            filled = 0
            while filled < block.size:
                got = self._trial(block.size - filled)
                block[filled:filled + got.size] = got[:block.size - filled]
                filled += got.size
        return out

    # -- one vectorised trial of steps 1-2 for m candidates: returns the accepted ones --
    def _trial(self, m: int) -> np.ndarray:
        m = max(m + m // 2 + 16, 64)  # about 1.5 trials an output: overshoot once
        Y = self._dlap(m)
        absY = np.abs(Y)
        Y = Y[self._accept_step1(absY)]
        return Y[self._accept_step2(Y)]

    def _words(self, m: int) -> np.ndarray:
        """m uniform words on [0, 2^bits): a uniform's first bits."""
        return self._bits(m, self.bits)

    def _bits(self, m: int, count: int) -> np.ndarray:
        """m uniform integers on [0, 2^count), count <= 63 (4 random bytes each up to 32
        bits, else 8)."""
        if count <= 32:
            raw = np.frombuffer(self.source.random_bytes(4 * m), dtype=np.uint32)
            return (raw >> np.uint32(32 - count)).astype(np.int64)
        raw = np.frombuffer(self.source.random_bytes(8 * m), dtype=np.uint64)
        return (raw >> np.uint64(64 - count)).astype(np.int64)

    def _dlap(self, m: int) -> np.ndarray:
        """m draws of the discrete Laplace, P(y) ~ exp(-|y| / t) (CKS Algorithm 2's law).

        |Y| = t V + U with V geometric, P(V >= v) = e^-v, and U on [0, t) with
        P(U) ~ e^(-U/t), drawn as U = hi 2^h + lo: hi on [0, 2^H) with P(hi >= j) =
        (e^(-j/2^H) - e^-1) / (1 - e^-1) (both by inversion of one uniform against exact
        thresholds, `_inverse`), then lo uniform on [0, 2^h) accepted with e^(-lo/t) >=
        e^(-2^-H) (CKS Algorithm 1; a rejected lo is drawn again, hi kept). A random sign;
        (negative, 0) is rejected, as in CKS Algorithm 2."""
        t, L = self.t, self.t.bit_length() - 1
        H = min(HI_BITS, L)
        h = L - H
        out = np.empty(0, dtype=np.int64)
        while out.size < m:
            k = m - out.size + 8
            V = self._inverse(k, _geometric_threshold, GEOMETRIC_TABLE, open_ended=True)
            hi = self._inverse(k, _hi_threshold(H), (1 << H) - 1) if H else np.zeros(k, np.int64)
            lo = np.zeros(k, dtype=np.int64)
            if h:
                todo = np.arange(k)
                while todo.size:
                    draw = self._bits(todo.size, h)
                    ok = self._cks(draw / t, draw / t, lambda i, d=draw: Fraction(int(d[i]), t),
                                   None)
                    lo[todo[ok]] = draw[ok]
                    todo = todo[~ok]
            Y = t * V + (hi << h) + lo
            negative = self._bits(k, 1) == 1
            keep = ~(negative & (Y == 0))
            out = np.concatenate((out, np.where(negative, -Y, Y)[keep]))
        return out[:m]

    def _inverse(self, m: int, threshold, size: int, open_ended: bool = False
                 ) -> np.ndarray:
        """m draws of X = #{j >= 1: U < theta_j} for thresholds theta_1 > theta_2 > ...
        in (0, 1) (`threshold(j, bits)`: exact rational bounds on theta_j within 2^-bits),
        i.e. P(X >= j) = theta_j: U's first word against a float enclosure of the first
        `size` thresholds, else (U's interval meets one, or reaches past the table of an
        `open_ended` law) exactly by `_inverse_exact`."""
        lo, hi = _threshold_table(threshold, size)
        w = self._words(m)
        step = 2.0 ** -self.bits
        u = w * step
        # thresholds are decreasing: count those surely above U and those possibly above
        sure = size - np.searchsorted(lo[::-1], u + step, side="left")
        maybe = size - np.searchsorted(hi[::-1], u, side="right")
        out = sure.astype(np.int64)
        for i in np.flatnonzero((sure != maybe) | ((sure == size) & open_ended)):
            out[i] = self._inverse_exact(int(w[i]), threshold)
        return out

    def _inverse_exact(self, word: int, threshold) -> int:
        """X = #{j: U < theta_j} exactly, U = word/2^bits and further bits as needed."""
        value, count, j = word, self.bits, 1
        while True:
            low, high = Fraction(value, 1 << count), Fraction(value + 1, 1 << count)
            t_lo, t_hi = threshold(j, count + 8)
            if high <= t_lo:
                j += 1  # U < theta_j surely
            elif low >= t_hi:
                return j - 1  # U >= theta_j: X = j - 1
            else:
                value, count = (value << 32) | self.source.randbelow(1 << 32), count + 32

    # -- step 1: accept Y with exp(-(|Y| - c)^2 / (2 s^2)) --
    def _accept_step1(self, absY: np.ndarray) -> np.ndarray:
        y = absY.astype(float)  # exact: |Y| < 2^53
        D = y - self.c_float
        err = (self.c_float + np.abs(D)) * SLACK  # bounds |D - (|Y| - c)| with room
        lo = np.maximum(np.abs(D) - err, 0.0)
        hi = np.abs(D) + err
        g_lo = lo * lo / (2.0 * self.s2) * (1.0 - SLACK)
        g_hi = hi * hi / (2.0 * self.s2) * (1.0 + SLACK)

        def exact(i: int) -> tuple[Fraction, Fraction]:
            g = (Fraction(int(absY[i])) - self.c) ** 2 / (2 * self.S2)
            return g, g

        return self._bernoulli_exp(g_lo, g_hi, exact)

    # -- step 2: u ~ U[-1/2, 1/2), accept with exp(-(2 Y u + u^2 + |Y|) / (2 s^2)) --
    def _accept_step2(self, Y: np.ndarray) -> np.ndarray:
        m = Y.size
        w = self._words(m)
        step = 2.0 ** -self.bits
        u0 = w * step - 0.5  # u lies in [u0, u0 + step): exact doubles
        u1 = u0 + step
        y = Y.astype(float)
        n0 = 2.0 * y * u0 + u0 * u0 + np.abs(y)
        n1 = 2.0 * y * u1 + u1 * u1 + np.abs(y)
        err = (4.0 * np.abs(y) + 1.0) * SLACK
        n_lo = np.maximum(np.minimum(n0, n1) - err, 0.0)
        n_lo[Y == 0] = 0.0  # u^2 on an interval that may hold 0
        n_hi = np.maximum(n0, n1) + err
        g_lo = n_lo / (2.0 * self.s2) * (1.0 - SLACK)
        g_hi = n_hi / (2.0 * self.s2) * (1.0 + SLACK)
        lazy: dict[int, list[int]] = {}  # i -> [u's bits so far, how many]: kept for u's step

        def exact(i: int) -> tuple[Fraction, Fraction]:
            bits, count = lazy.setdefault(i, [int(w[i]), self.bits])
            return self._step2_range(int(Y[i]), Fraction(bits, 1 << count) - Fraction(1, 2),
                                     Fraction(bits + 1, 1 << count) - Fraction(1, 2))

        def refine(i: int) -> None:
            entry = lazy[i]
            entry[0] = (entry[0] << 32) | self.source.randbelow(1 << 32)
            entry[1] += 32

        return self._bernoulli_exp(g_lo, g_hi, exact, refine)

    def _step2_range(self, Y: int, lo: Fraction, hi: Fraction) -> tuple[Fraction, Fraction]:
        """The exact range of (2 Y u + u^2 + |Y|) / (2 s^2) for u in [lo, hi] (convex in u:
        its maximum at an end, its minimum at an end or at u = -Y)."""
        def value(u: Fraction) -> Fraction:
            return (2 * Y * u + u * u + abs(Y)) / (2 * self.S2)

        ends = (value(lo), value(hi))
        low = value(Fraction(-Y)) if lo <= -Y <= hi else min(ends)
        return low, max(ends)

    # -- Bernoulli(exp(-g)) for g known within [g_lo, g_hi] and exactly on request --
    def _bernoulli_exp(self, g_lo: np.ndarray, g_hi: np.ndarray, exact, refine=None
                       ) -> np.ndarray:
        """Exact Bernoulli(exp(-g_i)): g_i split into parts = max(1, ceil(g_hi)) equal
        pieces a = g/parts in [0, 1], each CKS Algorithm 1; all must succeed."""
        parts = np.maximum(1.0, np.ceil(g_hi)).astype(np.int64)
        result = np.ones(g_lo.size, dtype=bool)
        piece = 0
        while True:
            active = np.flatnonzero(result & (parts > piece))
            if not active.size:
                return result
            p = parts[active]
            ok = self._cks(g_lo[active] / p * (1.0 - SLACK), g_hi[active] / p * (1.0 + SLACK),
                           lambda j: tuple(x / int(parts[active[j]])
                                           for x in exact(int(active[j]))),
                           None if refine is None else lambda j: refine(int(active[j])))
            result[active] = ok
            piece += 1

    def _cks(self, a_lo: np.ndarray, a_hi: np.ndarray, exact, refine) -> np.ndarray:
        """CKS Algorithm 1 for a in [a_lo, a_hi] within [0, 1]: K = 1; while
        Bernoulli(a/K): K += 1; return K odd. Each Bernoulli(a/K) compares a uniform U
        with a/K: decided on U's first word when its interval clears the enclosure, else
        by `_resolve` exactly."""
        m = a_lo.size
        K = np.ones(m, dtype=np.int64)
        result = np.empty(m, dtype=bool)
        active = np.arange(m)
        step = 2.0 ** -self.bits
        while active.size:
            w = self._words(active.size)
            u_lo = w * step  # U lies in [u_lo, u_lo + step)
            k = K[active].astype(float)
            below = (u_lo + step) <= a_lo[active] / k * (1.0 - SLACK)
            above = u_lo >= a_hi[active] / k * (1.0 + SLACK)
            go = below
            for j in np.flatnonzero(~(below | above)):
                go[j] = self._resolve(int(w[j]), int(K[active[j]]),
                                      lambda i=int(active[j]): exact(i),
                                      None if refine is None else
                                      (lambda i=int(active[j]): refine(i)))
            done = active[~go]
            result[done] = K[done] % 2 == 1
            active = active[go]
            K[active] += 1
        return result

    def _resolve(self, word: int, K: int, exact, refine) -> bool:
        """Whether U < a/K, exactly: U = word/2^bits + more bits drawn as needed, a within
        the exact rational range `exact()` (a point, or a range that `refine()` narrows
        by revealing more of u's bits), until U's interval and the range separate."""
        value, count = word, self.bits
        while True:
            bounds = exact()
            lo, hi = bounds if isinstance(bounds, tuple) else (bounds, bounds)
            low, high = Fraction(value, 1 << count), Fraction(value + 1, 1 << count)
            if high <= lo / K:
                return True
            if low >= hi / K:
                return False
            value, count = (value << 32) | self.source.randbelow(1 << 32), count + 32
            if refine is not None:
                refine()


def rounded_gaussian_noise(shape, sigma: float, gamma: float, source: NoiseSource,
                           word_bits: int = WORD_BITS) -> np.ndarray:
    """Integer lattice noise J of `shape`, J = round(sigma G / gamma) exactly (int64)."""
    count = math.prod(shape) if isinstance(shape, tuple) else int(shape)
    return RoundedGaussian(sigma / gamma, source, word_bits).sample(count).reshape(shape)


@lru_cache(maxsize=4096)
def exp_bounds(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rationals lo <= exp(-x) <= hi with hi - lo <= 2^-bits, for a rational x >= 0:
    exp(-x) = exp(-x/m)^m with x/m <= 1, whose alternating Taylor series' consecutive
    partial sums bracket it."""
    m = max(1, math.ceil(x))
    y = x / m
    precision = bits + 4 + 2 * m.bit_length() + m
    while True:
        total, term, k = Fraction(1), Fraction(1), 0
        while abs(term) > Fraction(1, 1 << precision):
            k += 1
            term = -term * y / k
            total += term
        lo, hi = sorted((total, total - term))
        lo, hi = max(lo, Fraction(0)) ** m, hi ** m
        if hi - lo <= Fraction(1, 1 << bits):
            return lo, hi
        precision += 16


@lru_cache(maxsize=4096)
def _geometric_threshold(j: int, bits: int) -> tuple[Fraction, Fraction]:
    """Bounds on e^-j = P(V >= j) for V geometric with ratio e^-1."""
    return exp_bounds(Fraction(j), bits)


@lru_cache(maxsize=8)
def _hi_threshold(H: int):
    """theta_j = (e^(-j/2^H) - e^-1) / (1 - e^-1) = P(hi >= j), as a bounds function."""
    @lru_cache(maxsize=4096)
    def threshold(j: int, bits: int) -> tuple[Fraction, Fraction]:
        if j >= 1 << H:
            return Fraction(0), Fraction(0)
        a_lo, a_hi = exp_bounds(Fraction(j, 1 << H), bits + 4)
        e_lo, e_hi = exp_bounds(Fraction(1), bits + 4)
        return (a_lo - e_hi) / (1 - e_lo), (a_hi - e_lo) / (1 - e_hi)
    return threshold


@lru_cache(maxsize=16)
def _threshold_table(threshold, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Doubles lo_j <= theta_j <= hi_j for j = 1..size (rounded outward, then widened)."""
    lo, hi = [], []
    for j in range(1, size + 1):
        a, b = threshold(j, 80)
        lo.append(math.nextafter(float(a), 0.0) * (1.0 - SLACK))
        hi.append(math.nextafter(float(b), 2.0) * (1.0 + SLACK))
    return np.array(lo), np.array(hi)


def rows_calibration(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """(sigma, gamma) of the exact Gaussian-rows release: gamma = `lattice_for` the sigma
    of sensitivity 1, then sigma for sensitivity 1 + gamma sqrt(d) (one row moved by 1,
    plus what rounding it to the lattice can add): a function of public values only."""
    from pobo.parties.gaussian import gaussian_sigma
    gamma = lattice_for(gaussian_sigma(epsilon, delta, 1.0))
    return gaussian_sigma(epsilon, delta, 1.0 + gamma * math.sqrt(d)), gamma


def exact_gaussian_rows(X: np.ndarray, sigma: float, gamma: float, source: NoiseSource,
                        rows: int = 1 << 14, word_bits: int = WORD_BITS,
                        out: np.ndarray | None = None) -> np.ndarray:
    """gamma (round(X / gamma) + J), J = round(sigma G / gamma) drawn exactly, as doubles:
    the continuous Gaussian mechanism on the rounded rows, rounded to the lattice (the
    module docstring's post-processing argument), `rows` rows at a time, written into
    `out` (a float array of X's shape, e.g. a scratch copy) when given."""
    X = np.asarray(X, dtype=float)
    sampler = RoundedGaussian(sigma / gamma, source, word_bits)
    out = np.empty(X.shape) if out is None else out
    for start in range(0, X.shape[0], rows):
        block = X[start:start + rows]
        lattice = round_to_lattice(block, gamma)
        lattice += sampler.sample(block.size).reshape(block.shape)
        out[start:start + rows] = lattice * gamma  # post-processing: any rounding is fine
    return out
