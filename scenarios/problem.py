"""What a scenario hands the curator: the dataset, the objective and public defaults."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from parties.preparation import fit_ard_lengthscales, rescale_by_lengthscales, scale_to_max_norm
from protocol.messages import KernelParams

MAX_NORM = 25.0


@dataclass(frozen=True)
class Problem:
    """A curator's private dataset X (n x d) and tabulated objective f (always maximised).

    A minimisation scenario stores f = -objective and says `sense = "minimise"`; its
    regret f* - f(x_t) is then the paper's regret objective(x_t) - min objective.
    `kernel` holds what the scenario declares public in the handshake; `noise_var` is
    the curator's true measurement noise. The other fields are the paper's default run
    parameters and where the data came from.
    """

    name: str
    X: np.ndarray
    f: np.ndarray
    kernel: KernelParams
    epsilon: float
    delta: float
    r: int
    T: int
    noise_var: float = 0.0
    noise: str = "gaussian"  # measurement noise: gaussian(noise_var), uniform[-R, R], student-t
    R: float = 0.0
    B: float | None = None  # declared public bound on |f| (needed for LDP rewards)
    sense: str = "maximise"
    metric: str = "simple_regret"
    source: str = "embedded"
    dropped: dict = field(default_factory=dict)
    release: dict = field(default_factory=dict)  # constants of Kusner et al.'s releases

    def __post_init__(self) -> None:
        if self.X.ndim != 2 or self.f.shape != (self.X.shape[0],):
            raise ValueError(f"X {self.X.shape} and f {self.f.shape} do not match")
        if not (np.isfinite(self.X).all() and np.isfinite(self.f).all()):
            raise ValueError(f"scenario {self.name}: X or f holds NaN or infinity")
        if self.sense not in ("maximise", "minimise"):
            raise ValueError(f"sense must be maximise or minimise, got {self.sense!r}")


def rng_for(seed: int | None, stream: str) -> np.random.Generator:
    """An independent Generator for one named use of the run seed (OS entropy if None)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng([int(seed), zlib.crc32(stream.encode())])


def prepare_inputs(X: np.ndarray, y: np.ndarray, seed: int | None, scaling: str = "ard",
                   sample: int = 300) -> np.ndarray:
    """The paper's preprocessing: divide each column by its ARD length-scale (fitted by
    the curator on a sample of its own rows, never sent) -- or by its standard deviation
    with scaling="standardise" -- then centre and scale to max norm 25."""
    if scaling == "ard":
        scale = fit_ard_lengthscales(X, y, rng_for(seed, "preprocessing"), sample=sample)
    elif scaling == "standardise":
        scale = np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    else:
        raise ValueError(f"scaling must be 'ard' or 'standardise', got {scaling!r}")
    Xr = rescale_by_lengthscales(X, scale)
    return scale_to_max_norm(Xr - Xr.mean(axis=0), MAX_NORM)


def fitted_prior(kernel: str = "se") -> KernelParams:
    """Declared starting values for a real-data scenario: the modeler fits its own
    hyperparameters (status 'initial'); l = 0.25 x max norm as in the authors' code."""
    return KernelParams(kernel, 0.25 * MAX_NORM, 1.0, 1e-2, "initial")


def subsample(arrays: tuple[np.ndarray, ...], n: int | None, seed: int | None,
              ) -> tuple[np.ndarray, ...]:
    """The same `n` random rows (seeded, order kept) of every array; all rows if n is None."""
    total = len(arrays[0])
    if n is None or n >= total:
        return arrays
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    rows = np.sort(rng_for(seed, "subsample").choice(total, size=n, replace=False))
    return tuple(a[rows] for a in arrays)


def data_problem(name: str, X_raw: np.ndarray, objective: np.ndarray, seed: int | None, *,
                 sense: str = "maximise", n: int | None = None, source: str,
                 dropped: dict | None = None, scaling: str = "ard", **defaults) -> Problem:
    """A Problem from raw inputs and the objective in its own sense, preprocessed as the
    paper does (ARD rescaling, centring, max norm 25); f is negated for minimisation."""
    X_raw, objective = subsample((np.asarray(X_raw, float), np.asarray(objective, float)), n, seed)
    f = objective if sense == "maximise" else -objective
    X = prepare_inputs(X_raw, f, seed, scaling)
    defaults.setdefault("kernel", fitted_prior())
    return Problem(name, X, f, sense=sense, source=source, dropped=dict(dropped or {}),
                   **defaults)
