"""FIDELITY.md: every table and figure pobo reproduces, the paper's numbers beside pobo's.

    python -m pobo.fidelity --collect runs/sweeps   # copy each sweep's runs.csv here
    python -m pobo.fidelity                          # fidelity/*.csv -> FIDELITY.md

The numbers come only from the CSVs in `fidelity/` (one per sweep, written by `pobo
sweep`, trimmed); the paper's numbers from `scenarios.presets` and the figure texts
below; the verdict is computed (`pobo.fidelity_rule`: |pobo - paper| <= 2 se of the
difference, with the per-run spread pooled over the columns of a cell), and the reason
beside it is the best-supported explanation we have, stated as such.

Where the parts live: the CSVs (columns kept, collecting, reading, the commands) in
`pobo.fidelity_csv`; the verdict rule in `pobo.fidelity_rule`; the PO-GP-UCB tables in
`pobo.fidelity_tables`, their Tables 1-3 summary and the rule's false-pass rate in
`pobo.fidelity_summary`; Fig. 2 in `pobo.fidelity_figures`; the hospital example in
`pobo.fidelity_hospital`; Zhou & Tan's LDP section in `pobo.fidelity_ldp`; the written
text (header, reasons, not reproduced) in `pobo.fidelity_text`. This module assembles
FIDELITY.md and stays the entry: the names others use are importable from here.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from pobo.fidelity_csv import (
    AUTHORS, KEEP, collect, random_by_scenario, random_expectations, read_rows, sweep_command,
)
from pobo.fidelity_figures import FIGURE_EXCESS, FIGURE_LEVEL, figure_section
from pobo.fidelity_hospital import HOSPITAL_MODES, hospital_section
from pobo.fidelity_ldp import moma_section
from pobo.fidelity_rule import RULE
from pobo.fidelity_summary import synthetic_summary
from pobo.fidelity_tables import table_section
from pobo.fidelity_text import HEADER, NOT_REPRODUCED
from pobo.scenarios.presets import PRESETS

__all__ = ["FIGURE_EXCESS", "FIGURE_LEVEL", "KEEP", "STALE", "collect", "main", "render",
           "stale_note"]


# CSVs in fidelity/ not rerun at the current code (the compute budget of issue 50): their
# documented command now gives other runs at some seeds (near-tie breaking changed since)
STALE: frozenset[str] = frozenset()
STALE_NOTE = ("**Not rerun at the current code:** {names} {verb} made by an earlier "
              "version (near-ties were then broken by index); the command above now gives "
              "other runs at some seeds.\n")


def stale_note(names: list[str], stale: frozenset[str]) -> str:
    """The note under a section whose CSVs are in `stale` ('' when none is)."""
    old = [f"fidelity/{n}.csv" for n in names if n in stale]
    return STALE_NOTE.format(names=", ".join(old), verb="was" if len(old) == 1 else
                             "were") if old else ""


def render(folder: Path, stale: frozenset[str] = STALE) -> str:
    """The whole FIDELITY.md from the CSVs in `folder` (`stale`: the CSV names not rerun
    at the current code, noted under their sections)."""
    parts = [HEADER.format(rule=RULE), "## PO-GP-UCB (Kharkovskii et al. 2020)", ""]
    parts.append(synthetic_summary(folder))
    random, expectations = random_by_scenario(folder), random_expectations(folder)
    for name in [*(f"table{i}" for i in range(1, 10)), "fig2a", "fig2b", "fig2c"]:
        path = folder / f"{name}.csv"
        if not path.exists():
            parts.append(f"### {PRESETS[name].caption}\n\nnot run in this version (compute "
                         f"budget): `{sweep_command(name, 10, PRESETS[name].scenario)}`\n")
            continue
        rows = read_rows(path)
        authors = folder / f"{name}{AUTHORS}.csv"
        scenario = PRESETS[name].scenario
        other = read_rows(authors) if authors.exists() else None
        parts.append(figure_section(name, rows, other) if name.startswith("fig") else
                     table_section(name, rows, other, random.get(scenario), expectations))
        parts += filter(None, [stale_note([name, name + AUTHORS, f"{scenario}-random"], stale)])
    if (folder / "hospital.csv").exists():
        modes = {suffix: read_rows(folder / f"hospital{suffix}.csv") for suffix in HOSPITAL_MODES
                 if (folder / f"hospital{suffix}.csv").exists()}
        parts.append(hospital_section(read_rows(folder / "hospital.csv"), modes))
        parts += filter(None, [stale_note(["hospital", *(f"hospital{m}" for m in modes)],
                                          stale)])
    parts += ["## Local DP BO (Zhou & Tan)", ""]
    if (folder / "ldp-moma-k.csv").exists():
        others = folder / "ldp-strategies.csv"
        parts.append(moma_section(read_rows(folder / "ldp-moma-k.csv"),
                                  read_rows(others) if others.exists() else None))
        parts += filter(None, [stale_note(["ldp-moma-k", "ldp-strategies"], stale)])
    parts.append(NOT_REPRODUCED)
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Collect sweep CSVs (--collect) and/or write FIDELITY.md."""
    parser = argparse.ArgumentParser(prog="python -m pobo.fidelity",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=Path("fidelity"), help="the CSV folder")
    parser.add_argument("--collect", type=Path, metavar="SWEEPS",
                        help="copy SWEEPS/*/runs.csv (trimmed) into the CSV folder first")
    parser.add_argument("--out", type=Path, default=Path("FIDELITY.md"))
    args = parser.parse_args(argv)
    if args.collect is not None:
        print("collected:", ", ".join(collect(args.collect, args.csv)) or "nothing")
    if not args.csv.is_dir():
        parser.error(f"no CSV folder {args.csv}")
    args.out.write_text(render(args.csv))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
