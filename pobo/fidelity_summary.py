"""FIDELITY.md's summary of Tables 1-3: per variant, the lifted and unlifted cells that
agree, and the verdict rule's measured false-pass rate against a known-wrong variant."""
from __future__ import annotations

from pathlib import Path

from pobo.fidelity_csv import AUTHORS, read_rows
from pobo.fidelity_rule import (
    RESAMPLES, RULE, WRONG, own_rule, pass_rates, pooled_rule, wrong_variant_command,
)
from pobo.fidelity_tables import Column, by_r, lifted_rs, table_agreement
from pobo.scenarios.presets import PRESETS


def synthetic_columns(folder: Path, suffix: str) -> dict[str, Column] | None:
    """Tables 1-3 as one Column each from fidelity/tableN{suffix}.csv (None: not all run)."""
    paths = {f"table{i}": folder / f"table{i}{suffix}.csv" for i in (1, 2, 3)}
    if not all(p.exists() for p in paths.values()):
        return None
    return {name: Column("", by_r(read_rows(p)), "") for name, p in paths.items()}


def synthetic_summary(folder: Path) -> str:
    """Tables 1-3 in one line: per variant, how many lifted and unlifted cells agree
    (computed; the spread pooled over the two variants as in the tables)."""
    variants = {label: synthetic_columns(folder, suffix) for label, suffix in
                (("the paper's text", ""), ("the authors' code", AUTHORS))}
    variants = {label: v for label, v in variants.items() if v}
    if not variants:
        return ""
    counts = {label: [0, 0] for label in variants}
    n_lifted = n_cells = 0
    for name in ("table1", "table2", "table3"):
        columns = [v[name] for v in variants.values()]
        for label, (lifted, unlifted) in zip(variants, table_agreement(name, columns)):
            counts[label][0] += lifted
            counts[label][1] += unlifted
        n_lifted += len(lifted_rs(PRESETS[name], columns[0]))
        n_cells += len(PRESETS[name].rs)
    rates = false_pass_section(folder)
    return (f"**Tables 1-3 (synthetic), cells within {RULE} of the paper:** lifted cells "
            f"(the {n_lifted} that tell the variants apart): "
            + ", ".join(f"{label} {c[0]} of {n_lifted}" for label, c in counts.items())
            + f"; unlifted cells: "
            + ", ".join(f"{label} {c[1]} of {n_cells - n_lifted}" for label, c in counts.items())
            + ".\n" + ("\n" + rates if rates else ""))


def false_pass_section(folder: Path) -> str:
    """The verdict rule's measured false-pass rate: how often it passes the known-wrong
    variant (fidelity/tableN-authors-beta.csv) over resamples of the seeds, beside the
    authors' code itself, for this rule and the rule before issue 50 (computed)."""
    text, authors = synthetic_columns(folder, ""), synthetic_columns(folder, AUTHORS)
    wrong = synthetic_columns(folder, AUTHORS + WRONG)
    if not (text and authors and wrong):
        return ""
    cells, paper, lifted = {}, {}, []
    for name in ("table1", "table2", "table3"):
        preset = PRESETS[name]
        for r in preset.rs:
            runs = {k: {g["seed"]: g["simple_regret_sigma_y"] for g in v[name].runs.get(r, [])}
                    for k, v in (("text", text), ("authors", authors), ("wrong", wrong))}
            seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
            cells[(name, r)] = {k: [v[s] for s in seeds] for k, v in runs.items()}
            paper[(name, r)] = preset.paper[r]
        lifted += [(name, r) for r in lifted_rs(preset, text[name])]
    seeds = min(len(c["text"]) for c in cells.values())
    rows, measured = [], {}
    for rule_label, rule in (("this rule (2 se, spread pooled over the shown columns)",
                              pooled_rule), ("the old rule (own se + 0.01 σ_y)", own_rule)):
        for variant, shown in (("wrong: β_t·variance", ("text", "wrong")),
                               ("authors' code: β_{t−1}^½·variance", ("text", "authors"))):
            judged = shown[1]
            rates = pass_rates({c: {k: v[k] for k in shown} for c, v in cells.items()},
                               judged, paper, lifted, rule)
            measured[(rule, judged)] = rates
            rows.append(f"| {rule_label} | {variant} | {rates.rate(True):.0%} | "
                        f"{rates.rate(False):.0%} | {rates.all_lifted:.0%} | "
                        f"{rates.mean_passed:.1f} of {len(cells)} |")
    return "\n".join([
        f"**The rule's false-pass rate** (measured over {RESAMPLES} bootstrap resamples of "
        f"the {seeds} seeds of each table, `pobo.fidelity_rule.pass_rates`): the known-wrong "
        "variant is --authors-code as it was before issue 50, the variance weighted by β_t "
        "(pobo's index) instead of the authors' β_{t−1}^½, 5-6x their exploration "
        f"(`{wrong_variant_command(seeds)}`, fidelity/tableN-authors{WRONG}.csv). Each "
        "variant is judged beside the paper's-text column, as the tables show it.", "",
        "| rule | variant judged | lifted cells passed | unlifted cells passed | all "
        f"{len(lifted)} lifted pass | cells passed (mean) |",
        "| --- | --- | --- | --- | --- | --- |", *rows, "",
        "**So:** the lifted cells decide. This rule passes a lifted cell of the wrong variant "
        f"in {measured[(pooled_rule, 'wrong')].rate(True):.0%} of resamples and all "
        f"{len(lifted)} in {measured[(pooled_rule, 'wrong')].all_lifted:.0%} (the old rule: "
        f"{measured[(own_rule, 'wrong')].rate(True):.0%} and "
        f"{measured[(own_rule, 'wrong')].all_lifted:.0%}), where the authors' code passes all "
        f"{len(lifted)} in {measured[(pooled_rule, 'authors')].all_lifted:.0%}; the unlifted "
        f"cells pass the wrong variant {measured[(pooled_rule, 'wrong')].rate(False):.0%} of "
        f"the time (under the old rule: {measured[(own_rule, 'wrong')].rate(False):.0%})"
        ", so they do not tell the variants apart and the verdict on Tables 1-3 rests on the "
        "lifted count.", ""])
