"""The dataset release's privacy statement at the scales people care about.

"(eps, delta)-DP for one row moved by at most 1" says little until one knows what 1 is.
The Gaussian releases' profiles depend on the neighbouring pair only through the size of
the move (parties/gaussian.py), so one release has an epsilon at every distance: here at
one preprocessed unit (with what that is in each feature's own units), at one declared
kernel length-scale (a move the optimiser can see), and at the public domain's diameter
(replacing a whole row by any other row of the domain).
"""
from __future__ import annotations

import math

import numpy as np

from pobo.parties.dataset import Problem
from pobo.parties.discrete_gaussian import rows_calibration
from pobo.parties.domain import MAX_NORM
from pobo.parties.gaussian import EPS_MAX, gaussian_epsilon, sketch_epsilon
from pobo.protocol.messages import ProjectedDataset
from pobo.protocol.policy import DP_PROJECTION, GAUSSIAN_ROWS, GAUSSIAN_SKETCH

SEEDED_CLAIM = ("simulation, seeded: no DP claim (whoever knows the seed recomputes the "
                "noise); the figures say what the same release would give from the OS CSPRNG")


def epsilon_at(release: ProjectedDataset, n: int, distance: float,
               paper: bool = False, d: int | None = None) -> float | None:
    """The release's epsilon at its own delta for one row moved by `distance` preprocessed
    units (None where no analysis gives one, and for the paper's release, which is not
    DP): exact for the Gaussian rows (the move plus gamma sqrt(d), what rounding the row
    to the noise's lattice can add: parties/discrete_gaussian.py; d = the row's
    dimension), the chi^2-mixture bound for every fully lifted sketch (also Blocki's
    constant). Seeded or not, this is the mechanism's calibration."""
    if release.mechanism == GAUSSIAN_ROWS:
        if d is None:
            raise ValueError("the Gaussian rows' epsilon needs the rows' dimension d")
        _, gamma = rows_calibration(release.epsilon, release.delta, d)
        return gaussian_epsilon(release.delta, (distance + gamma * math.sqrt(d)) / release.omega)
    move = distance * math.sqrt(1.0 - 1.0 / n)  # what centring leaves of the move
    if paper and release.mechanism == DP_PROJECTION:
        return None
    if release.mechanism == GAUSSIAN_SKETCH or (release.mechanism == DP_PROJECTION
                                                and release.noise_std > 0):
        if bounded_normal_floor(move, release.omega, release.Z.shape[1]) > release.delta:
            return None  # the sampler that runs cannot give (eps, delta) there: not stated
        return sketch_epsilon(release.delta, release.omega, release.Z.shape[1], move)
    if release.mechanism == DP_PROJECTION and distance <= 1:
        return release.epsilon  # the unlifted sketch after a passed test: BT3.1 at |v| <= 1
    return None


# |g| of NoiseSource's floating-point normals (Box-Muller on uniforms k / 2^53, k >= 1)
BOX_MULLER_BOUND = math.sqrt(-2.0 * math.log(2.0 ** -53))  # 8.5717


def bounded_normal_floor(move: float, omega: float, r: int) -> float:
    """An upper bound on the delta that the bounded support of the sketch's normals
    forces at a move of `move` (issue 46): conditioned on the secret M, coordinate j of a
    row of Z moves by (M^T v)_j / sqrt(r) against noise of std omega / sqrt(r), and an
    event beyond the support's edge has probability Phi(|M^T v|_j / omega - 8.5717) under
    one neighbour and 0 under the other; (M^T v)_j ~ N(0, |v|^2), and a union bound over
    the r coordinates gives r E_g[Phi(|v| |g| / omega - 8.5717)]. The sketches (jl,
    Blocki's) still draw these normals: where the floor passes delta their epsilon is not
    stated (the Gaussian rows draw exact lattice noise and have no floor)."""
    from scipy import integrate
    from scipy.stats import norm

    a = move / omega
    if a <= 0:
        return 0.0
    value, _ = integrate.quad(lambda x: 2.0 * norm.pdf(x) * norm.cdf(a * x - BOX_MULLER_BOUND),
                              0.0, np.inf, limit=200)
    return min(1.0, r * value)


def distances(problem: Problem) -> list[tuple[float, str]]:
    """(distance, what it is): one unit, one declared length-scale, a whole row."""
    out = [(1.0, "one preprocessed unit" + (
        ": " + "; ".join(problem.domain.unit_in_features()) if problem.domain else ""))]
    ls = problem.kernel.lengthscale
    if isinstance(ls, (int, float)) and ls > 0:
        out.append((float(ls), "one kernel length-scale (declared)"))
    diameter = problem.domain.diameter if problem.domain else 2 * MAX_NORM
    out.append((diameter, "replacing a whole row by any other row of the "
                + ("public domain" if problem.domain else "radius-25 ball")))
    return out


def release_statement(release: ProjectedDataset, problem: Problem, seeded: bool,
                      paper: bool = False) -> dict:
    """The statement of the dataset release: mechanism, (eps, delta), whether a DP claim
    is made (none for the paper's release, `paper`, nor for a seeded one), and epsilon by
    distance, including `epsilon_whole_row`."""
    n = release.Z.shape[0]
    dim = problem.X.shape[1]
    by_distance = [{"distance": d, "what": what,
                    "epsilon": epsilon_at(release, n, d, paper, dim)}
                   for d, what in distances(problem)]
    dp = not paper and not seeded and not problem.preparation
    claim = ("not DP: " + NOT_DP if paper else SEEDED_CLAIM if seeded else
             "not DP: " + DATA_DEPENDENT_CLAIM + problem.preparation if problem.preparation else
             f"({release.epsilon:.4g}, {release.delta:.3g})-DP for {problem.row_unit} moved "
             "by at most 1 preprocessed unit")
    return {"dp": dp, "claim": claim, "mechanism": release.mechanism,
            "epsilon": release.epsilon, "delta": release.delta, "noise_std": release.noise_std,
            "row": problem.row_unit, "epsilon_by_distance": by_distance,
            "distance_delta": release.delta,  # the delta the figures by distance are at
            "epsilon_whole_row": by_distance[-1]["epsilon"],
            "preprocessing": ({"public": True, **problem.domain.to_dict()} if problem.domain
                              else {"public": False, "how": problem.preparation or
                                    "the scenario's rows as given"})}


DATA_DEPENDENT_CLAIM = ("the rows are prepared from the data themselves, so the unit of "
                        "the neighbouring relation depends on X and the figures below "
                        "cover no fixed relation: ")
NOT_DP = ("Algorithm 1 as published: for n - 1 > d neither branch is DP (every column of Z "
          "lies in the column space of X_c), and its branch reads the exact sigma_min")


def epsilon_text(eps: float | None, digits: int = 3) -> str:
    """An epsilon of a privacy statement for a person: "no bound" (None: no DP claim at
    that move), "> 1e+04" (inf: past what the calculators resolve, no useful guarantee,
    but not no bound at all), else `digits` significant digits."""
    if eps is None:
        return "no bound"
    eps = float(eps)
    return (f"> {EPS_MAX:.0e} (no useful guarantee)" if math.isinf(eps)
            else f"{eps:.{digits}g}")


def statement_lines(statement: dict) -> list[str]:
    """The statement as a few plain lines, for the curator's start and the run summary."""
    lines = [f"privacy: {statement['mechanism']}: {statement['claim']}"]
    at = statement.get("distance_delta", statement["delta"])  # (older records: delta)
    for item in statement["epsilon_by_distance"]:
        lines.append(f"  eps at delta {at:.3g} for a move of {item['distance']:.3g}: "
                     f"{epsilon_text(item['epsilon'])}  ({item['what']})")
    if not statement["preprocessing"]["public"]:
        lines.append("  preprocessing is data-dependent: " + statement["preprocessing"]["how"]
                     + " (not covered)")
    return lines


def privacy_lines(unit: dict | None) -> list[str]:
    """The lines of a privacy unit's dataset statement (a run's, or a service's)."""
    dataset = (unit or {}).get("dataset") or {}
    if "epsilon_by_distance" not in dataset:
        return [f"privacy: {dataset.get('claim', 'the non-private baseline: no DP claim')}"]
    return statement_lines(dataset)
