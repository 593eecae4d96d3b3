"""Shared fixtures: small public session parameters and one message of every kind; the
`--full` option (the statistical checks at full length, see README)."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, KernelParams, Mechanism, ProjectedDataset,
    Query, Reward, SessionParams, Welcome,
)
from pobo.protocol.policy import DP_PROJECTION


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true",
                     help="run the statistical checks (marked slow) at full length: more "
                          "seeds and repetitions (minutes); without it they run reduced")


FULL_TIMEOUT = 3600  # seconds a test may run under --full (pyproject's timeout otherwise)


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its setting
def pytest_configure(config: pytest.Config) -> None:
    # the per-user key store of this test session (its parties' and children's): never
    # the real ~/.pobo
    os.environ["POBO_HOME"] = tempfile.mkdtemp(prefix="pobo-home-")
    if sys.dont_write_bytecode and "PYTHONPYCACHEPREFIX" not in os.environ:
        # PYTHONDONTWRITEBYTECODE (set on some machines) makes every process the suite
        # starts compile pobo's ~70 modules again, ~0.3 s of CPU each: they keep their
        # bytecode in this test session's own folder instead (removed at the end)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pobo-pyc-")
    if config.getoption("--full"):
        os.environ["POBO_FULL"] = "1"  # read by the tests' REDUCED flags at collection
        if config.getoption("timeout", None) is None:
            config.option.timeout = FULL_TIMEOUT


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Without --full, leave out the tests marked `full`: long checks (minutes of
    processes or repetitions) whose guarantee a faster test also covers, so that the
    README's suite stays within a few minutes on 2 cores; `pytest --full` runs them."""
    if config.getoption("--full"):
        return
    later = [item for item in items if item.get_closest_marker("full")]
    if later:
        config.hook.pytest_deselected(items=later)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


def pytest_report_header(config: pytest.Config) -> str:
    return ("pobo: the full-length checks run (--full)" if config.getoption("--full") else
            "pobo: statistical checks reduced, tests marked `full` left out (pytest --full "
            "runs them)")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this test session's key store and bytecode folder (one per run was left in /tmp)."""
    for folder, prefix in ((os.environ.get("POBO_HOME", ""), "pobo-home-"),
                           (os.environ.get("PYTHONPYCACHEPREFIX", ""), "pobo-pyc-")):
        if os.path.basename(folder).startswith(prefix):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def own_ledgers(tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own folder of the datasets' default ledgers ($POBO_LEDGERS), inherited
    by the processes it starts: a dataset's ledger spent by one test never refuses another
    (the key store stays the test session's, which module fixtures share)."""
    folder = tmp_path_factory.mktemp("ledgers")
    monkeypatch.setenv("POBO_LEDGERS", str(folder))
    return folder


@pytest.fixture
def params() -> SessionParams:
    return SessionParams("test", 5, 2, 3, "private", (Mechanism(DP_PROJECTION, 1.0, 1e-5),),
                         KernelParams("se", 1.0, 1.0, 1e-4), "seeded")


@pytest.fixture
def release() -> ProjectedDataset:
    Z = np.arange(10, dtype=float).reshape(5, 2)
    return ProjectedDataset(DP_PROJECTION, 1.0, 1e-5, 3.5, Z)


@pytest.fixture
def every_message(params, release) -> list:
    return [Hello(PROTOCOL_VERSION, "pytest"), Welcome(PROTOCOL_VERSION, "abc", params),
            Dataset(release), Query(1, 4), Reward(1, 4, -0.25), End("done"),
            Error("policy", "no")]
