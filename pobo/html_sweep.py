"""`pobo report` on a sweep folder: its runs.csv read back, the answer (best private
setting against random and non-private), the frontier and risk charts, one chart with every
curve, the table beside the paper's preset, and the parameters."""
from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from pobo.scenarios.presets import PRESETS, Preset
from pobo.headline import (
    eps_text, setting_label, setting_of, strategy_label, sweep_headline, sweep_spent,
    sweep_spent_text, varied_fields,
)
from pobo.html_chart import COLOURS, DASHES, Curve, svg_chart
from pobo.html_page import ReportError, _e, _page, _table, _value, _where, load_json
from pobo.html_run import privacy_html
from pobo.report import (
    dp_notice, frontier, frontier_risk, frontier_risk_table, markdown_table,
    regret_column,
)


_STRING_COLUMNS = frozenset({"run", "scenario", "strategy", "metric", "policy", "lift",
                             "sigma_y_source"})


def read_rows(path: Path) -> list[dict]:
    """The rows of a sweep's runs.csv with their types back (None, bool, int, float)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = [{k: _cell(k, v) for k, v in row.items()} for row in csv.DictReader(fh)]
    except (OSError, csv.Error) as exc:
        raise ReportError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
    needed = {"run", "scenario", "strategy", "epsilon", "r", "seed", "T", "n", "lifted",
              "simple_regret"}
    if not rows or not needed <= set(rows[0]):
        raise ReportError(f"{path} is not a sweep's runs.csv (no rows, or a column of "
                          f"{sorted(needed)} missing)")
    return rows


def _cell(column: str, text: str | None) -> object:
    if text is None or text == "":
        return None
    if column in _STRING_COLUMNS:
        return text
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def paper_preset(rows: list[dict], title: str | None) -> Preset | None:
    """The preset whose numbers the table sits beside: the one table.md is titled by, else
    a table preset of the same scenario, T and epsilons."""
    for preset in PRESETS.values():
        if title and preset.caption == title:
            return preset
    eps = sorted({float(r["epsilon"]) for r in rows if r["epsilon"] is not None})
    for preset in PRESETS.values():
        if (preset.paper and preset.scenario == rows[0]["scenario"]
                and preset.T == rows[0]["T"] and len(eps) == len(preset.epsilons)
                and all(math.isclose(a, b, rel_tol=1e-6)
                        for a, b in zip(eps, sorted(preset.epsilons)))):
            return preset
    return None


def sweep_report_html(folder: Path) -> str:
    """The page about one sweep folder (runs.csv, table.md, runs/RUN/result.json)."""
    rows = read_rows(folder / "runs.csv")
    table_md = folder / "table.md"
    md = table_md.read_text(encoding="utf-8") if table_md.is_file() else ""
    first = next((line for line in md.splitlines() if line.startswith("### ")), "")
    title = first[4:].strip() if first else None  # after a "No DP guarantee" line, say
    preset = paper_preset(rows, title)
    title = title or (preset.caption if preset else f"{rows[0]['scenario']} sweep")
    table = markdown_table(rows, preset.paper if preset else None, "")
    dataset = md.split("\n\n")[-1].strip() if md else ""
    results, missing = sweep_results(folder, rows)
    body = [f"<h1>pobo sweep: {_e(title)}</h1>", _where(folder),
            "<section id='result'>", "<h2>Result</h2>",
            *([f"<p class='verdict bad'>{_e(dp_notice(rows).replace('**', ''))}</p>"]
              if dp_notice(rows) else []),
            sweep_result_html(rows, results), "</section>"]
    measured = frontier_risk(rows)
    if len({r.get("lift") for r in rows if r.get("policy") == "private"}) > 1 or measured:
        body += ["<h2 id='frontier'>Privacy-utility frontier</h2>", frontier_chart(rows)]
    if measured:
        body += ["<h2 id='frontier-risk'>Measured risk against ε</h2>", risk_chart(rows),
                 markdown_html(frontier_risk_table(rows))]
    body += ["<h2 id='regret'>Curves</h2>", sweep_figure(rows, results, missing),
             "<h2 id='table'>Table</h2>",
             ("<p>The paper's column: preset " + _e(preset.name) + " (" + _e(preset.caption)
              + ").</p>") if preset and preset.paper else
             "<p>No preset of the paper matches this sweep: no paper column.</p>",
             markdown_html(table),
             "<h2 id='parameters'>Parameters</h2>",
             _table(("parameter", "value"), sweep_parameters(rows))]
    if dataset and not dataset.startswith("|"):
        body += ["<h3>The dataset</h3>", f"<pre>{_e(dataset)}</pre>"]
    return _page(f"pobo sweep: {title}", body)


def sweep_results(folder: Path, rows: list[dict]) -> tuple[dict[str, dict], int]:
    """Each row's runs/RUN/result.json by run name, and how many are missing or unreadable
    (left out of the curves and the privacy statement, and said so)."""
    results, missing = {}, 0
    for row in rows:
        try:
            results[str(row["run"])] = load_json(folder / "runs" / str(row["run"])
                                                 / "result.json")
        except ReportError:
            missing += 1
    return results, missing


def sweep_result_html(rows: list[dict], results: dict[str, dict]) -> str:
    """A sweep's answer first: the best private setting against random selection and the
    non-private baseline; then the privacy statement of that setting's runs."""
    head = sweep_headline(rows)
    lines = [("best private setting", head["best_private"]),
             ("random selection", head["random"]), ("non-private", head["non_private"])]
    table = _table(("", "setting", f"{head['metric']}, mean ± se", "runs"),
                   [(what, item["setting"], f"{item['mean']:.4g} ± {item['se']:.2g}",
                     item["runs"]) for what, item in lines if item is not None])
    parts = [f"<p class='answer'>{_e(head['text'])}</p>", table,
             f"<p>{'More' if head['higher_is_better'] else 'Less'} is better; "
             f"{head['runs']} runs over {head['seeds']} seed(s). The best private setting "
             f"is the best mean of {head['private_settings']}: an optimistic pick when the "
             "seeds are few (compare its standard error).</p>"]
    spent = sweep_spent_text(sweep_spent(r.get("ledger") for r in results.values()))
    best = head["best_private"]
    example = next((results[str(r["run"])] for r in rows if best is not None
                    and setting_of(r) == best["key"] and str(r["run"]) in results), None)
    if example is not None:
        parts += [f"<h3>Privacy of the best private setting ({_e(best['setting'])})</h3>",
                  privacy_html(example.get("privacy_unit"), None, spent_line=spent)]
    else:
        parts += ["<h3>Privacy</h3>", f"<p class='spent'>Ledger: {_e(spent)}</p>"]
    return "\n".join(parts)


def frontier_chart(rows: list[dict]) -> str:
    """One chart: the metric against epsilon (in order) for each release, random and
    non-private dashed."""
    lines = frontier(rows)
    epsilons = sorted({e for points in lines.values() for e, _, _ in points})
    curves = [Curve(name, tuple(m for _, m, _ in points),
                    "6 4" if name in ("random", "non-private") else None)
              for name, points in lines.items()]
    hits = rows[0].get("metric") == "hits"
    return svg_chart(curves, title="the metric against ε, per release", ident="frontier",
                     xlabel="ε (in order, not to scale)", xnames=[eps_text(e) for e in epsilons],
                     ylabel="hits (more is better)" if hits
                     else f"{regret_column(rows)[1]} (less is better)")


def risk_chart(rows: list[dict]) -> str:
    """The measured risk against epsilon (in order): per release, the mean share of
    feature values recovered with k known rows (solid) and with none (dashed), and the
    marginals' best guess (dotted)."""
    risk = frontier_risk(rows)
    lifts = [name for name in risk if name != "baseline"]
    epsilons = sorted({e for name in lifts for e, *_ in risk[name]})
    curves = []
    for i, name in enumerate(lifts):
        by_eps = {p[0]: p for p in risk[name]}
        colour = COLOURS[i % len(COLOURS)]
        curves.append(Curve(f"{name}: known rows", tuple(
            100 * by_eps[e][1] if e in by_eps else math.nan for e in epsilons), None, colour))
        curves.append(Curve(f"{name}: none known", tuple(
            100 * by_eps[e][3] if e in by_eps else math.nan for e in epsilons), "6 4", colour))
    curves.append(Curve("marginals' best guess", tuple(100 * risk["baseline"]
                                                       for _ in epsilons), "2 4", COLOURS[8]))
    return svg_chart(curves, title="feature values recovered against ε, per release",
                     ident="fig-frontier-risk", xlabel="ε (in order, not to scale)",
                     xnames=[eps_text(e) for e in epsilons],
                     ylabel="rows recovered, mean over features (%)")


def sweep_parameters(rows: list[dict]) -> list[tuple[str, object]]:
    """What a sweep varied and held fixed, from its rows."""
    def values(key: str) -> str:
        seen = sorted({r.get(key) for r in rows}, key=_order)
        return ", ".join("—" if v is None else _value(v) for v in seen)
    return [("scenario", values("scenario")), ("n", values("n")), ("d", values("d")),
            ("T", values("T")), ("runs", len(rows)), ("seeds", len({r["seed"] for r in rows})),
            ("strategies", ", ".join(sorted({strategy_label(r) for r in rows}))),
            ("ε", ", ".join(eps_text(e) for e in sorted({r["epsilon"] for r in rows},
                                                         key=_order))),
            ("r", values("r")), ("LDP ε", values("ldp_epsilon")),
            ("β scale", values("beta_scale")), ("lift", values("lift")),
            ("metric", values("metric"))]


def markdown_html(markdown: str) -> str:
    """markdown_table's text as HTML: headings, paragraphs and one table (escaped)."""
    out, table = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                table.append(cells)
            continue
        if table:
            out.append(_table(table[0], table[1:]))
            table = []
        if line.startswith("### "):
            out.append(f"<h3>{_e(line[4:])}</h3>")
        elif line.strip():
            out.append(f"<p>{_e(line)}</p>")
    return "\n".join(out)


def sweep_figure(rows: list[dict], results: dict[str, dict], missing: int = 0) -> str:
    """One chart with every curve: each setting's mean over seeds of simple regret / sigma_y
    (hits for a hits scenario, with random selection's expectation) against t, the
    non-private ones dashed."""
    traces: dict[tuple, list[list[float]]] = defaultdict(list)
    rate = None
    hits = rows[0].get("metric") == "hits"
    for row in rows:
        result = results.get(str(row["run"]))
        if result is None:
            continue
        if hits and result.get("hits") is not None:
            traces[setting_of(row)].append([float(h) for h in result["hits"]])
            rate = float(result["random_hits_expected"]) / max(1, len(result["hits"]))
        elif not hits and result.get("simple_regret") is not None:
            scale = float(result.get("sigma_y") or result.get("sigma_f") or 1.0)
            traces[setting_of(row)].append([float(v) / scale for v in result["simple_regret"]])
    note = (f"<p class='note'>{missing} run(s) have no readable result.json under runs/: "
            "left out of the curves.</p>") if missing else ""
    if not traces:
        return note + "<p class='no-figure'>No curves: no run recorded a trace.</p>"
    varied = varied_fields(traces)
    order = sorted(traces, key=lambda k: tuple(_order(v) for v in k))
    curves = [Curve(setting_label(k, varied), tuple(mean_trace(traces[k])),
                    DASHES[i // len(COLOURS) % len(DASHES)], COLOURS[i % len(COLOURS)])
              for i, k in enumerate(order)]
    seeds = len({r["seed"] for r in rows})
    if hits:
        if rate is not None:
            T = max(len(c.ys) for c in curves)
            curves.append(Curve("random (expected)", tuple(rate * t for t in range(1, T + 1)),
                                "2 4", COLOURS[8]))
        return note + svg_chart(curves, title=f"hits against queries, mean of {seeds} seeds",
                                xlabel="queries t", ylabel="distinct positives found",
                                ident="fig-hits")
    return note + svg_chart(curves, title=f"simple regret, mean of {seeds} seeds",
                            xlabel="iteration t", ylabel="simple regret / σ_y",
                            ident="fig-regret")


def _order(v: object) -> tuple:
    """A sort key for mixed cells: numbers by value, then strings, None last."""
    if v is None:
        return (2, 0.0, "")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, float(v), "")
    return (1, 0.0, str(v))


def mean_trace(traces: list[list[float]]) -> list[float]:
    """The mean over runs at each t, as far as the shortest run goes."""
    length = min(len(t) for t in traces)
    return np.mean([t[:length] for t in traces], axis=0).tolist()
