"""What a scenario hands the curator: the dataset, the objective and public defaults."""
from __future__ import annotations

import math

import numpy as np

from pobo.parties.kernels import squared_exponential
from pobo.parties.likelihood import fit_hyperparameters
from pobo.parties.preparation import fit_ard_lengthscales, rescale_by_lengthscales, scale_to_max_norm
from pobo.parties.dataset import Problem  # noqa: F401  (scenarios build Problems)
from pobo.parties.domain import PublicDomain, box_domain  # noqa: F401  (scenarios declare them)
from pobo.parties.noise import rng_for  # noqa: F401
from pobo.protocol.messages import KernelParams

MAX_NORM = 25.0
SIGNAL_SAMPLE = 300  # rows of the prepared dataset the sigma_y fit uses (O(sample^3))
ML_SIGMA_Y = "curator's maximum-likelihood fit on the prepared dataset"
HITS_UNIT = "std(f) over the rows (a hits scenario: no sigma_y is fitted to a 0/1 outcome)"
PREPARATION_SEED = 0  # the dataset's preparation stream: independent of the run seed


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


def fit_signal_std(X: np.ndarray, f: np.ndarray, rng: np.random.Generator,
                   sample: int = SIGNAL_SAMPLE) -> float:
    """sigma_y of the prepared dataset: the signal std of an isotropic SE kernel fitted by
    maximum likelihood (type II, with noise and constant mean) to at most `sample` rows
    drawn with `rng` -- the unit of the PO-GP-UCB paper's regret tables. Curator-private:
    used for reporting only, never sent."""
    rows = rng.choice(X.shape[0], size=min(sample, X.shape[0]), replace=False)
    Xs, fs = X[rows], f[rows]
    vy = float(np.var(fs)) or 1.0
    fit = fit_hyperparameters(squared_exponential(0.25 * MAX_NORM, vy), 0.1 * vy, Xs, fs, rng)
    return float(np.sqrt(fit.kernel.variance))


def fitted_prior(kernel: str = "se", lengthscale: float = 0.25 * MAX_NORM) -> KernelParams:
    """Declared starting values for a real-data scenario: the modeler fits its own
    hyperparameters (status 'initial'); l = 0.25 x max norm as in the authors' code,
    or the public domain's length-scale."""
    return KernelParams(kernel, float(lengthscale), 1.0, 1e-2, "initial")


def random_regret_expected(f: np.ndarray, T: int) -> float:
    """E[S_T] of T uniformly random queries with replacement (what `random` does), exact:
    with f sorted descending, sum_k (f_(k) - f_(k+1)) ((n - k)/n)^T -- the best of T draws
    misses the top k rows with probability ((n - k)/n)^T. Random search's baseline
    without sampling error."""
    v = np.sort(np.asarray(f, dtype=float))[::-1]
    n = v.size
    miss = ((n - np.arange(1, n)) / n) ** int(T)
    return float(np.sum((v[:-1] - v[1:]) * miss))


def distinct_hits(f: np.ndarray, queries: list[int]) -> list[float]:
    """Hits after each query: the distinct rows queried so far whose tabulated outcome
    f is positive (a patient tested twice is one patient found)."""
    seen: set[int] = set()
    out, hits = [], 0
    for i in queries:
        if i not in seen:
            seen.add(i)
            hits += f[i] > 0
        out.append(float(hits))
    return out


TOP_SHARE = 0.01  # "top-1% hits": queried rows among the best 1% of f


def top_rows_threshold(f: np.ndarray, share: float = TOP_SHARE) -> float:
    """The value of the ceil(share n)-th best row: rows at or above it are the top
    `share` of f (ties at the threshold included)."""
    v = np.sort(np.asarray(f, dtype=float))[::-1]
    return float(v[max(1, math.ceil(share * v.size)) - 1])


def top_hits(f: np.ndarray, queries: list[int], threshold: float) -> int:
    """Distinct queried rows whose f is at or above `threshold` (`top_rows_threshold`):
    a metric that separates methods where simple regret cannot (one outlier optimum)."""
    rows = np.unique(np.asarray(queries, dtype=np.int64))
    return int(np.count_nonzero(np.asarray(f)[rows] >= threshold)) if rows.size else 0


def best_rank(f: np.ndarray, queries: list[int]) -> int | None:
    """The rank among all rows (1 = f*) of the best row queried: 1 + rows strictly better."""
    if not len(queries):
        return None
    f = np.asarray(f)
    return 1 + int(np.count_nonzero(f > f[np.asarray(queries, dtype=np.int64)].max()))


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
                 dropped: dict | None = None, scaling: str | None = None,
                 domain: PublicDomain | None = None, **defaults) -> Problem:
    """A Problem from raw inputs and the objective in its own sense; f is negated for
    minimisation. scaling="public" (the default when a `domain` is given) prepares the
    rows from the scenario's public declaration alone (parties/domain.py), so the
    release's neighbouring relation is in known units; "ard" (the default without a
    domain) and "standardise" are the paper's data-dependent preprocessing
    (length-scales or standard deviations fitted on the rows, centring, max norm 25),
    outside every privacy claim, and the privacy unit says so.

    The preparation (the `n`-row subsample and the length-scale fit) is a property of
    the dataset, not of the run: it draws from PREPARATION_SEED whatever `seed` is, so
    the same file gives the same prepared X, sigma_min and sigma_y (the curator's ML
    signal std of the prepared data, for reporting regret) for every run seed, and a
    curator restarted on `--data` without a seed finds its journal's dataset again.
    `seed` is kept for the scenario builders' uniform signature."""
    del seed  # the run seed drives the projection, the design and the noise, not the data
    X_raw, objective = subsample((np.asarray(X_raw, float), np.asarray(objective, float)), n,
                                 PREPARATION_SEED)
    f = objective if sense == "maximise" else -objective
    clipped, preparation = 0, ""
    scaling = scaling or ("public" if domain is not None else "ard")
    if scaling == "public":
        if domain is None:
            raise ValueError(f"scenario {name} declares no public domain: give its bounds, "
                             "or prepare with scaling='ard' (not covered by the privacy claim)")
        X, clipped = domain.prepare(X_raw)
        defaults.setdefault("kernel", fitted_prior(lengthscale=domain.kernel_lengthscale))
    else:
        X = prepare_inputs(X_raw, f, PREPARATION_SEED, scaling)
        domain, preparation = None, DATA_DEPENDENT[scaling]
        defaults.setdefault("kernel", fitted_prior())
    if defaults.get("metric") == "hits":  # a 0/1 outcome: no regret to put in a unit
        sigma_y, unit = float(np.std(f)), HITS_UNIT
    else:
        sigma_y, unit = fit_signal_std(X, f, rng_for(PREPARATION_SEED, "signal-std")), ML_SIGMA_Y
    return Problem(name, X, f, sense=sense, source=source, dropped=dict(dropped or {}),
                   signal_std=sigma_y, signal_std_source=unit, domain=domain,
                   clipped=clipped, preparation=preparation, **defaults)


DATA_DEPENDENT = {
    "ard": "ARD length-scales fitted on the curator's own rows, centring on their mean and "
           "scaling by their largest norm to 25 (the paper's preprocessing)",
    "standardise": "each column divided by its standard deviation over the curator's rows, "
                   "centring on their mean and scaling by their largest norm to 25",
}
