"""The scenarios `pobo` knows: built in, installed by other packages, or a script.

A scenario is a function `build(seed, **options) -> Problem` (scenarios.problem:
the private dataset X, the objective f, its sense and the public defaults). The
built-in ones below use exactly that API; an installed distribution registers more
under the entry-point group `pobo.scenarios` (name = "module:function"); and
`pobo run path/to/my_scenario.py` loads the file and calls its `build`
(examples/my_scenario.py is one). A script or entry point may set `PUBLIC_INPUTS =
True` beside its `build` when its inputs are public (no projection by default).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a scenario's module (and numpy) is imported when it is built, not here
    from pobo.scenarios.problem import Problem

ENTRY_POINTS = "pobo.scenarios"
PUBLIC_INPUTS = frozenset({"ldp-synthetic", "tuning"})  # inputs are a public grid: no projection by default
# The task is to find distinct rows (patients to test, projects to buy) and the tabulated
# outcome is exact: a second query of a row returns the same value and costs a query. By
# default the modeler's GP-UCB or random never queries a row twice (a public fact of the
# task, not of the data). Real estate's GP-UCB spent 38 of its 100 queries on rows asked
# before (seeds 0-99): under the rule it finds 5.78 +- 0.13 top-1% projects, not 2.91.
# `table` on the same file, its --objective column exact, asked 14.6 distinct rows of 50;
# a table measured on demand (--objective-cmd, --objective-wait) may measure a row anew.
DISTINCT_ROWS = frozenset({"hospital", "realestate"})
DISTINCT_IF_TABULATED = frozenset({"table"})


def distinct_by_default(scenario: str, on_demand: bool) -> bool:
    """Whether a session of `scenario` asks each row at most once unless told otherwise:
    its task is to find rows and their outcome is fixed (DISTINCT_ROWS), or it is a
    table whose objective is a column, not measured on demand."""
    return scenario in DISTINCT_ROWS or (scenario in DISTINCT_IF_TABULATED and not on_demand)
# name -> the module whose `build` it is, imported only when the scenario is built
SCENARIOS: dict[str, str] = {
    "synthetic": "synthetic", "branin": "branin", "hospital": "hospital", "bank": "bank",
    "realestate": "realestate", "ldp-synthetic": "ldp_synthetic", "tuning": "tuning",
    "table": "table",
}


def installed() -> dict[str, object]:
    """Scenarios other distributions register under `pobo.scenarios` (not loaded yet)."""
    from importlib.metadata import entry_points  # ~30 ms: only when a name is not built in

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINTS)}


def scenario_names() -> list[str]:
    """Every scenario name: built in, then installed."""
    return sorted(SCENARIOS) + sorted(set(installed()) - set(SCENARIOS))


def is_known(name: str) -> bool:
    """Whether `name` is a registered scenario (the installed ones are looked up only
    for a name that is not built in)."""
    return name in SCENARIOS or name in installed()


def is_script(name: str) -> bool:
    """Whether `name` names a scenario script (a .py file) rather than a registered name."""
    return name.endswith(".py")


def resolve(name: str) -> Callable[..., Problem]:
    """The `build` function of scenario `name` (a name or a path to a .py script);
    ValueError, one line, for anything else."""
    if is_script(name):
        module = _load_script(Path(name))
        return module.build
    if name in SCENARIOS:
        return importlib.import_module(f"pobo.scenarios.{SCENARIOS[name]}").build
    found = installed().get(name)
    if found is None:
        raise ValueError(f"unknown scenario {name!r}; choose from {scenario_names()} or give "
                         "a path to a scenario script (.py)")
    builder = found.load()
    if not callable(builder):
        raise ValueError(f"the {ENTRY_POINTS} entry point {name!r} is not a function")
    return builder


def public_inputs(name: str) -> bool:
    """Whether scenario `name` declares its inputs public (no projection by default)."""
    if name in PUBLIC_INPUTS:
        return True
    if is_script(name) and Path(name).is_file():
        return bool(getattr(_load_script(Path(name)), "PUBLIC_INPUTS", False))
    return False


def _load_script(path: Path):
    """Import a scenario script by path (a new module each time: no global state)."""
    if not path.is_file():
        raise ValueError(f"no scenario script at {path}")
    spec = importlib.util.spec_from_file_location(f"pobo_scenario_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ValueError(f"scenario script {path} failed to load: {type(exc).__name__}: "
                         f"{exc}") from None
    if not callable(getattr(module, "build", None)):
        raise ValueError(f"scenario script {path} defines no build(seed, **options) function")
    return module


def build_problem(name: str, seed: int | None, **options) -> Problem:
    """The Problem of scenario `name` (a name or a script path) for `seed`, with
    scenario-specific options."""
    builder = resolve(name)
    options = {k: v for k, v in options.items() if v is not None}
    try:  # the options the builder takes, apart from what goes wrong inside it
        inspect.signature(builder).bind(seed, **options)
    except TypeError as exc:
        raise ValueError(f"scenario {name!r} does not take options {sorted(options)}: {exc}") from None
    except ValueError:
        pass  # no signature to read: the call itself says
    try:
        problem = builder(seed, **options)
    except (ValueError, OSError, MemoryError):
        raise  # already what a user reads in one line
    except Exception as exc:  # a scenario script's own fault: one line, naming it
        raise ValueError(f"scenario {name!r} failed to build its problem: "
                         f"{type(exc).__name__}: {exc}") from None
    from pobo.scenarios.problem import Problem  # noqa: F811  (loaded with the scenario)

    if not isinstance(problem, Problem):
        raise ValueError(f"scenario {name!r} returned {type(problem).__name__}, not a Problem")
    return problem
