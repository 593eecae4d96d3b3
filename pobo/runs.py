"""`pobo runs [DIR]`: the runs and sweeps under a folder, one line each, oldest first
(as Optuna's study list): scenario, time, status, policy, epsilon spent and the headline
result. From Python: `list_runs(path) -> list[dict]`, and `runs_table(entries)` for the
lines the command prints.

A run is a folder holding result.json, a sweep one holding runs.csv; the runs inside a
sweep (SWEEP/runs/RUN/) are summarised on the sweep's line, not listed. A deployment's
folders are runs too, each described by what its side can know (pobo.party_records): a
curator's session folder (curator.json: kind "curator"), a modeler's or an ask/tell
client's folder (modeler.json: kind "modeler"), and a `pobo run` folder holding both
parties' records but no result.json (a run that failed or was stopped: kind "run").
Every status is ok, failed (its cause in `note`) or interrupted, or running while a
`pobo run` still holds the folder (pobo.inuse). A run that carries no
DP claim (seeded, --lift paper, non-private) says "no DP claim" where its epsilon would
be. Other folders are searched, down to MAX_DEPTH levels. A record that cannot be read
is listed with status "unreadable" and a one-line note, never a traceback.
"""
from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path

from pobo.headline import (
    eps_text, ledger_spent, number, policy_text, run_headline, sweep_headline, sweep_spent,
)
from pobo.party_records import (
    TRANSCRIPTS, folder_kind, modeler_view, party_status, read_record, status_of,
)
from pobo.inuse import in_use
from pobo.runspec import nominal_reason

MAX_DEPTH = 4  # how deep under DIR to look for runs and sweeps
COLUMNS = (("path", "FOLDER"), ("kind", "KIND"), ("scenario", "SCENARIO"), ("when", "TIME"),
           ("status", "STATUS"), ("policy", "POLICY"), ("spent", "ε SPENT"),
           ("result", "RESULT"))


class RunsError(ValueError):
    """A folder to list that is not there."""


def list_runs(path: Path | str = "runs") -> list[dict]:
    """Every run, sweep and party's folder under `path` (itself included), oldest first
    by the time its record was written: one dict each (see `describe_run`,
    `describe_party` and `describe_sweep`); RunsError when `path` is not a folder."""
    root = Path(path)
    if not root.is_dir():
        raise RunsError(f"no folder at {root}")
    entries = [describe(folder, root) for folder in record_folders(root)]
    return sorted(entries, key=lambda e: (e["mtime"] is None, e["mtime"] or 0.0, e["path"]))


def record_folders(root: Path, depth: int = 0) -> list[Path]:
    """The folders under `root` that hold a run, a sweep or a party's record (not
    descending into them, nor into hidden folders or keys/)."""
    if kind_of(root) is not None:
        return [root]
    if depth >= MAX_DEPTH:
        return []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()
                          and not p.name.startswith(".") and p.name != "keys")
    except OSError:
        return []
    return [found for child in children for found in record_folders(child, depth + 1)]


def kind_of(folder: Path) -> str | None:
    """run (result.json, or both parties' records), sweep (runs.csv), curator
    (curator.json or its transcript only), modeler (a modeler's or an ask/tell client's
    record or transcript only), or None."""
    if (folder / "result.json").is_file():
        return "run"
    if (folder / "runs.csv").is_file():
        return "sweep"
    return folder_kind(folder)


def describe(folder: Path, root: Path) -> dict:
    """The entry of one folder; a record that cannot be read gives status "unreadable"
    and its reason in `note`."""
    kind = kind_of(folder)
    merged = (folder / "result.json").is_file()
    record = folder / ("result.json" if merged else "runs.csv" if kind == "sweep" else
                       f"{kind}.json" if kind in ("curator", "modeler") else "curator.json")
    entry = {"path": relative(folder, root), "kind": kind, "scenario": None, "time": None,
             "mtime": None, "status": None, "policy": None, "dp_claim": None,
             "no_dp_claim": None, "epsilon_spent": None, "delta_spent": None,
             "budget_epsilon": None, "result": None, "note": None}
    try:
        written = [folder / n for n in (record.name, *TRANSCRIPTS) if (folder / n).is_file()]
        entry["mtime"] = max(p.stat().st_mtime for p in written) if not merged and \
            kind != "sweep" else record.stat().st_mtime
        entry["time"] = datetime.fromtimestamp(entry["mtime"], timezone.utc).isoformat(
            timespec="seconds")
        if kind == "sweep":
            entry.update(describe_sweep(folder))
        elif merged:
            entry.update(describe_run(read_result(record)))
        else:
            entry.update(describe_party(folder, kind))
            if in_use(folder):  # a `pobo run` still going: its records are not final
                entry.update(status="running", note="a run is still going in this folder")
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        entry.update(status="unreadable", note=f"{record.name}: {type(exc).__name__}: "
                                                f"{one_line(exc)}")
    return entry


def read_result(path: Path) -> dict:
    """A result.json's object; ValueError when it holds anything else."""
    return read_record(path)


def describe_run(result: dict) -> dict:
    """A run's fields: scenario, status (and its cause in `note`), policy, whether it
    carries a DP claim, what its ledger spent, its headline."""
    spent = ledger_spent(result.get("ledger"))
    head = run_headline(result)
    status, cause = status_of(result)
    why = nominal_reason(result)
    return {"scenario": result.get("scenario"), "status": status, "note": cause,
            "policy": policy_text(result), "dp_claim": why is None, "no_dp_claim": why,
            "epsilon_spent": spent.get("epsilon"), "delta_spent": spent.get("delta_spent"),
            "stated_at_delta": spent.get("delta"),
            "budget_epsilon": spent.get("budget_epsilon"),
            "budget_delta": spent.get("budget_delta"),
            "result": head["short"], "metric": head["metric"], "value": head["value"],
            "random": head["random"], "best": head["best"], "optimum": head["optimum"]}


def describe_party(folder: Path, kind: str) -> dict:
    """A party's folder without result.json. A curator's (or a `pobo run`'s whose result
    was not merged) is described from curator.json like a run; a modeler's (or an ask/tell
    client's) from modeler.json and what its transcript holds from the curator: the
    session's parameters, its DP claim, and the dataset's epsilon spent as the curator
    signed it in its last ledger head."""
    status, cause = party_status(folder)
    if kind in ("curator", "run") and (folder / "curator.json").is_file():
        entry = describe_run(read_record(folder / "curator.json"))
        entry.update(status=status, note=cause)
        return entry
    if kind in ("curator", "run"):  # a transcript alone: killed before any record
        return {"status": status, "note": cause}
    record = (read_record(folder / "modeler.json") if (folder / "modeler.json").is_file()
              else {})
    view = (modeler_view(folder / "modeler.transcript")
            if (folder / "modeler.transcript").is_file() else {})
    head = record.get("ledger_head") if isinstance(record.get("ledger_head"), dict) else {}
    why = "; ".join(view["not_dp"]) if view.get("not_dp") else None
    queries = record.get("queries") or []
    best = record.get("best_reward")
    return {"scenario": view.get("scenario"), "status": status, "note": cause,
            "policy": (f"{view['policy']} ({view['mechanism']})" if view.get("mechanism")
                       else view.get("policy")),
            "dp_claim": None if "dp" not in view else why is None, "no_dp_claim": why,
            "epsilon_spent": head.get("central_epsilon"),
            "delta_spent": head.get("central_delta"),
            "result": (f"best reward {number(best, 4)} at row {record.get('best_index')} "
                       f"({len(queries)} queries)" if best is not None else None)}


def describe_sweep(folder: Path) -> dict:
    """A sweep's fields from runs.csv and its runs' result.json: scenario, how many runs
    finished ok, its policies and releases, epsilon spent per run (largest, and summed in
    `epsilon_spent_sum`), and its headline (best private, random, non-private)."""
    from pobo.html_sweep import read_rows  # (numpy): only when there is a sweep

    rows = read_rows(folder / "runs.csv")
    results = []
    for row in rows:
        try:
            results.append(read_result(folder / "runs" / str(row["run"]) / "result.json"))
        except (OSError, ValueError):
            pass
    ok = sum(1 for r in results if r.get("status") == "ok")
    spent = sweep_spent(r.get("ledger") for r in results)
    head = sweep_headline(rows)
    lifts = sorted({str(r.get("lift")) for r in rows if r.get("policy") == "private"})
    policies = ([f"private ({', '.join(lifts)})"] if lifts else []) + (
        ["non-private"] if any(r.get("policy") == "non-private" for r in rows) else [])
    claims = [str(r.get("dp")) in ("True", "true", "1") for r in rows if "dp" in r]
    return {"scenario": ", ".join(sorted({str(r["scenario"]) for r in rows})),
            "status": "ok" if ok == len(rows) else f"{ok}/{len(rows)} ok",
            "dp_claim": (None if not claims or 0 < claims.count(True) < len(claims)
                         else all(claims)),  # None: some runs carry one, some not
            "no_dp_claim": None if not claims or all(claims) else
            f"{claims.count(False)} of {len(claims)} runs carry no DP claim",
            "policy": " + ".join(policies), "runs": len(rows),
            "epsilon_spent": spent.get("epsilon_max"),
            "epsilon_spent_min": spent.get("epsilon_min"),
            "epsilon_spent_sum": spent.get("epsilon_sum"), "delta_spent": spent.get("delta_max"),
            "result": head["short"], "metric": head["metric"],
            "best_private": _plain(head["best_private"]), "random": _plain(head["random"]),
            "non_private": _plain(head["non_private"])}


def _plain(item: dict | None) -> dict | None:
    """A headline line without its internal key (JSON-ready)."""
    return None if item is None else {k: v for k, v in item.items() if k != "key"}


def relative(folder: Path, root: Path) -> str:
    """The folder as the user named it: DIR/SUB, or DIR itself."""
    return str(root / folder.relative_to(root)) if folder != root else str(root)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (JSON errors span none, OS errors may)."""
    return " ".join(str(exc).split())[:200]


def spent_cell(entry: dict) -> str:
    """The epsilon-spent column: a run's, a sweep's range per run, or a dash; "no DP
    claim" for a run that carries none (seeded, --lift paper, non-private: its ledger's
    epsilons are nominal, not a guarantee) and a sweep whose runs carry none."""
    if entry.get("dp_claim") is False:
        return "no DP claim" + (" (non-private)" if entry.get("policy") == "non-private"
                                else "")
    if entry.get("policy") == "non-private":
        return "no DP claim (non-private)"
    if entry.get("epsilon_spent") is None:
        return "—"
    high = entry["epsilon_spent"]
    low = entry.get("epsilon_spent_min", high)
    text = number(high) if low == high else f"{number(low)}–{number(high)}/run"
    return text + ("" if entry.get("budget_epsilon") is None else
                   f" of {eps_text(entry['budget_epsilon'])}") + (
        f" ({entry['no_dp_claim']})" if entry.get("no_dp_claim") else "")


def runs_table(entries: list[dict]) -> str:
    """The entries as aligned text lines under a header (what `pobo runs` prints)."""
    if not entries:
        return "no runs or sweeps found"
    cells = [[{"spent": spent_cell(e),
               "when": "" if e["mtime"] is None else time.strftime(
                   "%Y-%m-%d %H:%M", time.localtime(e["mtime"])),
               "result": e["note"] if e.get("note") and e["status"] in ("unreadable",
                                                                        "failed")
               else e.get("result") or e.get("note")}.get(
                   key, e.get(key)) for key, _ in COLUMNS] for e in entries]
    cells = [[title for _, title in COLUMNS]] + [["—" if c is None else str(c) for c in row]
                                                 for row in cells]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]
                     for row in cells)


def runs_json(entries: list[dict]) -> str:
    """The entries as a JSON list (what `pobo runs --json` prints); a number that is not
    finite (a mean of nothing, an unbounded epsilon) is null, as JSON has no NaN."""
    def finite(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value
    return json.dumps(finite(entries), indent=1, ensure_ascii=False, allow_nan=False,
                      default=str)
