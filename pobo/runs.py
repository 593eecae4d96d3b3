"""`pobo runs [DIR]`: the runs and sweeps under a folder, one line each, oldest first
(as Optuna's study list): scenario, time, status, policy, epsilon spent and the headline
result. From Python: `list_runs(path) -> list[dict]`, and `runs_table(entries)` for the
lines the command prints.

A run is a folder holding result.json, a sweep one holding runs.csv; the runs inside a
sweep (SWEEP/runs/RUN/) are summarised on the sweep's line, not listed. A folder holding
a party's record (curator.json, modeler.json, a transcript) but no result.json is listed
as incomplete (a run stopped before it wrote its result). Other folders are searched,
down to MAX_DEPTH levels. A record that cannot be read is listed with status
"unreadable" and a one-line note, never a traceback.
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

MAX_DEPTH = 4  # how deep under DIR to look for runs and sweeps
PARTY_RECORDS = ("curator.json", "modeler.json", "curator.transcript", "modeler.transcript")
COLUMNS = (("path", "FOLDER"), ("kind", "KIND"), ("scenario", "SCENARIO"), ("when", "TIME"),
           ("status", "STATUS"), ("policy", "POLICY"), ("claim", "DP"), ("spent", "ε SPENT"),
           ("result", "RESULT"))


class RunsError(ValueError):
    """A folder to list that is not there."""


def list_runs(path: Path | str = "runs") -> list[dict]:
    """Every run, sweep and incomplete run folder under `path` (itself included), oldest
    first by the time its record was written: one dict each (see `describe_run` and
    `describe_sweep`); RunsError when `path` is not a folder."""
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
    """run (result.json), sweep (runs.csv), incomplete (a party's record only), or None."""
    if (folder / "result.json").is_file():
        return "run"
    if (folder / "runs.csv").is_file():
        return "sweep"
    if any((folder / name).is_file() for name in PARTY_RECORDS):
        return "incomplete"
    return None


def describe(folder: Path, root: Path) -> dict:
    """The entry of one folder; a record that cannot be read gives status "unreadable"
    and its reason in `note`."""
    kind = kind_of(folder)
    record = folder / {"run": "result.json", "sweep": "runs.csv"}.get(kind, "")
    entry = {"path": relative(folder, root), "kind": kind, "scenario": None, "time": None,
             "mtime": None, "status": None, "policy": None, "claim": None,
             "epsilon_spent": None,
             "delta_spent": None, "budget_epsilon": None, "result": None, "note": None}
    try:
        entry["mtime"] = record.stat().st_mtime if kind != "incomplete" else max(
            (folder / n).stat().st_mtime for n in PARTY_RECORDS if (folder / n).is_file())
        entry["time"] = datetime.fromtimestamp(entry["mtime"], timezone.utc).isoformat(
            timespec="seconds")
        if kind == "run":
            entry.update(describe_run(read_result(record)))
        elif kind == "sweep":
            entry.update(describe_sweep(folder))
        else:
            entry.update(status="incomplete", note="a party's record but no result.json: "
                                                   "a run stopped before it finished")
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        entry.update(status="unreadable", note=f"{record.name}: {type(exc).__name__}: "
                                                f"{one_line(exc)}")
    return entry


def read_result(path: Path) -> dict:
    """A result.json's object; ValueError when it holds anything else."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def describe_run(result: dict) -> dict:
    """A run's fields: scenario, status, policy, what its ledger spent, its headline."""
    spent = ledger_spent(result.get("ledger"))
    head = run_headline(result)
    status = str(result.get("status") or "?")
    if result.get("consistent") is False:
        status += " (inconsistent)"
    reasons = [str(why) for why in result.get("not_dp") or []]
    short = "; ".join(why.split(":")[0].split(" (")[0] for why in reasons)
    claim = (None if "dp" not in result else "yes" if result.get("dp") is not False
             else f"no: {short or 'dp: false'}")
    return {"scenario": result.get("scenario"), "status": status, "dp": result.get("dp"),
            "not_dp": reasons, "claim": claim, "policy": policy_text(result),
            "epsilon_spent": spent.get("epsilon"),
            "delta_spent": spent.get("delta_spent"), "epsilon_at_delta": spent.get("delta"),
            "budget_epsilon": spent.get("budget_epsilon"),
            "result": head["short"], "metric": head["metric"], "value": head["value"],
            "random": head["random"], "best": head["best"], "optimum": head["optimum"]}


def describe_sweep(folder: Path) -> dict:
    """A sweep's fields from runs.csv and its runs' result.json: scenario, how many runs
    finished ok, its policies and releases, epsilon spent per run (largest, and summed in
    `epsilon_spent_sum`), and its headline (best private, random, non-private)."""
    from pobo.html_report import read_rows  # (numpy): only when there is a sweep

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
    without = [r for r in results if r.get("dp") is False]
    short = sorted({why.split(":")[0].split(" (")[0] for r in without
                    for why in (r.get("not_dp") or [])})
    claim = (None if not results else "yes" if not without else
             f"no in {len(without)} of {len(results)}: {'; '.join(short) or 'dp: false'}")
    return {"scenario": ", ".join(sorted({str(r["scenario"]) for r in rows})),
            "status": "ok" if ok == len(rows) else f"{ok}/{len(rows)} ok",
            "policy": " + ".join(policies), "claim": claim, "runs": len(rows),
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
    """The epsilon-spent column: a run's, a sweep's range per run, or a dash; a
    non-private run spends no epsilon but its data had no DP protection at all."""
    if entry.get("policy") == "non-private":
        return "n/a (no DP)"
    if entry.get("epsilon_spent") is None:
        return "—"
    high = entry["epsilon_spent"]
    low = entry.get("epsilon_spent_min", high)
    text = number(high) if low == high else f"{number(low)}–{number(high)}/run"
    return text + ("" if entry.get("budget_epsilon") is None else
                   f" of {eps_text(entry['budget_epsilon'])}")


def runs_table(entries: list[dict]) -> str:
    """The entries as aligned text lines under a header (what `pobo runs` prints)."""
    if not entries:
        return "no runs or sweeps found"
    cells = [[{"spent": spent_cell(e),
               "when": "" if e["mtime"] is None else time.strftime(
                   "%Y-%m-%d %H:%M", time.localtime(e["mtime"])),
               "result": e["note"] if e.get("note") else e.get("result")}.get(
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
