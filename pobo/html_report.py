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

Where the parts live: the page's frame, tables, escaping and ReportError in
`pobo.html_page`; the SVG charts in `pobo.html_chart`; a run's page in `pobo.html_run`; a
sweep's in `pobo.html_sweep`; a deployment party's in `pobo.party_report`. This module
picks the page for a folder and writes it, and stays the entry: the names others use are
importable from here.
"""
from __future__ import annotations

from pathlib import Path

from pobo.html_chart import Curve, nice_ticks, svg_chart
from pobo.html_page import ReportError, load_json
from pobo.html_run import run_report_html
from pobo.html_sweep import paper_preset, read_rows, sweep_report_html
from pobo.party_records import folder_kind

__all__ = ["REPORT_NAME", "Curve", "ReportError", "load_json", "nice_ticks", "paper_preset",
           "read_rows", "run_report_html", "svg_chart", "sweep_report_html",
           "write_html_report"]

REPORT_NAME = "report.html"


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
