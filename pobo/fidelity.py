"""FIDELITY.md: every table and figure pobo reproduces, the paper's numbers beside pobo's.

    python -m pobo.fidelity --collect runs/sweeps   # copy each sweep's runs.csv here
    python -m pobo.fidelity                          # fidelity/*.csv -> FIDELITY.md

The numbers come only from the CSVs in `fidelity/` (one per sweep, written by `pobo
sweep`, trimmed); the paper's numbers from `scenarios.presets` and the figure texts
below; the verdict is computed (`pobo.fidelity_rule`: |pobo - paper| <= 2 se of the
difference, with the per-run spread pooled over the columns of a cell), and the reason
beside it is the best-supported explanation we have, stated as such.
"""
from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from pobo.fidelity_rule import (
    RESAMPLES, TOLERANCE, WRONG, agrees, own_rule, pass_rates, pooled_rule, pooled_sd,
    wrong_variant_command,
)
from pobo.scenarios.bank import PAPER_N
from pobo.scenarios.presets import PRESETS, RANDOM_BASELINE
from pobo.report import mean_se

KEEP = ("scenario", "strategy", "lift", "authors_code", "moma_k", "beta_scale", "ldp_epsilon",
        "metric",
        "epsilon", "r",
        "seed", "T", "n", "sigma_min", "lifted", "simple_regret", "simple_regret_sigma_y",
        "cumulative_regret", "hits", "random_hits_expected", "random_regret_expected",
        "sigma_y", "sigma_y_source")
DATA = {"bank": "../shared/data/lending-club-2007-2011.csv.gz",
        "realestate": "../shared/data/sg-private-projects.csv",
        "hospital": "../shared/data/diabetic_data.csv.gz"}
# Fig. 2's text (sec. 4): PO-GP-UCB's extra simple regret over non-private GP-UCB at T, in sigma_y
FIGURE_EXCESS = {"fig2a": {1.1: 0.011, 0.9: 0.069, 0.0: 0.099},
                 "fig2b": {2.9: 0.003, 2.0: 0.019, 1.0: 0.05},
                 "fig2c": {2.8: 0.051, 1.0: 0.017, 0.5: 0.082}}
# the level of each panel at its largest epsilon: the same setting in the paper's tables
FIGURE_LEVEL = {"fig2a": (1.1, "Table 1", 0.014), "fig2b": (2.9, "Table 5", 0.077),
                "fig2c": (2.8, "Table 8", 0.453)}
REASONS = {
    "synthetic": "pobo's first column follows the paper's text (line 9's lift sqrt(σ² + ω²); "
                 "GP-UCB scoring mean + β_t^½ σ with δ = 0.05), the second is the same preset "
                 "with --authors-code, the two departures found in the authors' code (lift "
                 "σ + ω; mean + β_{t−1}^½ σ² with δ = 0.1: their `_get_beta()` returns the "
                 "square root of β, indexed by the observations so far); either alone was "
                 "reported not to reproduce the lifted cells (issue 50, an independent "
                 "reimplementation at 50 seeds: the lift alone 3 of 6, the UCB alone 0 of 6). "
                 "The lifted releases differ most: σ + ω stretches the inputs by (σ + ω)/σ "
                 "(2.2 at r = 15, ε = e^1.1) where line 9 stretches them by sqrt(σ² + ω²)/σ "
                 "(1.55), which shrinks the declared length-scale relative to the data (see "
                 "the lifted-r line). In the unlifted cells the paper's numbers are of the "
                 "order of 0.01 and most runs find the maximum, so those cells hardly tell "
                 "the variants apart; the authors' score σ² (not σ) explores less where σ < 1 "
                 "and at small r misses the peak more often than the text's. The GP is fully "
                 "specified (l = 6.25 as in the authors' code; the text's 1.25 is not what "
                 "they ran) and σ_y = 1 is declared, so the unit is the paper's; S_T of "
                 "50-query runs is heavy-tailed (a few seeds miss the peak), so 2 se is "
                 "optimistic.",
    "bank": "prepared as the paper (`prep=paper`, passed by the preset): n = 36,000 (a seeded "
            "random subset of the 42,254 completed 2007-2011 loans; which 36,000 the paper "
            "used is not stated), inputs divided by their standard deviations, centred and "
            "scaled to max norm 25. That puts σ_min at 206, inside the [202.4, 207.9) implied "
            "by the paper's stated largest admissible r (10, 15, 20 at ε = e^2.7, e^2.9, "
            "e^3.1), so the same r are unlifted as in the paper. Dividing by ARD "
            "length-scales instead (the text: 'preprocessed to form an isotropic covariance "
            "function') gives σ_min = 43 at n = 36,000 (1.56 on all rows) and lifts every r. "
            "The unit is std(f) over the 36,000 prepared rows (0.487 in log return), stable "
            "by construction; the paper's σ_y cannot be recovered (the implied-unit line "
            "says what it would have to be): it is not given, and "
            "the curator's ML σ_y of this data depends on the 300-row sample (0.05-0.25 "
            "over three samples here; 0.045-2.95 in issue 25), so regret in an ML σ_y would "
            "move by a factor of 5 with the sample. The ROI is log(total_pymnt_inv / "
            "funded_amnt_inv); the paper does not define it precisely. Random search reads "
            "neither Z nor ε: its baseline is its exact expected S_T over T uniform draws, "
            "computed from f, with random runs beside it as a check.",
    "synthetic-figure": "the synthetic GP is fully specified (l = 6.25 as in the authors' code; "
                        "the text's 1.25 is not what they ran) and σ_y = 1 is declared, so the "
                        "unit is the paper's; pobo follows the paper's text here (Tables 1-3 "
                        "also show --authors-code).",
    "bank-unprepared": "this CSV predates the paper's preparation: all 42,254 loans, inputs "
                       "divided by ARD length-scales (σ_min = 1.56: every r and ε lifted) "
                       "and σ_y = 2.66 from one 300-row ML fit, an unstable unit (other "
                       "samples gave 0.045, 0.057 and 2.95: issue 25); rerun the preset "
                       "(`prep=paper`) to compare in the paper's setting.",
    "realestate": "the shared file is not the paper's data: 2,362 projects with URA "
                  "transactions averaged per project, against the paper's 2,004 individual "
                  "properties. Its cheapest row (Bedok Shopping Complex, a 60-year lease from "
                  "1977, 3,009 $/m²) is an outlier 0.403 below the next in log price (1.4 "
                  "σ_y), and whether 100 queries find that one row of 2,362 decides S_T "
                  "(the random-search line above: GP-UCB beats random at few r). The authors' "
                  "own code on the same file gives the same raw S_T as pobo (0.71-0.73, issue "
                  "15), so the gap is the data and the unit: the paper's numbers would need "
                  "the σ_y of the implied-unit line, several times the curator's ML σ_y of the "
                  "prepared data (0.28; 0.24 fitted on all 2,362 rows), which no fit we know "
                  "of gives.",
}


@dataclass(frozen=True)
class Entry:
    """One table or figure: its CSV, where it comes from, and the command that makes it."""

    name: str
    paper: str
    title: str
    command: str


def sweep_command(name: str, seeds: int, scenario: str, authors: bool = False) -> str:
    """The `pobo sweep` command that regenerates fidelity/NAME.csv (NAME-authors.csv with
    `authors`: the same preset with --authors-code)."""
    data = f" --data {DATA[scenario]}" if scenario in DATA else ""
    switch, suffix = (" --authors-code", AUTHORS) if authors else ("", "")
    return (f"pobo sweep --preset {name}{switch} --seeds {seeds}{data} --workers 1 "
            f"--out runs/sweeps/{name}{suffix}")


def read_rows(path: Path) -> list[dict]:
    """A fidelity CSV's rows with numbers parsed (empty cells None)."""
    def parse(v: str):
        if v in ("", "None"):
            return None
        try:
            return float(v)
        except ValueError:
            return {"True": True, "False": False}.get(v, v)
    with open(path, newline="") as fh:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def collect(sweeps: Path, out: Path) -> list[str]:
    """Copy each sweep folder's runs.csv (trimmed to KEEP) to out/NAME.csv; the names."""
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for runs in sorted(sweeps.glob("*/runs.csv")):
        with open(runs, newline="") as fh, open(out / f"{runs.parent.name}.csv", "w",
                                                 newline="") as dst:
            reader = csv.DictReader(fh)
            writer = csv.DictWriter(dst, fieldnames=[k for k in KEEP if k in reader.fieldnames])
            writer.writeheader()
            for row in reader:
                writer.writerow({k: row[k] for k in writer.fieldnames})
        names.append(runs.parent.name)
    return names


def _fmt(m: float, se: float) -> str:
    return f"{m:.3f} ± {se:.3f}"


AUTHORS = "-authors"  # fidelity/NAME-authors.csv: the preset run with --authors-code
RULE = "2 se" + (f" + {TOLERANCE} σ_y" if TOLERANCE else "")  # the rule, as the tables say it


def by_r(rows: list[dict], strategy: str = "gp-ucb") -> dict[int, list[dict]]:
    """A table's runs of `strategy` per r."""
    out: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        if row.get("strategy", "gp-ucb") == strategy:
            out[int(row["r"])].append(row)
    return out


def table_verdict(good: int, total: int) -> str:
    """The verdict on a table from the number of its r that agree with the paper."""
    return ("reproduces" if good == total else
            "reproduces mostly" if good >= total - 2 else "does not reproduce")


@dataclass(frozen=True)
class Column:
    """pobo's S_T/sigma_y per r in one variant (the paper's text, or the authors' code)."""

    label: str
    runs: dict  # r -> the runs
    command: str

    def values(self, r: int) -> list[float]:
        """The runs' S_T/sigma_y at r, in seed order."""
        return [g["simple_regret_sigma_y"] for g in sorted(self.runs.get(r, []),
                                                            key=lambda g: g["seed"])]

    def cell(self, r: int, paper: float, sd: float) -> tuple[str, bool | None]:
        """'mean ± se' at r and whether it agrees with the paper, judged with the per-run
        spread `sd` pooled over the table's columns (None: not run)."""
        values = self.values(r)
        if not values:
            return "not run", None
        m, se = mean_se(values)
        return _fmt(m, se), agrees(m, paper, sd, len(values))


def cell_sd(columns: list[Column], r: int) -> float:
    """The per-run spread at r pooled over the columns (`pobo.fidelity_rule`)."""
    return pooled_sd([c.values(r) for c in columns])


def lifted_rs(preset, column: Column) -> list[int]:
    """The table's r whose releases are lifted (sigma_min < omega), from the runs."""
    return [r for r in preset.rs if any(g["lifted"] for g in column.runs.get(r, []))]


def table_agreement(name: str, columns: list[Column]) -> list[tuple[int, int]]:
    """Per column, how many of the table's lifted and unlifted r agree with the paper."""
    preset = PRESETS[name]
    lifted = lifted_rs(preset, columns[0])
    out = []
    for column in columns:
        oks = {r: column.cell(r, preset.paper[r], cell_sd(columns, r))[1] for r in preset.rs}
        out.append((sum(bool(oks[r]) for r in lifted),
                    sum(bool(oks[r]) for r in preset.rs if r not in lifted)))
    return out


def reason(scenario: str, rows: list[dict], figure: bool = False) -> str:
    """Why pobo's numbers differ from the paper's, for the data the CSV rows were run on."""
    if scenario == "bank" and int(rows[0]["n"]) != PAPER_N:
        return REASONS["bank-unprepared"]
    return REASONS[f"{scenario}-figure" if figure and scenario == "synthetic" else scenario]


def lifted_line(preset, columns: list) -> str:
    """Each column's mean difference from the paper over the lifted r (computed)."""
    lifted = lifted_rs(preset, columns[0])
    if not lifted:
        return ""
    parts = []
    for column in columns:
        diffs = [mean_se([g["simple_regret_sigma_y"] for g in column.runs[r]])[0] -
                 preset.paper[r] for r in lifted if column.runs.get(r)]
        if diffs:
            parts.append(f"{column.label} {sum(diffs) / len(diffs):+.3f}")
    return (f"**Lifted r ({', '.join(map(str, lifted))}):** mean pobo − paper, "
            + ", ".join(parts) + " σ_y.")


def table_section(name: str, rows: list[dict], authors: list[dict] | None = None,
                  random_rows: list[dict] | None = None,
                  expectations: dict | None = None) -> str:
    """A PO-GP-UCB table: per r, the paper's S_T/sigma_y beside pobo's following the
    paper's text (sigma_y and raw) and, when run, following the authors' code
    (`authors`, --authors-code) and random search."""
    preset = PRESETS[name]
    seeds = len({r["seed"] for r in rows})
    columns = [Column("paper's text", by_r(rows), sweep_command(name, seeds, preset.scenario))]
    if authors:
        columns.append(Column("authors' code", by_r(authors), sweep_command(
            name, len({r["seed"] for r in authors}), preset.scenario, authors=True)))
    text = columns[0].runs
    key = (rows[0]["scenario"], rows[0]["n"], rows[0]["T"])
    random = [g for g in (random_rows or []) if (g["scenario"], g["n"], g["T"]) == key]
    expected = (expectations or {}).get(key)
    head = "| r | paper S_T/σ_y | " + " | ".join(
        f"pobo ({c.label}) S_T/σ_y | agrees" for c in columns)
    head += " | pobo S_T raw | unlifted |"
    lines = [f"### {preset.caption} (PO-GP-UCB)", "",
             f"paper: 50 runs; pobo: n = {int(rows[0]['n'])}, T = {int(rows[0]['T'])}, "
             + (f"σ_min = {rows[0]['sigma_min']:.4g}, " if rows[0].get("sigma_min") else "")
             + f"σ_y = {rows[0]['sigma_y']:.4g} "
             f"({rows[0]['sigma_y_source']}); "
             + "; ".join(f"{c.label}: {len({g['seed'] for v in c.runs.values() for g in v})} "
                         f"seeds, `{c.command}`" for c in columns), "",
             head, "|" + " --- |" * (head.count("|") - 1)]
    good = [0] * len(columns)
    lifted = lifted_rs(preset, columns[0])
    good_lifted = [0] * len(columns)
    for r in preset.rs:
        cells = []
        sd = cell_sd(columns, r)
        for i, column in enumerate(columns):
            cell, ok = column.cell(r, preset.paper[r], sd)
            good[i] += bool(ok)
            good_lifted[i] += bool(ok) and r in lifted
            cells.append(f"{cell} | {'—' if ok is None else 'yes' if ok else 'no'}")
        group = text.get(r, [])
        raw = _fmt(*mean_se([g["simple_regret"] for g in group])) if group else ""
        unlifted = f"{sum(not g['lifted'] for g in group)}/{len(group)}" if group else ""
        lines.append(f"| {r} | {preset.paper[r]} | " + " | ".join(cells) + f" | {raw} | "
                     f"{unlifted} |")
    total = len(preset.rs)
    lines.append("")
    for column, g, gl in zip(columns, good, good_lifted):
        split = (f": lifted r {gl} of {len(lifted)}, unlifted {g - gl} of "
                 f"{total - len(lifted)}" if lifted else "")
        lines.append(f"**Verdict ({column.label}): {table_verdict(g, total)}** ({g} of {total} "
                     f"r within {RULE} of the paper{split}).")
    if len(columns) > 1:
        lines.append(lifted_line(preset, columns))
    if random or expected is not None:
        lines.append(random_verdict(text, random, expected))
    if preset.scenario == "bank":
        lines.append(admissible_verdict(preset, text))
    if preset.scenario != "synthetic":
        lines.append(implied_unit(preset, text, rows[0]["sigma_y"]))
    lines += ["", f"Why: {reason(preset.scenario, rows)}", ""]
    return "\n".join(lines)


def random_verdict(gp: dict, random: list[dict], expected: float | None = None) -> str:
    """Whether PO-GP-UCB beats random search at each r (2 se of the difference): against
    the exact expectation of random's S_T/sigma_y when known (`expected`, from f), else
    random's runs pooled over their seeds (`random_by_scenario`: r and epsilon do not
    change them); the runs are shown beside it as a check."""
    pooled = [g["simple_regret_sigma_y"] for g in random]
    sampled = ""
    if pooled:
        scenario = random[0]["scenario"]
        command = (f"`pobo sweep {RANDOM_BASELINE.get(scenario, scenario)} --data "
                   f"{DATA[scenario]} --seeds {len(pooled)} --workers 1 --out "
                   f"runs/sweeps/{scenario}-random`")
        sampled = f"; random's runs: {_fmt(*mean_se(pooled))} σ_y over {len(pooled)} seeds, {command}"
    pm, pse = (expected, 0.0) if expected is not None else mean_se(pooled)
    better = worse = 0
    for r, group in gp.items():
        m, se = mean_se([g["simple_regret_sigma_y"] for g in group])
        gap = 2 * math.hypot(se, pse)
        better += m < pm - gap
        worse += m > pm + gap
    base = (f"exact E[S_T] of T uniform random queries {expected:.3f} σ_y (from f)"
            if expected is not None else f"random's runs {_fmt(pm, pse)} σ_y")
    return (f"**Against random search** ({base}): PO-GP-UCB is lower by more than 2 se at "
            f"{better} of {len(gp)} r, higher at {worse}, indistinguishable at "
            f"{len(gp) - better - worse}{sampled}.")


def implied_unit(preset, gp: dict, sigma_y: float) -> str:
    """The sigma_y (in the objective's units) at which pobo's raw S_T, summed over the
    table's r, equals the paper's numbers: what the paper's unit would have to be."""
    raw = [mean_se([g["simple_regret"] for g in gp[r]])[0] for r in preset.rs if gp.get(r)]
    paper = [preset.paper[r] for r in preset.rs if gp.get(r)]
    if not raw or not sum(paper):
        return ""
    implied = sum(raw) / sum(paper)
    return (f"**Implied unit:** pobo's raw S_T equals the paper's numbers at σ_y = "
            f"{implied:.3g} in the objective's units ({implied / sigma_y:.2f} x the σ_y used "
            "here).")


def admissible_verdict(preset, gp: dict) -> str:
    """The paper's claim that the largest admissible r (sigma_min >= omega) is best,
    checked on pobo's runs: which r is unlifted, which has the lowest mean, and whether
    the largest unlifted r is within 2 se of that lowest."""
    means = {r: mean_se([g["simple_regret_sigma_y"] for g in v]) for r, v in gp.items()}
    unlifted = [r for r, v in gp.items() if v and not any(g["lifted"] for g in v)]
    if not means:
        return ""
    best = min(means, key=lambda r: means[r][0])
    if not unlifted:
        return (f"**Largest admissible r:** every r is lifted here, so the paper's claim "
                f"that it is best cannot be tested (lowest mean at r = {best}).")
    top = max(unlifted)
    close = means[top][0] - means[best][0] <= 2 * math.hypot(means[top][1], means[best][1])
    return (f"**Largest admissible r = {top}** (unlifted: r ≤ {top}); lowest mean at r = "
            f"{best}; r = {top} is {'within' if close else 'not within'} 2 se of it.")


def by_epsilon(rows: list[dict], log_eps: float | None) -> list[float]:
    """A figure's S_T/sigma_y at epsilon = e^log_eps (None: non-private), in seed order."""
    def match(e):
        return e is None if log_eps is None else (e is not None and abs(math.log(e) - log_eps)
                                                  < 1e-6)
    return [g["simple_regret_sigma_y"] for g in sorted(rows, key=lambda g: g["seed"])
            if match(g["epsilon"])]


def figure_section(name: str, rows: list[dict], authors: list[dict] | None = None) -> str:
    """A Fig. 2 panel: per epsilon, pobo's S_T/sigma_y and its excess over non-private
    GP-UCB, beside the excess the paper's text states; `authors`: the same preset with
    --authors-code beside it (the private runs' spread pooled over both at each epsilon)."""
    preset = PRESETS[name]
    variants = [("paper's text", rows, sweep_command(name, len({r["seed"] for r in rows}),
                                                     preset.scenario))]
    if authors:
        variants.append(("authors' code", authors, sweep_command(
            name, len({r["seed"] for r in authors}), preset.scenario, authors=True)))
    bases = [mean_se(by_epsilon(v, None)) if by_epsilon(v, None) else (math.nan, math.nan)
             for _, v, _ in variants]
    head = "| ε | " + " | ".join(
        (f"pobo ({label}) " if authors else "pobo ") + "S_T/σ_y | excess over non-private | "
        "agrees" for label, _, _ in variants) + " | paper excess |"
    lines = [f"### {preset.caption} (PO-GP-UCB)", "",
             f"pobo: r = {preset.rs[0]}, T = {int(rows[0]['T'])}, σ_y = "
             f"{rows[0]['sigma_y']:.4g}; paper: 50 seeds; "
             + "; ".join(f"{label}: {len({r['seed'] for r in v})} seeds, `{command}`, "
                         f"non-private GP-UCB S_T/σ_y = {_fmt(*base)}"
                         for (label, v, command), base in zip(variants, bases)), "",
             head, "|" + " --- |" * (head.count("|") - 1)]
    good, total = [0] * len(variants), 0
    for x in preset.log_eps:
        columns = [by_epsilon(v, x) for _, v, _ in variants]
        if not columns[0]:
            lines.append(f"| e^{x} | not run |" + " |" * (head.count("|") - 3))
            continue
        sd = pooled_sd(columns)
        paper = FIGURE_EXCESS[name].get(x)
        total += paper is not None
        cells = []
        for i, (values, (bm, bse)) in enumerate(zip(columns, bases)):
            if not values:
                cells.append("not run | | —")
                continue
            m, se = mean_se(values)
            n = len(values)
            ex, exse = m - bm, math.hypot(sd / math.sqrt(n), bse)
            # the excess's sd: the pooled private spread and the baseline's se (sd = se sqrt(n))
            ok = None if paper is None else agrees(ex, paper, exse * math.sqrt(n), n)
            good[i] += bool(ok)
            cells.append(f"{_fmt(m, se)} | {_fmt(ex, exse)} | "
                         f"{'—' if ok is None else 'yes' if ok else 'no'}")
        lines.append(f"| e^{x} | " + " | ".join(cells)
                     + f" | {'—' if paper is None else paper} |")
    x, table, level = FIGURE_LEVEL[name]
    columns = [by_epsilon(v, x) for _, v, _ in variants]
    sd = pooled_sd(columns)
    lines.append("")
    for (label, _, _), g, at in zip(variants, good, columns):
        verdict = "reproduces" if g == total else ("reproduces mostly" if g >= total - 1
                                                   else "does not reproduce")
        level_ok = bool(at) and agrees(mean_se(at)[0], level, sd, len(at))
        if not level_ok:
            verdict = "does not reproduce"
        lines.append(f"**Verdict{f' ({label})' if authors else ''}: {verdict}** ({g} of "
                     f"{total} stated excesses within {RULE}; the level at ε = e^{x}, "
                     f"{table}'s {level} σ_y, {'agrees' if level_ok else 'does not agree'}).")
    if authors:
        def seeds_at(v: list[dict], x: float) -> dict:
            return {g["seed"]: g["simple_regret_sigma_y"] for g in v if g["epsilon"] is not None
                    and abs(math.log(g["epsilon"]) - x) < 1e-6}
        lines.append("**The two modes** (paper's text − authors' code, paired by seed): "
                     + "; ".join(f"e^{x} " + paired(seeds_at(rows, x), seeds_at(authors, x),
                                                    unit=" σ_y") for x in preset.log_eps) + ".")
    lines += ["", f"Why: {reason(preset.scenario, rows, figure=True)}", ""]
    return "\n".join(lines)


def paired(a: dict, b: dict, unit: str = "") -> str:
    """a − b over the seeds both ran (the same data, projection and noise draws per seed),
    mean ± se, and whether it is separated from 0 at 2 se."""
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        return "not run"
    m, se = mean_se([a[s] - b[s] for s in common])
    return (f"{_fmt(m, se)}{unit} over {len(common)} seeds, "
            f"{'separated' if abs(m) > 2 * se else 'not separated'} at 2 se")


HOSPITAL = "pobo sweep hospital --data ../shared/data/diabetic_data.csv.gz --workers 1"
# the hospital's runs in the two modes of Tables 1-3 (the paper's release and UCB, and the
# authors' code's): fidelity/hospital{suffix}.csv, and the options that made them
HOSPITAL_MODES = {"-text": ("the paper's text", "--lift paper --fit every"),
                  AUTHORS: ("the authors' code", "--authors-code --fit every")}


def release_label(row: dict) -> str:
    """How a hospital run released the data: its lift, and the authors' code switch."""
    if row["epsilon"] is None:
        label = "non-private"
    elif row.get("lift") in (None, "paper"):
        label = "PO-GP-UCB (--lift paper)"
    else:
        label = f"--lift {row['lift']}"
    return label + (", authors' code" if row.get("authors_code") else "")


def hospital_section(rows: list[dict], modes: dict | None = None) -> str:
    """The hospital example (no numbers in the paper): distinct positives found in T; with
    `modes` (suffix -> rows), PO-GP-UCB as the paper's text and as the authors' code beside
    it, and whether the two are separated (2 se of the difference)."""
    seeds = len({r["seed"] for r in rows})
    groups: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        groups[(row["strategy"], release_label(row))].append(row["hits"])
    expected = rows[0]["random_hits_expected"]
    lines = ["### Hospital readmission (PO-GP-UCB sec. 1, example (a): no experiment in the paper)",
             "", f"pobo: n = {int(rows[0]['n'])}, T = {int(rows[0]['T'])}, hits = "
                 "distinct patients readmitted within 30 days found; no row queried twice; "
                 f"{seeds} seeds, `{HOSPITAL} --strategies gp-ucb random --seeds {seeds} "
                 "--non-private`"]
    mode_hits = {}
    for suffix, mode_rows in (modes or {}).items():
        label, switch = HOSPITAL_MODES[suffix]
        n = len({r["seed"] for r in mode_rows})
        lines[-1] += f"; {label}: {n} seeds, `{HOSPITAL} {switch} --seeds {n}`"
        for row in mode_rows:
            groups[(row["strategy"], release_label(row))].append(row["hits"])
        mode_hits[label] = {r["seed"]: r["hits"] for r in mode_rows if r["epsilon"] is not None}
    lines += ["", "| strategy | release | hits |", "| --- | --- | --- |"]
    for (strategy, release), values in sorted(groups.items()):
        lines.append(f"| {strategy} | {release} | {_fmt(*mean_se(values))} |")
    lines.append(f"| random (expected) | — | {expected:.2f} |")
    private = [(k, v) for k, v in sorted(groups.items()) if k[0] == "gp-ucb"
               and k[1] != "non-private"]
    better = [k[1] for k, v in private if mean_se(v)[0] - 2 * mean_se(v)[1] > (expected or 0)]
    lines += ["", f"**Verdict: better than random** with {', '.join(better)}" if better else
              "**Verdict: no release better than random**"]
    lines[-1] += (f" ({len(better)} of {len(private)} private GP-UCB releases: mean hits minus "
                  "2 se above random's expectation).")
    if len(mode_hits) == 2:
        (la, a), (lb, b) = mode_hits.items()
        lines.append(f"**The two modes** ({la} − {lb}, paired by seed): "
                     f"{paired(a, b, unit=' hits')}.")
    lines += ["", "Why: the paper gives no numbers; the 9 inputs predict 30-day readmission "
                  "weakly.", ""]
    return "\n".join(lines)


def moma_section(rows: list[dict], others: list[dict] | None = None) -> str:
    """LDP-MoMA-GP-UCB's cumulative regret against its epoch length k, and (`others`,
    the same setting and seeds) beside the other LDP strategies and random: is MoMA best,
    as Zhou & Tan's Fig. 2a has it?"""
    seeds = len({r["seed"] for r in rows})
    groups: dict[float | None, list[float]] = defaultdict(list)
    for row in rows:
        groups[row["moma_k"]].append(row["cumulative_regret"])
    scale = rows[0]["beta_scale"]
    ks = " ".join(str(int(k)) for k in sorted(groups))
    lines = ["### LDP-MoMA-GP-UCB epoch length k (Zhou & Tan, Fig. 2a setting)", "",
             f"pobo: ldp-synthetic (SE), LDP ε = {rows[0]['ldp_epsilon']:g}, T = "
             f"{int(rows[0]['T'])}, {seeds} seeds, β scale "
             f"{'default (0.01)' if scale is None else scale}; k and the β scale were chosen "
             "on this same problem; `pobo sweep ldp-synthetic --ldp-eps 1 "
             f"--strategies moma-gp-ucb --moma-k {ks} --seeds {seeds} --workers 1`", "",
             "| k | epochs | R_T |", "| --- | --- | --- |"]
    T = int(rows[0]["T"])
    for k, values in sorted(groups.items(), key=lambda kv: kv[0] or 0):
        lines.append(f"| {int(k)} | {T // int(k)} | {_fmt(*mean_se(values))} |")
    means = {k: mean_se(v) for k, v in groups.items()}
    best = min(means, key=lambda k: means[k][0])
    theorem = max(means)
    clear = means[theorem][0] - means[best][0] > 2 * math.hypot(means[best][1], means[theorem][1])
    lines += ["", f"**Verdict: k = {int(best)} has the lowest R_T; against the theorem's "
                  f"k = {int(theorem)} the difference is "
                  f"{'larger' if clear else 'not larger'} than 2 se at {seeds} seeds.**"]
    if others:
        lines.append(ldp_ranking(means, others, best, theorem))
    lines += ["", f"Why: at the theorem's k = ⌈24 ln(4eT/δ)⌉ = {int(theorem)}, MoMA gets only "
                  f"{T // int(theorem)} epochs in T = {T} (one row played per epoch), so it "
                  "barely adapts; shorter epochs adapt more often. The paper sets its "
                  "constants \"order-wise\" without stating k, so which k it ran is not "
                  "known; both k and β were chosen on this problem.", ""]
    return "\n".join(lines)


def ldp_ranking(moma: dict, others: list[dict], best: float, theorem: float) -> str:
    """MoMA (its best k and the theorem's) ranked by R_T among the other strategies."""
    groups: dict[str, list[float]] = defaultdict(list)
    for row in others:
        groups[row["strategy"]].append(row["cumulative_regret"])
    entries = {name: mean_se(v) for name, v in groups.items()}
    entries[f"moma-gp-ucb k={int(best)}"] = moma[best]
    entries[f"moma-gp-ucb k={int(theorem)}"] = moma[theorem]
    order = sorted(entries, key=lambda name: entries[name][0])
    leader = order[0]
    mine = f"moma-gp-ucb k={int(best)}"
    gap = (entries[mine][0] - entries[leader][0]) / (math.hypot(entries[mine][1],
                                                                entries[leader][1]) or 1.0)
    seeds = len({r["seed"] for r in others})
    return (f"**Beside the other strategies** ({seeds} seeds, `pobo sweep ldp-synthetic "
            f"--ldp-eps 1 --strategies {' '.join(sorted(groups))} --seeds {seeds} --workers 1`): "
            + ", ".join(f"{name} {_fmt(*entries[name])}" for name in order)
            + f". MoMA at its best k is {order.index(mine) + 1} of {len(order)}"
            + ("" if leader == mine else f", {gap:.1f} se behind {leader}")
            + ": Zhou & Tan's \"MoMA best\" is "
            + ("reproduced" if leader.startswith("moma") else
               "not reproduced" if gap > 2 else
               "neither reproduced nor refuted (within 2 se of the leader)") + ".")


HEADER = """# FIDELITY: the papers' tables and figures, and pobo's

Generated by `python -m pobo.fidelity` from the sweep CSVs in `fidelity/` — do not
edit by hand. Regret is in units of σ_y, as in the PO-GP-UCB paper: the declared signal
std for the synthetic GP (σ_y = 1); for the bank tables prepared as the paper
(`prep=paper`), std(f) over the prepared rows, because the paper's σ_y is not given and
an ML fit of it is not stable on this data; for the other real data the curator's
maximum-likelihood signal std of its prepared dataset (fitted once, on 300 rows drawn
with the fixed preparation seed). Each table says which, and the raw value is beside it.
Each real dataset is prepared once, independent of the run seed. Verdicts and the lines
marked in bold are computed from the CSVs; the "Why" beside them is our best-supported
explanation, stated as such. "Agrees" means |pobo − paper| ≤ {rule}, the standard error
of the difference: the paper reports no standard errors, so its 50-run mean is taken to
have the per-run spread s that pobo measures, se = s √(1/seeds + 1/50); where a table has
two pobo columns (the paper's text, the authors' code) s is pooled over both at the cell,
so a variant that spreads more does not widen its own window (`pobo.fidelity_rule`). There
is no absolute slack: the rule's false-pass rate against a known-wrong variant is measured
below Tables 1-3's summary. The lifted cells are counted on their own: they are the ones
that tell the variants apart.
Fewer seeds than the paper's 50 where the 2-core machine did not allow more (stated
per table).
"""

NOT_REPRODUCED = """## Not reproduced

- **Kusner et al. 2015, Figures 1-3** (DP hyperparameter tuning of SVM / logistic
  regression on their datasets): pobo implements the three releases (Algorithms 1-3,
  `--release`; the `tuning` scenario runs Algorithm 3 on a generated validation set) and
  tests their mechanisms, but does not rerun the paper's experiments: the datasets and
  the tuned models are not in this project.
- **Zhou & Tan, Fig. 2b-c and 3** (real-data LDP experiments) and the non-private
  heavy-tailed Fig. 2d-f: not run here for lack of compute; `ldp-synthetic --noise
  student-t` runs the latter's setting.
"""


def random_by_scenario(folder: Path) -> dict[str, list[dict]]:
    """Random search's runs per scenario, from SCENARIO-random.csv and the table CSVs.
    Random reads neither Z nor epsilon: its runs of one seed on one prepared dataset are
    the same run at every r and epsilon (kept once), and different seeds are draws of one
    distribution, pooled."""
    out: dict[str, dict] = defaultdict(dict)
    paths = [*(folder / f"{s}-random.csv" for s in DATA),
             *(folder / f"table{i}.csv" for i in range(1, 10))]
    for path in paths:
        if path.exists():
            for row in read_rows(path):
                if row.get("strategy") == "random":  # a seed's random runs are one run
                    out[row["scenario"]].setdefault((row["n"], row["T"], row["seed"]), row)
    return {scenario: list(runs.values()) for scenario, runs in out.items()}


def random_expectations(folder: Path) -> dict[tuple, float]:
    """(scenario, n, T) -> random search's exact expected S_T/sigma_y, from any CSV row
    that records it (a property of the prepared data and T, the same in every run)."""
    out = {}
    for path in sorted(folder.glob("*.csv")):
        for row in read_rows(path):
            if row.get("random_regret_expected") is not None and row.get("sigma_y"):
                out[(row["scenario"], row["n"], row["T"])] = (row["random_regret_expected"]
                                                             / row["sigma_y"])
    return out


def synthetic_columns(folder: Path, suffix: str) -> dict[str, Column] | None:
    """Tables 1-3 as one Column each from fidelity/tableN{suffix}.csv (None: not all run)."""
    paths = {f"table{i}": folder / f"table{i}{suffix}.csv" for i in (1, 2, 3)}
    if not all(p.exists() for p in paths.values()):
        return None
    return {name: Column("", by_r(read_rows(p)), "") for name, p in paths.items()}


def synthetic_summary(folder: Path) -> str:
    """Tables 1-3 in one line: per variant, how many lifted and unlifted cells agree
    (computed; the spread pooled over the two variants as in the tables)."""
    variants = {label: synthetic_columns(folder, suffix) for label, suffix in
                (("the paper's text", ""), ("the authors' code", AUTHORS))}
    variants = {label: v for label, v in variants.items() if v}
    if not variants:
        return ""
    counts = {label: [0, 0] for label in variants}
    n_lifted = n_cells = 0
    for name in ("table1", "table2", "table3"):
        columns = [v[name] for v in variants.values()]
        for label, (lifted, unlifted) in zip(variants, table_agreement(name, columns)):
            counts[label][0] += lifted
            counts[label][1] += unlifted
        n_lifted += len(lifted_rs(PRESETS[name], columns[0]))
        n_cells += len(PRESETS[name].rs)
    rates = false_pass_section(folder)
    return (f"**Tables 1-3 (synthetic), cells within {RULE} of the paper:** lifted cells "
            f"(the {n_lifted} that tell the variants apart): "
            + ", ".join(f"{label} {c[0]} of {n_lifted}" for label, c in counts.items())
            + f"; unlifted cells: "
            + ", ".join(f"{label} {c[1]} of {n_cells - n_lifted}" for label, c in counts.items())
            + ".\n" + ("\n" + rates if rates else ""))


def false_pass_section(folder: Path) -> str:
    """The verdict rule's measured false-pass rate: how often it passes the known-wrong
    variant (fidelity/tableN-authors-beta.csv) over resamples of the seeds, beside the
    authors' code itself, for this rule and the rule before issue 50 (computed)."""
    text, authors = synthetic_columns(folder, ""), synthetic_columns(folder, AUTHORS)
    wrong = synthetic_columns(folder, AUTHORS + WRONG)
    if not (text and authors and wrong):
        return ""
    cells, paper, lifted = {}, {}, []
    for name in ("table1", "table2", "table3"):
        preset = PRESETS[name]
        for r in preset.rs:
            runs = {k: {g["seed"]: g["simple_regret_sigma_y"] for g in v[name].runs.get(r, [])}
                    for k, v in (("text", text), ("authors", authors), ("wrong", wrong))}
            seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
            cells[(name, r)] = {k: [v[s] for s in seeds] for k, v in runs.items()}
            paper[(name, r)] = preset.paper[r]
        lifted += [(name, r) for r in lifted_rs(preset, text[name])]
    seeds = min(len(c["text"]) for c in cells.values())
    rows, measured = [], {}
    for rule_label, rule in (("this rule (2 se, spread pooled over the shown columns)",
                              pooled_rule), ("the old rule (own se + 0.01 σ_y)", own_rule)):
        for variant, shown in (("wrong: β_t·variance", ("text", "wrong")),
                               ("authors' code: β_{t−1}^½·variance", ("text", "authors"))):
            judged = shown[1]
            rates = pass_rates({c: {k: v[k] for k in shown} for c, v in cells.items()},
                               judged, paper, lifted, rule)
            measured[(rule, judged)] = rates
            rows.append(f"| {rule_label} | {variant} | {rates.rate(True):.0%} | "
                        f"{rates.rate(False):.0%} | {rates.all_lifted:.0%} | "
                        f"{rates.mean_passed:.1f} of {len(cells)} |")
    return "\n".join([
        f"**The rule's false-pass rate** (measured over {RESAMPLES} bootstrap resamples of "
        f"the {seeds} seeds of each table, `pobo.fidelity_rule.pass_rates`): the known-wrong "
        "variant is --authors-code as it was before issue 50, the variance weighted by β_t "
        "(pobo's index) instead of the authors' β_{t−1}^½, 5-6x their exploration "
        f"(`{wrong_variant_command(seeds)}`, fidelity/tableN-authors{WRONG}.csv). Each "
        "variant is judged beside the paper's-text column, as the tables show it.", "",
        "| rule | variant judged | lifted cells passed | unlifted cells passed | all "
        f"{len(lifted)} lifted pass | cells passed (mean) |",
        "| --- | --- | --- | --- | --- | --- |", *rows, "",
        "**So:** the lifted cells decide. This rule passes a lifted cell of the wrong variant "
        f"in {measured[(pooled_rule, 'wrong')].rate(True):.0%} of resamples and all "
        f"{len(lifted)} in {measured[(pooled_rule, 'wrong')].all_lifted:.0%} (the old rule: "
        f"{measured[(own_rule, 'wrong')].rate(True):.0%} and "
        f"{measured[(own_rule, 'wrong')].all_lifted:.0%}), where the authors' code passes all "
        f"{len(lifted)} in {measured[(pooled_rule, 'authors')].all_lifted:.0%}; the unlifted "
        f"cells pass the wrong variant {measured[(pooled_rule, 'wrong')].rate(False):.0%} of "
        f"the time (under the old rule: {measured[(own_rule, 'wrong')].rate(False):.0%})"
        ", so they do not tell the variants apart and the verdict on Tables 1-3 rests on the "
        "lifted count.", ""])


# CSVs in fidelity/ not rerun at the current code (the compute budget of issue 50): their
# documented command now gives other runs at some seeds (near-tie breaking changed since)
STALE: frozenset[str] = frozenset()
STALE_NOTE = ("**Not rerun at the current code:** {names} {verb} made by an earlier "
              "version (near-ties were then broken by index); the command above now gives "
              "other runs at some seeds.\n")


def stale_note(names: list[str], stale: frozenset[str]) -> str:
    """The note under a section whose CSVs are in `stale` ('' when none is)."""
    old = [f"fidelity/{n}.csv" for n in names if n in stale]
    return STALE_NOTE.format(names=", ".join(old), verb="was" if len(old) == 1 else
                             "were") if old else ""


def render(folder: Path, stale: frozenset[str] = STALE) -> str:
    """The whole FIDELITY.md from the CSVs in `folder` (`stale`: the CSV names not rerun
    at the current code, noted under their sections)."""
    parts = [HEADER.format(rule=RULE), "## PO-GP-UCB (Kharkovskii et al. 2020)", ""]
    parts.append(synthetic_summary(folder))
    random, expectations = random_by_scenario(folder), random_expectations(folder)
    for name in [*(f"table{i}" for i in range(1, 10)), "fig2a", "fig2b", "fig2c"]:
        path = folder / f"{name}.csv"
        if not path.exists():
            parts.append(f"### {PRESETS[name].caption}\n\nnot run in this version (compute "
                         f"budget): `{sweep_command(name, 10, PRESETS[name].scenario)}`\n")
            continue
        rows = read_rows(path)
        authors = folder / f"{name}{AUTHORS}.csv"
        scenario = PRESETS[name].scenario
        other = read_rows(authors) if authors.exists() else None
        parts.append(figure_section(name, rows, other) if name.startswith("fig") else
                     table_section(name, rows, other, random.get(scenario), expectations))
        parts += filter(None, [stale_note([name, name + AUTHORS, f"{scenario}-random"], stale)])
    if (folder / "hospital.csv").exists():
        modes = {suffix: read_rows(folder / f"hospital{suffix}.csv") for suffix in HOSPITAL_MODES
                 if (folder / f"hospital{suffix}.csv").exists()}
        parts.append(hospital_section(read_rows(folder / "hospital.csv"), modes))
        parts += filter(None, [stale_note(["hospital", *(f"hospital{m}" for m in modes)],
                                          stale)])
    parts += ["## Local DP BO (Zhou & Tan)", ""]
    if (folder / "ldp-moma-k.csv").exists():
        others = folder / "ldp-strategies.csv"
        parts.append(moma_section(read_rows(folder / "ldp-moma-k.csv"),
                                  read_rows(others) if others.exists() else None))
        parts += filter(None, [stale_note(["ldp-moma-k", "ldp-strategies"], stale)])
    parts.append(NOT_REPRODUCED)
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Collect sweep CSVs (--collect) and/or write FIDELITY.md."""
    parser = argparse.ArgumentParser(prog="python -m pobo.fidelity",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=Path("fidelity"), help="the CSV folder")
    parser.add_argument("--collect", type=Path, metavar="SWEEPS",
                        help="copy SWEEPS/*/runs.csv (trimmed) into the CSV folder first")
    parser.add_argument("--out", type=Path, default=Path("FIDELITY.md"))
    args = parser.parse_args(argv)
    if args.collect is not None:
        print("collected:", ", ".join(collect(args.collect, args.csv)) or "nothing")
    if not args.csv.is_dir():
        parser.error(f"no CSV folder {args.csv}")
    args.out.write_text(render(args.csv))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
