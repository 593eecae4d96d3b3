"""Gaussian-process posterior over a fixed finite candidate set, updated in O(n t).

`IncrementalGP` keeps V = L^-1 K(X_t, Z) (t x n), alpha = L^-1 (y - m) and the
posterior mean and variance over all n candidates. Adding observation t+1 at
candidate i needs no solve: column i of V already is L^-1 k(X_t, z_i), the new row
of the Cholesky factor L. One t x n vector-matrix product gives the new row of V, and
mean and variance are updated in O(n):

    v = (k(Z, z_i) - V^T l) / d,   d^2 = k(z_i, z_i) + s_n^2 - l^T l,
    a = (y - m - l^T alpha) / d,   mean += a v,   var -= v^2.

Pending (hallucinated) observations, for GP-BUCB (Desautels, Krause & Burdick 2014,
eq. 5-6): `add_pending(i)` conditions on candidate i with y = the posterior mean there,
so a = 0 -- the mean is unchanged and the variance shrinks as if i had been observed.
Real observations always come first (positions 0..r-1), pending ones after them; then
every pending alpha is 0, the mean is the posterior of the real values alone and the
variance that of real and pending rows together (GP-BUCB's mu_fb[t] and sigma_t-1).
`resolve(slot, y)` first moves the slot down to position r, past the pending rows before
it, by adjacent swaps: swapping rows p, p+1 of L and re-triangularising with a 2 x 2
Givens reflection G (L' = P L G) gives V' = L'^-1 P K = G V, so each swap rotates two
rows of V, O(n + t), and leaves alpha (zeros), mean and variance as they are. Row r of
L then is the row of the slot conditioned on the real values only, and the real y sets

    alpha_r = (y - m - L[r, :r] alpha[:r]) / L[r, r],   mean += alpha_r V[r],

the exact posterior of the real values (the pending alphas stay 0: their hallucinated
values move with the mean). A resolve costs O(t) + O(n) + O(n + t) per pending slot
asked before it; in order, it is the arithmetic of `add` exactly.

Memory (`cache`): V is the engine's only large state, T x n. "float64" keeps it exact;
"float32" (what "auto" picks when the float64 cache would pass LEAN_CACHE_BYTES: 8 GB at
n = 1e7, T = 100) halves it and keeps the arithmetic in float64: a new row is computed
in float64 (the t x n product over column blocks of the stored rows, each block widened
to float64: SCRATCH / t candidates, so that a block stays in one core's L2 cache whatever
t, and on one BLAS thread: the thousands of block products of a step would otherwise
each fork and join a second thread) and updates mean and variance before it is rounded
for storage, and the row l of L comes from L and the kernel (l = L^-1 k(X_t, z_i), a
t x t triangular solve) instead of the rounded column of V. Only the stored rows carry
float32 rounding (2^-24 relative), which reaches later rows through the product,
amplified at most by the conditioning of L; tests/test_gp_lean.py bounds the difference
from the float64 engine.
The candidates are never copied: a kernel column is Z (z_i / l^2) and |z / l|^2 is
computed once over row blocks.

`posterior_dense` is the textbook formula (Rasmussen & Williams eq. 2.25-2.26), the
reference and the "full recompute" of the benchmark.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np

from pobo.parties.kernels import Kernel
from pobo.protocol.errors import PoboError

DEFAULT_JITTER = 1e-10
PIVOT_FLOOR = 1e-12  # a Cholesky pivot below this fraction of its diagonal is lost to rounding
CACHES = ("auto", "float64", "float32")
LEAN_CACHE_BYTES = 1 << 31  # "auto": a float64 cache larger than this is stored as float32
# float64 elements of one block of the float32 cache's product, whatever t (1 MB: with its
# float32 source it stays in a 2 MB L2; and below OpenBLAS's 460,800 elements, where a
# product forks a second thread: issue 47, steps 89-100 of n = 1e7, T = 100 were 5-7x slower)
SCRATCH = 1 << 17
MIN_BLOCK = 256  # candidates per block at least (a large capacity: fewer, longer products)
ROW_BLOCK = 1 << 16  # candidates per block when computing |z / l|^2


def cache_dtype(cache: str, n: int, capacity: int) -> np.dtype:
    """The dtype of V (capacity x n) for a `cache` policy: "auto" is float64 unless that
    would exceed LEAN_CACHE_BYTES."""
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {CACHES}, got {cache!r}")
    if cache == "auto":
        cache = "float32" if 8 * n * capacity > LEAN_CACHE_BYTES else "float64"
    return np.dtype(cache)


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread for the block (threadpoolctl). A fit (a dataset's preparation)
    then gives the same bits whatever OPENBLAS_NUM_THREADS says -- a threaded reduction sums
    in another order, and the dataset's digest, which binds its journal, changed -- and
    small products stop thrashing between threads: the 400-row example's fit, 74 s with 2
    threads on a loaded machine, 7.6 s with one; the float32 cache's thousands of block
    products a step (`IncrementalGP._new_row`) likewise."""
    import scipy.linalg  # noqa: F401  (loaded first: a limit binds only loaded libraries)
    from threadpoolctl import threadpool_limits  # lazy: party start-up stays light

    with threadpool_limits(limits=1, user_api="blas"):
        yield


class NumericalError(PoboError):
    """A Cholesky update that would not be positive definite."""


def argmax_breaking_ties(score: np.ndarray, rng: np.random.Generator) -> int:
    """An index of the maximum of `score`, uniform among the entries within 1e-12
    (relative) of it: one O(n) pass more than argmax, and no rng draw without a tie."""
    best = int(np.argmax(score))
    top = score[best]
    if not np.isfinite(top):
        return best
    ties = np.flatnonzero(score >= top - 1e-12 * max(1.0, abs(top)))
    return best if ties.size == 1 else int(ties[rng.integers(ties.size)])


class IncrementalGP:
    """GP posterior over candidates Z, one observation at a time, O(n t) per step.

    Jitter policy: `jitter` (default 1e-10, absolute) is added to the noise variance on
    the diagonal, here and in `posterior_dense` alike. A Cholesky pivot below 1e-12 of
    its diagonal raises NumericalError instead of producing NaN; the engine is left as
    it was. Memory: V is preallocated for `capacity` rows (8 or 4 n capacity bytes, by
    `cache`: module docstring) plus six length-n float64 vectors; Z is not copied.
    """

    def __init__(self, Z: np.ndarray, kernel: Kernel, noise_var: float, capacity: int,
                 jitter: float = DEFAULT_JITTER, prior_mean: float = 0.0,
                 cache: str = "auto") -> None:
        self.Z = np.asarray(Z, dtype=float)
        if self.Z.ndim != 2:
            raise ValueError(f"candidates must be an n x r matrix, got shape {self.Z.shape}")
        if kernel.ard and len(kernel.lengthscales) != self.Z.shape[1]:
            raise ValueError(f"ARD kernel has {len(kernel.lengthscales)} length-scales for "
                             f"{self.Z.shape[1]} input dimensions")
        if not (math.isfinite(noise_var) and noise_var >= 0):
            raise ValueError(f"noise variance must be >= 0 and finite, got {noise_var}")
        self.kernel, self.noise_var, self.jitter = kernel, float(noise_var), float(jitter)
        self.prior_mean = float(prior_mean)
        self.capacity = int(capacity)
        self.cache = cache
        n = self.n
        # 1 / l^2 per input dimension and |z / l|^2 per candidate: a kernel column costs one
        # n x r product with z_i / l^2 and a few O(n) passes, with no scaled copy of Z
        self._inv_l2 = 1.0 / np.square(np.broadcast_to(
            np.asarray(kernel.lengthscales, dtype=float), (self.Z.shape[1],)))
        self._zz = np.empty(n)
        for start in range(0, n, ROW_BLOCK):
            block = self.Z[start:start + ROW_BLOCK]
            np.einsum("ij,ij,j->i", block, block, self._inv_l2, out=self._zz[start:start + ROW_BLOCK])
        # SE: k(Z, z_i) = exp(Zs zs_i + h - |zs_i|^2 / 2), h = log(variance) - |Zs|^2 / 2
        if kernel.family == "se":
            self._h = np.multiply(self._zz, -0.5)
            self._h += math.log(kernel.variance)
        else:
            self._h = None
        self.V = np.empty((self.capacity, n), dtype=cache_dtype(cache, n, self.capacity))
        self._lean = self.V.dtype != np.float64
        self.L = np.zeros((self.capacity, self.capacity))
        self.alpha = np.empty(self.capacity)
        self.indices = np.empty(self.capacity, dtype=np.int64)
        self.y = np.empty(self.capacity)
        self.t = 0
        self._pending: list[int] = []  # slots of positions t - len(_pending) .. t - 1
        self.mean = np.full(n, self.prior_mean)
        self.var = np.full(n, kernel.variance)
        self._buf = np.empty(n)
        # the float32 cache's newest row in float64, and its position (-1: none held)
        self._row = np.empty(n) if self._lean else None
        self._row_at = -1
        # (t, index, l, d) of the last next_row: reused while the engine has not changed
        # (a modeler checks a row when it asks and appends it when the reward comes)
        self._next: tuple[int, int, np.ndarray, float] | None = None
        # the float32 product's scratch: t x block float64 (`_product_block`), the stored rows
        # widened (a preallocated copy is 4x faster than numpy's mixed-type product)
        size = max(SCRATCH, MIN_BLOCK * self.capacity)
        self._scratch = (np.empty(size), np.empty(min(n, size))) if self._lean else None

    @property
    def n(self) -> int:
        """Number of candidates."""
        return self.Z.shape[0]

    @property
    def std(self) -> np.ndarray:
        """Posterior standard deviation over all candidates."""
        return np.sqrt(self.var)

    def kernel_column(self, index: int, out: np.ndarray | None = None) -> np.ndarray:
        """k(Z, z_index) over all candidates, O(n r), into `out` if given."""
        out = np.dot(self.Z, self.Z[index] * self._inv_l2, out=out)
        if self._h is not None:
            out += self._h
            out += -0.5 * self._zz[index]
            return np.exp(out, out=out)
        out *= -2.0
        out += self._zz
        out += self._zz[index]
        np.maximum(out, 0.0, out=out)
        self.kernel.profile(out, out=out)
        out *= self.kernel.variance
        return out

    @property
    def has_pending(self) -> bool:
        """Whether any hallucinated observation still waits for its real value."""
        return bool(self._pending)

    def add(self, index: int, y: float) -> None:
        """Condition on y observed at candidate `index`: O(n t) time, no refactorisation.

        With pending slots it is `resolve(add_pending(index), y)`: real values stay first.
        """
        if not math.isfinite(y):
            raise ValueError(f"observation must be finite, got {y}")
        if self._pending:
            self.resolve(self.add_pending(index), y)
            return
        t = self.t
        l_row, d, v = self._new_row(index)
        a = (y - self.prior_mean - l_row @ self.alpha[:t]) / d
        self._append(index, l_row, d, a, y)
        self.mean += np.multiply(v, a, out=self._buf)
        self._shrink(v)

    def add_pending(self, index: int) -> int:
        """Hallucinate an observation at `index` (y = posterior mean, GP-BUCB): the mean
        stays, the variance shrinks; O(n t). Returns the slot to `resolve` later."""
        slot = self.t
        l_row, d, v = self._new_row(index)
        self._append(index, l_row, d, 0.0, math.nan)
        self._shrink(v)
        self._pending.append(slot)
        return slot

    def resolve(self, slot: int, y: float) -> None:
        """Replace pending `slot`'s hallucinated value by the real y, in any order: the mean
        becomes the exact posterior of the real values (module docstring); O(n + t) per
        slot still pending before it, plus O(n + t)."""
        if not math.isfinite(y):
            raise ValueError(f"observation must be finite, got {y}")
        if slot not in self._pending:
            raise ValueError(f"slot {slot} is not pending")
        j = self._pending.index(slot)
        r = self.t - len(self._pending)
        for p in range(r + j - 1, r - 1, -1):
            self._swap_pending(p)
        del self._pending[j]
        a = (y - self.prior_mean - self.L[r, :r] @ self.alpha[:r]) / self.L[r, r]
        self.alpha[r], self.y[r] = a, y
        row = self._row if self._row_at == r else self.V[r]
        self.mean += np.multiply(row, a, out=self._buf, dtype=np.float64)

    def next_row(self, index: int) -> tuple[np.ndarray, float]:
        """Row t of L (l, d) that adding candidate `index` now would append, changing
        nothing: O(t) (O(t^2) with a float32 cache). Raises what `add` and `add_pending`
        would: a full engine, a row out of range, a Cholesky pivot lost to rounding."""
        t = self.t
        kept = self._next
        if kept is not None and kept[0] == t and kept[1] == index:
            return kept[2], kept[3]
        if t >= self.capacity:
            raise ValueError(f"engine is full: capacity {self.capacity} observations")
        if not 0 <= index < self.n:
            raise IndexError(f"candidate {index} out of range [0, {self.n})")
        l_row = self._l_row(index)
        diag = self.kernel.variance + self.noise_var + self.jitter
        pivot = diag - l_row @ l_row
        if not pivot > PIVOT_FLOOR * diag:
            raise NumericalError(f"Cholesky pivot {pivot:.3e} at step {t + 1} (row {index}) "
                                 "is not positive; raise the noise variance or jitter")
        d = math.sqrt(pivot)
        self._next = (t, index, l_row, d)
        return l_row, d

    def _new_row(self, index: int) -> tuple[np.ndarray, float, np.ndarray]:
        """Row t of L (l, d) for candidate `index`, and row t of V written in place; the
        third value is that row in float64 (V[t] itself unless the cache is float32)."""
        t = self.t
        l_row, d = self.next_row(index)
        if not self._lean:
            v = self.V[t]
            self.kernel_column(index, out=v)
            if t:
                v -= np.dot(l_row, self.V[:t], out=self._buf)
            v *= 1.0 / d
            return l_row, d, v
        v = self.kernel_column(index, out=self._row)
        self._row_at = -1
        if t:  # float64 products over blocks of columns of V, each widened to float64
            wide, part = self._scratch
            step = self._product_block(t)
            with one_blas_thread():
                for start in range(0, self.n, step):
                    stop = min(start + step, self.n)
                    block = wide[:t * (stop - start)].reshape(t, stop - start)
                    np.copyto(block, self.V[:t, start:stop])
                    v[start:stop] -= np.dot(l_row, block, out=part[:stop - start])
        v *= 1.0 / d
        self.V[t] = v
        self._row_at = t
        return l_row, d, v

    def _product_block(self, t: int) -> int:
        """Candidates per block of the float32 cache's product at t stored rows: SCRATCH / t
        (at least MIN_BLOCK, at most n), so a block's size does not grow with t."""
        return max(MIN_BLOCK, min(self.n, SCRATCH // max(1, t)))

    def _l_row(self, index: int) -> np.ndarray:
        """L^-1 k(X_t, z_index): column `index` of V, read from a float64 cache, or solved
        from L in float64 (O(t^2)) when the cache is float32 and holds it rounded."""
        t = self.t
        if not self._lean:
            return self.V[:t, index].copy()
        if not t:
            return np.empty(0)
        k = self.kernel(self.Z[self.indices[:t]], self.Z[index:index + 1])[:, 0]
        return np.linalg.solve(self.L[:t, :t], k)

    def _append(self, index: int, l_row: np.ndarray, d: float, a: float, y: float) -> None:
        """Record row t of L, alpha, the candidate and its value; t += 1."""
        t = self.t
        self.L[t, :t], self.L[t, t] = l_row, d
        self.alpha[t], self.indices[t], self.y[t] = a, index, y
        self.t = t + 1

    def _shrink(self, v: np.ndarray) -> None:
        """var -= v^2, floored at 0."""
        self.var -= np.multiply(v, v, out=self._buf)
        np.maximum(self.var, 0.0, out=self.var)

    def _swap_pending(self, p: int) -> None:
        """Exchange the pending rows at positions p and p + 1: L' = P L G with the Givens
        reflection G that makes it lower triangular again, V' = G V; O(n + t)."""
        L, V, t = self.L, self.V, self.t
        a, b, c = L[p + 1, p], L[p + 1, p + 1], L[p, p]
        h = math.hypot(a, b)
        cs, sn = a / h, b / h
        L[[p, p + 1], :p] = L[[p + 1, p], :p]
        L[p, p], L[p, p + 1], L[p + 1, p], L[p + 1, p + 1] = h, 0.0, c * cs, c * sn
        L[p + 2:t, p:p + 2] = L[p + 2:t, p:p + 2] @ np.array([[cs, sn], [sn, -cs]])
        V[p], V[p + 1] = cs * V[p] + sn * V[p + 1], sn * V[p] - cs * V[p + 1]
        self.indices[[p, p + 1]] = self.indices[[p + 1, p]]
        self._row_at = -1  # the float64 copy of a row no longer matches its position
        self._next = None  # nor the row next_row worked out

    def ucb_argmax(self, beta: float, rng: np.random.Generator, variance: bool = False) -> int:
        """argmax of mean + beta^1/2 std over all candidates (`variance`: mean + beta^1/2
        var, the score of the PO-GP-UCB authors' code, a reproduction switch).

        Before any observation every candidate ties and the choice is a uniform draw
        with `rng`; afterwards ties (to 1e-12 relative: duplicate rows, or rows the kernel
        sees as far from every observation) are broken by a uniform draw with `rng` too,
        never by index order, which would walk the rows 0, 1, 2, ...
        """
        if self.t == 0:
            return int(rng.integers(self.n))
        return argmax_breaking_ties(self.ucb_score(beta, variance), rng)

    def ucb_score(self, beta: float, variance: bool = False) -> np.ndarray:
        """mean + beta^1/2 std (`variance`: mean + beta^1/2 var) over all candidates, in the
        engine's scratch vector: no n-sized temporary; valid until the engine's next call."""
        if variance:
            score = np.multiply(self.var, math.sqrt(beta), out=self._buf)
        else:
            score = np.sqrt(self.var, out=self._buf)
            score *= math.sqrt(beta)
        score += self.mean
        return score

    def observations(self) -> tuple[np.ndarray, np.ndarray]:
        """(candidate indices, real values) conditioned on so far, in the order they became
        real (added or resolved); pending slots are left out: they hold no value."""
        r = self.t - len(self._pending)
        return self.indices[:r].copy(), self.y[:r].copy()

    def rebuilt(self, kernel: Kernel, noise_var: float, prior_mean: float = 0.0,
                in_place: bool = False) -> IncrementalGP:
        """A fresh engine with new hyperparameters holding the same observations, O(n t^2)
        in BLAS-3 (`_condition_all`).
        `in_place`: it takes this engine's cache over (one T x n cache in memory, not
        two: 4 GB at n = 1e7), and this engine is unusable afterwards.

        Refused (ValueError) while slots are pending: hyperparameters are fitted to real
        values only, and the pending slots' numbers would not carry over."""
        if self._pending:
            raise ValueError(f"cannot rebuild with {len(self._pending)} slots pending")
        observations = self.observations()
        gp = IncrementalGP(self.Z, kernel, noise_var, self.capacity, self.jitter, prior_mean,
                           self.cache)
        if in_place:  # the new cache, never written, was never resident: swap it for ours
            gp.V, self.V = self.V, None
        gp._condition_all(*observations)
        return gp

    def _kernel_block(self, indices: np.ndarray, start: int, stop: int) -> np.ndarray:
        """k(X_t, Z[start:stop]), t x block, from |z / l|^2 computed at set-up (as
        `kernel_column` does): one small product and one exp pass, no scaled copy of Z."""
        K = (self.Z[indices] * self._inv_l2) @ self.Z[start:stop].T
        if self._h is not None:
            K += self._h[start:stop]
            K -= (0.5 * self._zz[indices])[:, None]
            return np.exp(K, out=K)
        K *= -2.0
        K += self._zz[start:stop]
        K += self._zz[indices][:, None]
        np.maximum(K, 0.0, out=K)
        self.kernel.profile(K, out=K)
        K *= self.kernel.variance
        return K

    def _condition_all(self, indices: np.ndarray, y: np.ndarray) -> None:
        """Condition a fresh engine on all (indices, y) at once: one Cholesky of the t x t
        kernel matrix and V = L^-1 K(X_t, Z) by triangular solves over column blocks
        (BLAS-3, O(n t^2)); the same L, V, mean and variance as t `add` calls, to
        rounding, 3-10x faster than their t vector-matrix products. A pivot below
        PIVOT_FLOOR of its diagonal raises NumericalError, as `add` would."""
        import scipy.linalg  # here, not at import: only a refit rebuilds
        t = len(indices)
        if t == 0:
            return
        if t > self.capacity:
            raise ValueError(f"engine is full: capacity {self.capacity} observations")
        indices = np.asarray(indices, dtype=np.int64)
        Xt = self.Z[indices]
        diag = self.kernel.variance + self.noise_var + self.jitter
        K = self.kernel(Xt, Xt)
        np.fill_diagonal(K, diag)
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            L = None
        if L is None or not (np.diag(L) ** 2 > PIVOT_FLOOR * diag).all():
            raise NumericalError(f"Cholesky of {t} observations is not positive definite; "
                                 "raise the noise variance or jitter")
        r = np.asarray(y, dtype=float) - self.prior_mean
        alpha = scipy.linalg.solve_triangular(L, r, lower=True, check_finite=False)
        block = max(256, min(self.n, (1 << 19) // max(t, 1)))  # 4 MB of K a block
        for start in range(0, self.n, block):
            stop = min(start + block, self.n)
            Vb = scipy.linalg.solve_triangular(L, self._kernel_block(indices, start, stop),
                                               lower=True, check_finite=False, overwrite_b=True)
            self.V[:t, start:stop] = Vb
            self.mean[start:stop] += alpha @ Vb
            self.var[start:stop] -= np.einsum("ij,ij->j", Vb, Vb)
        np.maximum(self.var, 0.0, out=self.var)
        self.L[:t, :t] = L
        self.alpha[:t], self.indices[:t], self.y[:t] = alpha, indices, y
        self.t = t
        self._row_at, self._next = -1, None


def posterior_dense(Z: np.ndarray, indices: np.ndarray, y: np.ndarray, kernel: Kernel,
                    noise_var: float, jitter: float = DEFAULT_JITTER, prior_mean: float = 0.0,
                    chunk: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """Textbook GP posterior mean and variance over all rows of Z, O(n t^2 + t^3).

    Cholesky of K_t + (noise + jitter) I by scipy.linalg, then the cross-covariances in
    chunks of `chunk` candidates so memory stays O(chunk t).
    """
    import scipy.linalg  # only here: the parties' imports stay free of scipy
    Z = np.asarray(Z, dtype=float)
    Xt = Z[np.asarray(indices, dtype=np.int64)]
    K = kernel(Xt, Xt) + (noise_var + jitter) * np.eye(len(Xt))
    factor = scipy.linalg.cho_factor(K, lower=True, check_finite=False)
    weights = scipy.linalg.cho_solve(factor, np.asarray(y, dtype=float) - prior_mean)
    mean, var = np.empty(Z.shape[0]), np.empty(Z.shape[0])
    for start in range(0, Z.shape[0], chunk):
        Ks = kernel(Z[start:start + chunk], Xt)
        mean[start:start + chunk] = prior_mean + Ks @ weights
        W = scipy.linalg.solve_triangular(factor[0], Ks.T, lower=True, check_finite=False)
        var[start:start + chunk] = kernel.variance - np.einsum("ij,ij->j", W, W)
    return mean, np.maximum(var, 0.0)
