"""FIDELITY.md's CSVs: the columns kept, how a sweep's runs.csv is collected and read, the
command that makes each CSV, and random search's runs and expectation read from them."""
from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


KEEP = ("scenario", "strategy", "lift", "authors_code", "moma_k", "beta_scale", "ldp_epsilon",
        "metric",
        "epsilon", "r",
        "seed", "T", "n", "sigma_min", "lifted", "simple_regret", "simple_regret_sigma_y",
        "cumulative_regret", "hits", "random_hits_expected", "random_regret_expected",
        "sigma_y", "sigma_y_source")
DATA = {"bank": "../shared/data/lending-club-2007-2011.csv.gz",
        "realestate": "../shared/data/sg-private-projects.csv",
        "hospital": "../shared/data/diabetic_data.csv.gz"}
AUTHORS = "-authors"  # fidelity/NAME-authors.csv: the preset run with --authors-code


@dataclass(frozen=True)
class Entry:
    """One table or figure: its CSV, where it comes from, and the command that makes it."""

    name: str
    paper: str
    title: str
    command: str


def sweep_command(name: str, seeds: int, scenario: str, authors: bool = False) -> str:
    """The `pobo sweep` command that regenerates fidelity/NAME.csv (NAME-authors.csv with
    `authors`: the same preset with --authors-code)."""
    data = f" --data {DATA[scenario]}" if scenario in DATA else ""
    switch, suffix = (" --authors-code", AUTHORS) if authors else ("", "")
    return (f"pobo sweep --preset {name}{switch} --seeds {seeds}{data} --workers 1 "
            f"--out runs/sweeps/{name}{suffix}")


def read_rows(path: Path) -> list[dict]:
    """A fidelity CSV's rows with numbers parsed (empty cells None)."""
    def parse(v: str):
        if v in ("", "None"):
            return None
        try:
            return float(v)
        except ValueError:
            return {"True": True, "False": False}.get(v, v)
    with open(path, newline="") as fh:
        return [{k: parse(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def collect(sweeps: Path, out: Path) -> list[str]:
    """Copy each sweep folder's runs.csv (trimmed to KEEP) to out/NAME.csv; the names."""
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for runs in sorted(sweeps.glob("*/runs.csv")):
        with open(runs, newline="") as fh, open(out / f"{runs.parent.name}.csv", "w",
                                                 newline="") as dst:
            reader = csv.DictReader(fh)
            writer = csv.DictWriter(dst, fieldnames=[k for k in KEEP if k in reader.fieldnames])
            writer.writeheader()
            for row in reader:
                writer.writerow({k: row[k] for k in writer.fieldnames})
        names.append(runs.parent.name)
    return names


def random_by_scenario(folder: Path) -> dict[str, list[dict]]:
    """Random search's runs per scenario, from SCENARIO-random.csv and the table CSVs.
    Random reads neither Z nor epsilon: its runs of one seed on one prepared dataset are
    the same run at every r and epsilon (kept once), and different seeds are draws of one
    distribution, pooled."""
    out: dict[str, dict] = defaultdict(dict)
    paths = [*(folder / f"{s}-random.csv" for s in DATA),
             *(folder / f"table{i}.csv" for i in range(1, 10))]
    for path in paths:
        if path.exists():
            for row in read_rows(path):
                if row.get("strategy") == "random":  # a seed's random runs are one run
                    out[row["scenario"]].setdefault((row["n"], row["T"], row["seed"]), row)
    return {scenario: list(runs.values()) for scenario, runs in out.items()}


def random_expectations(folder: Path) -> dict[tuple, float]:
    """(scenario, n, T) -> random search's exact expected S_T/sigma_y, from any CSV row
    that records it (a property of the prepared data and T, the same in every run)."""
    out = {}
    for path in sorted(folder.glob("*.csv")):
        for row in read_rows(path):
            if row.get("random_regret_expected") is not None and row.get("sigma_y"):
                out[(row["scenario"], row["n"], row["T"])] = (row["random_regret_expected"]
                                                             / row["sigma_y"])
    return out
