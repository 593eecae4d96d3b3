"""Issue 16 item 10: what each process imports (in a fresh interpreter each, untimed)."""
import json
import subprocess
import sys

import pytest


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                           "print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_parser_and_the_parent_of_pobo_run_import_no_numerical_code():
    loaded = modules_after("from pobo.cli import build_parser, config_from_args\n"
                           "from pobo.launch import scenario_argv, modeler_argv\n"
                           "args = build_parser().parse_args(['run', 'synthetic'])\n"
                           "config = config_from_args(args)\n"
                           "scenario_argv(config), modeler_argv(config)")
    heavy = {m for m in loaded if m.split(".")[0] in ("numpy", "scipy", "zmq", "matplotlib",
                                                      "sklearn", "dask", "distributed")}
    assert not heavy, sorted(heavy)[:5]
    assert "pobo.scenarios.synthetic" not in loaded  # the scenario is built by the curator


@pytest.mark.parametrize("side", ["curator", "modeler"])
def test_a_party_process_imports_no_scipy(side):
    code = {"curator": "from pobo.session import prepare_service, RunConfig\n"
                       "from pobo.remote import serve_curator\n"
                       "prepare_service(RunConfig('synthetic', seed=0, options={'grid': 10}))",
            "modeler": "from pobo.remote import connect_modeler"}[side]
    loaded = modules_after(code)
    assert not {m for m in loaded if m.split(".")[0] == "scipy"}
    if side == "modeler":  # no dataset loaders, no scenario modules
        assert not {m for m in loaded if m.startswith("pobo.scenarios.") and m.split(".")[-1]
                    in ("loaders", "synthetic", "bank", "hospital", "realestate", "table")}


def test_a_fit_imports_scipy_optimize_when_it_runs():
    loaded = modules_after("import numpy as np\n"
                           "from pobo.parties.likelihood import fit_hyperparameters\n"
                           "from pobo.parties.kernels import squared_exponential\n"
                           "X = np.linspace(0, 1, 8)[:, None]\n"
                           "fit_hyperparameters(squared_exponential(0.3), 0.1, X, np.sin(6 * X[:, 0]),"
                           " np.random.default_rng(0), restarts=1)")
    assert "scipy.optimize" in loaded
