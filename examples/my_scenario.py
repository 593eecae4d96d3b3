"""A scenario of your own: a plant's recipe records and their yield, maximised.

    pobo run examples/my_scenario.py --T 30
    pobo curator examples/my_scenario.py --journal plant.db --sessions 0 --budget-eps 10

A scenario is a function `build(seed, **options) -> Problem`: the curator's private
dataset X (one row per candidate), the objective f on every row, its sense, and the
public defaults (epsilon, delta, r, T, the declared bound B on |f| that LDP rewards
need, the kernel the modeler starts from). `data_problem` prepares X as the paper does
(length-scales fitted on the curator's own rows, centring, max norm 25). Options are
the command line's (`--n 500` arrives as n=500). Your data would come from a file:
here it is generated, so the example runs anywhere.
"""
from __future__ import annotations

import numpy as np

from pobo.scenarios.problem import Problem, data_problem


def build(seed: int | None, n: int = 400) -> Problem:
    """n recipes (temperature, pressure, catalyst) and their yield."""
    rng = np.random.default_rng(20261122)  # the plant's records: fixed, not the run's seed
    temperature = rng.uniform(150, 250, n)
    pressure = rng.uniform(1, 10, n)
    catalyst = rng.uniform(0, 2, n)
    yield_ = (np.exp(-((temperature - 205) / 30) ** 2) * np.tanh(pressure / 4)
              - 0.3 * (catalyst - 1.2) ** 2 + rng.normal(0, 0.02, n))
    X = np.column_stack([temperature, pressure, catalyst])
    return data_problem("plant", X, yield_, seed, source="examples/my_scenario.py (generated)",
                        epsilon=2.0, delta=1e-5, r=8, T=30, noise_var=0.0, B=2.0)
