"""What a modeler can learn about individual rows from a release Z: the attacks it could
mount, measured against the best guess the public marginals allow.

The modeler holds Z (n x r), the release's public parameters (its mechanism and per-
coordinate noise std) and, in the strongest case here, k rows of X it knows already
(anchors: patients whose records it holds, with their positions in Z). Two attacks:

- **With k anchors** (`anchored_estimate`). Z = (X_c + sigma G) Q with Q an isometry for
  the default release (mechanism gaussian-rows, r >= d), so Z is X rotated and noised.
  Centre the anchors' released rows and their preprocessed rows, find the rotation that
  maps one onto the other (orthogonal Procrustes, scipy.linalg.orthogonal_procrustes;
  X padded with r - d zero columns), and apply it, with the anchors' mean as the
  translation, to every row of Z. A release whose map is not an isometry (the sketch
  releases, r < d, the paper's branches) is aligned by least squares with an intercept
  instead (needs k > r).
- **With no anchors** (`unanchored_estimate`). The modeler knows the population's mean and
  covariance of the preprocessed rows and each feature's marginal (public statistics;
  the measurement hands it the dataset's own, an upper bound on what published
  statistics would give). The principal axes of Z are the rotated principal axes of X
  (the noise adds sigma^2 to every eigenvalue of an isometric release), so X is
  recovered up to one sign per axis (and a rotation inside eigenspaces of nearly equal
  eigenvalues, which it cannot resolve). Signs are chosen by coordinate ascent on the
  likelihood of the decoded rows under the public marginals (a few seeded starts, on a
  sample of rows).

Every estimate is then decoded to each feature's grid (`FeatureGrid`): the values the
feature takes (its observed support: for hospital, the declared integer counts and the
age decades) when it has at most MAX_GRID of them, matched exactly; otherwise GRID_BINS
equal bins of its range, a row counting as recovered when the decoded value lies within
one bin of the truth. Two decoders: `nearest` (the nearest grid value) and `bayes` (the
grid value of highest posterior under the public marginal as prior and Gaussian error of
the spread `error_std` gauges from the estimate alone; it falls back to the marginal's
mode when the release carries no information, and becomes `nearest` when the noise is
small). A feature's recovery rate is over the rows that are not anchors (anchored
attack) or over every row (unanchored); its baseline is the best guess from the public
marginal alone: the share of rows equal to the marginal's mode (within one bin of the
best bin centre, for a binned feature). The attacks report the better of the two
decoders per feature (the attacker can compute both; the measurement picks by the
truth, an optimism of at most the gap between `nearest` and `bayes`, both kept).

The positions of the anchors in Z are taken as known (a release in file order, or rows
the modeler has queried and recognised); the measurement does not cover finding them.

Each feature also gets anonymeter's framing of inference risk (`residual_risk`: the
share of what the baseline misses that an attack recovers). anonymeter itself is not
used: its inference attack looks rows up in synthetic records by nearest neighbour (not
this threat model: Z is a noised rotation of X, not a sample of records), and it needs
pandas, scikit-learn, numba, polars and pyarrow with numpy < 1.27 (pobo runs on numpy 2).

Plain numpy; scipy.linalg is imported only inside `anchored_estimate`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_GRID = 256  # a feature with at most this many distinct values is decoded exactly
GRID_BINS = 50  # bins of a feature with more (one bin: 1/50 of its range)
SIGN_SAMPLE = 2000  # rows the unanchored attack's sign search scores
SIGN_STARTS = 4  # seeded starts of its coordinate ascent
_CHUNK = 8192  # rows decoded at a time (n x grid scores)
DECIMALS = 8  # grid values are compared to this many decimals (preprocessed units ~ 1-25)


@dataclass(frozen=True)
class FeatureGrid:
    """One feature's public grid (in the units the attack decodes in) and its marginal."""

    name: str
    values: np.ndarray  # sorted grid values (or bin centres)
    prior: np.ndarray  # the marginal's probability of each value (sums to 1)
    exact: bool  # True: recovered means the exact value; False: within one `step`
    step: float  # the bin width of a binned feature (0 for an exact one)

    def describe(self) -> str:
        """'10 values, exact' or '50 bins, within one bin (width 0.5)'."""
        if self.exact:
            return f"{len(self.values)} values, exact"
        return f"{len(self.values)} bins, within one bin (width {self.step:.3g})"


def feature_grids(X: np.ndarray, names: list[str] | tuple[str, ...],
                  bounds: tuple[np.ndarray, np.ndarray] | None = None) -> list[FeatureGrid]:
    """Each column's grid and marginal: its distinct values when it has at most MAX_GRID
    (to DECIMALS places, so a value that went through the public preprocessing is one
    value), else GRID_BINS bins of `bounds` (lower, upper per
    column; default the column's range)."""
    X = np.asarray(X, dtype=float)
    grids = []
    for j in range(X.shape[1]):
        col = _rounded(X[:, j])
        values, counts = np.unique(col, return_counts=True)
        if len(values) <= MAX_GRID:
            grids.append(FeatureGrid(str(names[j]), values, counts / counts.sum(), True, 0.0))
            continue
        lo, hi = ((float(bounds[0][j]), float(bounds[1][j])) if bounds is not None
                  else (float(col.min()), float(col.max())))
        step = (hi - lo) / GRID_BINS
        edges = lo + step * np.arange(GRID_BINS + 1)
        counts, _ = np.histogram(np.clip(col, lo, hi), bins=edges)
        grids.append(FeatureGrid(str(names[j]), (edges[:-1] + edges[1:]) / 2,
                                 counts / counts.sum(), False, step))
    return grids


def _rounded(values: np.ndarray) -> np.ndarray:
    """Values to DECIMALS places: one value for each grid point however the public
    preprocessing rounded it."""
    return np.round(np.asarray(values, dtype=float), DECIMALS)


def decode(grid: FeatureGrid, estimate: np.ndarray, error_std: float,
           rule: str = "bayes") -> np.ndarray:
    """Each estimate decoded to a grid value: the nearest one, or (rule "bayes") the one
    of highest posterior under the marginal prior and N(0, error_std^2) error."""
    estimate = np.asarray(estimate, dtype=float)
    v = grid.values
    if rule == "nearest" or error_std <= 0:
        k = np.clip(np.searchsorted(v, estimate), 1, len(v) - 1) if len(v) > 1 else \
            np.zeros(estimate.shape, dtype=int)
        if len(v) > 1:
            k = np.where(np.abs(estimate - v[k - 1]) <= np.abs(v[k] - estimate), k - 1, k)
        return v[k]
    if rule != "bayes":
        raise ValueError(f"rule must be 'nearest' or 'bayes', got {rule!r}")
    with np.errstate(divide="ignore"):
        log_prior = np.log(grid.prior)
    out = np.empty_like(estimate)
    scale = -0.5 / error_std ** 2
    for start in range(0, estimate.size, _CHUNK):
        e = estimate[start:start + _CHUNK, None]
        out[start:start + _CHUNK] = v[np.argmax(log_prior + scale * (e - v) ** 2, axis=1)]
    return out


def recovered(grid: FeatureGrid, decoded: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Which decoded values count as recovering the truth (exact value, or within one
    bin of it)."""
    truth = np.asarray(truth, dtype=float)
    if grid.exact:
        return decoded == _rounded(truth)
    return np.abs(decoded - truth) <= grid.step * (1 + 1e-9)


def marginal_baseline(grid: FeatureGrid, truth: np.ndarray) -> float:
    """The share of `truth` the best single guess from the marginal gets: its mode (the
    best bin centre, counted within one bin, for a binned feature)."""
    guess = grid.values[int(np.argmax(grid.prior))]
    if not grid.exact:  # the centre that covers most of the prior within one bin
        cover = [grid.prior[np.abs(grid.values - c) <= grid.step * (1 + 1e-9)].sum()
                 for c in grid.values]
        guess = grid.values[int(np.argmax(cover))]
    return float(np.mean(recovered(grid, np.full(len(truth), guess), truth)))


def anchored_estimate(Z: np.ndarray, anchors: np.ndarray, known: np.ndarray,
                      isometric: bool = True) -> np.ndarray:
    """Estimates of every row of X (n x d) from Z (n x r) and the known rows `known`
    (k x d) at positions `anchors` of Z: orthogonal Procrustes after centring for an
    isometric release (r >= d), else least squares with an intercept (needs k > r)."""
    Z = np.asarray(Z, dtype=float)
    known = np.asarray(known, dtype=float)
    n, r = Z.shape
    k, d = known.shape
    Za = Z[anchors]
    if isometric and r >= d:
        from scipy.linalg import orthogonal_procrustes

        z0, x0 = Za.mean(axis=0), known.mean(axis=0)
        target = np.zeros((k, r))
        target[:, :d] = known - x0
        R, _ = orthogonal_procrustes(Za - z0, target)
        return (Z - z0) @ R[:, :d] + x0
    if k <= r:
        raise ValueError(f"least-squares alignment needs more anchors than r = {r} "
                         f"(got {k})")
    design = np.column_stack([Za, np.ones(k)])
    W, *_ = np.linalg.lstsq(design, known, rcond=None)
    return Z @ W[:-1] + W[-1]


def unanchored_estimate(Z: np.ndarray, mean: np.ndarray, cov: np.ndarray,
                        grids: list[FeatureGrid], noise_std: float,
                        rng: np.random.Generator, isometric: bool = True) -> np.ndarray:
    """Estimates of every row of X from Z and public statistics only: Z's top-d principal
    axes mapped onto X's (mean, covariance), one sign per axis chosen by coordinate
    ascent on the marginal likelihood of a sample of decoded rows (SIGN_STARTS seeded
    starts). A non-isometric release's axes are rescaled to X's variances; one into
    r < d dimensions keeps X's top r axes."""
    Z = np.asarray(Z, dtype=float)
    d = min(len(mean), Z.shape[1])  # axes matched (a JL release into r < d keeps r)
    Zc = Z - Z.mean(axis=0)
    lz, U = np.linalg.eigh(Zc.T @ Zc / len(Z))
    lx, V = np.linalg.eigh(np.asarray(cov, dtype=float))
    U, lz = U[:, ::-1][:, :d], lz[::-1][:d]
    V, lx = V[:, ::-1][:, :d], lx[::-1][:d]
    scores = Zc @ U  # n x d: the rows' coordinates on Z's axes
    if not isometric:
        scores *= np.sqrt(np.maximum(lx, 0) / np.maximum(lz, 1e-300))
    sample = scores[rng.choice(len(Z), size=min(SIGN_SAMPLE, len(Z)), replace=False)]
    smooth = [max(noise_std, (g.step or _spacing(g.values)) / 2, 1e-9) for g in grids]

    def loglik(signs: np.ndarray) -> float:
        est = mean + (sample * signs) @ V.T
        return sum(_log_marginal(g, est[:, j], smooth[j]) for j, g in enumerate(grids))

    best, best_value = np.ones(d), -np.inf
    for start in range(SIGN_STARTS):
        signs = np.ones(d) if start == 0 else rng.choice((-1.0, 1.0), size=d)
        value = loglik(signs)
        for _ in range(d):  # passes; each tries every flip
            improved = False
            for i in range(d):
                signs[i] = -signs[i]
                trial = loglik(signs)
                if trial > value + 1e-12:
                    value, improved = trial, True
                else:
                    signs[i] = -signs[i]
            if not improved:
                break
        if value > best_value:
            best, best_value = signs.copy(), value
    return mean + (scores * best) @ V.T


def _spacing(values: np.ndarray) -> float:
    return float(np.min(np.diff(values))) if len(values) > 1 else 1.0


def _log_marginal(grid: FeatureGrid, x: np.ndarray, h: float) -> float:
    """Mean log density of `x` under the marginal smoothed by N(0, h^2)."""
    z = (x[:, None] - grid.values) / h
    m = -0.5 * z * z
    top = m.max(axis=1, keepdims=True)
    return float(np.mean(top[:, 0] + np.log(np.exp(m - top) @ grid.prior + 1e-300)))


def error_std(grid: FeatureGrid, estimate: np.ndarray, floor: float) -> float:
    """The spread of an estimate's error, as the attacker can gauge it without the truth:
    the gap between its variance and the public marginal's, |var(estimate) - var(x)|
    (an aligned release is x plus independent error, whose variance adds; a least-squares
    fit is E[x | z] plus error, whose variance it lacks), at least `floor` (the release's
    announced noise std, for an isometric one)."""
    prior_var = float(grid.prior @ grid.values ** 2 - (grid.prior @ grid.values) ** 2)
    gap = abs(float(np.var(estimate)) - prior_var)
    return float(np.sqrt(max(floor ** 2, gap, 1e-18)))


def attack_rates(grids: list[FeatureGrid], estimate: np.ndarray, truth: np.ndarray,
                 rows: np.ndarray, floor: float) -> list[dict]:
    """Per feature: the share of `rows` whose value each decoder recovers from
    `estimate`."""
    out = []
    for j, g in enumerate(grids):
        est, true = estimate[rows, j], truth[rows, j]
        s = error_std(g, est, floor)
        rates = {rule: float(np.mean(recovered(g, decode(g, est, s, rule), true)))
                 for rule in ("nearest", "bayes")}
        out.append({**rates, "best": max(rates.values()), "error_std": s})
    return out


def residual_risk(attack: float, baseline: float) -> float:
    """Anonymeter's inference risk (Giomi et al. 2022): the attack's success beyond the
    baseline's, as a share of what the baseline leaves to gain, (a - b) / (1 - b),
    clipped to [0, 1] (0: nothing beyond the marginals; 1: every row the baseline
    misses is recovered)."""
    if baseline >= 1.0:
        return 0.0
    return float(min(1.0, max(0.0, (attack - baseline) / (1.0 - baseline))))


FLAG_MARGIN = 0.05  # a feature is flagged when an attack beats the marginal's guess by more


def measure_risk(X: np.ndarray, Z: np.ndarray, names: list[str] | tuple[str, ...], *,
                 anchors: int = 20, seed: int = 0, repeats: int = 1,
                 noise_std: float = 0.0, isometric: bool = True,
                 bounds: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Both attacks on the release Z of the (preprocessed) rows X, row i of Z being row i
    of X. Per feature: the marginal's best guess (`baseline`), the `anchors`-row attack
    over the rows that are not anchors (mean and standard deviation over `repeats`
    anchor draws), and the unanchored one over every row; a feature either attack
    recovers more than FLAG_MARGIN above its baseline is `flagged`. `seed` draws the
    anchors and the sign search's starts."""
    X = np.asarray(X, dtype=float)
    Z = np.asarray(Z, dtype=float)
    n, d = X.shape
    if Z.shape[0] != n:
        raise ValueError(f"Z has {Z.shape[0]} rows, X {n}: the release is not of these rows")
    if not 1 <= anchors < n:
        raise ValueError(f"anchors must lie in [1, n - 1] = [1, {n - 1}], got {anchors}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    rng = np.random.default_rng(seed)
    grids = feature_grids(X, names, bounds)
    floor = noise_std if isometric else 0.0
    draws, fits = [], []
    for _ in range(repeats):
        known = np.sort(rng.choice(n, size=anchors, replace=False))
        rows = np.setdiff1d(np.arange(n), known)
        estimate = anchored_estimate(Z, known, X[known], isometric)
        fits.append(float(np.sqrt(np.mean((estimate[known] - X[known]) ** 2))))
        draws.append(attack_rates(grids, estimate, X, rows, floor))
    cov = np.cov(X.T, bias=True).reshape(d, d)
    blind = attack_rates(grids, unanchored_estimate(Z, X.mean(axis=0), cov, grids, noise_std,
                                                    rng, isometric), X, np.arange(n), floor)
    features = []
    for j, (g, b) in enumerate(zip(grids, blind)):
        rates = {rule: [draw[j][rule] for draw in draws] for rule in ("best", "nearest", "bayes")}
        item = {"feature": g.name, "grid": g.describe(), "exact": g.exact,
                "baseline": marginal_baseline(g, X[:, j]),
                "anchored": float(np.mean(rates["best"])),
                "anchored_sd": float(np.std(rates["best"], ddof=1)) if repeats > 1 else None,
                "anchored_nearest": float(np.mean(rates["nearest"])),
                "anchored_bayes": float(np.mean(rates["bayes"])),
                "unanchored": b["best"], "unanchored_nearest": b["nearest"],
                "unanchored_bayes": b["bayes"]}
        best = max(item["anchored"], item["unanchored"])
        item["residual"] = residual_risk(best, item["baseline"])
        item["flagged"] = best > item["baseline"] + FLAG_MARGIN
        features.append(item)
    mean = lambda key: float(np.mean([f[key] for f in features]))  # noqa: E731
    return {"anchors": int(anchors), "repeats": int(repeats), "seed": int(seed),
            "rows": int(n), "anchor_fit_rms": float(np.mean(fits)),
            "alignment": ("orthogonal Procrustes" if isometric
                                          and Z.shape[1] >= d else "least squares"),
            "features": features, "flagged": [f["feature"] for f in features if f["flagged"]],
            "summary": {"baseline": mean("baseline"), "anchored": mean("anchored"),
                        "unanchored": mean("unanchored"), "residual": mean("residual"),
                        "best": float(np.mean([max(f["anchored"], f["unanchored"])
                                               for f in features]))}}
