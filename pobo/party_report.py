"""`pobo report DIR` for a deployment's folders: a curator's session folder
(curator.json), a modeler's or an ask/tell client's folder (modeler.json), or a `pobo
run` folder whose result.json was never merged (a failed or stopped run). Each page
leads with what that side can know: the answer it holds, the privacy statement, the
ledger and whether the audit of its transcript passes (signatures checked against the
keys the user trusts, as `pobo audit`); then the parameters. The curator's page leaves
out the fields that must not leave it (pobo.party_records.CURATOR_PRIVATE: the
unsalted digest of (X, f), the exact sigma_min, f*), as the run page does.
"""
from __future__ import annotations

from pathlib import Path

from pobo.headline import number
from pobo.html_page import ReportError, _e, _page, _table, _where, load_json
from pobo.html_run import (
    RUN_PARAMETERS, _ledger_html, _unit_html, audit_html, nominal_spent, privacy_html,
    run_result_html,
)
from pobo.party_records import modeler_view, party_status, without_curator_private
from pobo.runspec import nominal_reason

MODELER_PARAMETERS = (("strategy", "strategy"), ("beta_scale", "β scale"),
                      ("batch", "batch"), ("seed", "seed"), ("hyper", "hyperparameters"),
                      ("signatures", "signatures"), ("seconds", "seconds"),
                      ("prepare_seconds", "preparation (s)"), ("step_seconds", "per step (s)"))


def party_report_html(folder: Path, kind: str) -> str:
    """The page about a party's folder (`kind`: curator, modeler, or run for a folder
    holding both parties' records but no result.json)."""
    status, cause = party_status(folder)
    if (folder / "curator.json").is_file() and kind in ("curator", "run"):
        return curator_page(folder, kind, status, cause)
    if (folder / "modeler.json").is_file() or (folder / "modeler.transcript").is_file():
        return modeler_page(folder, status, cause)
    return _page("pobo: a party's transcript", [
        "<h1>A party's transcript, no record</h1>", _where(folder),
        "<section id='result'><h2>Result</h2>",
        f"<p class='answer'>No record: {_e(cause or 'its process stopped before writing it')}"
        "</p>", "<h3>Audit</h3>", audit_html(folder), "</section>"])


def _status_line(status: str, cause: str | None) -> str:
    return (f"<p class='status {status}'>status: {_e(status)}"
            + (f" ({_e(cause)})" if cause else "") + "</p>")


def curator_page(folder: Path, kind: str, status: str, cause: str | None) -> str:
    """A curator's session (or a run not merged): its answers, privacy statement, ledger
    and audit first; no curator-private field."""
    record = load_json(folder / "curator.json")
    record = {**record, "status": status}
    why = nominal_reason(record)
    title = ("pobo run (not merged: " + status + ")" if kind == "run"
             else "pobo curator session") + f": {record.get('scenario', '?')}"
    public = without_curator_private(record)
    params = [(label, public[key]) for key, label in RUN_PARAMETERS if key in public]
    body = [f"<h1>{_e(title)}</h1>", _where(folder), "<section id='result'>",
            "<h2>Result (the curator's record)</h2>", _status_line(status, cause),
            run_result_html(record), "<h3>Privacy</h3>",
            privacy_html(record.get("privacy_unit"), record.get("ledger"),
                         nominal_spent(record)),
            "<h3 id='ledger'>Privacy ledger</h3>", _ledger_html(record.get("ledger"), why),
            "<h3 id='audit'>Audit</h3>", audit_html(folder), "</section>",
            "<h2 id='parameters'>Parameters</h2>", _table(("parameter", "value"), params),
            "<h2 id='privacy-unit'>Privacy unit</h2>", _unit_html(record.get("privacy_unit"))]
    return _page(title, body)


def modeler_page(folder: Path, status: str, cause: str | None) -> str:
    """A modeler's or an ask/tell client's session: what it found, what the curator's
    signed frames say of the privacy of what it received, the ledger head the curator
    signed, and the audit of its transcript."""
    record = (load_json(folder / "modeler.json") if (folder / "modeler.json").is_file()
              else {})
    view = (modeler_view(folder / "modeler.transcript")
            if (folder / "modeler.transcript").is_file() else {})
    queries = record.get("queries") or []
    best = record.get("best_reward")
    answer = (f"Best reward {number(best, 6)} at row {record.get('best_index')} after "
              f"{len(queries)} queries" + (f" of T = {view['T']}" if view.get("T") else "")
              if best is not None else "No reward received")
    claim = ("no DP claim (" + "; ".join(view["not_dp"]) + ")" if view.get("not_dp") else
             "DP claim: the release is differentially private" if view.get("dp") else
             "unknown: the transcript holds no Dataset")
    release = ([("release", view.get("mechanism")), ("ε", view.get("epsilon")),
                ("δ", view.get("delta"))] if view.get("mechanism") else [])
    head = record.get("ledger_head") if isinstance(record.get("ledger_head"), dict) else None
    ledger = (f"the dataset's central ε {number(head.get('central_epsilon'))} at δ "
              f"{number(head.get('central_delta'), 3)} over {head.get('entries')} entries, "
              f"as the curator signed it at the session's end (chain "
              f"{str(head.get('chain', ''))[:16]}…); the most any row's LDP reports spent: "
              f"ε {number(head.get('max_row_epsilon'))}" if head else
              "no ledger head: the curator signed none, or the session did not end")
    if view.get("not_dp") and head:
        ledger = "nominal (no DP claim): " + ledger
    title = f"pobo modeler session: {view.get('scenario', '?')}"
    params = [(label, record[key]) for key, label in MODELER_PARAMETERS if key in record]
    params += [(k, view[k]) for k in ("scenario", "n", "r", "T", "policy", "randomness",
                                      "session") if k in view]
    body = [f"<h1>{_e(title)}</h1>", _where(folder), "<section id='result'>",
            "<h2>Result (the modeler's record)</h2>", _status_line(status, cause),
            f"<p class='answer'>{_e(answer)}</p>", "<h3>Privacy</h3>",
            f"<p class='claim'>{_e(claim)}</p>",
            _table(("", ""), release, head=False) if release else "",
            "<h3 id='ledger'>Privacy ledger</h3>", f"<p class='spent'>Ledger: {_e(ledger)}</p>",
            "<h3 id='audit'>Audit</h3>", audit_html(folder), "</section>",
            "<h2 id='parameters'>Parameters</h2>", _table(("parameter", "value"), params)]
    return _page(title, body)


__all__ = ["party_report_html", "curator_page", "modeler_page", "ReportError"]
