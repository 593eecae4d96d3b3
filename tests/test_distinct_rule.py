"""The `distinct` rule from the command line: the curator's flag, the curator process
`pobo run` starts, and a release that the rule (or a batch) makes impossible, refused
before either party starts."""
from __future__ import annotations

import json
import subprocess
import sys

from pobo.cli import build_parser, config_from_args, main
from pobo.launch import scenario_argv



def _config(*argv: str):
    return config_from_args(build_parser().parse_args(list(argv)))


def test_the_curator_takes_the_rule_and_pobo_run_hands_it_on():
    """`pobo curator` had no --distinct flag and `pobo run` did not pass the rule to the
    curator process: `pobo run hospital --no-distinct` told only the modeler, whose
    curator still announced the rule."""
    assert _config("curator", "hospital").distinct
    assert not _config("curator", "hospital", "--no-distinct").distinct
    assert _config("curator", "synthetic", "--distinct").distinct
    assert "--no-distinct" in scenario_argv(_config("run", "hospital", "--no-distinct"))
    assert "--distinct" in scenario_argv(_config("run", "realestate"))
    assert "--no-distinct" in scenario_argv(_config("run", "synthetic"))


def test_a_release_the_curator_would_refuse_is_refused_before_any_party_starts(tmp_path,
                                                                              capsys):
    out = tmp_path / "run"
    assert main(["run", "realestate", "--release", "noisy", "--T", "3", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "add --no-distinct" in err[0], err
    assert main(["run", "synthetic", "--release", "noisy", "--batch", "2", "--T", "3",
                 "--out", str(out)]) == 1
    assert "not --batch 2" in capsys.readouterr().err
    assert not out.exists()  # nothing started, nothing recorded


def test_pobo_run_with_no_distinct_grants_the_noisy_release_over_tcp(tmp_path):
    """The rule lifted on the command line reaches the curator process: Kusner et al.'s
    noisy release is granted (it was refused at the Hello before)."""
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "pobo", "run", "realestate", "--release",
                           "noisy", "--no-distinct", "--T", "4", "--out", str(out)],
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and result["modeler"]["release"] is not None
