"""Gaussian-process posterior over a fixed finite candidate set, updated in O(n t).

`IncrementalGP` keeps V = L^-1 K(X_t, Z) (t x n), alpha = L^-1 y and the posterior
mean and variance over all n candidates. Adding observation t+1 at candidate i needs
no solve: column i of V already is L^-1 k(X_t, z_i), the new row of L. One t x n
vector-matrix product gives the new row of V, and mean and variance are updated in
O(n). `posterior_dense` is the textbook formula (Rasmussen & Williams eq. 2.25-2.26)
used as the reference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from protocol.errors import PoboError

DEFAULT_JITTER = 1e-10
PIVOT_FLOOR = 1e-12  # a Cholesky pivot below this fraction of its diagonal is lost to rounding


class NumericalError(PoboError):
    """A Cholesky update that would not be positive definite."""


@dataclass(frozen=True)
class SquaredExponential:
    """Isotropic SE kernel k(a, b) = s2 exp(-|a - b|^2 / (2 l^2))."""

    lengthscale: float
    variance: float = 1.0

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """The kernel matrix between the rows of A and the rows of B."""
        return self.variance * np.exp(-0.5 * sq_distances(A, B) / self.lengthscale**2)

    def diag(self, A: np.ndarray) -> np.ndarray:
        """k(a, a) for every row a of A."""
        return np.full(A.shape[0], self.variance)


def sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between rows of A and rows of B (clipped at 0)."""
    d2 = (np.einsum("ij,ij->i", A, A)[:, None] + np.einsum("ij,ij->i", B, B)[None, :]
          - 2.0 * (A @ B.T))
    return np.maximum(d2, 0.0, out=d2)


class IncrementalGP:
    """GP posterior over candidates Z, one observation at a time, O(n t) per step.

    Jitter policy: `jitter` (default 1e-10, absolute) is added to the
    noise variance on the diagonal, in this engine and in `posterior_dense` alike. A
    Cholesky row whose pivot is not positive raises NumericalError instead of NaN.
    Memory: V is preallocated for `capacity` rows, 8 n capacity bytes.
    """

    def __init__(self, Z: np.ndarray, kernel: SquaredExponential, noise_var: float,
                 capacity: int, jitter: float = DEFAULT_JITTER) -> None:
        self.Z = np.asarray(Z, dtype=float)
        self.kernel = kernel
        self.noise = float(noise_var) + jitter
        n = self.Z.shape[0]
        self.capacity = int(capacity)
        self.t = 0
        self.V = np.empty((self.capacity, n))
        self.L = np.zeros((self.capacity, self.capacity))
        self.alpha = np.empty(self.capacity)
        self.indices = np.empty(self.capacity, dtype=np.int64)
        self.y = np.empty(self.capacity)
        self.prior_var = kernel.diag(self.Z)
        self.mean = np.zeros(n)
        self.var = self.prior_var.copy()

    @property
    def std(self) -> np.ndarray:
        """Posterior standard deviation over all candidates."""
        return np.sqrt(self.var)

    def add(self, index: int, y: float) -> None:
        """Condition on y observed at candidate `index`: O(n t) time, no refactorisation."""
        t = self.t
        if t >= self.capacity:
            raise ValueError(f"engine is full: capacity {self.capacity} observations")
        k_col = self.kernel(self.Z, self.Z[index:index + 1])[:, 0]
        l_row = self.V[:t, index].copy()
        pivot = self.prior_var[index] + self.noise - l_row @ l_row
        if not pivot > PIVOT_FLOOR * (self.prior_var[index] + self.noise):
            raise NumericalError(f"Cholesky pivot {pivot:.3e} at step {t + 1} (row {index}) "
                                 "is not positive; raise the noise variance or jitter")
        d = np.sqrt(pivot)
        v = k_col - l_row @ self.V[:t] if t else k_col
        v /= d
        a = (y - l_row @ self.alpha[:t]) / d
        self.V[t] = v
        self.L[t, :t] = l_row
        self.L[t, t] = d
        self.alpha[t] = a
        self.indices[t] = index
        self.y[t] = y
        self.t = t + 1
        self.mean += a * v
        self.var -= v * v
        np.maximum(self.var, 0.0, out=self.var)


def posterior_dense(Z: np.ndarray, indices: np.ndarray, y: np.ndarray,
                    kernel: SquaredExponential, noise_var: float,
                    jitter: float = DEFAULT_JITTER) -> tuple[np.ndarray, np.ndarray]:
    """Textbook GP posterior mean and variance over all rows of Z (O(n t^2 + t^3))."""
    Xt = Z[np.asarray(indices)]
    K = kernel(Xt, Xt) + (noise_var + jitter) * np.eye(len(Xt))
    factor = scipy.linalg.cho_factor(K, lower=True)
    Ks = kernel(Z, Xt)
    mean = Ks @ scipy.linalg.cho_solve(factor, np.asarray(y, dtype=float))
    W = scipy.linalg.solve_triangular(factor[0], Ks.T, lower=True)
    var = kernel.diag(Z) - np.einsum("ij,ij->j", W, W)
    return mean, np.maximum(var, 0.0)
