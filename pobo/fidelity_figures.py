"""FIDELITY.md's Fig. 2 panels: per epsilon, pobo's S_T/sigma_y and its excess over
non-private GP-UCB beside the excess the paper's text states."""
from __future__ import annotations

import math

from pobo.fidelity_csv import sweep_command
from pobo.fidelity_rule import RULE, _fmt, agrees, paired, pooled_sd
from pobo.fidelity_text import reason
from pobo.scenarios.presets import PRESETS
from pobo.report import mean_se


# Fig. 2's text (sec. 4): PO-GP-UCB's extra simple regret over non-private GP-UCB at T, in sigma_y
FIGURE_EXCESS = {"fig2a": {1.1: 0.011, 0.9: 0.069, 0.0: 0.099},
                 "fig2b": {2.9: 0.003, 2.0: 0.019, 1.0: 0.05},
                 "fig2c": {2.8: 0.051, 1.0: 0.017, 0.5: 0.082}}
# the level of each panel at its largest epsilon: the same setting in the paper's tables
FIGURE_LEVEL = {"fig2a": (1.1, "Table 1", 0.014), "fig2b": (2.9, "Table 5", 0.077),
                "fig2c": (2.8, "Table 8", 0.453)}


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
