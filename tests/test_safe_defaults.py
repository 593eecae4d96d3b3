"""Safe with no flags: the defaults a new user (or an attacker against a README curator)
meets -- budgets, loud non-DP modes -- each tried as the issue's attack (issue 22)."""
import asyncio
import math
import subprocess
import sys

import pytest

from pobo.parties.journal import Journal
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.scenarios.runspec import startup_warnings
from pobo.scenarios.session import (
    DEFAULT_RELEASE_ALLOWANCE, RunConfig, prepare_service, release_request,
)
from tests.test_dataset_ledger import _session  # one whole in-process session

SMALL = dict(T=3, seed=0, timeout=10.0, options={"grid": 8})


def cfg(**overrides) -> RunConfig:
    """A small synthetic run (8 x 8 grid, T = 3) with `overrides`."""
    return RunConfig(**{**SMALL, **overrides})


def test_with_no_budget_flag_six_releases_do_not_pass_one(tmp_path):
    """The issue's attack: 6 noisy releases against a curator given no --budget-eps took
    central eps to 63. With the default budget the first release is granted (it fits the
    default run) and every later one is refused; eps stays within projection + allowance."""
    config = cfg(release="noisy")
    service = prepare_service(config, journal=Journal(tmp_path / "j.db"))
    budget = service.settings.budget
    assert math.isfinite(budget.epsilon) and budget.delta < 1
    granted = []
    for i in range(6):
        cres, mres = asyncio.run(_session(service, tmp_path / f"s{i}",
                                          release=release_request(config)))
        assert cres["status"] == "ok"
        granted.append(mres["release"] is not None)
    assert granted == [True] + [False] * 5
    central = cres["ledger"]["central"]
    eps0 = service.settings.epsilon
    assert central["epsilon"] <= eps0 + DEFAULT_RELEASE_ALLOWANCE[0] + 1e-9
    assert central["budget_epsilon"] == pytest.approx(eps0 + DEFAULT_RELEASE_ALLOWANCE[0])


def test_with_no_row_budget_a_row_cannot_report_without_limit(tmp_path):
    """The issue's attack: 1,000 LDP rewards on one row across sessions. By default a row
    may report T times (one session's worth); the next report is refused, typed."""
    config = cfg(T=3, ldp_epsilon=1.0)
    service = prepare_service(config)
    assert service.settings.budget.row_epsilon == pytest.approx(3.0)
    answered = 0
    with pytest.raises(ProtocolError) as refusal:
        for _ in range(1000):
            service.new_session().curator().respond(1, 7)
            answered += 1
    assert refusal.value.code is ErrorCode.PRIVACY_BUDGET and answered == 3


def test_inf_opts_out_and_says_so():
    config = cfg(budget_epsilon=math.inf, ldp_epsilon=1.0, ldp_row_budget=math.inf)
    service = prepare_service(config)
    assert math.isinf(service.settings.budget.epsilon)
    assert math.isinf(service.settings.budget.row_epsilon)
    said = " ".join(startup_warnings(config))
    assert "--budget-eps inf" in said and "--ldp-row-budget inf" in said
    assert not any("budget" in w for w in startup_warnings(cfg(seed=None)))


def test_the_cli_takes_inf_and_warns_at_start(tmp_path):
    """`pobo curator --budget-eps inf` parses (no 'expected a number'), and the curator
    warns before it serves (it exits at once here: nothing connects within 1 s)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pobo", "curator", "synthetic", "--grid", "8", "--T", "2",
         "--budget-eps", "inf", "--bind", "tcp://127.0.0.1:0", "--accept-timeout", "1",
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert "expected" not in proc.stderr
    assert "warning: --budget-eps inf: no central privacy budget" in proc.stderr


@pytest.mark.parametrize("scenario, options", [("synthetic", {}), ("hospital", {"n": 3000}),
                                               ("bank", {"n": 2000})])
def test_the_shipped_scenarios_default_runs_fit_the_default_budget(scenario, options,
                                                                  tmp_path):
    """The default budget refuses nothing a default run does: the projection (and its
    lift test) and one default release, with LDP on."""
    config = RunConfig(scenario, T=3, seed=0, options=options, release="noisy",
                       ldp_epsilon=1.0)
    service = prepare_service(config)
    cres, mres = asyncio.run(_session(service, tmp_path, release=release_request(config)))
    assert cres["status"] == "ok" and mres["release"] is not None, mres.get("release_error")
