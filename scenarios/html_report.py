"""`pobo report DIR`: one self-contained HTML page about a run folder or a sweep folder.

A run folder (result.json): its parameters, privacy ledger and privacy unit, the audit
of its two transcripts (signatures verified against keys/ when it is there) and its
regret curve. A sweep folder (runs.csv, runs/RUN/result.json): the table as table.md
has it, with the paper's column where a preset reports one, and one regret-against-t
chart per r with every strategy and the non-private baseline. Figures are inline SVG
drawn here from the numbers: the page loads nothing, from the network or from disk.
A short inline script measures the figures on load and writes what it found (and any
script error) into the hidden element #pobo-selfcheck, for a headless browser to read.
"""
from __future__ import annotations

import csv
import html
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pobo.protocol.errors import PoboError
from pobo.protocol.ledger import describe_ledger
from pobo.scenarios.auditing import audit_files, signing_keys
from pobo.scenarios.presets import PRESETS, Preset
from pobo.scenarios.report import _eps_label, frontier, markdown_table, strategy_label

REPORT_NAME = "report.html"
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
_STRING_COLUMNS = frozenset({"run", "scenario", "strategy", "metric", "policy", "lift",
                             "sigma_y_source"})


class ReportError(ValueError):
    """A folder that is neither a run nor a sweep, or a result in it that cannot be read."""


@dataclass(frozen=True)
class Curve:
    """One line of a chart: y against t = 1, 2, ... (dash: an SVG stroke-dasharray)."""

    label: str
    ys: tuple[float, ...]
    dash: str | None = None
    colour: str | None = None


def write_html_report(folder: Path | str, out: Path | str | None = None) -> Path:
    """Write the HTML report of a run or sweep folder to `out` (default FOLDER/report.html)
    and return its path; ReportError for a folder that is neither."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"no folder at {folder}")
    if (folder / "result.json").is_file():
        page = run_report_html(folder)
    elif (folder / "runs.csv").is_file():
        page = sweep_report_html(folder)
    else:
        raise ReportError(f"{folder} is neither a run folder (result.json) nor a sweep "
                          "folder (runs.csv)")
    path = Path(out) if out is not None else folder / REPORT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


# --- a run ---------------------------------------------------------------------------

RUN_PARAMETERS = (
    ("scenario", "scenario"), ("status", "status"), ("end_reason", "end reason"),
    ("n", "n (rows)"), ("d", "d (columns)"), ("r", "r (projection dimension)"), ("T", "T"),
    ("policy", "policy"), ("epsilon", "ε"), ("delta", "δ"), ("lift", "lift"),
    ("lifted", "lifted"), ("sigma_min", "σ_min(X)"), ("omega", "ω"),
    ("ldp_epsilon", "LDP ε (rewards)"), ("seed", "seed"), ("randomness", "randomness"),
    ("batch", "batch"), ("objective", "objective"), ("metric", "metric"),
    ("source", "data source"), ("security", "transport security"),
    ("signatures", "signatures"), ("session", "session"), ("seconds", "seconds"),
)


def load_json(path: Path) -> dict:
    """A JSON object from `path`; ReportError (one line) when it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} does not hold a JSON object")
    return data


def run_report_html(folder: Path) -> str:
    """The page about one run folder (result.json, transcripts, keys/)."""
    result = load_json(folder / "result.json")
    modeler = result.get("modeler") if isinstance(result.get("modeler"), dict) else {}
    params = [(label, result[key]) for key, label in RUN_PARAMETERS if key in result]
    params[1:1] = [("strategy", modeler.get("strategy")), ("β scale", modeler.get("beta_scale"))]
    if isinstance(result.get("kernel"), dict):
        params.append(("kernel", ", ".join(f"{k} = {_value(v)}"
                                           for k, v in result["kernel"].items())))
    body = [f"<h1>pobo run: {_e(result.get('scenario', '?'))}</h1>",
            f"<p class='where'>{_e(folder.resolve())}</p>",
            "<h2 id='parameters'>Parameters</h2>", _table(("parameter", "value"), params),
            "<h2 id='ledger'>Privacy ledger</h2>", _ledger_html(result.get("ledger")),
            "<h2 id='privacy-unit'>Privacy unit</h2>", _unit_html(result.get("privacy_unit")),
            "<h2 id='audit'>Audit</h2>", audit_html(folder),
            "<h2 id='regret'>Regret</h2>", _run_figure(result)]
    return _page(f"pobo run: {result.get('scenario', '?')}", body)


def _ledger_html(ledger: object) -> str:
    if not isinstance(ledger, dict):
        return "<p>No ledger recorded in result.json.</p>"
    try:
        text = describe_ledger(ledger)
    except (KeyError, TypeError, ValueError) as exc:
        return f"<p>The recorded ledger cannot be read ({_e(type(exc).__name__)}).</p>"
    return f"<pre class='ledger'>{_e(text)}</pre>"


def _unit_html(unit: object) -> str:
    if not isinstance(unit, dict):
        return "<p>No privacy unit recorded in result.json.</p>"
    parts = []
    if isinstance(unit.get("epsilon_by_distance"), list):
        dataset = unit.get("dataset") or {}
        parts.append(f"<p class='claim'>{_e(dataset.get('claim', ''))}</p>")
        rows = [(f"{item.get('distance', 0):.3g}", item.get("what", ""),
                 "no bound" if item.get("epsilon") is None else f"{item['epsilon']:.3g}")
                for item in unit["epsilon_by_distance"]]
        parts.append(_table(("move (preprocessed units)", "what it is",
                             f"epsilon at delta {dataset.get('delta', 0):.3g}"), rows))
    for name, mechanism in unit.items():
        if name in ("not_covered", "epsilon_by_distance", "epsilon_whole_row"):
            continue
        rows = (list(mechanism.items()) if isinstance(mechanism, dict)
                else [("", mechanism)])
        parts += [f"<h3>{_e(name)}</h3>", _table(("", ""), rows, head=False)]
    parts.append("<h3>Not covered</h3><ul>"
                 + "".join(f"<li>{_e(item)}</li>" for item in unit.get("not_covered", []))
                 + "</ul>")
    return "\n".join(parts)


def audit_html(folder: Path) -> str:
    """The verdict of `pobo audit` on the folder's two transcripts (with keys/ if there)."""
    transcripts = [folder / "curator.transcript", folder / "modeler.transcript"]
    present = [p for p in transcripts if p.is_file()]
    if not present:
        return ("<p class='verdict none'>Not audited: no transcripts in this folder (a sweep "
                "keeps them only with --transcripts).</p>")
    keys_dir = folder / "keys"
    try:
        keys = (signing_keys(keys_dir=keys_dir)
                if (keys_dir / "curator.sign_public").is_file()
                and (keys_dir / "modeler.sign_public").is_file() else None)
        reports = audit_files(present, keys=keys)
    except (PoboError, ValueError, OSError) as exc:
        return (f"<p class='verdict bad'>The audit could not run: {_e(type(exc).__name__)}: "
                f"{_e(exc)}</p>")
    ok = all(r.ok for r in reports)
    lines = [f"<p class='verdict {'ok' if ok else 'bad'}'>"
             f"{'OK' if ok else 'VIOLATIONS'}: {len(reports)} transcript(s) audited"
             + ("" if keys else "; no keys/ folder, so signatures were not verified") + "</p>"]
    for r in reports:
        lines.append(f"<h3>{_e(r.role)} transcript</h3>"
                     + _table(("", ""), [("file", Path(r.path).name), ("records", r.records),
                                         ("session", r.session), ("complete", r.complete),
                                         ("signatures", r.signatures),
                                         ("verdict", "OK" if r.ok else "VIOLATIONS")],
                              head=False))
        lines += [f"<p class='violation'>violation: {_e(v)}</p>" for v in r.violations]
        lines += [f"<p class='note'>note: {_e(n)}</p>" for n in r.notes]
    return "\n".join(lines)


def _run_figure(result: dict) -> str:
    T = result.get("T")
    if result.get("metric") == "hits" and result.get("hits") is not None:
        hits = [float(h) for h in result["hits"]]
        curves = [Curve("this run", tuple(hits))]
        if result.get("random_hits_expected") is not None and T:
            rate = float(result["random_hits_expected"]) / float(T)
            curves.append(Curve("random (expected)",
                                tuple(rate * t for t in range(1, len(hits) + 1)), "2 4",
                                COLOURS[8]))
        return svg_chart(curves, title="distinct positives found", xlabel="queries t",
                         ylabel="hits", ident="fig-hits")
    if result.get("simple_regret") is None:
        why = result.get("objective") or "not tabulated"
        return (f"<p class='no-figure'>No regret curve: f was evaluated on demand ({_e(why)}), "
                "so it is known only at the queried rows.</p>")
    simple = [float(v) for v in result["simple_regret"]]
    sigma_y = result.get("sigma_y")
    if sigma_y:
        ys, ylabel = [v / float(sigma_y) for v in simple], "simple regret / σ_y"
        note = (f"σ_y = {float(sigma_y):.4g} ({result.get('sigma_y_source') or '?'}); final "
                f"simple regret {simple[-1]:.4g} raw, {simple[-1] / float(sigma_y):.4g} σ_y.")
    else:
        ys, ylabel = simple, "simple regret (raw)"
        note = f"No σ_y recorded: raw units; final simple regret {simple[-1]:.4g}."
    label = _eps_label(result.get("epsilon")) + (f", r = {result['r']}"
                                                 if result.get("epsilon") is not None else "")
    return (svg_chart([Curve(label, tuple(ys))], title="simple regret against iterations",
                      xlabel="iteration t", ylabel=ylabel, ident="fig-regret")
            + f"<p>{_e(note)}</p>")


# --- a sweep -------------------------------------------------------------------------

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
    first = md.splitlines()[0] if md else ""
    title = first[4:].strip() if first.startswith("### ") else None
    preset = paper_preset(rows, title)
    title = title or (preset.caption if preset else f"{rows[0]['scenario']} sweep")
    table = markdown_table(rows, preset.paper if preset else None, "")
    dataset = md.split("\n\n")[-1].strip() if md else ""
    body = [f"<h1>pobo sweep: {_e(title)}</h1>", f"<p class='where'>{_e(folder.resolve())}</p>",
            "<h2 id='parameters'>Parameters</h2>", _table(("parameter", "value"),
                                                          sweep_parameters(rows)),
            "<h2 id='table'>Table</h2>",
            ("<p>The paper's column: preset " + _e(preset.name) + " (" + _e(preset.caption)
             + ").</p>") if preset and preset.paper else
            "<p>No preset of the paper matches this sweep: no paper column.</p>",
            markdown_html(table)]
    if dataset and not dataset.startswith("|"):
        body += ["<h3>The dataset</h3>", f"<pre>{_e(dataset)}</pre>"]
    if len({r.get("lift") for r in rows if r.get("policy") == "private"}) > 1:
        body += ["<h2 id='frontier'>Privacy-utility frontier</h2>", frontier_chart(rows)]
    body += ["<h2 id='regret'>Regret curves</h2>", sweep_figures(folder, rows)]
    return _page(f"pobo sweep: {title}", body)


def frontier_chart(rows: list[dict]) -> str:
    """One chart: the metric against epsilon (in order) for each release, random and
    non-private dashed."""
    lines = frontier(rows)
    epsilons = sorted({e for points in lines.values() for e, _, _ in points})
    curves = [Curve(name, tuple(m for _, m, _ in points),
                    "6 4" if name in ("random", "non-private") else None)
              for name, points in lines.items()]
    hits = rows[0].get("metric") == "hits"
    return svg_chart(curves, title="the metric against epsilon, per release", ident="frontier",
                     xlabel="epsilon, in order: " + ", ".join(f"{e:.3g}" for e in epsilons),
                     ylabel="hits" if hits else "S_T / σ_y")


def sweep_parameters(rows: list[dict]) -> list[tuple[str, object]]:
    """What a sweep varied and held fixed, from its rows."""
    def values(key: str) -> str:
        seen = sorted({r.get(key) for r in rows}, key=_order)
        return ", ".join("—" if v is None else _value(v) for v in seen)
    return [("scenario", values("scenario")), ("n", values("n")), ("d", values("d")),
            ("T", values("T")), ("runs", len(rows)), ("seeds", len({r["seed"] for r in rows})),
            ("strategies", ", ".join(sorted({strategy_label(r) for r in rows}))),
            ("ε", ", ".join(sorted({_eps_label(r["epsilon"]) for r in rows}))),
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


def sweep_figures(folder: Path, rows: list[dict]) -> str:
    """One chart per r (every strategy at that r and the non-private runs), mean over seeds;
    for a hits scenario one chart with random selection's expectation."""
    traces: dict[tuple, list[list[float]]] = defaultdict(list)
    rate, missing = None, 0
    hits = rows[0].get("metric") == "hits"
    for row in rows:
        path = folder / "runs" / str(row["run"]) / "result.json"
        if not path.is_file():
            missing += 1
            continue
        result = load_json(path)
        key = (strategy_label(row), row.get("beta_scale"), row.get("ldp_epsilon"),
               row["epsilon"], row["r"] if row["epsilon"] is not None else None)
        if hits and result.get("hits") is not None:
            traces[key].append([float(h) for h in result["hits"]])
            rate = float(result["random_hits_expected"]) / float(result["T"])
        elif not hits and result.get("simple_regret") is not None:
            scale = float(result.get("sigma_y") or result.get("sigma_f") or 1.0)
            traces[key].append([float(v) / scale for v in result["simple_regret"]])
    note = (f"<p class='note'>{missing} run(s) have no result.json under runs/: left out of "
            "the curves.</p>") if missing else ""
    if not traces:
        return note + "<p class='no-figure'>No curves: no run recorded a trace.</p>"
    varied = [len({k[i] for k in traces}) > 1 for i in range(3)]

    def label(key: tuple) -> str:
        strategy, scale, ldp, eps, r = key
        bits = [strategy] if varied[0] else []
        bits += [f"β scale {_value(scale)}"] if varied[1] else []
        bits += [f"LDP ε {_value(ldp)}"] if varied[2] else []
        return ", ".join(bits + [_eps_label(eps)])

    order = sorted(traces, key=lambda k: tuple(_order(v) for v in k))
    colours = {k: COLOURS[i % len(COLOURS)] for i, k in enumerate(order)}
    def curve(key: tuple) -> Curve:
        return Curve(label(key) + ("" if not hits or key[3] is None else f", r = {key[4]}"),
                     tuple(mean_trace(traces[key])), None if key[3] is not None else "7 4",
                     colours[key])
    seeds = len({r["seed"] for r in rows})
    if hits:
        curves = [curve(k) for k in order]
        T = max(len(c.ys) for c in curves)
        if rate is not None:
            curves.append(Curve("random (expected)", tuple(rate * t for t in range(1, T + 1)),
                                "2 4", COLOURS[8]))
        return note + svg_chart(curves, title=f"hits against queries, mean of {seeds} seeds",
                                xlabel="queries t", ylabel="distinct positives found",
                                ident="fig-hits")
    rs = sorted({k[4] for k in order if k[3] is not None}, key=_order) or [None]
    charts = []
    for r in rs:
        keys = [k for k in order if k[3] is None or k[4] == r]
        charts.append(svg_chart([curve(k) for k in keys],
                                title=(f"r = {r}: " if r is not None else "")
                                + f"simple regret, mean of {seeds} seeds",
                                xlabel="iteration t", ylabel="simple regret / σ_y",
                                ident=f"fig-regret-r{r}"))
    return note + "\n".join(charts)


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


# --- figures -------------------------------------------------------------------------

def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (about `count` of them)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(low / step) * step
    # as many ticks as cover [low, high], counted up front: a loop until one reached
    # `high` never ended when rounding made every tick 0 (a curve of values ~1e-20)
    n = max(2, math.ceil((high - start) / step - 1e-9) + 1)
    digits = max(0, 2 - math.floor(math.log10(step)))  # enough for the step's digits
    return [round(start + k * step, digits) for k in range(n)]


def svg_chart(curves: list[Curve], *, title: str, xlabel: str, ylabel: str,
              ident: str = "fig", width: int = 640, height: int = 340) -> str:
    """An inline SVG line chart: axes with ticks and labels, one polyline per curve, and
    a legend below the plot."""
    curves = [c for c in curves if c.ys]
    left, right, top, bottom = 64, 16, 28, 44
    legend_h = 18 * len(curves) + 8
    full_h = height + legend_h
    pw, ph = width - left - right, height - top - bottom
    finite = [y for c in curves for y in c.ys if math.isfinite(y)] or [0.0, 1.0]
    yt = nice_ticks(min(min(finite), 0.0), max(finite))
    xmax = max((len(c.ys) for c in curves), default=1)
    xt = [t for t in nice_ticks(1, max(xmax, 2)) if 1 <= t <= max(xmax, 2)] or [1]
    x0, x1, y0, y1 = 1.0, float(max(xmax, 2)), yt[0], yt[-1]

    def X(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def Y(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    parts = [f"<svg class='pobo-figure' id='{_e(ident)}' role='img' width='{width}' "
             f"height='{full_h}' viewBox='0 0 {width} {full_h}' "
             f"aria-label='{_e(title)}'>",
             f"<title>{_e(title)}</title>",
             f"<text x='{width / 2:.1f}' y='18' text-anchor='middle' class='title'>"
             f"{_e(title)}</text>",
             f"<rect x='{left}' y='{top}' width='{pw}' height='{ph}' fill='none' "
             "stroke='#999'/>"]
    for y in yt:
        parts.append(f"<line x1='{left}' x2='{left + pw}' y1='{Y(y):.1f}' y2='{Y(y):.1f}' "
                     f"stroke='#eee'/><text x='{left - 6}' y='{Y(y) + 4:.1f}' "
                     f"text-anchor='end' class='tick'>{_tick(y)}</text>")
    for x in xt:
        parts.append(f"<line x1='{X(x):.1f}' x2='{X(x):.1f}' y1='{top + ph}' "
                     f"y2='{top + ph + 5}' stroke='#999'/><text x='{X(x):.1f}' "
                     f"y='{top + ph + 18}' text-anchor='middle' class='tick'>{_tick(x)}</text>")
    parts.append(f"<text x='{left + pw / 2:.1f}' y='{top + ph + 36}' text-anchor='middle' "
                 f"class='axis'>{_e(xlabel)}</text>")
    parts.append(f"<text transform='translate(16 {top + ph / 2:.1f}) rotate(-90)' "
                 f"text-anchor='middle' class='axis'>{_e(ylabel)}</text>")
    for i, c in enumerate(curves):
        colour = c.colour or COLOURS[i % len(COLOURS)]
        dash = f" stroke-dasharray='{c.dash}'" if c.dash else ""
        points = " ".join(f"{X(t):.1f},{Y(y):.1f}" for t, y in enumerate(c.ys, 1)
                          if math.isfinite(y))
        parts.append(f"<polyline class='curve' data-label='{_e(c.label)}' points='{points}' "
                     f"fill='none' stroke='{colour}' stroke-width='2'{dash}/>")
        ly = height + 14 + 18 * i
        parts.append(f"<line x1='{left}' x2='{left + 28}' y1='{ly - 4}' y2='{ly - 4}' "
                     f"stroke='{colour}' stroke-width='2'{dash}/><text x='{left + 36}' "
                     f"y='{ly}' class='legend'>{_e(c.label)}</text>")
    parts.append("</svg>")
    return "\n".join(parts)


def _tick(v: float) -> str:
    return f"{v:.4g}"


# --- the page ------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
pre { background: #f8f8f8; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; }
.where { color: #666; font-size: 0.9em; }
.verdict { font-weight: bold; padding: 0.4em 0.6em; display: inline-block; }
.verdict.ok { background: #e3f5e1; } .verdict.bad { background: #fbe3e3; }
.verdict.none { background: #f1f1f1; } .violation { color: #a00; }
svg.pobo-figure { display: block; margin: 1em 0; background: #fff; }
svg .title { font-size: 14px; font-weight: bold; } svg .tick { font-size: 11px; fill: #444; }
svg .axis, svg .legend { font-size: 12px; }
"""

# Collects script errors, then on load writes each figure's rendered size and curve count
# into #pobo-selfcheck (hidden), so that a headless browser's dumped DOM shows both.
_SELFCHECK = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); });
  window.addEventListener('load', function () {
    var figures = Array.prototype.map.call(document.querySelectorAll('svg.pobo-figure'),
      function (svg) {
        var box = svg.getBoundingClientRect();
        return {id: svg.id, width: box.width, height: box.height,
                curves: svg.querySelectorAll('polyline.curve').length};
      });
    document.getElementById('pobo-selfcheck').textContent =
      JSON.stringify({figures: figures, errors: errors});
  });
})();
"""


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            f"<title>{_e(title)}</title>\n<style>{_STYLE}</style>\n"
            f"<script>{_SELFCHECK}</script>\n</head>\n<body>\n" + "\n".join(body)
            + "\n<pre id='pobo-selfcheck' hidden></pre>\n</body>\n</html>\n")


def _table(header, rows, head: bool = True) -> str:
    th = ("<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>") if head else ""
    return ("<table>" + th + "".join("<tr>" + "".join(f"<td>{_e(_value(c))}</td>" for c in row)
                                     + "</tr>" for row in rows) + "</table>")


def _value(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_value(x)}" for k, x in v.items())
    return str(v)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
