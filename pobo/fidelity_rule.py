"""FIDELITY.md's verdict rule, and how often it passes a variant known to be wrong.

A cell agrees with the paper when |pobo's mean - the paper's| <= 2 se of the difference,
se = s sqrt(1/seeds + 1/50): the paper's 50-run mean is taken to have the same per-run
spread s as pobo's (the paper reports none). Where a table has two pobo columns (the
paper's text and the authors' code), s is their per-run standard deviation pooled at the
cell, the same for both columns, so a variant that spreads more does not widen its own
window; with one column it is that column's. No absolute slack (TOLERANCE = 0): measured
below, the old 0.01 sigma_y slack let a known-wrong variant pass most of the unlifted
cells, where the paper's numbers are themselves of the order of 0.01.

The false-pass rate is measured, not assumed: `python -m pobo.fidelity_rule` reruns Tables
1-3 with --authors-code as it was before issue 50 (the variance weighted by beta_t, not
beta_{t-1}^1/2: 5-6x the authors' exploration), and `pass_rates` resamples the seeds of
each table (the same seeds in every column) and counts how often the rule passes it.

    python -m pobo.fidelity_rule --seeds 50 --out runs/sweeps   # the wrong variant's sweeps
    python -m pobo.fidelity --collect runs/sweeps                # -> fidelity/*-beta.csv
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pobo.headline import mean_se

PAPER_RUNS = 50  # the paper's runs per cell
Z = 2.0  # standard errors of the difference
TOLERANCE = 0.0  # sigma_y of absolute slack beside Z se (issue 50: 0.01 let wrong variants pass)
OLD_TOLERANCE = 0.01  # the rule before issue 50: own se, + 0.01 sigma_y
WRONG = "-beta"  # fidelity/tableN-authors-beta.csv: the authors' code with beta_t, not beta^1/2
RESAMPLES = 2000
BOOTSTRAP_SEED = 50  # fixed: FIDELITY.md is regenerated bit for bit
RULE = "2 se" + (f" + {TOLERANCE} σ_y" if TOLERANCE else "")  # the rule, as the tables say it


def pooled_sd(columns: Sequence[Sequence[float]]) -> float:
    """The per-run standard deviation pooled over the columns run at one cell, each
    about its own mean (a column of one run adds nothing)."""
    ss = dof = 0.0
    for values in columns:
        v = np.asarray(values, dtype=float)
        if v.size > 1:
            ss += float(((v - v.mean()) ** 2).sum())
            dof += v.size - 1
    return math.sqrt(ss / dof) if dof else 0.0


def window(sd: float, seeds: int, tolerance: float = TOLERANCE) -> float:
    """Z standard errors of (pobo's mean - the paper's 50-run mean), both with per-run
    spread sd, plus `tolerance`."""
    return Z * sd * math.sqrt(1.0 / seeds + 1.0 / PAPER_RUNS) + tolerance


def agrees(mean: float, paper: float, sd: float, seeds: int,
           tolerance: float = TOLERANCE) -> bool:
    """Whether pobo's mean over `seeds` runs agrees with the paper's (see the module)."""
    return abs(mean - paper) <= window(sd, seeds, tolerance)


def _fmt(m: float, se: float) -> str:
    """'mean ± se' as FIDELITY.md prints it."""
    return f"{m:.3f} ± {se:.3f}"


def paired(a: dict, b: dict, unit: str = "") -> str:
    """a − b over the seeds both ran (the same data, projection and noise draws per seed),
    mean ± se, and whether it is separated from 0 at 2 se."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return "not run"
    m, se = mean_se([a[s] - b[s] for s in common])
    return (f"{_fmt(m, se)}{unit} over {len(common)} seeds, "
            f"{'separated' if abs(m) > 2 * se else 'not separated'} at 2 se")


def old_agrees(values: np.ndarray, paper: float) -> np.ndarray:
    """The rule before issue 50 on runs along the last axis: 2 se of pobo's own runs (the
    paper's se taken as se sqrt(seeds/50)) + 0.01 sigma_y."""
    n = values.shape[-1]
    se = values.std(axis=-1, ddof=1) / math.sqrt(n)
    return np.abs(values.mean(axis=-1) - paper) <= (
        2 * se * math.sqrt(1 + n / PAPER_RUNS) + OLD_TOLERANCE)


def pooled_rule(values: np.ndarray, paper: float, columns: list) -> np.ndarray:
    """This module's rule on runs along the last axis, the sd pooled over `columns`."""
    n = values.shape[-1]
    ss = sum(((c - c.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1) for c in columns)
    sd = np.sqrt(ss / (len(columns) * (n - 1)))
    return np.abs(values.mean(axis=-1) - paper) <= Z * sd * math.sqrt(
        1.0 / n + 1.0 / PAPER_RUNS) + TOLERANCE


def own_rule(values: np.ndarray, paper: float, columns: list) -> np.ndarray:
    """The rule before issue 50 (pobo's own spread + 0.01), `columns` unused."""
    return old_agrees(values, paper)


Rule = Callable[[np.ndarray, float, list], np.ndarray]  # (judged, paper, columns) -> agrees


@dataclass(frozen=True)
class Rates:
    """How often a rule passes one variant over resamples of the seeds."""

    per_cell: dict  # (table, r) -> fraction of resamples in which the cell agrees
    lifted: tuple  # the (table, r) cells that are lifted
    all_lifted: float  # fraction of resamples in which every lifted cell agrees
    mean_passed: float  # mean number of cells that agree

    def rate(self, lifted: bool) -> float:
        """The mean pass rate over the lifted (or the unlifted) cells."""
        cells = [c for c in self.per_cell if (c in self.lifted) == lifted]
        return sum(self.per_cell[c] for c in cells) / len(cells) if cells else math.nan


def pass_rates(cells: dict, judged: str, paper: dict, lifted: Sequence, rule: Rule,
               resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Rates:
    """How often `rule` passes column `judged` over `resamples` bootstrap resamples of the
    seeds. `cells`: (table, r) -> {column: runs in seed order, the same seeds in every
    column}, the columns FIDELITY.md would show together (their spread is pooled). A
    table's cells share each resample of its seeds, as its runs share the seeds."""
    rng = np.random.default_rng(seed)
    ok = {}
    for table in sorted({t for t, _ in cells}):
        mine = [c for c in cells if c[0] == table]
        size = len(cells[mine[0]][judged])
        pick = rng.integers(size, size=(resamples, size))
        for cell in mine:
            columns = [np.asarray(v, dtype=float)[pick] for v in cells[cell].values()]
            ok[cell] = rule(np.asarray(cells[cell][judged], dtype=float)[pick], paper[cell],
                            columns)
    every = np.ones(resamples, dtype=bool)
    for cell in lifted:
        every &= ok[cell]
    return Rates({c: float(v.mean()) for c, v in ok.items()}, tuple(lifted),
                 float(every.mean()), float(sum(v.astype(int) for v in ok.values()).mean()))


@contextmanager
def beta_not_root():
    """GP-UCB's --authors-code score as it was before issue 50, for measuring the rule:
    mean + S^2 beta_t variance (beta_t at pobo's index t, and no square root). Only in
    this process (a sweep with --workers 1)."""
    from unittest import mock

    from pobo.parties.strategies import GPUCB, beta_gp_ucb

    original = GPUCB.beta

    def beta(self, t: int, n: int) -> float:  # the engine takes the root of what it gets
        if not self.variance:
            return original(self, t, n)
        return (self.beta_scale**2 * beta_gp_ucb(t, n, self.delta)) ** 2

    with mock.patch.object(GPUCB, "beta", beta):
        yield


def wrong_variant_command(seeds: int) -> str:
    """The command that regenerates fidelity/tableN-authors-beta.csv."""
    return (f"python -m pobo.fidelity_rule --seeds {seeds} --out runs/sweeps && "
            "python -m pobo.fidelity --collect runs/sweeps")


def main(argv: list[str] | None = None) -> int:
    """Run Tables 1-3 as --authors-code with the variance weighted by beta_t (known wrong).

    Into OUT/tableN-authors-beta, to measure the verdict rule's false-pass rate."""
    from pobo.cli import main as pobo_main

    parser = argparse.ArgumentParser(prog="python -m pobo.fidelity_rule",
                                     description=main.__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50, help="seeds 0..N-1 (default 50)")
    parser.add_argument("--tables", nargs="+", default=["table1", "table2", "table3"],
                        choices=["table1", "table2", "table3"], help="default all three")
    parser.add_argument("--out", type=Path, default=Path("runs/sweeps"),
                        help="the sweeps' parent folder (default runs/sweeps)")
    args = parser.parse_args(argv)
    with beta_not_root():
        for name in args.tables:
            code = pobo_main(["sweep", "--preset", name, "--authors-code", "--seeds",
                              str(args.seeds), "--workers", "1", "-q", "--out",
                              str(args.out / f"{name}-authors{WRONG}")])
            if code:
                return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
