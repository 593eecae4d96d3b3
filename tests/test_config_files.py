"""Config files (issue 16 item 5): `--config FILE.toml` for run, curator, modeler and
sweep, every flag as a key, flags overriding the file; the README's two configs parse."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pobo.cli import build_parser, main
from pobo.config import apply_config, check_required

README = Path(__file__).resolve().parents[1] / "docs" / "deployment.md"  # the two-machine walkthrough


def _args(argv: list[str]):
    parser = build_parser()
    args = parser.parse_args(argv)
    sub = parser.subcommands[args.command]
    if args.config is not None:
        apply_config(sub, args, argv, args.config)
    return args


def test_every_flag_is_a_key_and_flags_override_the_file(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('scenario = "synthetic"\nT = 9\nldp_eps = 1.5\nnon-private = true\n'
                      'r = "auto"\nbatch = 3\n')
    args = _args(["run", "--config", str(config), "--T", "4"])
    assert (args.scenario, args.T, args.ldp_eps, args.non_private, args.r, args.batch) == \
        ("synthetic", 4, 1.5, True, "auto", 3)
    sweep = tmp_path / "s.toml"
    sweep.write_text('strategies = ["gp-ucb", "random"]\nseeds = 3\nr = [5, 10]\n')
    args = _args(["sweep", "synthetic", "--config", str(sweep)])
    assert (args.strategies, args.seeds, args.r) == (["gp-ucb", "random"], 3, [5, 10])
    config.write_text(config.read_text() + 'strategies = ["gp-ucb"]\n')
    with pytest.raises(ValueError, match="unknown key 'strategies'"):
        _args(["run", "--config", str(config)])  # a sweep key is not a run flag


def test_a_command_uses_its_own_table(tmp_path):
    config = tmp_path / "both.toml"
    config.write_text('[curator]\nscenario = "branin"\nsessions = 3\n\n'
                      '[modeler]\nconnect = "tcp://127.0.0.1:7"\nbatch = 2\n')
    curator = _args(["curator", "--config", str(config)])
    assert (curator.scenario, curator.sessions) == ("branin", 3)
    modeler = _args(["modeler", "--config", str(config)])
    assert (modeler.connect, modeler.batch) == ("tcp://127.0.0.1:7", 2)


@pytest.mark.parametrize("text, says", [
    ("T = 0\n", "T: expected an integer >= 1"),
    ("T = [1, 2]\n", "expected one value"),
    ('lift = "sometimes"\n', "not one of"),
    ("non-private = 1\n", "expected true or false"),
    ("T = \n", "not valid TOML"),
    ("[rnu]\nT = 5\n", "has no [run] table"),
])
def test_a_bad_value_is_one_line_naming_the_file(tmp_path, capsys, text, says):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    assert main(["run", "synthetic", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(config) in err and says in err


def test_a_missing_setting_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["modeler", "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert "--connect is required" in capsys.readouterr().err


def test_the_readme_configs_parse_into_the_walkthrough_flags(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    tables = {re.search(r"\[(\w+)\]", b).group(1): b for b in blocks}
    assert set(tables) >= {"curator", "modeler"}
    for command, text in tables.items():
        path = tmp_path / f"{command}.toml"
        path.write_text(text)
        parser = build_parser()
        argv = [command, "--config", str(path)]
        args = parser.parse_args(argv)
        apply_config(parser.subcommands[command], args, argv, path)
        check_required(parser.subcommands[command], args, ("scenario",) if command ==
                       "curator" else ("connect",))
    assert args.curator_sign_key == Path("keys/curator.sign_public") and args.verbose


def test_pobo_run_from_a_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[run]\nscenario = "synthetic"\ngrid = 8\nT = 6\ntransport = "inproc"\n'
                      f'out = "{tmp_path / "out"}"\n')
    assert main(["run", "--config", str(config), "--T", "5"]) == 0
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["T"] == 5 and result["n"] == 64
