"""Tabular data without code: `pobo run table --data F.csv --features ... --objective ...`."""
import asyncio
import json
import subprocess
import sys

import numpy as np
import pytest

from pobo.scenarios.registry import build_problem
from pobo.session import RunConfig, run_inproc

POBO = [sys.executable, "-m", "pobo"]


@pytest.fixture
def csv_file(tmp_path):
    """A messy CSV: an id column, percent signs, a missing cell, a duplicate row."""
    rng = np.random.default_rng(0)
    lines = ["id,temp,dose,note,yield"]
    for i in range(60):
        t, d = rng.uniform(10, 30), rng.uniform(0, 5)
        y = -((t - 20) ** 2) / 20 - (d - 2) ** 2 + rng.normal(0, 0.05)
        lines.append(f"{i},{t:.3f},{d:.3f}%,x,{y:.4f}")
    lines.append("60,?,1.0,x,0.5")  # a missing feature
    lines.append(lines[1])  # a duplicate (same id too)
    path = tmp_path / "plant.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_table_picks_the_named_columns_and_counts_what_it_drops(csv_file):
    problem = build_problem("table", 0, data=str(csv_file), features="temp,dose",
                            objective="yield")
    assert problem.X.shape == (60, 2) and problem.f.shape == (60,)
    assert problem.dropped == {"missing temp": 1, "duplicate": 1}
    assert problem.sense == "maximise" and problem.B is None
    assert "features ['temp', 'dose'], objective 'yield'" in problem.source
    low = build_problem("table", 0, data=str(csv_file), features="temp,dose",
                        objective="yield", minimise=True)
    assert np.allclose(low.f, -problem.f) and low.sense == "minimise"


@pytest.mark.parametrize("args, message", [
    (["--features", "temp,height", "--objective", "yield"], "no column(s) ['height']"),
    (["--features", "temp", "--objective", "profit"], "no column(s) ['profit']"),
    (["--features", "temp,yield", "--objective", "yield"], "also a feature"),
    (["--objective", "yield"], "needs --data"),
])
def test_table_refuses_unknown_or_missing_columns_in_one_line(csv_file, args, message,
                                                             tmp_path):
    run = subprocess.run([*POBO, "run", "table", "--data", str(csv_file), "--transport",
                          "inproc", *args], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)  # its default out folder, runs/, goes there
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1 and message in lines[0], run.stderr
    assert not (tmp_path / "runs").exists()  # no folder of a run that never started


@pytest.mark.parametrize("transport", ["inproc", "tcp"])
def test_a_run_that_never_starts_leaves_no_folder_and_keeps_one_that_was_there(
        csv_file, tmp_path, transport):
    """A run refused before its session starts leaves no folder (the default
    runs/<name>/ and runs/, or a given --out it made): over tcp too, where the modeler,
    started beside the curator, may have recorded the Hello nobody received (removed,
    with the keys never copied). A given --out that held anything already keeps all of
    it, and gains nothing."""
    bad = ["--features", "temp,height", "--objective", "yield"]
    run = subprocess.run([*POBO, "run", "table", "--data", str(csv_file), "--transport",
                          transport, *bad], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert run.returncode == 1 and "no column(s) ['height']" in run.stderr, run.stderr
    assert not (tmp_path / "runs").exists(), list((tmp_path / "runs").rglob("*"))
    kept = tmp_path / "mine"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    run = subprocess.run([*POBO, "run", "table", "--data", str(csv_file), "--transport",
                          transport, "--out", str(kept), *bad], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert (kept / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]


def test_pobo_run_table_over_tcp_finds_a_good_row(csv_file, tmp_path):
    out = tmp_path / "run"
    subprocess.run([*POBO, "run", "table", "--data", str(csv_file), "--features", "temp,dose",
                    "--objective", "yield", "--T", "15", "--lift", "paper", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=180)
    result = json.loads((out / "result.json").read_text())
    assert result["scenario"] == "table" and len(result["queries"]) == 15
    assert result["status"] == "ok" and result["modeler"]["status"] == "ok"


def test_table_in_process_from_python(csv_file, tmp_path):
    config = RunConfig("table", T=5, options={"data": str(csv_file), "features": "temp,dose",
                                              "objective": "yield"})
    result = asyncio.run(run_inproc(config, tmp_path))
    assert len(result["queries"]) == 5 and result["n"] == 60 and result["d"] == 2


def test_a_table_column_is_asked_a_row_at_most_once_unless_measured_on_demand(csv_file,
                                                                              tmp_path):
    """An --objective column is exact: a second query of a row returns the same value.
    Without the rule GP-UCB asked 14.6 distinct rows of 50 on the real-estate file (30
    seeds); a table measured on demand may measure a row anew, so it keeps the choice."""
    options = {"data": str(csv_file), "features": "temp,dose", "objective": "yield"}
    config = RunConfig("table", T=40, seed=0, options=options)
    assert config.distinct and config.strategy_spec == "gp-ucb+distinct"
    result = asyncio.run(run_inproc(config, tmp_path / "column"))
    assert len(set(result["queries"])) == 40
    repeats = asyncio.run(run_inproc(RunConfig("table", T=40, seed=0, options=options,
                                               distinct=False), tmp_path / "free"))
    assert len(set(repeats["queries"])) < 40  # what the rule prevents, on this file
    assert not RunConfig("table", options=options, objective_cmd="./lab {index}").distinct
    assert not RunConfig("table", options=options, objective_wait=True).distinct


def test_pobo_sweep_takes_a_table_s_columns(csv_file):
    """`pobo sweep table --data F --features ... --objective ...` (docs/privacy.md's way to
    draw a table's frontier) was refused: sweep had no table flags."""
    from pobo.cli import build_parser, sweep_spec_from_args

    spec, _ = sweep_spec_from_args(build_parser().parse_args(
        ["sweep", "table", "--data", str(csv_file), "--features", "temp,dose", "--objective",
         "yield", "--minimise", "--seeds", "2"]))
    assert spec.options == {"data": str(csv_file), "features": "temp,dose",
                            "objective": "yield", "minimise": True}
    assert [c.distinct for _, c in spec.runs()] == [True, True]


def test_table_without_an_objective_column_measures_on_demand_from_public_bounds(
        csv_file, tmp_path):
    """Issue 22 item 12: the README's on-demand example (`table ... --objective-cmd` with no
    --objective) runs when the table's preparation comes from --bounds; without bounds it
    is a one-line error saying what to give."""
    lab = tmp_path / "lab.py"
    lab.write_text("import sys\nprint(float(sys.argv[1]) * 0.5)\n")
    problem = build_problem("table", 0, data=str(csv_file), features="temp,dose",
                            bounds="0:100,0:100")
    assert problem.f is None and problem.domain is not None
    result = asyncio.run(run_inproc(RunConfig(
        "table", T=3, seed=0, options={"data": str(csv_file), "features": "temp,dose",
                                       "bounds": "0:100,0:100"},
        objective_cmd=f"{sys.executable} {lab} {{index}}"), tmp_path / "run"))
    assert result["status"] == "ok" and len(result["queries"]) == 3
    assert result["measured"] == [0.5 * i for i in result["data_rows"]]  # f at the data row
    with pytest.raises(ValueError, match="needs --bounds"):
        build_problem("table", 0, data=str(csv_file), features="temp,dose")


def test_a_run_s_keys_go_beside_its_records_and_nowhere_else(tmp_path):
    """The run's public keys are copied into out/keys/ once the run has recorded anything
    there (a party's record or transcript), never into a folder that holds none."""
    from pobo.launch import publish_beside_records

    empty = tmp_path / "nothing"
    assert publish_beside_records("c" * 64, "m" * 64, empty) is None
    assert not empty.exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert publish_beside_records("c" * 64, "m" * 64, mine) is None
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    (mine / "modeler.json").write_text("{}")
    keys = publish_beside_records("c" * 64, "m" * 64, mine)
    assert (keys / "curator.sign_public").read_text() == "c" * 64 + "\n"
