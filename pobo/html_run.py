"""`pobo report` on a run folder: the answer, the privacy statement and measured risk, the
regret (or hits) chart, the parameters, the ledger, the privacy unit and the audit of the
run's transcripts (against the user's key store)."""
from __future__ import annotations

from pathlib import Path

from pobo.parties.statement import epsilon_text
from pobo.protocol.errors import PoboError
from pobo.protocol.ledger import describe_ledger
from pobo.auditing import audit_files, trusted_keys
from pobo.headline import (
    eps_label, ledger_spent, number, policy_text, run_headline, spent_text,
)
from pobo.html_chart import COLOURS, Curve, svg_chart
from pobo.html_page import _e, _page, _table, _value, _where, load_json
from pobo.runspec import nominal_reason


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
                 ("simple regret S_T", f"{head['regret']:.4g} = {head['value']:.4g} σ_f "
                  f"(σ_f = {head['sigma_f']:.4g}, std of f over the rows) = "
                  f"{head['value_sigma_y']:.4g} σ_y (σ_y = {head['sigma_y']:.4g}, "
                  f"{result.get('sigma_y_source') or '?'})")]
    if head.get("top1_hits") is not None:
        rows += [("top-1% rows found", f"{head['top1_hits']} of {result.get('top1_rows')} "
                  f"(random selection expects {number(result.get('random_top1_expected'), 3)})"),
                 ("best row found ranks", f"{head['best_rank']} of {result.get('n')}")]
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
