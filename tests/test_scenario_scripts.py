"""Bring your own scenario: a script run by path, and one installed through an entry point."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pobo.scenarios.registry import build_problem, scenario_names

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_scenario.py"
POBO = [sys.executable, "-m", "pobo"]


def test_the_example_script_runs_through_pobo_run(tmp_path):
    out = tmp_path / "run"
    subprocess.run([*POBO, "run", str(EXAMPLE), "--T", "6", "--out", str(out)], check=True,
                   capture_output=True, text=True, timeout=180)
    result = json.loads((out / "result.json").read_text())
    assert result["scenario"] == "plant" and len(result["queries"]) == 6
    assert result["n"] == 400 and result["d"] == 3 and result["status"] == "ok"


def test_a_script_takes_its_options_and_is_built_like_a_builtin():
    problem = build_problem(str(EXAMPLE), 0, n=50)
    assert problem.name == "plant" and problem.X.shape == (50, 3)
    with pytest.raises(ValueError, match="does not take options"):
        build_problem(str(EXAMPLE), 0, grid=4)


@pytest.mark.parametrize("body, message", [
    ("x = 1\n", "defines no build"), ("raise RuntimeError('boom')\n", "failed to load"),
    ("def build(seed):\n    return 3\n", "not a Problem")])
def test_a_broken_script_is_a_one_line_error(tmp_path, body, message):
    script = tmp_path / "bad.py"
    script.write_text(body)
    run = subprocess.run([*POBO, "run", str(script), "--transport", "inproc"],
                         capture_output=True, text=True, timeout=120)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1 and message in lines[0], run.stderr


@pytest.fixture
def installed_scenario(tmp_path):
    """A distribution on sys.path that registers `plant-demo` under `pobo.scenarios`."""
    site = tmp_path / "site"
    (site / "plantdemo").mkdir(parents=True)
    (site / "plantdemo" / "__init__.py").write_text(textwrap.dedent(f"""
        import runpy
        build = runpy.run_path({str(EXAMPLE)!r})["build"]
        """))
    info = site / "plantdemo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plantdemo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pobo.scenarios]\nplant-demo = plantdemo:build\n")
    sys.path.insert(0, str(site))
    yield site
    sys.path.remove(str(site))


def test_an_entry_point_scenario_is_listed_and_runs(installed_scenario, tmp_path):
    assert "plant-demo" in scenario_names()
    assert build_problem("plant-demo", 0, n=30).X.shape == (30, 3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(installed_scenario), os.environ.get("PYTHONPATH", "")])}
    help_text = subprocess.run([*POBO, "run", "--help"], capture_output=True, text=True,
                               timeout=60, env=env, check=True).stdout
    assert "plant-demo" in help_text
    out = tmp_path / "run"
    subprocess.run([*POBO, "run", "plant-demo", "--n", "60", "--T", "4", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=180, env=env)
    assert json.loads((out / "result.json").read_text())["scenario"] == "plant"
