"""Sweep reports: a CSV of every run, paper-style markdown tables, and PNG plots."""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from parties.projection import omega, singular_values
from scenarios.registry import build_problem


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    a = np.asarray(values, dtype=float)
    se = float(a.std(ddof=1) / math.sqrt(len(a))) if len(a) > 1 else 0.0
    return float(a.mean()), se


def write_csv(rows: list[dict], path: Path) -> None:
    """One line per run, columns as in `scenarios.sweep.summarise`."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _eps_label(eps: float | None) -> str:
    if eps is None:
        return "non-private"
    return f"e^{math.log(eps):.2g} = {eps:.4g}"


METRICS = {"hits": ("hits", "hits (positives found)"),
           "cumulative_regret": ("cumulative_regret", "R_T (cumulative regret)"),
           "simple_regret": ("simple_regret_norm", "S_T / sigma_f")}


def _num(value) -> str:
    return "—" if value is None else f"{value:.4g}"


def markdown_table(rows: list[dict], paper: dict | None = None, title: str = "") -> str:
    """The scenario's metric (S_T/sigma_f, hits or R_T) as mean +- standard error per
    strategy, beta scale, LDP epsilon, projection epsilon and r, the non-private
    release below, with the paper's value beside each r when given. "unlifted" counts
    the runs whose release was not lifted: under --lift paper that is sigma_min >= omega
    (the paper's guideline); under always/private a lifted release is the DP one."""
    metric, name = METRICS[rows[0].get("metric", "simple_regret")]
    cells: dict[tuple, list[float]] = defaultdict(list)
    lifted: dict[tuple, list[bool]] = defaultdict(list)
    for row in rows:
        key = (row["strategy"], row.get("beta_scale"), row.get("ldp_epsilon"), row["epsilon"],
               row["r"] if row["epsilon"] is not None else None)
        cells[key].append(row[metric])
        lifted[key].append(bool(row["lifted"]))
    lines = [f"### {title}" if title else "", "",
             f"{name}, mean ± standard error over seeds (n = {rows[0]['n']}, T = {rows[0]['T']})",
             "", "| strategy | β scale | LDP ε | ε | r | " + name + " | runs | unlifted |"
             + (" paper S_T |" if paper else ""),
             "| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if paper else "")]
    order = lambda kv: tuple((v is None, v or 0) if not isinstance(v, str) else (False, v)  # noqa: E731
                             for v in kv[0])
    for key, values in sorted(cells.items(), key=order):
        strategy, scale, ldp, eps, r = key
        m, se = mean_se(values)
        ok = lifted[key]
        admissible = "—" if eps is None else ("yes" if not any(ok) else
                                              "no" if all(ok) else f"{ok.count(False)}/{len(ok)}")
        extra = f" {paper.get(r, '')} |" if paper else ""
        lines.append(f"| {strategy} | {'default' if scale is None else _num(scale)} | "
                     f"{_num(ldp)} | {_eps_label(eps)} | {r if r is not None else 'd'} | "
                     f"{m:.4f} ± {se:.4f} | {len(values)} | {admissible} |{extra}")
    return "\n".join(lines).strip() + "\n"


def admissible_r(scenario: str, options: dict, epsilons, rs, seed: int = 0) -> str:
    """Which r satisfy sigma_min >= omega for each epsilon (the paper's guideline)."""
    problem = build_problem(scenario, seed, **options)
    sigma_min = float(singular_values(problem.X)[-1])
    lines = [f"sigma_min(X) = {sigma_min:.4g} for {scenario} (seed {seed})"]
    for eps in epsilons:
        if eps is None:
            continue
        delta = problem.delta
        ok = [r for r in rs if r is not None and omega(r, eps, delta) <= sigma_min]
        lines.append(f"  eps = {eps:.4g} (delta = {delta:g}): sigma_min >= omega for r in "
                     f"{ok if ok else 'none'}; omega = "
                     + ", ".join(f"{omega(r, eps, delta):.4g} (r={r})" for r in rs if r))
    return "\n".join(lines)


def plot_regret(rows: list[dict], out: Path, sweep_dir: Path) -> list[Path] | str:
    """PNG plots like the paper's Fig. 2: mean S_t/sigma_f against t, one curve per
    epsilon (non-private included), one figure per r; or a message without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plots (pip install 'pobo[plot]')"
    traces: dict[tuple, list[np.ndarray]] = defaultdict(list)
    for row in rows:
        result = json.loads((sweep_dir / "runs" / row["run"] / "result.json").read_text())
        trace = np.asarray(result["simple_regret"]) / (result["sigma_f"] or 1.0)
        traces[(row["strategy"], row["epsilon"], row["r"])].append(trace)
    rs = sorted({r for (_, eps, r) in traces if eps is not None})
    paths = []
    for r in rs:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for (strategy, eps, rr), ts in sorted(traces.items(), key=lambda kv: (
                kv[0][0], kv[0][1] is None, kv[0][1] or 0)):
            if eps is not None and rr != r:
                continue
            m = np.mean(ts, axis=0)
            label = f"{strategy}, {_eps_label(eps)}" if len({k[0] for k in traces}) > 1 else _eps_label(eps)
            ax.plot(np.arange(1, len(m) + 1), m, label=label,
                    linestyle="--" if eps is None else "-")
        ax.set_xlabel("iteration t")
        ax.set_ylabel("simple regret / σ_f")
        ax.set_title(f"{rows[0]['scenario']}, r = {r}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"regret_r{r}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def write_report(rows: list[dict], out: Path | str, *, scenario: str, options: dict,
                 epsilons, rs, paper: dict | None = None, title: str = "") -> str:
    """runs.csv, table.md and the plots in `out`; returns the text to print."""
    out = Path(out)
    write_csv(rows, out / "runs.csv")
    table = markdown_table(rows, paper, title)
    text = table + "\n" + admissible_r(scenario, options, epsilons, rs) + "\n"
    (out / "table.md").write_text(text)
    plots = plot_regret(rows, out, out)
    text += (plots if isinstance(plots, str) else
             "plots: " + ", ".join(str(p) for p in plots)) + "\n"
    return text + f"csv: {out / 'runs.csv'}\ntable: {out / 'table.md'}\n"
