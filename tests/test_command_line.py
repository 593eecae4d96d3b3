"""The command line a person expects (issue 48 item 8): an argparse error names the
subcommand and the nearest flag or choice; warnings speak of what the user typed (a
`pobo run` is not told about a `pobo curator --seed 0` it never typed); `pobo run` ends
with the next commands; a text column named as a number is said to be non-numeric, not
missing."""
from __future__ import annotations

import subprocess
import sys

import pytest

from pobo.cli import build_parser
from pobo.scenarios.loaders import read_columns

POBO = [sys.executable, "-m", "pobo"]


def _pobo(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*POBO, *argv], capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("argv, says", [
    (["run", "synthetic", "--epz", "3"],
     "pobo run: error: unrecognized arguments: --epz 3; did you mean --eps?"),
    (["curator", "synthetic", "--bnd", "tcp://127.0.0.1:0"],
     "pobo curator: error: unrecognized arguments: --bnd tcp://127.0.0.1:0; did you mean "
     "--bind?"),
    (["runs", "--jsn"], "pobo runs: error: unrecognized arguments: --jsn; did you mean --json?"),
    (["run", "synthetic", "--lift", "gausian"], "; did you mean gaussian?"),
    (["rn", "synthetic"], "; did you mean run?"),
])
def test_a_mistyped_flag_is_named_by_its_subcommand_with_the_nearest_one(argv, says, capsys):
    """A review's finding: `pobo: error: unrecognized arguments`, no subcommand and no
    nearest flag."""
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and says in err and len(err.strip().splitlines()) == 1


def test_no_guess_when_nothing_is_near(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "synthetic", "--zzzzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_pobo_run_warns_of_what_the_user_typed_and_ends_with_the_next_commands(tmp_path):
    """A review's finding: every `pobo run` warned about `pobo curator ... --seed 0`,
    which the user never typed, and ended with a path and no next step."""
    out = tmp_path / "run"
    done = _pobo("run", "synthetic", "--grid", "5", "--T", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "pobo curator:" not in done.stderr and "--seed 0 draws" not in done.stderr
    assert "pobo run: warning: this run is a seeded simulation (seed 0" in done.stderr
    tail = done.stdout.strip().splitlines()[-3:]
    assert tail[0].startswith(f"next: pobo report {out} ")
    assert tail[1].split()[:3] == ["pobo", "audit", str(out / "curator.transcript")]
    assert str(out / "modeler.transcript") in tail[1]
    assert tail[2].split()[:3] == ["pobo", "runs", str(tmp_path)]
    assert _pobo("audit", str(out / "curator.transcript"), str(out / "modeler.transcript"),
                 "--allow-unsigned").returncode == 0  # the command it gives works


def test_a_text_column_is_named_non_numeric_not_missing(tmp_path):
    """A review's finding: a text column given as a feature was reported as "missing"."""
    data = tmp_path / "t.csv"
    data.write_text("a,grade,y\n1,A,2\n2,,3\n3,C,1\n4,7,5\n")
    table = read_columns(data, ["a", "grade", "y"])
    assert table.dropped == {"non-numeric grade": 2, "missing grade": 1}
    done = _pobo("curator", "table", "--data", str(data), "--features", "a,grade",
                 "--objective", "y", "--T", "2", "--bind", "tcp://127.0.0.1:0", "--out",
                 str(tmp_path / "c"))
    assert done.returncode == 1 and "non-numeric grade" in done.stderr
