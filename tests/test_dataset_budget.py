"""Issue 45: one ledger per dataset that no restart, flag or default can reset or widen.

Each test is one of the issue's measured breaks, tried as an operator or a modeler
would; each fails on the code before the change (named in its docstring)."""
import asyncio
import json
import math
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from pobo.parties.budget_history import budget_history
from pobo.parties.journal import Journal
from pobo.protocol.accounting import composed_epsilon, gaussian_epsilon_at, part_of, pld_epsilon
from pobo.protocol.ledger import PROCESS_ONLY, Budget, Entry, Ledger
from pobo.session import RunConfig, prepare_service
from test_dataset_ledger import _session  # one whole in-process session


def _table(tmp_path, n: int = 40) -> dict:
    """A CSV with a public domain (--bounds): the same file is the same dataset."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, size=(n, 2))
    path = tmp_path / "rows.csv"
    path.write_text("a,b,y\n" + "".join(f"{a:.6f},{b:.6f},{a - b:.6f}\n" for a, b in x))
    return {"data": str(path), "features": "a,b", "objective": "y", "bounds": "0:1,0:1"}


def _deployed(tmp_path, **overrides) -> RunConfig:
    """A deployed curator's configuration (no seed: the OS CSPRNG; no --journal)."""
    return RunConfig("table", seed=None, T=2, options=_table(tmp_path), **overrides)


def test_restarts_without_a_journal_serve_one_release_from_one_budget(tmp_path, own_ledgers):
    """Issue 45: three starts of a curator with no --journal served three different Z of
    the same X, each charged to a fresh in-memory ledger. Now each start finds the
    dataset's own journal, serves the release it charged, and charges nothing again."""
    config = _deployed(tmp_path)
    services = [prepare_service(config) for _ in range(3)]
    paths = {s.journal.path for s in services}
    assert len(paths) == 1 and str(own_ledgers) in paths.pop()
    for other in services[1:]:
        assert np.array_equal(other.release.Z, services[0].release.Z)
    assert [e["mechanism"] for e in services[-1].journal.central_entries()] == ["gaussian-rows"]
    view = services[-1].new_session().ledger_view()
    assert view["scope"] == "dataset"
    for s in services:
        s.journal.close()


def test_an_ephemeral_ledger_says_it_covers_this_process_only(tmp_path, own_ledgers):
    """--ephemeral-ledger: memory, a new Z each start, and every record says so."""
    from pobo.protocol.ledger import describe_ledger
    config = _deployed(tmp_path, ephemeral_ledger=True)
    a, b = prepare_service(config), prepare_service(config)
    assert a.journal.path == ":memory:" and not any(own_ledgers.iterdir())
    assert not np.array_equal(a.release.Z, b.release.Z)
    view = a.new_session().ledger_view()
    assert view["scope"] == "process" and PROCESS_ONLY in describe_ledger(view)


def test_the_default_journal_is_keyed_by_the_data(tmp_path, own_ledgers):
    """Another file (other rows) is another dataset: its own journal, its own budget."""
    first = prepare_service(_deployed(tmp_path))
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    second = prepare_service(RunConfig("table", seed=None, T=2,
                                       options=_table(other_dir, n=41)))
    assert first.journal.path != second.journal.path
    assert len(list(own_ledgers.glob("*.sqlite"))) == 2


def test_the_curator_command_names_the_dataset_ledger_it_uses(tmp_path, own_ledgers):
    """`pobo curator` without --journal says which journal holds the dataset's ledger,
    and `pobo ledger --journal` of it shows the budget fixed at the first serve."""
    opts = _table(tmp_path)
    argv = [sys.executable, "-m", "pobo", "curator", "table", "--data", opts["data"],
            "--features", "a,b", "--objective", "y", "--bounds", "0:1,0:1", "--T", "2",
            "--bind", "tcp://127.0.0.1:0", "--accept-timeout", "2", "--unsigned",
            "--out", str(tmp_path / "c")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert "the dataset's ledger:" in proc.stdout, proc.stdout + proc.stderr
    [journal] = own_ledgers.glob("*.sqlite")
    shown = subprocess.run([sys.executable, "-m", "pobo", "ledger", "--journal", str(journal)],
                           capture_output=True, text=True, timeout=120)
    assert "fixed at the dataset's first serve" in shown.stdout, shown.stdout + shown.stderr


def test_public_input_scenarios_have_a_central_budget_of_one_release(tmp_path, own_ledgers):
    """Issue 45: `tuning` and `ldp-synthetic` had no central budget, and ten Lipschitz
    releases at eps = 1 went out on one dataset. Now the default budget admits one."""
    config = RunConfig("tuning", seed=None, T=3, release="lipschitz", release_epsilon=1.0)
    service = prepare_service(config)
    assert math.isfinite(service.settings.budget.epsilon)
    assert service.settings.budget.releases == 1
    outcomes = []
    for i in range(3):
        _, mres = asyncio.run(_session(service, tmp_path / f"s{i}",
                                       release=service_request(config)))
        outcomes.append(mres["release"] is not None)
    assert outcomes == [True, False, False]
    lipschitz = [e for e in service.journal.central_entries()
                 if e["mechanism"] == "release:lipschitz"]
    assert len(lipschitz) == 1


def service_request(config):
    from pobo.session import release_request
    return release_request(config)


def test_the_default_budget_admits_one_release_at_any_epsilon_and_delta(tmp_path, own_ledgers):
    """Issue 45: modelers asking (0.3, 1e-7) got six noisy releases under the default
    budget sized for one (the accountant turned its unused delta into epsilon)."""
    config = RunConfig("synthetic", seed=0, T=3, options={"grid": 8}, release="noisy",
                       release_epsilon=0.3, release_delta=1e-9, journal=str(tmp_path / "j.db"))
    granted = []
    for i in range(4):
        journal = Journal(tmp_path / "j.db")
        service = prepare_service(config, journal=journal)
        _, mres = asyncio.run(_session(service, tmp_path / f"s{i}",
                                       release=service_request(config)))
        granted.append(mres["release"] is not None)
        if not granted[-1]:
            assert "admits 1 release" in mres["release_error"], mres["release_error"]
        journal.close()
    assert granted == [True, False, False, False]


def test_adding_an_entry_never_lowers_the_stated_epsilon():
    """Issue 45: two projections composed read 2.978, less than the 3.004 one of them read
    alone (the single entry at its own delta, the composition at the budget's). Every
    figure is now stated at the ledger's delta, and grows with every entry."""
    budget = Budget(50.0, 0.00201)
    ledger, stated = Ledger(budget), []
    for mechanism, eps, delta in [("gaussian-rows", 3.004, 1e-5), ("gaussian-rows", 3.004, 1e-5),
                                  ("release:noisy", 0.3, 1e-7), ("ctl-laplace", 0.5, 0.0),
                                  ("gaussian-rows", 0.2, 1e-6)]:
        ledger.charge(Entry(mechanism, eps, delta))
        stated.append(ledger.to_dict()["central"]["epsilon"])
    assert stated == sorted(stated) and stated[0] < stated[1], stated
    entries = ledger.to_dict()["entries"]
    assert all(e["epsilon_at_ledger_delta"] <= e["epsilon"] for e in entries)


@pytest.mark.parametrize("eps, delta, target", [(3.004, 1e-5, 2.01e-3), (28.6, 1e-5, 1e-3),
                                                (0.5, 1e-6, 1e-4), (8.0, 1e-6, 1.0002e-6)])
def test_a_gaussian_entry_restated_at_another_delta_agrees_with_dp_accounting(eps, delta, target):
    """gaussian_epsilon_at (the analytic profile) against dp-accounting's PLD of the same
    Gaussian: within 1e-5 relative (the PLD's discretisation is pessimistic)."""
    ours = gaussian_epsilon_at(eps, delta, target)
    theirs = pld_epsilon(((part_of("gaussian-rows", eps, delta), 1),), target)
    assert ours == pytest.approx(theirs, rel=1e-5) and ours <= eps
    assert composed_epsilon(Counter({part_of("gaussian-rows", eps, delta): 1}), target) == ours


def test_every_default_delta_is_below_one_over_n(tmp_path, own_ledgers):
    """Issue 45: the default budget's delta was 143/n on hospital. Every default delta,
    of a budget, a row budget and a release, is now below 1/n."""
    from pobo.session import curator_settings, dataset_budget
    from pobo.scenarios.registry import build_problem
    for scenario, options in [("hospital", {}), ("bank", {}), ("realestate", {}),
                              ("synthetic", {}), ("tuning", {}), ("ldp-synthetic", {})]:
        config = RunConfig(scenario, seed=0, options=options, ldp_epsilon=1.0,
                           release="noisy")
        problem = build_problem(scenario, 0)
        n = problem.X.shape[0]
        budget = dataset_budget(config, curator_settings(config, problem), problem.X.shape)
        assert budget.delta < 1 / n and budget.row_delta < 1 / n, scenario
        assert 2 * config.release_delta < 1 / n and math.isfinite(budget.epsilon), scenario
        assert budget.releases == 1


def test_the_budget_history_records_each_change(tmp_path):
    """The first serve's budget is the history's first entry; a lowering is the next."""
    journal = tmp_path / "j.db"
    cfg = RunConfig("synthetic", seed=0, T=2, options={"grid": 8}, budget_epsilon=6.0)
    prepare_service(cfg, journal=Journal(journal))
    prepare_service(RunConfig("synthetic", seed=0, T=2, options={"grid": 8},
                              budget_epsilon=5.0), journal=Journal(journal))
    history = budget_history(Journal(journal))
    assert [(h["budget_epsilon"], h["why"]) for h in history] == [
        (6.0, "fixed at the dataset's first serve"), (5.0, "lowered")]
    assert json.loads(Journal(journal).meta("budget"))["budget_epsilon"] == 5.0


def test_a_raise_between_two_sessions_shows_in_their_audit(tmp_path):
    """Issue 45: a raise of the budget is recorded in the journal and shows in `pobo
    audit` of two sessions' transcripts: every Welcome carries the budget in force (its
    central, per-row and release limits), and the audit names the change between them."""
    from pobo.auditing import audit_files

    journal = tmp_path / "j.db"
    config = RunConfig("synthetic", seed=0, T=2, options={"grid": 8}, budget_epsilon=6.0)
    first = prepare_service(config, journal=Journal(journal))
    asyncio.run(_session(first, tmp_path / "s1"))
    first.journal.close()
    raised = prepare_service(RunConfig("synthetic", seed=0, T=2, options={"grid": 8},
                                       budget_epsilon=9.0, raise_budget=True),
                             journal=Journal(journal))
    assert raised.params.budget_epsilon == 9.0 and raised.params.budget_releases == -1
    asyncio.run(_session(raised, tmp_path / "s2"))
    paths = [tmp_path / s / f"{role}.transcript" for s in ("s1", "s2")
             for role in ("curator", "modeler")]
    notes = [n for r in audit_files(paths, keys=None) for n in r.notes]
    said = [n for n in notes if "budget was RAISED" in n]
    assert len(said) == 1 and "central (6, " in said[0] and "central (9, " in said[0], notes
    alone = [n for r in audit_files(paths[:2], keys=None) for n in r.notes]
    assert not any("budget" in n and "RAISED" in n for n in alone)
