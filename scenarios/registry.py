"""The scenarios `pobo` knows, by name."""
from __future__ import annotations

from collections.abc import Callable

from scenarios import (
    bank, branin, hospital, ldp_synthetic, realestate, synthetic, table, tuning,
)
from scenarios.problem import Problem

PUBLIC_INPUTS = frozenset({"ldp-synthetic", "tuning"})  # inputs are a public grid: no projection by default
SCENARIOS: dict[str, Callable[..., Problem]] = {
    "synthetic": synthetic.build, "branin": branin.build, "hospital": hospital.build,
    "bank": bank.build, "realestate": realestate.build, "ldp-synthetic": ldp_synthetic.build,
    "tuning": tuning.build, "table": table.build,
}


def build_problem(name: str, seed: int | None, **options) -> Problem:
    """The Problem of scenario `name` for `seed`, with scenario-specific options."""
    try:
        builder = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose from {sorted(SCENARIOS)}") from None
    options = {k: v for k, v in options.items() if v is not None}
    try:
        return builder(seed, **options)
    except TypeError as exc:
        raise ValueError(f"scenario {name!r} does not take options {sorted(options)}: {exc}") from None
