"""Metrics that tell methods apart in every scenario: top-1% rows found and the rank of
the best row found (scenarios/problem.py), as result.json records them."""
from __future__ import annotations

import numpy as np

from pobo.scenarios.problem import best_rank, top_hits, top_rows_threshold


def test_top_rows_are_the_best_ceil_one_percent_ties_included():
    f = np.arange(250, dtype=float)  # ceil(2.5) = 3 rows: 249, 248, 247
    assert top_rows_threshold(f) == 247.0
    tied = np.array([0.0] * 180 + [1.0] * 20)  # a 0/1 outcome: every positive ties at 1
    assert top_rows_threshold(tied) == 1.0 and int(np.sum(tied >= 1.0)) == 20


def test_top_hits_count_distinct_rows_at_or_above_the_threshold():
    f = np.arange(250, dtype=float)
    assert top_hits(f, [249, 249, 248, 10, 246], top_rows_threshold(f)) == 2  # repeats once
    assert top_hits(f, [], 247.0) == 0


def test_best_rank_is_one_plus_the_rows_strictly_better_than_the_best_found():
    f = np.array([0.5, 3.0, 2.0, 3.0, 1.0])
    assert best_rank(f, [0, 4]) == 4 and best_rank(f, [2]) == 3 and best_rank(f, [3]) == 1
    assert best_rank(f, []) is None
