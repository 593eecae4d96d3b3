"""Sweeps: deterministic tables, resume, the dask executor, reports."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from pobo.scenarios.report import markdown_table, write_report
from pobo.scenarios.sweep import SweepSpec, run_sweep

SPEC = SweepSpec("synthetic", epsilons=(2.0, 20.0), rs=(2, 3), seeds=3, T=6,
                 non_private=True, options={"grid": 12})


def test_same_seeds_give_identical_tables(tmp_path):
    a = run_sweep(SPEC, tmp_path / "a", workers=2, progress=None)
    with ThreadPoolExecutor(2) as threads:  # its threads end with the test
        b = run_sweep(SPEC, tmp_path / "b", executor=threads, progress=None)
    assert len(a) == 3 * (2 * 2 + 1)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(a) == strip(b)
    assert markdown_table(a) == markdown_table(b)
    assert "non-private" in markdown_table(a)


def test_one_worker_runs_in_this_process_with_the_same_table(tmp_path, monkeypatch):
    """workers=1 starts no interpreter (like joblib's n_jobs=1) and gives the table that
    two spawned workers give."""
    import pobo.scenarios.sweep as sweep_module

    pooled = run_sweep(SPEC, tmp_path / "pool", workers=2, progress=None)

    def no_pool(*args, **kwargs):
        raise AssertionError("workers=1 must not start a process pool")

    monkeypatch.setattr(sweep_module, "ProcessPoolExecutor", no_pool)
    here = run_sweep(SPEC, tmp_path / "here", workers=1, progress=None)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(here) == strip(pooled)


def test_an_interrupted_sweep_resumes_without_rerunning_finished_runs(tmp_path):
    small = SweepSpec("synthetic", epsilons=(2.0,), rs=(2,), seeds=2, T=5, options={"grid": 10})
    first = run_sweep(small, tmp_path, workers=1, progress=None)
    stamps = {r["run"]: (tmp_path / "runs" / r["run"] / "result.json").stat().st_mtime_ns
              for r in first}
    broken = tmp_path / "runs" / first[1]["run"] / "result.json"
    broken.write_text("{ half a file")  # as if killed while writing
    lines = []
    again = run_sweep(small, tmp_path, workers=1, progress=lines.append)
    assert lines[0].startswith("[sweep] 1 of 2 runs already finished")
    assert (tmp_path / "runs" / first[0]["run"] / "result.json").stat().st_mtime_ns == \
        stamps[first[0]["run"]]
    assert json.loads(broken.read_text())["status"] == "ok"  # re-run
    assert [r["simple_regret"] for r in again] == [r["simple_regret"] for r in first]


def test_report_files_and_admissible_r(tmp_path):
    rows = run_sweep(SPEC, tmp_path, workers=2, progress=None)
    text = write_report(rows, tmp_path, scenario="synthetic", options={"grid": 12},
                        epsilons=SPEC.epsilons, rs=SPEC.rs, paper={2: 0.5}, title="t")
    assert (tmp_path / "runs.csv").read_text().count("\n") == len(rows) + 1
    assert "paper S_T" in (tmp_path / "table.md").read_text()
    assert "sigma_min >= omega for swept r in" in text and "largest admissible r" in text
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "regret_r2.png").stat().st_size > 1000
    except ImportError:
        assert "matplotlib is not installed" in text


def test_dask_cluster_gives_the_same_table_as_the_process_pool(tmp_path):
    distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
    small = SweepSpec("synthetic", epsilons=(3.0,), rs=(2, 4), seeds=2, T=5, options={"grid": 10})
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        from pobo.scenarios.sweep import dask_executor
        executor = dask_executor(cluster.scheduler_address)
        try:
            on_dask = run_sweep(small, tmp_path / "dask", executor=executor, progress=None)
        finally:
            executor._client.close()
    local = run_sweep(small, tmp_path / "pool", workers=2, progress=None)
    assert markdown_table(on_dask) == markdown_table(local)


def test_pobo_sweep_command_prints_a_table_and_the_wall_time(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pobo", "sweep", "synthetic",
                           "--grid", "10", "--T", "4", "--seeds", "2", "--r", "2", "3",
                           "--log-eps", "1.1", "--non-private", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "wall time" in done.stdout and "| 3.004 | 2 |" in done.stdout and "e^" not in done.stdout
    assert done.stdout.count("[sweep] ") >= 6
