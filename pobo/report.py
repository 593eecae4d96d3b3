"""Sweep reports: a CSV of every run, paper-style markdown tables, and PNG plots."""
from __future__ import annotations

import csv
import re
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from pobo.parties.dataset import regret_scale
from pobo.parties.projection import largest_admissible_r, omega, singular_values
from pobo.headline import eps_label, eps_text, mean_se, strategy_label
from pobo.scenarios.registry import build_problem


def write_csv(rows: list[dict], path: Path) -> None:
    """One line per run, columns as in `scenarios.sweep.summarise`."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


METRICS = {"hits": ("hits", "hits (distinct positives found)"),
           "cumulative_regret": ("cumulative_regret", "R_T (cumulative regret)"),
           "simple_regret": ("simple_regret_sigma_y", "S_T / σ_y")}


def _num(value) -> str:
    return "—" if value is None else f"{value:.4g}"


def sigma_y_line(rows: list[dict]) -> str:
    """Which sigma_y the regret is divided by (one value, or the range over seeds)."""
    values = sorted({round(float(r["sigma_y"]), 6) for r in rows if r.get("sigma_y") is not None})
    if not values:
        return ""
    where = rows[0].get("sigma_y_source") or "?"
    shown = f"{values[0]:.4g}" if len(values) == 1 else f"{values[0]:.4g}–{values[-1]:.4g}"
    return f"σ_y = {shown} ({where}); S_T raw in the objective's own units beside it."


def markdown_table(rows: list[dict], paper: dict | None = None, title: str = "") -> str:
    """The scenario's metric (S_T/sigma_y with raw S_T beside it, hits or R_T) as mean +-
    standard error per strategy, beta scale, LDP epsilon, projection epsilon and r, the
    non-private release below, with the paper's S_T/sigma_y beside each r when given.
    "unlifted" counts the runs whose release was not lifted: under --lift paper that is
    sigma_min >= omega (the paper's guideline); under always/private a lifted release is
    the DP one."""
    kind = rows[0].get("metric", "simple_regret")
    metric, name = METRICS[kind]
    raw = kind == "simple_regret"
    cells: dict[tuple, list[float]] = defaultdict(list)
    raws: dict[tuple, list[float]] = defaultdict(list)
    lifted: dict[tuple, list[bool]] = defaultdict(list)
    # a sweep over releases (the frontier preset) gets a column naming each
    releases = len({r.get("lift") for r in rows if r["epsilon"] is not None}) > 1
    for row in rows:
        key = (strategy_label(row), row.get("lift") if releases else None,
               row.get("beta_scale"), row.get("ldp_epsilon"),
               row["epsilon"], row["r"] if row["epsilon"] is not None else None)
        cells[key].append(float(row[metric]))
        raws[key].append(float(row["simple_regret"]))
        lifted[key].append(bool(row["lifted"]))
    seeds = len({row["seed"] for row in rows})
    lines = [f"### {title}" if title else "", "",
             f"{name}, mean ± standard error over {seeds} seeds "
             f"(n = {rows[0]['n']}, T = {rows[0]['T']})",
             sigma_y_line(rows) if raw else "",
             "", "| strategy |" + (" release |" if releases else "")
             + " β scale | LDP ε | ε | r | " + name + " |"
             + (" S_T (raw) |" if raw else "") + " runs | unlifted |"
             + (" paper S_T / σ_y |" if paper else ""),
             "| --- |" + (" --- |" if releases else "") + " --- | --- | --- | --- | --- |"
             + (" --- |" if raw else "") + " --- | --- |"
             + (" --- |" if paper else "")]
    order = lambda kv: tuple((v is None, v or 0) if not isinstance(v, str) else (False, v)  # noqa: E731
                             for v in kv[0])
    for key, values in sorted(cells.items(), key=order):
        strategy, lift, scale, ldp, eps, r = key
        m, se = mean_se(values)
        ok = lifted[key]
        admissible = "—" if eps is None else ("yes" if not any(ok) else
                                              "no" if all(ok) else f"{ok.count(False)}/{len(ok)}")
        extra = f" {paper.get(r, '')} |" if paper else ""
        rm, rse = mean_se(raws[key])
        release = f" {lift or '—'} |" if releases else ""
        lines.append(f"| {strategy} |{release} {'default' if scale is None else _num(scale)} | "
                     f"{_num(ldp)} | {eps_text(eps)} | {r if r is not None else 'd'} | "
                     f"{m:.4f} ± {se:.4f} |" + (f" {rm:.4f} ± {rse:.4f} |" if raw else "")
                     + f" {len(values)} | {admissible} |{extra}")
    return "\n".join(line for i, line in enumerate(lines) if line or i in (1, 4)).strip() + "\n"


def frontier(rows: list[dict]) -> dict:
    """The privacy-utility frontier of a sweep over releases: {line: [(eps, mean, se)]}
    for GP-UCB under each release, and the random and non-private reference lines (their
    one value repeated at every epsilon). The metric is hits for a hits scenario, else
    S_T / sigma_y."""
    column, _ = METRICS["hits" if rows and rows[0].get("metric") == "hits" else "simple_regret"]
    epsilons = sorted({r["epsilon"] for r in rows if r["epsilon"] is not None})
    lines: dict[str, list] = {}
    for lift in sorted({r["lift"] for r in rows if r["policy"] == "private"}):
        lines[lift] = [(e, *mean_se([r[column] for r in rows if r["lift"] == lift
                                     and r["epsilon"] == e and r["strategy"] == "gp-ucb"
                                     and r["policy"] == "private"])) for e in epsilons]
    for name, pick in (("random", lambda r: r["strategy"] == "random"),
                       ("non-private", lambda r: r["policy"] == "non-private"
                        and r["strategy"] == "gp-ucb")):
        values = [r[column] for r in rows if pick(r)]
        if values:
            lines[name] = [(e, *mean_se(values)) for e in epsilons]
    return {k: [p for p in v if not math.isnan(p[1])] for k, v in lines.items()}


def frontier_table(rows: list[dict]) -> str:
    """The frontier as a markdown table: one row per epsilon, one column per line."""
    lines = frontier(rows)
    hits = rows[0].get("metric") == "hits"
    epsilons = sorted({e for points in lines.values() for e, _, _ in points})
    head = (f"### Privacy-utility frontier: {rows[0]['scenario']}, "
            f"{'hits (more is better)' if hits else 'S_T / σ_y (less is better)'}, mean ± se "
            f"over {len({r['seed'] for r in rows})} seeds, T = {rows[0]['T']}")
    names = list(lines)
    out = [head, "", "| eps | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for e in epsilons:
        cells = []
        for name in names:
            found = [(m, se) for x, m, se in lines[name] if x == e]
            cells.append(f"{found[0][0]:.3g} ± {found[0][1]:.2g}" if found else "—")
        out.append(f"| {e:.4g} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def frontier_risk(rows: list[dict]) -> dict:
    """The measured risk of a sweep's releases (the runs that kept one: `--risk` or the
    frontier preset): {release: [(eps, anchored mean, anchored sd, unanchored mean,
    unanchored sd)]} over seeds, each the mean over features of the share of rows
    recovered (pobo.risk), and the marginals' best guess as 'baseline'."""
    measured = [r for r in rows if r.get("risk_anchored") not in (None, "")
                and r["policy"] == "private"]
    out: dict[str, list] = {}
    seen: set = set()
    for lift in sorted({r["lift"] for r in measured}):
        points = []
        for e in sorted({r["epsilon"] for r in measured if r["lift"] == lift}):
            release = {}  # one value per seed: the random run shares gp-ucb's release
            for r in measured:
                if r["lift"] == lift and r["epsilon"] == e:
                    release[r["seed"]] = (float(r["risk_anchored"]),
                                          float(r["risk_unanchored"]))
                    seen.add((r["seed"], float(r["risk_baseline"])))
            a = [v[0] for v in release.values()]
            b = [v[1] for v in release.values()]
            points.append((e, float(np.mean(a)), float(np.std(a)), float(np.mean(b)),
                           float(np.std(b))))
        out[lift] = points
    if seen:
        out["baseline"] = float(np.mean([b for _, b in seen]))
    return out


def frontier_risk_table(rows: list[dict]) -> str:
    """The measured risk beside the frontier: one row per epsilon, one column per
    release, "k known rows / none known" as percentages (mean ± sd over seeds)."""
    risk = frontier_risk(rows)
    if not risk:
        return ""
    k = next(int(r["risk_anchors"]) for r in rows if r.get("risk_anchors") not in (None, ""))
    lifts = [name for name in risk if name != "baseline"]
    epsilons = sorted({e for name in lifts for e, *_ in risk[name]})
    out = [f"### Measured risk: {rows[0]['scenario']}, share of feature values a modeler "
           f"recovers (mean over features), with {k} known rows / with none; the public "
           f"marginals' best guess gets {100 * risk['baseline']:.0f}% (mean ± sd over "
           f"{len({r['seed'] for r in rows})} seeds)", "",
           "| eps | " + " | ".join(lifts) + " |", "|---" * (len(lifts) + 1) + "|"]
    for e in epsilons:
        cells = []
        for name in lifts:
            found = [p for p in risk[name] if p[0] == e]
            cells.append("—" if not found else
                         f"{100 * found[0][1]:.0f}% ± {100 * found[0][2]:.1f} / "
                         f"{100 * found[0][3]:.0f}% ± {100 * found[0][4]:.1f}")
        out.append(f"| {e:.4g} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def admissible_r(scenario: str, options: dict, epsilons, rs, seed: int = 0) -> str:
    """The dataset's sigma_min, sigma_y and, for each epsilon, the largest r with
    sigma_min >= omega (the paper's guideline) and which swept r satisfy it. For a
    real dataset (`--data`) these are properties of the file, the same for every seed."""
    problem = build_problem(scenario, seed, **options)
    sigma_min = float(singular_values(problem.X)[-1])
    sigma_y, where = regret_scale(problem)
    fixed = options.get("data") is not None or scenario in FIXED_INPUTS
    lines = [f"{scenario}: n = {problem.X.shape[0]}, d = {problem.X.shape[1]}, "
             f"sigma_min(X) = {sigma_min:.4g}, sigma_y = {sigma_y:.4g} ({where}); "
             + ("prepared once, the same for every seed" if fixed
                else f"seed {seed}'s dataset (this scenario draws its data from the seed)")]
    for eps in epsilons:
        if eps is None:
            continue
        delta = problem.delta
        ok = [r for r in rs if r is not None and omega(r, eps, delta) <= sigma_min]
        lines.append(f"  eps = {eps:.4g} (delta = {delta:g}): largest admissible r = "
                     f"{largest_admissible_r(sigma_min, eps, delta)}; sigma_min >= omega for "
                     f"swept r in {ok if ok else 'none'}; omega = "
                     + ", ".join(f"{omega(r, eps, delta):.4g} (r={r})" for r in rs if r))
    return "\n".join(lines)


FIXED_INPUTS = frozenset({"synthetic", "branin", "ldp-synthetic", "tuning"})  # X is a fixed grid


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def plot_regret(rows: list[dict], out: Path, sweep_dir: Path) -> list[Path] | str:
    """PNG plots like the paper's Fig. 2: mean S_t/sigma_y against t, one curve per
    epsilon (non-private included), one figure per r (hits against queries for a hits
    scenario); or a message without matplotlib."""
    plt = _plt()
    if plt is None:
        return "matplotlib is not installed: no plots (pip install 'pobo[plot]')"
    if rows[0].get("metric") == "hits":
        return plot_hits(rows, out, sweep_dir, plt)
    traces: dict[tuple, list[np.ndarray]] = defaultdict(list)
    for row in rows:
        result = json.loads((sweep_dir / "runs" / row["run"] / "result.json").read_text())
        scale = result.get("sigma_y") or result["sigma_f"] or 1.0
        trace = np.asarray(result["simple_regret"]) / scale
        traces[(strategy_label(row), row["epsilon"], row["r"])].append(trace)
    rs = sorted({r for (_, eps, r) in traces if eps is not None})
    paths = []
    for r in rs:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for (strategy, eps, rr), ts in sorted(traces.items(), key=lambda kv: (
                kv[0][0], kv[0][1] is None, kv[0][1] or 0)):
            if eps is not None and rr != r:
                continue
            m = np.mean(ts, axis=0)
            label = f"{strategy}, {eps_label(eps)}" if len({k[0] for k in traces}) > 1 else eps_label(eps)
            ax.plot(np.arange(1, len(m) + 1), m, label=label,
                    linestyle="--" if eps is None else "-")
        ax.set_xlabel("iteration t")
        ax.set_ylabel("simple regret / σ_y")
        ax.set_title(f"{rows[0]['scenario']}, r = {r}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"regret_r{r}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_hits(rows: list[dict], out: Path, sweep_dir: Path, plt) -> list[Path]:
    """hits.png: mean distinct positives found against queries per strategy and release,
    with random selection's expectation t x (positive rate) as a dotted line."""
    traces: dict[tuple, list[np.ndarray]] = defaultdict(list)
    rate = None
    for row in rows:
        result = json.loads((sweep_dir / "runs" / row["run"] / "result.json").read_text())
        traces[(strategy_label(row), row["epsilon"], row["r"])].append(np.asarray(result["hits"]))
        rate = result["random_hits_expected"] / max(1, len(result["hits"]))  # per query made
    fig, ax = plt.subplots(figsize=(5, 3.6))
    T = 0
    for (strategy, eps, r), ts in sorted(traces.items(), key=lambda kv: (
            kv[0][0], kv[0][1] is None, kv[0][1] or 0)):
        m = np.mean(ts, axis=0)
        T = max(T, len(m))
        ax.plot(np.arange(1, len(m) + 1), m, label=f"{strategy}, {eps_label(eps)}"
                + ("" if eps is None else f", r = {r}"), linestyle="--" if eps is None else "-")
    t = np.arange(1, T + 1)
    ax.plot(t, rate * t, ":", color="grey", label="random (expected)")
    ax.set_xlabel("queries t")
    ax.set_ylabel("distinct positives found")
    ax.set_title(f"{rows[0]['scenario']}: hits against queries")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "hits.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def dp_notice(rows: list[dict]) -> str:
    """A line saying how many of the sweep's runs carry no DP claim, and why (empty when
    every one does): the paper's presets run its own release, which is not DP, and a
    table of their regret must not read as a private result."""
    if not rows or "dp" not in rows[0]:
        return ""  # a runs.csv from before the column
    without = [r for r in rows if str(r.get("dp")) not in ("True", "true", "1")]
    if not without:
        return ""
    reasons = sorted({re.sub(r" \(seed -?\d+\)", "", why)  # one reason, not one per seed
                      for r in without for why in str(r.get("not_dp") or "").split("; ")
                      if why})
    return (f"**No DP guarantee:** {len(without)} of {len(rows)} runs carry no differential-"
            "privacy claim" + (f" ({'; '.join(reasons)})" if reasons else "") + ".")


def write_report(rows: list[dict], out: Path | str, *, scenario: str, options: dict,
                 epsilons, rs, paper: dict | None = None, title: str = "",
                 dataset: str | None = None) -> str:
    """runs.csv, table.md (with the dataset's sigma_min, sigma_y and admissible r, from
    `dataset` if already computed) and the plots in `out`; returns the text to print
    (without the dataset lines when they were passed in: printed once, before)."""
    out = Path(out)
    write_csv(rows, out / "runs.csv")
    table = markdown_table(rows, paper, title)
    notice = dp_notice(rows)
    if notice:
        table = notice + "\n" + table
    risk = frontier_risk_table(rows)
    if len({r["lift"] for r in rows if r["policy"] == "private"}) > 1 or risk:
        table += "\n" + frontier_table(rows)  # utility beside the risk: the two axes
    if risk:
        table += "\n" + risk
    about = dataset if dataset is not None else admissible_r(scenario, options, epsilons, rs)
    (out / "table.md").write_text(table + "\n" + about + "\n")
    text = table + "\n" + ("" if dataset is not None else about + "\n")
    plots = plot_regret(rows, out, out)
    text += (plots if isinstance(plots, str) else
             "plots: " + ", ".join(str(p) for p in plots)) + "\n"
    return text + f"csv: {out / 'runs.csv'}\ntable: {out / 'table.md'}\n"
