"""`pobo runs [DIR]`: the runs and sweeps under a folder, one line each, oldest first;
--json; folders that cannot be read are listed with a note, never a traceback."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pobo.report import write_report
from pobo.runs import RunsError, list_runs, runs_table
from pobo.session import RunConfig, run_inproc
from pobo.sweep import SweepSpec, run_sweep

SWEEP = SweepSpec("synthetic", epsilons=(8.0,), rs=(3,), seeds=2, T=5, non_private=True,
                  strategies=("gp-ucb", "random"), options={"grid": 10})


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """runs/ with a run, a non-private run, a sweep, a broken run, a broken sweep, an
    incomplete run and an empty folder, their records written at known times."""
    root = tmp_path_factory.mktemp("runs")
    asyncio.run(run_inproc(RunConfig("synthetic", T=6, epsilon=8.0, options={"grid": 10},
                                     seed=None), root / "run-a"))  # the OS CSPRNG: DP
    asyncio.run(run_inproc(RunConfig("synthetic", T=6, non_private=True,
                                     options={"grid": 10}), root / "deeper" / "run-np"))
    rows = run_sweep(SWEEP, root / "sweep", executor=ThreadPoolExecutor(1), progress=None)
    write_report(rows, root / "sweep", scenario="synthetic", options=SWEEP.options,
                 epsilons=SWEEP.epsilons, rs=SWEEP.rs, title="a sweep", dataset="")
    (root / "broken").mkdir()
    (root / "broken" / "result.json").write_text("{ half")
    (root / "bad-sweep").mkdir()
    (root / "bad-sweep" / "runs.csv").write_text("a,b\n1,2\n")
    (root / "stopped").mkdir()
    (root / "stopped" / "modeler.json").write_text("{}")
    (root / "empty" / "nothing").mkdir(parents=True)
    # written in this order, an hour apart, whatever order they were made in
    order = [root / "sweep" / "runs.csv", root / "broken" / "result.json",
             root / "run-a" / "result.json", root / "stopped" / "modeler.json",
             root / "bad-sweep" / "runs.csv", root / "deeper" / "run-np" / "result.json"]
    for hours, path in enumerate(order):
        os.utime(path, (1.7e9 + 3600 * hours, 1.7e9 + 3600 * hours))
    return root


def test_every_run_and_sweep_once_oldest_first(folder):
    entries = list_runs(folder)
    assert [Path(e["path"]).relative_to(folder).as_posix() for e in entries] == [
        "sweep", "broken", "run-a", "stopped", "bad-sweep", "deeper/run-np"]
    assert [e["kind"] for e in entries] == ["sweep", "run", "run", "modeler", "sweep",
                                            "run"]
    times = [e["time"] for e in entries]
    assert times == sorted(times) and times[0] == "2023-11-14T22:13:20+00:00"


def test_a_run_line_holds_its_ledger_and_its_answer(folder):
    by = {Path(e["path"]).name: e for e in list_runs(folder)}
    result = json.loads((folder / "run-a" / "result.json").read_text())
    run = by["run-a"]
    assert run["scenario"] == "synthetic" and run["status"] == "ok"
    assert run["policy"] == f"private ({result['lift']})"
    # the projection's (8, 1e-5), stated at the ledger's delta (the budget's, 1e-5 + 2e-8)
    assert run["epsilon_spent"] == result["ledger"]["central"]["epsilon"] \
        == pytest.approx(8.0, rel=1e-3)
    regret = result["simple_regret"][-1] / result["sigma_y"]
    assert run["value"] == pytest.approx(regret)
    assert run["result"].startswith(f"S_T {regret:.3g} σ_y")
    private = by["run-np"]
    assert private["policy"] == "non-private"
    assert private["epsilon_spent"] == json.loads(
        (folder / "deeper" / "run-np" / "result.json").read_text())["ledger"]["central"][
        "epsilon"]


def test_a_sweep_is_one_line_with_its_runs_summarised(folder):
    entries = list_runs(folder)
    assert not [e for e in entries if "/runs/" in e["path"]]  # its runs are not listed
    [sweep] = [e for e in entries if Path(e["path"]).name == "sweep"]
    rows = (folder / "sweep" / "runs.csv").read_text().splitlines()
    assert sweep["runs"] == len(rows) - 1 and sweep["status"] == "ok"
    assert sweep["policy"] == "private (gaussian) + non-private"
    assert sweep["epsilon_spent"] == sweep["epsilon_spent_min"] == pytest.approx(8.0, rel=1e-3)
    private_runs = sum(1 for line in rows[1:] if ",private," in line)
    assert sweep["epsilon_spent_sum"] == pytest.approx(8.0 * private_runs, rel=1e-3)
    assert sweep["best_private"]["setting"] == "gp-ucb, ε = 8"
    assert sweep["random"] is not None and sweep["non_private"] is not None
    assert sweep["result"].startswith("S_T/σ_y private ")
    # a run of it gone: the line says so, nothing raises
    gone = folder.parent / "sweep-copy"
    shutil.copytree(folder / "sweep", gone)
    shutil.rmtree(next((gone / "runs").iterdir()))
    [copy] = list_runs(gone)
    assert copy["status"] == f"{sweep['runs'] - 1}/{sweep['runs']} ok"


def test_unreadable_folders_are_one_line_notes(folder):
    by = {Path(e["path"]).name: e for e in list_runs(folder)}
    assert by["broken"]["status"] == "unreadable"
    assert by["broken"]["note"].startswith("result.json: JSONDecodeError: ")
    assert by["bad-sweep"]["status"] == "unreadable"
    assert by["bad-sweep"]["note"].startswith("runs.csv: ReportError: ")
    assert by["stopped"]["status"] == "failed"  # a record with no status: not "ok"
    for entry in by.values():
        assert entry["note"] is None or "\n" not in entry["note"]
    # a result.json of the wrong shape is a note too
    odd = folder.parent / "odd"
    (odd / "x").mkdir(parents=True)
    (odd / "x" / "result.json").write_text('{"queries": 5, "metric": "hits", "hits": 3}')
    (odd / "y").mkdir()
    (odd / "y" / "result.json").write_text("[1, 2]")
    [x, y] = list_runs(odd)
    assert x["status"] == y["status"] == "unreadable"
    assert x["note"].startswith("result.json: TypeError") and "JSON object" in y["note"]


def test_the_command_prints_a_table_and_json(folder):
    def pobo(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pobo", "runs", *args],
                              capture_output=True, text=True, timeout=120)

    text = pobo(str(folder))
    assert text.returncode == 0 and text.stderr == ""
    lines = text.stdout.splitlines()
    assert lines[0].split()[:4] == ["FOLDER", "KIND", "SCENARIO", "TIME"]
    assert lines[1:] == runs_table(list_runs(folder)).splitlines()[1:]
    assert len(lines) == 7 and "Traceback" not in text.stdout
    assert "7.999" in lines[3].split() and "result.json: JSONDecodeError" in lines[2]
    assert "no DP claim (non-private)" in lines[6]  # no epsilon, and no protection either
    # the sweep's runs are seeded: their ledgers are nominal, not an epsilon spent
    assert "no DP claim" in lines[1] and " of " not in lines[1].split("no DP claim")[0][-12:]
    as_json = pobo(str(folder), "--json")
    assert as_json.returncode == 0
    entries = json.loads(as_json.stdout)
    assert entries == json.loads(json.dumps(list_runs(folder)))
    missing = pobo(str(folder / "nowhere"))
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == (f"pobo runs: error: RunsError: no folder at "
                                      f"{folder / 'nowhere'}")


def test_the_default_folder_is_runs_and_an_empty_one_says_so(folder, tmp_path):
    shutil.copytree(folder / "run-a", tmp_path / "runs" / "only")
    done = subprocess.run([sys.executable, "-m", "pobo", "runs"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "runs/only" in done.stdout
    (tmp_path / "none").mkdir()
    assert list_runs(tmp_path / "none") == []
    assert runs_table([]) == "no runs or sweeps found"
    with pytest.raises(RunsError, match="no folder at"):
        list_runs(tmp_path / "missing")
