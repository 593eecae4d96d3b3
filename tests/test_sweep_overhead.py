"""benchmarks/sweep_overhead.py compares like with like: the sweep, its parties called with
no channel, the flat prototype (with and without the boundary's checks written flat) and
the protocol-free reference must query the same rows in
every run (the script exits non-zero otherwise), `--split` prints each path's fixed
cost and cost a step, and `--lines` each path's Python lines a step and a run. Its times
are the benchmark's to print, not checked here; the line counts' order is structural (the
sweep runs its parties' code and more, the parties and the prototype the reference's)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "sweep_overhead.py"


def test_the_four_paths_query_the_same_rows_and_split_and_lines_print_each():
    done = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "1", "--rs", "3", "8",
                           "--reps", "1", "--split", "--lines"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "the same rows queried by all five in every run: yes" in out
    assert "ratio sweep/reference:" in out
    split = out[out.index("split (T = 1 and T = 50"):].splitlines()
    for path in ("sweep", "reference", "flat prototype", "flat, checked", "parties, no channel"):
        assert any(line.strip().startswith(path) and "a step" in line for line in split), path
    assert "the GP's own time a step" in out
    counted = out[out.index("Python lines executed"):].splitlines()[1:6]
    per_step = {}
    for line in counted:
        name, _, rest = line.strip().partition("  ")
        per_step[name] = float(rest.split()[0])
    assert set(per_step) == {"reference", "flat prototype", "flat, checked",
                             "parties, no channel", "sweep"}
    assert per_step["sweep"] > per_step["parties, no channel"] > per_step["reference"] > 0
    assert per_step["flat, checked"] > per_step["flat prototype"] > per_step["reference"]
    assert "the sweep's most a step: " in out and "channel.py:" in out


def test_a_path_that_queries_other_rows_fails_the_script(monkeypatch):
    """The like-for-like check bites: a reference that asks one other row in one run (on
    either repetition's order) makes the script exit with the reason, not print a ratio."""
    import importlib.util

    import pytest

    spec = importlib.util.spec_from_file_location("sweep_overhead_under_test", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    honest, calls = bench.reference, []

    def one_row_off(*args, **kwargs):
        runs = honest(*args, **kwargs)
        calls.append(len(calls))
        if len(calls) == 2:  # the second repetition's, run after the sweep
            runs[-1] = runs[-1][:-1] + [runs[-1][-1] + 1]
        return runs

    monkeypatch.setattr(bench, "reference", one_row_off)
    with pytest.raises(SystemExit, match="queried different rows"):
        bench.main(["--seeds", "1", "--rs", "3", "--reps", "2"])
    assert len(calls) == 2


def test_the_checked_flat_prototype_refuses_what_the_boundary_refuses(monkeypatch, tmp_path):
    """The checked prototype's checks bite: a modeler that asks a row outside [0, n) is
    refused by its own outgoing check, and the unchecked prototype lets the same run
    through (so the checks, not the run, refuse it)."""
    import asyncio
    import importlib.util

    import numpy as np
    import pytest

    spec = importlib.util.spec_from_file_location("sweep_overhead_checked", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    problem = bench.build_problem(bench.PRESET.scenario, 0)
    Z = np.ascontiguousarray(problem.X[:, :2], dtype=np.float64)

    def run(checked: bool, folder: str) -> list[int]:
        return asyncio.run(bench._flat_run(Z, problem.f, problem.kernel, problem.noise_var,
                                           0, 3, tmp_path / folder, checked))

    assert run(True, "honest") == run(False, "unchecked")
    n = Z.shape[0]
    monkeypatch.setattr(bench.IncrementalGP, "ucb_argmax",
                        lambda self, beta, rng, variance=False: n - 1 if self.t else n)
    with pytest.raises(AssertionError, match="query refused"):
        run(True, "refused")
