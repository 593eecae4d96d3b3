"""A slow objective with no process start, for benchmarks/batches.py.

    POBO_SLEEPY_S=0.01 pobo run benchmarks/sleepy_objective.py --grid 30 --T 48

The synthetic scenario's rows (`--grid` x `--grid`, seeded as `pobo run synthetic`)
with f evaluated on demand by `evaluate(index)`: it sleeps POBO_SLEEPY_S seconds
(default 0.01: a lab's measurement, say) and returns the tabulated value at that row.
The curator runs it in a worker thread (parties.objective.FunctionObjective), so a
query pays the sleep and a thread's start, where `--objective-cmd` pays two process
starts as well. (The sleep comes from the environment: `pobo curator` takes only the
scenario options it knows, and `pobo run` starts the curator with this environment.)
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from pobo.scenarios.problem import Problem
from pobo.scenarios.synthetic import build as synthetic

SLEEP_ENV = "POBO_SLEEPY_S"


def sleepy(f: np.ndarray, seconds: float) -> Callable[[int], float]:
    """The objective function of the row index: f[index] after sleeping `seconds`."""
    def evaluate(index: int) -> float:
        time.sleep(seconds)
        return float(f[index])
    return evaluate


def build(seed: int | None, grid: int = 30) -> Problem:
    """The synthetic problem on a grid x grid grid, f measured on demand in POBO_SLEEPY_S s."""
    seconds = float(os.environ.get(SLEEP_ENV, "0.01"))
    problem = synthetic(seed, grid=grid)
    return replace(problem, name="sleepy", f=None, evaluate=sleepy(problem.f, seconds),
                   source=f"{problem.source}, evaluated on demand after a {seconds:g} s sleep")
