"""Stationary kernels as data: a family, length-scales (one, or one per dimension) and a variance.

Every kernel here is k(a, b) = variance * g(u), u = sum_j (a_j - b_j)^2 / l_j^2, with
g(u) = exp(-u / 2) for the squared exponential and
g(u) = (1 + sqrt(5u) + 5u/3) exp(-sqrt(5u)) for Matern nu = 5/2 (Rasmussen & Williams
eq. 4.9 and 4.17). One length-scale is the isotropic kernel the PO-GP-UCB paper uses;
one per dimension is ARD. Hyperparameters travel in log space (`theta`) for the
likelihood fit; `gradients` gives dK/dtheta analytically.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FAMILIES = ("se", "matern52")
_SQRT5 = math.sqrt(5.0)


@dataclass(frozen=True)
class Kernel:
    """k(a, b) = variance * g(sum_j (a_j - b_j)^2 / l_j^2) for a family g."""

    family: str
    lengthscales: tuple[float, ...]
    variance: float = 1.0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown kernel family {self.family!r}; choose from {FAMILIES}")
        ls = tuple(float(v) for v in np.atleast_1d(self.lengthscales))
        if not ls or not all(math.isfinite(v) and v > 0 for v in ls):
            raise ValueError(f"length-scales must be positive and finite, got {ls}")
        if not (math.isfinite(self.variance) and self.variance > 0):
            raise ValueError(f"kernel variance must be positive and finite, got {self.variance}")
        object.__setattr__(self, "lengthscales", ls)
        object.__setattr__(self, "variance", float(self.variance))

    @property
    def name(self) -> str:
        """'se', 'ard-se', 'matern52' or 'ard-matern52'."""
        return ("ard-" if self.ard else "") + self.family

    @property
    def ard(self) -> bool:
        """Whether each input dimension has its own length-scale."""
        return len(self.lengthscales) > 1

    @property
    def theta(self) -> np.ndarray:
        """log([l_1, ..., l_k, variance]): the free parameters in log space."""
        return np.log([*self.lengthscales, self.variance])

    def with_theta(self, theta: np.ndarray) -> Kernel:
        """The same family with parameters exp(theta)."""
        values = np.exp(np.asarray(theta, dtype=float))
        return Kernel(self.family, tuple(values[:-1]), float(values[-1]))

    def scale(self, A: np.ndarray) -> np.ndarray:
        """Inputs divided by their length-scales, so that u is a plain squared distance."""
        return np.asarray(A, dtype=float) / np.asarray(self.lengthscales)

    def profile(self, u: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """g(u), the unit-variance kernel as a function of scaled squared distance u
        (written into `out`, which may be u itself, when given)."""
        if self.family == "se":
            out = np.multiply(u, -0.5, out=out)
            return np.exp(out, out=out)
        r = np.sqrt(5.0 * u)
        poly = (5.0 / 3.0) * u
        poly += 1.0
        poly += r
        np.negative(r, out=r)
        return np.multiply(poly, np.exp(r, out=r), out=out)

    def profile_derivative(self, u: np.ndarray) -> np.ndarray:
        """dg/du: -exp(-u/2)/2 (SE), -(5/6)(1 + sqrt(5u)) exp(-sqrt(5u)) (Matern 5/2)."""
        if self.family == "se":
            return -0.5 * np.exp(-0.5 * u)
        r = np.sqrt(5.0 * u)
        return -(5.0 / 6.0) * (1.0 + r) * np.exp(-r)

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """The kernel matrix between the rows of A and the rows of B."""
        return self.variance * self.profile(sq_distances(self.scale(A), self.scale(B)))

    def diag(self, A: np.ndarray) -> np.ndarray:
        """k(a, a) = variance for every row a of A."""
        return np.full(np.asarray(A).shape[0], self.variance)

    def gradients(self, X: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """K(X, X) and dK/dtheta_j for each log-parameter (length-scales, then variance)."""
        Xs = self.scale(X)
        u = sq_distances(Xs, Xs)
        K = self.variance * self.profile(u)
        # SE: dg/du = -g / 2, so variance * dg/du is -K / 2 (no second exp pass)
        dg = -0.5 * K if self.family == "se" else self.variance * self.profile_derivative(u)
        if self.ard:  # du/dlog l_j = -2 (a_j - b_j)^2 / l_j^2
            grads = [-2.0 * dg * (Xs[:, j, None] - Xs[None, :, j]) ** 2
                     for j in range(Xs.shape[1])]
        else:
            grads = [-2.0 * dg * u]
        return K, [*grads, K]


def sq_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between rows of A and rows of B (clipped at 0)."""
    d2 = (np.einsum("ij,ij->i", A, A)[:, None] + np.einsum("ij,ij->i", B, B)[None, :]
          - 2.0 * (A @ B.T))
    return np.maximum(d2, 0.0, out=d2)


def squared_exponential(lengthscale: float, variance: float = 1.0) -> Kernel:
    """Isotropic SE kernel variance * exp(-|a - b|^2 / (2 l^2)) (PO-GP-UCB's kernel)."""
    return Kernel("se", (lengthscale,), variance)


def ard_squared_exponential(lengthscales, variance: float = 1.0) -> Kernel:
    """SE kernel with one length-scale per input dimension."""
    ls = tuple(np.atleast_1d(lengthscales).astype(float))
    if len(ls) < 2:
        raise ValueError("an ARD kernel needs one length-scale per dimension (at least 2)")
    return Kernel("se", ls, variance)


def matern52(lengthscale: float, variance: float = 1.0) -> Kernel:
    """Isotropic Matern nu = 5/2 kernel (the LDP-BO paper's second kernel)."""
    return Kernel("matern52", (lengthscale,), variance)


def noisy_input_kernel(lengthscale: float, signal_var: float, noise_std: float,
                       dims: int) -> tuple[float, float, float]:
    """(l_z, s_f^2, (1 - c) s_f^2): the SE kernel between rows seen with independent
    N(0, s^2) noise on each of `dims` coordinates, as a kernel plus a nugget.

    For two different rows, E over both noises of s_f^2 exp(-|x - x'|^2 / 2 l^2) is
    c s_f^2 exp(-|z - z'|^2 / 2 l_z^2) with l_z^2 = l^2 + 2 s^2 and c = (l^2 / l_z^2)^(dims/2)
    (Girard et al. 2003); a row with itself keeps s_f^2, the remaining (1 - c) s_f^2 acting
    as noise. The kernel keeps s_f^2 rather than c s_f^2 (a little more prior variance per
    row; on synthetic, T = 50, 30 seeds: S_T/sigma_y 0.053 against 0.077 with c s_f^2 and
    0.10 with no nugget). A modeler of a Gaussian release uses its public noise_std here,
    so that far rows do not look exactly known and near rows do not look identical.
    """
    if noise_std <= 0:
        return lengthscale, signal_var, 0.0
    lz2 = lengthscale**2 + 2.0 * noise_std**2
    c = (lengthscale**2 / lz2) ** (dims / 2.0)
    return math.sqrt(lz2), signal_var, (1.0 - c) * signal_var


def kernel_by_name(name: str, lengthscale: float, variance: float, dims: int = 1) -> Kernel:
    """A kernel from its CLI / handshake name; ARD kernels start at `lengthscale` in every dim."""
    family = name.removeprefix("ard-")
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel {name!r}; choose from se, ard-se, matern52, ard-matern52")
    ls = (lengthscale,) * (dims if name.startswith("ard-") else 1)
    return Kernel(family, ls, variance)
