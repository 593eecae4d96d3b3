"""benchmarks/sweep_overhead.py compares like with like: the sweep, its parties called with
no channel, the flat prototype and the protocol-free reference must query the same rows in
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
    assert "the same rows queried by all three in every run: yes" in out
    assert "ratio sweep/reference:" in out
    split = out[out.index("split (T = 1 and T = 50"):].splitlines()
    for path in ("sweep", "reference", "flat prototype", "parties, no channel"):
        assert any(line.strip().startswith(path) and "a step" in line for line in split), path
    assert "the GP's own time a step" in out
    counted = out[out.index("Python lines executed"):].splitlines()[1:5]
    per_step = {}
    for line in counted:
        name, _, rest = line.strip().partition("  ")
        per_step[name] = float(rest.split()[0])
    assert set(per_step) == {"reference", "flat prototype", "parties, no channel", "sweep"}
    assert per_step["sweep"] > per_step["parties, no channel"] > per_step["reference"] > 0
    assert per_step["flat prototype"] > per_step["reference"]
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
