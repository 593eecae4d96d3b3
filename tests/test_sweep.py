"""Sweeps: deterministic tables, resume, the dask executor, reports."""
import dataclasses
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from pobo.report import markdown_table, write_report
from pobo.sweep import SweepSpec, run_sweep

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
    import pobo.sweep as sweep_module

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


def test_a_sweep_says_in_its_table_and_csv_that_its_runs_carry_no_dp_claim(tmp_path):
    """A review's finding: `pobo sweep --preset table1` printed, and wrote to table.md and
    runs.csv, regret with nothing saying the runs carry no DP guarantee (the paper's own
    release, seeded noise). Each run's row says whether it is DP and why not, and the
    table's first line how many are not."""
    small = dataclasses.replace(SPEC, epsilons=(2.0,), rs=(2,), seeds=2, non_private=False,
                                lifts=("paper",))
    rows = run_sweep(small, tmp_path, workers=1, progress=None)
    text = write_report(rows, tmp_path, scenario="synthetic", options={"grid": 12},
                        epsilons=small.epsilons, rs=small.rs)
    assert all(r["dp"] is False and "lift paper" in r["not_dp"] for r in rows), rows
    first = (tmp_path / "table.md").read_text().splitlines()[0]
    assert first.startswith(f"**No DP guarantee:** {len(rows)} of {len(rows)} runs")
    assert "lift paper" in first and "(seed" not in first and first in text
    assert ",dp,not_dp," in (tmp_path / "runs.csv").read_text().splitlines()[0]
    from pobo.html_report import write_html_report
    page = write_html_report(tmp_path).read_text()
    assert f"No DP guarantee: {len(rows)} of {len(rows)} runs" in page


def test_dask_cluster_gives_the_same_table_as_the_process_pool(tmp_path):
    distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
    small = SweepSpec("synthetic", epsilons=(3.0,), rs=(2, 4), seeds=2, T=5, options={"grid": 10})
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        from pobo.sweep import dask_executor
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


def test_runs_sharing_a_worker_give_what_each_gives_alone(tmp_path):
    """A seed's runs share one process, one event loop, one dataset and whatever a
    process caches (the in-memory journal's empty schema, ...): each run's record must be
    the one it gives
    alone, in a fresh service on a freshly built dataset, so nothing leaks from one run
    into the next. The sweep runs them forwards; alone they run backwards."""
    import asyncio

    from pobo.session import run_inproc

    spec = SweepSpec("synthetic", epsilons=(2.0,), rs=(2, 3), seeds=2, T=6, non_private=True,
                     ldp_epsilons=(None, 4.0), options={"grid": 10})
    rows = run_sweep(spec, tmp_path / "sweep", workers=1, progress=None)
    keys = ("queries", "rewards", "measured", "simple_regret", "dataset_digest", "omega",
            "status", "dp", "privacy_unit", "f_star", "sigma_f", "random_regret_expected",
            "sigma_y", "sigma_y_source", "cumulative_regret")
    for rid, cfg in reversed(spec.runs()):
        alone = asyncio.run(run_inproc(cfg, tmp_path / "alone" / rid, transcripts=False))
        swept = json.loads((tmp_path / "sweep" / "runs" / rid / "result.json").read_text())
        assert {k: swept[k] for k in keys} == {k: alone[k] for k in keys}, rid
        assert swept["ledger"]["session"]["entries"] == alone["ledger"]["session"]["entries"]
    assert len(rows) == 2 * 2 * 3


def test_a_seeds_runs_share_one_event_loop_and_no_task_outlives_its_run(tmp_path, monkeypatch):
    """The runs of a group run one after another on one event loop: when each starts,
    nothing of the run before it is still scheduled (its parties' tasks, timers or
    evaluations), so a run cannot act inside the next one."""
    import asyncio

    import pobo.sweep as sweep_module

    seen = []
    real = sweep_module.run_inproc

    async def watched(*args, **kwargs):
        loop = asyncio.get_running_loop()
        live = [h for h in loop._scheduled if not h.cancelled()]  # (cancelled: inert)
        seen.append((loop, len(asyncio.all_tasks()), len(live)))
        return await real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "run_inproc", watched)
    spec = SweepSpec("synthetic", epsilons=(2.0,), rs=(2, 3, 4), seeds=1, T=5,
                     options={"grid": 10})
    run_sweep(spec, tmp_path / "s", workers=1, progress=None)
    assert len(seen) == 3 and len({id(loop) for loop, _, _ in seen}) == 1
    assert all(tasks == 1 for _, tasks, _ in seen), seen  # the group's own task alone
    assert all(timers == 0 for _, _, timers in seen[1:]), seen  # no timer of a run left


def test_a_seeds_runs_compute_the_datasets_own_figures_once(tmp_path, monkeypatch):
    """The figures that depend only on the dataset (its digest, E[S_T] of random search)
    are computed once for a seed's runs, which share the Problem; another Problem (here
    one with another f) gets its own."""
    import dataclasses

    import pobo.parties.dataset as dataset
    import pobo.session as session
    from pobo.scenarios.registry import build_problem

    calls = {"digest": 0, "random": 0}
    digest, random_regret = dataset.arrays_digest, session.random_regret_expected

    def counted(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)
        return wrapper

    monkeypatch.setattr(dataset, "arrays_digest", counted("digest", digest))
    monkeypatch.setattr(session, "random_regret_expected", counted("random", random_regret))
    spec = SweepSpec("synthetic", epsilons=(2.0,), rs=(2, 3, 4), seeds=2, T=6,
                     options={"grid": 10})
    rows = run_sweep(spec, tmp_path / "sweep", workers=1, progress=None)
    assert len(rows) == 6 and calls == {"digest": 2, "random": 2}  # one per seed
    results = [json.loads((tmp_path / "sweep" / "runs" / r["run"] / "result.json").read_text())
               for r in rows]
    for seed in (0, 1):
        problem = build_problem("synthetic", seed, grid=10)
        mine = [r for r in results if r["seed"] == seed]
        assert {r["dataset_digest"] for r in mine} == {digest(problem.X, problem.f)}
        assert {r["random_regret_expected"] for r in mine} == {random_regret(problem.f, 6)}
        other = dataclasses.replace(problem, f=problem.f + 1.0)
        assert dataset.dataset_digest(problem) == mine[0]["dataset_digest"]
        assert dataset.dataset_digest(other) == digest(other.X, other.f) != mine[0]["dataset_digest"]


def test_a_sweep_run_writes_result_json_and_a_failed_one_each_partys_record(
        tmp_path, monkeypatch):
    """result.json holds both parties' records, so a finished sweep run writes only it;
    a run that fails part-way leaves curator.json and modeler.json as `pobo run` does."""
    from pobo.parties.curator import Curator

    small = SweepSpec("synthetic", epsilons=(2.0,), rs=(2,), seeds=1, T=5, options={"grid": 10})
    (rid, _), = small.runs()
    run_sweep(small, tmp_path / "ok", workers=1, progress=None)
    assert sorted(p.name for p in (tmp_path / "ok" / "runs" / rid).iterdir()) == ["result.json"]

    start = Curator.start

    def failing(self, seq, index):
        if seq == 3:
            raise RuntimeError("the objective's disk is gone")
        return start(self, seq, index)

    monkeypatch.setattr(Curator, "start", failing)
    with pytest.raises(RuntimeError, match="disk is gone"):
        run_sweep(small, tmp_path / "failed", workers=1, progress=None)
    folder = tmp_path / "failed" / "runs" / rid
    assert sorted(p.name for p in folder.iterdir()) == ["curator.json", "modeler.json"]
    curator = json.loads((folder / "curator.json").read_text())
    modeler = json.loads((folder / "modeler.json").read_text())
    assert curator["status"] == "failed" and "disk is gone" in curator["error"]
    assert len(curator["queries"]) == 2 and modeler["queries"] == curator["queries"]
    assert modeler["status"] == "error"


def test_a_problems_data_cannot_be_changed_through_it_so_its_remembered_figures_hold():
    from pobo.parties.dataset import dataset_digest
    from pobo.scenarios.registry import build_problem

    problem = build_problem("synthetic", 0, grid=10)
    digest = dataset_digest(problem)
    with pytest.raises(ValueError):
        problem.X[0, 0] += 1.0
    with pytest.raises(ValueError):
        problem.f[0] = 0.0
    assert dataset_digest(problem) == digest
    changed = dataclasses.replace(problem, f=problem.f + 1.0)  # a new Problem: its own figures
    assert dataset_digest(changed) != digest


def test_a_pickled_problem_forgets_its_figures_and_stays_read_only():
    import pickle

    from pobo.parties.dataset import dataset_digest
    from pobo.scenarios.registry import build_problem

    problem = build_problem("synthetic", 0, grid=10)
    dataset_digest(problem)
    copy = pickle.loads(pickle.dumps(problem))
    assert "_once" not in copy.__dict__
    assert not copy.X.flags.writeable and not copy.f.flags.writeable
    assert dataset_digest(copy) == dataset_digest(problem)
