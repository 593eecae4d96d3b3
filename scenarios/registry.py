"""The scenarios `pobo` knows, by name."""
from __future__ import annotations

from collections.abc import Callable

from scenarios import synthetic
from scenarios.problem import Problem

SCENARIOS: dict[str, Callable[..., Problem]] = {"synthetic": synthetic.build}


def build_problem(name: str, seed: int | None, **options) -> Problem:
    """The Problem of scenario `name` for `seed`, with scenario-specific options."""
    try:
        builder = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; choose from {sorted(SCENARIOS)}") from None
    return builder(seed, **{k: v for k, v in options.items() if v is not None})
