"""FIDELITY.md's PO-GP-UCB tables: per r, the paper's S_T/sigma_y beside pobo's in each
variant, the verdicts, and the computed lines under them (lifted r, random search, the
largest admissible r, the implied unit)."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from pobo.fidelity_csv import DATA, sweep_command
from pobo.fidelity_rule import RULE, _fmt, agrees, pooled_sd
from pobo.fidelity_text import reason
from pobo.scenarios.presets import PRESETS, RANDOM_BASELINE
from pobo.report import mean_se


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
