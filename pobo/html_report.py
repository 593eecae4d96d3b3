"""`pobo report DIR`: one self-contained HTML page about a run folder or a sweep folder.

Both pages lead with the answer (section #result): for a run, the best f found against
f* (simple regret in sigma_y) or, for hospital, the hits against random selection's
expectation; for a sweep, the best private setting beside random selection and the
non-private baseline. Beside it the privacy statement: the claim, epsilon per distance,
the whole-row epsilon and what the ledger spent against its budget. Then the figures (a
sweep over releases: the privacy-utility frontier; every sweep: one chart with every
curve), then the details: parameters, ledger, privacy unit, the audit of the run's two
transcripts (signatures verified against the user's key store, never keys/), the sweep's table. Epsilons are printed as given (%.4g); the page names
folders, never their absolute paths. Figures are inline SVG drawn here from the numbers:
the page loads nothing, from the network or from disk. A short inline script measures the
figures and the answer's position on load and writes what it found (and any script
error) into the hidden element #pobo-selfcheck, for a headless browser to read.
"""
from __future__ import annotations

import csv
import html
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pobo.parties.statement import epsilon_text
from pobo.protocol.errors import PoboError
from pobo.protocol.ledger import describe_ledger
from pobo.auditing import audit_files, trusted_keys
from pobo.scenarios.presets import PRESETS, Preset
from pobo.headline import (
    eps_label, eps_text, ledger_spent, number, policy_text, run_headline, setting_label,
    setting_of, spent_text, strategy_label, sweep_headline, sweep_spent, sweep_spent_text,
    varied_fields,
)
from pobo.report import (
    dp_notice, frontier, frontier_risk, frontier_risk_table, markdown_table,
)
from pobo.party_records import folder_kind
from pobo.runspec import nominal_reason

REPORT_NAME = "report.html"
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
DASHES = (None, "7 4", "2 3", "9 3 2 3")  # with COLOURS: 40 curves drawn apart
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
    """Write the HTML report of a run, sweep or party's folder (a deployment's curator or
    modeler: pobo.party_report) to `out` (default FOLDER/report.html) and return its
    path; ReportError for a folder that is none of them, or whose records hold values of
    the wrong shape (a list where a number belongs, ...)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"no folder at {folder}")
    try:
        if (folder / "result.json").is_file():
            page = run_report_html(folder)
        elif (folder / "runs.csv").is_file():
            page = sweep_report_html(folder)
        elif folder_kind(folder) is not None:  # a deployment's curator or modeler folder
            from pobo.party_report import party_report_html

            page = party_report_html(folder, folder_kind(folder))
        else:
            raise ReportError(f"{folder} holds no run (result.json), sweep (runs.csv) nor "
                              "party's record (curator.json, modeler.json, a transcript)")
    except ReportError:
        raise
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        raise ReportError(f"{folder}: malformed: a record of an unexpected shape, or a runs.csv "
                          f"with a column or value missing ({type(exc).__name__}: {exc})"
                          ) from None
    path = Path(out) if out is not None else folder / REPORT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


# --- a run ---------------------------------------------------------------------------

RUN_PARAMETERS = (
    ("scenario", "scenario"), ("status", "status"), ("end_reason", "end reason"),
    ("n", "n (rows)"), ("d", "d (columns)"), ("r", "r (projection dimension)"), ("T", "T"),
    ("policy", "policy"), ("epsilon", "ε"), ("delta", "δ"), ("lift", "lift"),
    ("lifted", "lifted"),  # (not sigma_min: curator-private, pobo.party_records)
    ("omega", "ω: the release's noise parameter (the Gaussian σ of gaussian-rows)"),
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
    body = [f"<h1>pobo run: {_e(result.get('scenario', '?'))}</h1>", _where(folder),
            "<section id='result'>", "<h2>Result</h2>", run_result_html(result),
            "<h3>Privacy</h3>", privacy_html(result.get("privacy_unit"), result.get("ledger"),
                                             nominal_spent(result)),
            risk_html(result.get("risk")), "</section>",
            f"<h2 id='regret'>{'Hits' if result.get('metric') == 'hits' else 'Regret'}</h2>",
            _run_figure(result),
            "<h2 id='parameters'>Parameters</h2>", _table(("parameter", "value"), params),
            "<h2 id='ledger'>Privacy ledger</h2>",
            _ledger_html(result.get("ledger"), nominal_reason(result)),
            "<h2 id='privacy-unit'>Privacy unit</h2>", _unit_html(result.get("privacy_unit")),
            "<h2 id='audit'>Audit</h2>", audit_html(folder)]
    return _page(f"pobo run: {result.get('scenario', '?')}", body)


def _where(folder: Path) -> str:
    """The folder by its name only: the page may be mailed, its absolute path stays here."""
    return f"<p class='where'>folder {_e(folder.resolve().name or folder)}</p>"


def run_result_html(result: dict) -> str:
    """A run's answer first: best f found and f* (simple regret in sigma_y), or hits
    against random selection's expectation, or the best measured value."""
    head = run_headline(result)
    rows: list[tuple[str, object]] = []
    if head["metric"] == "hits" and head["value"] is not None:
        rows += [("distinct positives found", f"{head['value']:.0f}"),
                 ("random selection expects", number(head["random"], 3))]
    elif head["metric"] == "measured":
        rows += [("best measured value", number(head["best"], 6))]
    elif head["value"] is not None:
        rows += [("best f found", number(head["best"], 6)),  # (not f*: curator-private)
                 ("simple regret S_T", f"{head['regret']:.4g} = {head['value']:.4g} σ_y "
                  f"(σ_y = {head['sigma_y']:.4g}, {result.get('sigma_y_source') or '?'})")]
    modeler = result.get("modeler") if isinstance(result.get("modeler"), dict) else {}
    rows += [("queries", len(result.get("queries") or [])), ("T", result.get("T")),
             ("strategy", modeler.get("strategy")), ("policy", policy_text(result)),
             ("status", result.get("status"))]
    return (f"<p class='answer'>{_e(head.get('public', head['text']))}</p>"
            + _table(("", ""), rows, head=False))


def privacy_html(unit: object, ledger: object, spent_line: str | None = None) -> str:
    """The privacy statement: the claim, epsilon per distance and for a whole row, and
    what the ledger spent against its budget (or `spent_line` in its place)."""
    dataset = unit.get("dataset") if isinstance(unit, dict) else None
    dataset = dataset if isinstance(dataset, dict) else {}
    claim = dataset.get("claim") or ("non-private baseline: no DP claim"
                                     if isinstance(unit, dict) else
                                     "no privacy statement recorded")
    parts = [f"<p class='claim'>{_e(claim)}</p>"]
    by_distance = unit.get("epsilon_by_distance") if isinstance(unit, dict) else None
    if isinstance(by_distance, list) and by_distance:
        rows = [(number(item.get("distance"), 3), item.get("what", ""),
                 epsilon_text(item.get("epsilon"), 4))
                for item in by_distance if isinstance(item, dict)]
        parts.append(_table(("move (preprocessed units)", "what it is",
                             f"ε at δ {number(dataset.get('delta'), 3)}"), rows))
    if isinstance(unit, dict) and unit.get("epsilon_whole_row") is not None:
        parts.append(f"<p class='whole-row'>ε for a whole row (any row replaced by any other "
                     f"of the domain): {_e(epsilon_text(unit['epsilon_whole_row'], 4))}</p>")
    spent = spent_line if spent_line is not None else spent_text(ledger_spent(ledger))
    parts.append(f"<p class='spent'>Ledger: {_e(spent)}</p>")
    return "\n".join(parts)


def nominal_spent(result: dict) -> str | None:
    """The ledger's line for a run with no DP claim (its epsilons are nominal, not spent
    under a guarantee); None for a run that carries one."""
    why = nominal_reason(result)
    return None if why is None else (f"no DP claim ({why}): nominally "
                                     + spent_text(ledger_spent(result.get("ledger"))))


def risk_html(risk: object) -> str:
    """The measured risk (pobo.risk) beside the epsilon table: per feature, the share of
    rows a modeler recovers with k known rows and with none, against the public
    marginal's best guess; a note when the run measured none."""
    if not isinstance(risk, dict) or not isinstance(risk.get("features"), list):
        return ("<p class='risk none'>Risk not measured for this run (`pobo risk RUN_DIR`, "
                "or `pobo run --risk`, measures what a modeler recovers).</p>")
    k = risk.get("anchors")
    pct = lambda v: "—" if v is None else f"{100 * float(v):.0f}%"  # noqa: E731
    rows = [(f.get("feature"), f.get("grid"), pct(f.get("baseline")),
             pct(f.get("anchored")) + (f" ± {100 * f['anchored_sd']:.0f}"
                                       if f.get("anchored_sd") is not None else ""),
             pct(f.get("unanchored")), number(f.get("residual"), 2),
             "yes" if f.get("flagged") else "no")
            for f in risk["features"] if isinstance(f, dict)]
    flagged = risk.get("flagged") or []
    return (f"<h3 id='risk'>Measured risk: what a modeler recovers</h3>"
            f"<p class='risk'>From this release ({_e(risk.get('mechanism'))}, noise std "
            f"{number(risk.get('noise_std'), 4)}), a modeler that knows {_e(k)} rows and their "
            f"positions aligns Z to them ({_e(risk.get('alignment'))}) and decodes every "
            "other row to each feature's grid; one that knows none aligns Z's principal axes "
            "to the public marginals. Share of rows whose value it recovers, against the "
            "best guess from the public marginal:</p>"
            + _table(("feature", "grid (recovered means)", "marginal's best guess",
                      f"{k} known rows", "none known",
                      "residual risk (anonymeter's)", "flagged"), rows)
            + f"<p class='risk-flag'>Flagged (an attack beats the marginal's guess by more "
              f"than 5 points): {_e(', '.join(flagged) if flagged else 'none')}.</p>")


def _ledger_html(ledger: object, nominal: str | None = None) -> str:
    if not isinstance(ledger, dict):
        return "<p>No ledger recorded in result.json.</p>"
    try:
        text = describe_ledger(ledger, nominal)
    except (KeyError, TypeError, ValueError) as exc:
        return f"<p>The recorded ledger cannot be read ({_e(type(exc).__name__)}).</p>"
    return f"<pre class='ledger'>{_e(text)}</pre>"


def _unit_html(unit: object) -> str:
    if not isinstance(unit, dict):
        return "<p>No privacy unit recorded in result.json.</p>"
    parts = []  # the claim and epsilon by distance lead the page (privacy_html)
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
    """The verdict of `pobo audit` on the folder's two transcripts, its signatures checked
    against the keys the user trusts (auditing.trusted_keys), never the folder's keys/."""
    transcripts = [folder / "curator.transcript", folder / "modeler.transcript"]
    present = [p for p in transcripts if p.is_file()]
    if not present:
        return ("<p class='verdict none'>Not audited: no transcripts in this folder (a sweep "
                "keeps them only with --transcripts).</p>")
    try:
        trust = trusted_keys(present)  # the user's key store, never the folder's keys/
        reports = audit_files(present, keys=trust.keys)
    except (PoboError, ValueError, OSError) as exc:
        return (f"<p class='verdict bad'>The audit could not run: {_e(type(exc).__name__)}: "
                f"{_e(exc)}</p>")
    ok = all(r.ok for r in reports)
    verified = ok and all(r.signatures == "verified" for r in reports)
    vouched = all(r.complete or r.paired for r in reports)  # a tail alone: pobo audit's exit 4
    verdict = ("VIOLATIONS" if not ok else "NOT VERIFIED" if not verified
               else "INCOMPLETE" if not vouched else "OK")
    verified = verified and vouched
    lines = [f"<p class='verdict {'ok' if verified else 'bad'}'>"
             f"{verdict}: {len(reports)} transcript(s) audited</p>"]
    lines += [f"<p class='note'>{_e(line)}</p>" for line in trust.lines()]
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
            rate = float(result["random_hits_expected"]) / max(1, len(hits))  # per query
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
    label = eps_label(result.get("epsilon")) + (f", r = {result['r']}"
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
                     ylabel="hits (more is better)" if hits else "S_T / σ_y (less is better)")


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
              ident: str = "fig", width: int = 640, height: int = 340,
              xnames: list[str] | None = None) -> str:
    """An inline SVG line chart: axes with ticks and labels, one polyline per curve, and
    a legend below the plot; `xnames` labels x = 1, 2, ... by name (a categorical axis)."""
    curves = [c for c in curves if c.ys]
    left, right, top, bottom = 64, 16, 28, 44
    legend_h = 18 * len(curves) + 8
    full_h = height + legend_h
    pw, ph = width - left - right, height - top - bottom
    finite = [y for c in curves for y in c.ys if math.isfinite(y)] or [0.0, 1.0]
    yt = nice_ticks(min(min(finite), 0.0), max(finite))
    xmax = max((len(c.ys) for c in curves), default=1)
    xt = ([t for t in nice_ticks(1, max(xmax, 2)) if 1 <= t <= max(xmax, 2)] or [1]
          if not xnames else list(range(1, len(xnames) + 1)))
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
                     f"y='{top + ph + 18}' text-anchor='middle' class='tick'>"
                     f"{_e(xnames[x - 1]) if xnames else _tick(x)}</text>")
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

# Collects script errors, then on load writes each figure's rendered size, position and
# curve count, and where the answer (#result) sits, into #pobo-selfcheck (hidden), so that
# a headless browser's dumped DOM shows them.
_SELFCHECK = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) { errors.push(String(e.message || e)); });
  window.addEventListener('load', function () {
    var figures = Array.prototype.map.call(document.querySelectorAll('svg.pobo-figure'),
      function (svg) {
        var box = svg.getBoundingClientRect();
        return {id: svg.id, width: box.width, height: box.height, top: box.top,
                curves: svg.querySelectorAll('polyline.curve').length};
      });
    var section = document.getElementById('result');
    var answer = section && section.querySelector('.answer');
    var result = section && answer ? {top: section.getBoundingClientRect().top,
      answer_bottom: answer.getBoundingClientRect().bottom, answer: answer.textContent} : null;
    document.getElementById('pobo-selfcheck').textContent =
      JSON.stringify({figures: figures, errors: errors, result: result});
  });
})();
"""


# an absolute POSIX path in the escaped page text (not a tag's "</" nor an escaped one,
# not a URL's "//", not a ratio "a/b")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/<-])(?<!&lt;)/(?:[^\s/<>'\"&;]+/)*([^\s/<>'\"&;]+)")


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part (…/data.csv): a result.json
    may name files by where they were on the machine that ran it, the page names none."""
    return _ABSOLUTE_PATH.sub(lambda m: "…/" + m.group(1), text)


def _page(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
            f"<title>{without_paths(_e(title))}</title>\n<style>{_STYLE}</style>\n"
            f"<script>{_SELFCHECK}</script>\n</head>\n<body>\n"
            + without_paths("\n".join(body))
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
