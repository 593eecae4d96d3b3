"""One dataset, one privacy budget: the ledger spans sessions, restarts and releases.

Each test is an attack from the review: open many sessions, restart the curator, ask
again for a row, read the public parameters, and check that the guarantee still holds.
"""
import asyncio
import json
import math
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from pobo.parties.dataset import dataset_digest
from pobo.parties.journal import Journal, JournalError
from pobo.parties.noise import NoiseSource
from pobo.protocol.audit import audit_session, audit_transcript, numeric_fields
from pobo.protocol.errors import ErrorCode, PeerError, ProtocolError
from pobo.protocol.ledger import PrivacyBudgetExceeded
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, Query, Reward, Welcome,
)
from pobo.scenarios.registry import build_problem
from pobo.session import RunConfig, curate, open_channel, optimise, prepare_service
from pobo.transport.inproc import pipe_pair

SMALL = dict(T=3, seed=0, timeout=10.0, options={"grid": 8})


def cfg(**overrides) -> RunConfig:
    """A small synthetic run (8 x 8 grid, T = 3) with `overrides`."""
    return RunConfig(**{**SMALL, **overrides})


class CountingSource(NoiseSource):
    """A CSPRNG source that counts how often privacy noise is drawn."""

    draws = 0

    def randbelow(self, n: int) -> int:
        CountingSource.draws += 1
        return super().randbelow(n)


async def _session(service, out, **modeler):
    """One whole in-process session against `service`: (curator result, modeler result)."""
    session = service.new_session()
    cpipe, mpipe = pipe_pair()
    public = service.settings.non_private
    cchan = open_channel(cpipe, "curator", public, out, 10.0)
    mchan = open_channel(mpipe, "modeler", public, out, 10.0)
    try:
        return await asyncio.gather(curate(cchan, session, out, verbose=False),
                                    optimise(mchan, 1, out=out, **modeler))
    finally:
        cchan.close()
        mchan.close()


def test_a_second_session_gets_the_same_projection_and_no_new_charge():
    service = prepare_service(cfg(seed=None))  # CSPRNG: Z cannot be recomputed
    first, second = service.new_session(), service.new_session()
    assert first.session_id != second.session_id and len(first.session_id) == 32
    assert np.array_equal(first.release.Z, second.release.Z)
    charged = service.journal.central_entries()
    assert [e["mechanism"] for e in charged] == ["gaussian-rows"]
    for _ in range(50):
        service.new_session()
    assert service.journal.central_entries() == charged


def test_a_restarted_curator_serves_the_same_z_from_its_journal_without_charging(
        tmp_path, monkeypatch):
    import pobo.parties.service as service_module

    config = cfg(budget_epsilon=10.0)
    journal = Journal(tmp_path / "journal.db")
    z = prepare_service(config, journal=journal).new_session().release.Z
    journal.close()

    def redraw(*args, **kwargs):
        raise AssertionError("a restarted curator drew a new projection")

    monkeypatch.setattr(service_module, "choose_projection", redraw)
    for _ in range(3):  # three restarts: Z comes from the journal, charged once in all
        journal = Journal(tmp_path / "journal.db")
        service = prepare_service(config, journal=journal)
        assert np.array_equal(service.new_session().release.Z, z)
        assert len(service.journal.central_entries()) == 1  # the projection, once
        journal.close()


def test_a_journal_refuses_another_dataset(tmp_path):
    journal = Journal(tmp_path / "journal.db")
    prepare_service(cfg(), journal=journal)
    other = cfg(options={"grid": 9})
    with pytest.raises(JournalError, match="another dataset"):
        prepare_service(other, journal=journal)


def test_sessions_never_spend_more_than_the_budget_before_and_after_a_restart(tmp_path):
    """Every session asks for a noisy release (2 x 0.5 eps); the budget admits the
    projection (3; n - 1 > d, so no lift test) and three releases. However many sessions follow,
    before or after a restart, the dataset's central total stays within the budget."""
    config = cfg(T=4, epsilon=3.0, budget_epsilon=6.5, budget_delta=0.1,
                       release="noisy", release_epsilon=0.5, release_delta=1e-3)
    granted = refused = 0
    for restart in range(2):
        journal = Journal(tmp_path / "journal.db")
        service = prepare_service(config, journal=journal)
        for i in range(4):
            out = tmp_path / f"r{restart}s{i}"
            cres, mres = asyncio.run(_session(service, out, release=_request(config)))
            assert cres["status"] == "ok"
            if mres["release"] is not None:
                granted += 1
            else:
                refused += 1
                assert mres["release_error"].startswith("privacy_budget")
            eps, delta = (cres["ledger"]["central"][k] for k in ("epsilon", "delta"))
            assert eps <= 6.5 + 1e-9 and delta <= 0.1
        journal.close()
    # the basic sum admits three releases; the PLD accountant, enforced where tighter,
    # admits more, and never past the budget (checked above at every session)
    assert granted >= 3 and refused >= 1 and granted + refused == 8
    central = cres["ledger"]["central"]
    assert central["epsilon_basic"] == pytest.approx(3.0 + granted * 1.0)
    assert central["epsilon"] <= central["epsilon_basic"]  # the accountant, at delta 0.1


def _request(config):
    from pobo.session import release_request
    return release_request(config)


def test_a_projection_past_the_budget_is_refused_before_anything_is_drawn(monkeypatch):
    import pobo.parties.service as service_module

    def boom(*args, **kwargs):
        raise AssertionError("the projection was drawn")

    monkeypatch.setattr(service_module, "choose_projection", boom)
    with pytest.raises(PrivacyBudgetExceeded, match="budget"):
        prepare_service(cfg(epsilon=3.0, budget_epsilon=1.5))  # (3, 1e-5) is (1.9, 1.6e-3)


def test_ldp_reports_on_a_row_compose_across_sessions_and_the_row_budget_refuses(tmp_path):
    """eps = 1 per report, row budget 2.5: two sessions each ask row 5 once, fine; a
    third report on row 5 from a third session is refused with privacy_budget before f is
    evaluated or any noise drawn, while other rows are still answered."""
    config = cfg(T=5, seed=None, ldp_epsilon=1.0, ldp_row_budget=2.5)
    service = prepare_service(config, journal=Journal(tmp_path / "j.db"))
    for _ in range(2):
        curator = service.new_session().curator()
        curator.respond(1, 5)
    third = service.new_session().curator()
    third.source = third.noise.source = CountingSource()  # its noise pool's draws, counted
    evaluated = []
    measure = third.oracle.measure
    object.__setattr__(third.oracle, "measure", lambda i, rng: evaluated.append(i) or measure(i, rng))
    before = CountingSource.draws
    with pytest.raises(ProtocolError) as refusal:
        third.respond(1, 5)
    assert refusal.value.code is ErrorCode.PRIVACY_BUDGET
    assert evaluated == [] and CountingSource.draws == before  # nothing evaluated or drawn
    assert third.queries == []
    third.respond(1, 6)  # another individual still has budget
    third.refill()  # as the runner does once the reward is sent: the used noise is redrawn
    assert evaluated == [6] and CountingSource.draws > before
    local = service.ledger.to_dict()["local"]
    assert local["max_row_epsilon_basic"] == pytest.approx(2.0) and local["worst_row"] == 5
    assert 1.99 < local["max_row_epsilon"] <= 2.0  # the accountant at the row delta
    assert local["reports"] == 3 and local["rows"] == 2
    assert local["row_budget_epsilon"] == 2.5


def test_a_refused_ldp_report_reaches_the_modeler_as_a_typed_error(tmp_path):
    """Over the protocol: a modeler that keeps asking row 0 gets privacy_budget."""
    config = cfg(T=3, ldp_epsilon=1.0, ldp_row_budget=1.0)
    service = prepare_service(config)
    service.new_session().curator().respond(1, 0)  # row 0 has spent its budget

    class AlwaysRowZero:
        name = "row-zero"

        def select(self, gp, t, rng):
            return 0

    import pobo.session as session_module
    original = session_module.make_strategy
    session_module.make_strategy = lambda name, scale=None: AlwaysRowZero()
    try:
        with pytest.raises(PeerError) as err:
            asyncio.run(_session(service, tmp_path))
    finally:
        session_module.make_strategy = original
    assert err.value.code == "privacy_budget"


def test_the_restarted_curator_keeps_the_row_totals(tmp_path):
    config = cfg(T=5, ldp_epsilon=1.0, ldp_row_budget=2.0)
    journal = Journal(tmp_path / "j.db")
    curator = prepare_service(config, journal=journal).new_session().curator()
    curator.respond(1, 3)
    curator.respond(2, 3)
    journal.close()
    journal = Journal(tmp_path / "j.db")
    again = prepare_service(config, journal=journal).new_session().curator()
    with pytest.raises(PrivacyBudgetExceeded):
        again.respond(1, 3)
    journal.close()


@pytest.mark.parametrize("scenario, options", [
    ("synthetic", {"grid": 10}), ("branin", {"grid": 10}), ("hospital", {"n": 500}),
    ("bank", {"n": 500}), ("realestate", {"n": 300}), ("ldp-synthetic", {}), ("tuning", {})])
def test_no_welcome_field_is_one_individuals_value(scenario, options):
    """No number in the Welcome equals a value of f or an entry of X that only one row
    holds (a declared constant may equal a value many rows share: B = 1 for a 0/1
    outcome, or bank's clip bound -ln 0.01 that charged-off loans sit on)."""
    ldp = 1.0 if scenario != "tuning" else None
    service = prepare_service(RunConfig(scenario, T=5, seed=3, options=options, ldp_epsilon=ldp))
    problem = service.problem
    values = Counter(np.round(np.abs(problem.f), 12).tolist())
    if service.params.policy == "private":
        values += Counter(np.round(np.abs(problem.X), 12).ravel().tolist())
    single = [(name, v) for name, v in numeric_fields(service.params)
              if values[round(abs(v), 12)] == 1]
    assert single == []


def test_ldp_synthetic_declares_its_bound_whatever_the_instance():
    bounds = {prepare_service(RunConfig("ldp-synthetic", seed=s, T=5, ldp_epsilon=1.0))
              .params.reward_bound for s in range(5)}
    assert bounds == {10.0}
    assert prepare_service(RunConfig("ldp-synthetic", seed=0, T=5, ldp_epsilon=1.0,
                                     reward_bound=3.0)).params.reward_bound == 3.0


def test_audit_data_flags_a_public_parameter_computed_from_f(tmp_path):
    """A curator that announces B = max|f| exactly (the old ldp-synthetic) fails
    `pobo audit --data`; the declared constant passes."""
    problem = build_problem("ldp-synthetic", 0)
    leaky = float(np.max(np.abs(problem.f)))
    for bound, ok in ((leaky, False), (None, True)):
        out = tmp_path / str(ok)
        config = RunConfig("ldp-synthetic", T=3, seed=0, ldp_epsilon=1.0, reward_bound=bound)
        asyncio.run(_session(prepare_service(config, problem), out))
        report = audit_transcript(out / "curator.transcript", X=problem.X, f=problem.f)
        flagged = [v for v in report.violations if "reward_bound" in v]
        assert bool(flagged) is not ok, report.violations


def test_pobo_ledger_prints_the_dataset_ledger_as_json(tmp_path):
    config = cfg(T=4, ldp_epsilon=0.5, budget_epsilon=20.0)
    journal = Journal(tmp_path / "j.db")
    service = prepare_service(config, journal=journal)
    for row in (1, 1, 2):
        service.new_session().curator().respond(1, row)
    journal.close()
    cmd = [sys.executable, "-m", "pobo", "ledger", "--journal", str(tmp_path / "j.db")]
    data = json.loads(subprocess.run(cmd + ["--json"], capture_output=True, text=True,
                                     timeout=60, check=True).stdout)
    # the projection's own (eps, delta), stated at the ledger's delta (the budget's)
    from pobo.protocol.accounting import gaussian_epsilon_at
    stated = gaussian_epsilon_at(service.settings.epsilon, service.settings.delta,
                                 data["central"]["delta"])
    assert data["central"]["epsilon"] == pytest.approx(stated, rel=1e-9)
    assert data["entries"][0]["epsilon_at_ledger_delta"] == data["central"]["epsilon"]
    assert data["central"]["budget_epsilon"] == 20.0
    assert data["local"]["max_row_epsilon_basic"] == pytest.approx(1.0)
    assert 0.99 < data["local"]["max_row_epsilon"] <= 1.0
    assert data["local"]["rows"] == 2 and data["local"]["reports"] == 3
    assert [e["mechanism"] for e in data["entries"]] == ["gaussian-rows"]
    assert len(data["sessions"]) == 3 and data["dataset"] == dataset_digest(service.problem)
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "worst-off row 1" in text and "of budget (20" in text


def test_pobo_ledger_on_a_missing_journal_is_one_line(tmp_path):
    cmd = [sys.executable, "-m", "pobo", "ledger", "--journal", str(tmp_path / "no.db")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1
    assert "no journal" in run.stderr


def test_the_result_states_the_privacy_unit_and_the_lift(tmp_path):
    result = asyncio.run(_session(prepare_service(cfg(lift="paper")), tmp_path))[0]
    unit = result["privacy_unit"]
    assert "changed by at most 1 in l2" in unit["dataset"]["neighbouring"]
    assert "NOT covered" in unit["dataset"]["branch"]
    assert any("preprocessing" in line for line in unit["not_covered"])
    assert result["ledger"]["session"]["central"]["epsilon"] == pytest.approx(math.exp(1.1))


def _wide_problem(scale: float):
    """n = 4 rows in d = 6 (n - 1 <= d: the private lift test decides), rows scaled so
    that sigma_(n-1) of the centred X is about `scale`."""
    from pobo.parties.dataset import Problem
    from pobo.protocol.messages import KernelParams
    rng = np.random.default_rng(11)
    X = rng.standard_normal((4, 6))
    X -= X.mean(0)
    X *= scale / np.linalg.svd(X, compute_uv=False)[2]
    return Problem("wide", X, rng.standard_normal(4), KernelParams("se", 1.0, 1.0, 1e-2),
                   epsilon=3.0, delta=1e-5, r=2, T=2, B=4.0)


@pytest.mark.parametrize("scale, lifted", [(1e5, False), (10.0, True)])
def test_the_private_lift_test_decides_and_is_charged_once(scale, lifted, tmp_path):
    """n - 1 <= d: the test runs on a noisy sigma_(n-1), charges (0.1 eps, delta) beside
    the projection -- once, however many sessions and restarts -- and is announced."""
    from pobo.parties.service import CuratorService, CuratorSettings
    settings = CuratorSettings(3.0, 1e-5, 2, 2, lift="private", seed=None)
    for _ in range(2):  # a restart on the same journal
        journal = Journal(tmp_path / "j.db")
        service = CuratorService(_wide_problem(scale), settings, journal)
        for _ in range(3):
            service.new_session()
        entries = [(e["mechanism"], e["epsilon"], e["delta"])
                   for e in service.journal.central_entries()]
        assert entries == [("po-gp-ucb-projection", 3.0, 1e-5),
                           ("lift-test", pytest.approx(0.3), 1e-5)]
        assert service.report["lifted"] is lifted and service.report["lift"] == "private"
        assert ("lift-test", pytest.approx(0.3), 1e-5) in [
            (m.name, m.epsilon, m.delta) for m in service.params.mechanisms]
        assert service.privacy_unit()["dataset"]["epsilon"] == pytest.approx(3.3)
        # the claim is the whole release's, the test included (a review found the
        # projection's alone), and the figures by distance say which delta they are at
        from pobo.parties.statement import privacy_lines
        unit = service.privacy_unit()
        assert unit["dataset"]["claim"].startswith("(3.3, 2e-05)-DP for ")
        assert "lift test (0.3, 1e-05), composed" in unit["dataset"]["claim"]
        moves = [line for line in privacy_lines(unit) if "for a move of" in line]
        assert moves and all("eps at delta 1e-05 for a move of" in line for line in moves)
        journal.close()


def test_a_private_lift_on_a_tall_dataset_charges_no_test():
    service = prepare_service(cfg(lift="private"))
    assert service.report["lifted"] and service.test_epsilon == 0.0
    assert "no test is run" in service.privacy_unit()["dataset"]["branch"]


def test_a_budget_eps_alone_caps_delta_below_one_over_n(tmp_path):
    """--budget-eps without --budget-delta: a release asking for delta = 0.49 is refused
    (the delta budget is 0.1/n, below 1/n, not 1)."""
    config = cfg(T=4, epsilon=3.0, budget_epsilon=25.0, release="noisy", release_epsilon=0.5,
                 release_delta=0.49)
    service = prepare_service(config)
    assert service.settings.budget.delta == pytest.approx(0.1 / 64)
    cres, mres = asyncio.run(_session(service, tmp_path, release=_request(config)))
    assert mres["release"] is None and mres["release_error"].startswith("privacy_budget")
    assert cres["ledger"]["central"]["delta"] <= 1 / 64


def test_a_query_refused_for_its_row_budget_frees_its_seq_and_slot(tmp_path):
    """PROTOCOL.md 7.1: a query the curator admits and then refuses (its row's LDP budget)
    is not asked: the Error names it, and the same seq with another row, in the one batch
    slot, is answered; both transcripts pass the audit."""
    service = prepare_service(cfg(T=2, ldp_epsilon=1.0, ldp_row_budget=1.0))
    service.new_session().curator().respond(1, 0)  # row 0 has spent its budget
    session = service.new_session()

    async def run():
        mpipe, cpipe = pipe_pair()
        cur = open_channel(cpipe, "curator", False, tmp_path, 10.0)
        mod = open_channel(mpipe, "modeler", False, tmp_path, 10.0)

        async def drive():
            await mod.send(Hello(PROTOCOL_VERSION, "t"))
            assert isinstance(await mod.recv(), Welcome)
            assert isinstance(await mod.recv(), Dataset)
            await mod.send(Query(1, 0))
            refusal = await mod.recv()
            assert isinstance(refusal, Error)
            assert (refusal.code, refusal.seq) == ("privacy_budget", 1)
            for seq, row in ((1, 2), (2, 3)):
                await mod.send(Query(seq, row))
                reward = await mod.recv()
                assert isinstance(reward, Reward) and (reward.seq, reward.index) == (seq, row)
            await mod.send(End("done"))

        try:
            result, _ = await asyncio.gather(curate(cur, session, tmp_path, verbose=False),
                                             drive())
        finally:
            cur.close()
            mod.close()
        return result

    result = asyncio.run(run())
    assert result["status"] == "ok" and result["queries"] == [2, 3]
    reports = audit_session(tmp_path / "curator.transcript", tmp_path / "modeler.transcript")
    assert all(r.ok for r in reports), [r.violations for r in reports]


@pytest.mark.parametrize("batch, size", [(1, 32), (33, 33), (64, 64)])
def test_a_sessions_noise_pool_holds_as_many_noises_as_its_batch(batch, size):
    """With more answers finishing in one loop turn than noises ahead, the rest were
    drawn on the answer path, where their time tells their size (issue 21). A session's
    pool now holds at least its batch: 64 reserved queries completed in a row, with no
    refill between, draw no noise on the answer path."""
    service = prepare_service(cfg(T=100, seed=None, ldp_epsilon=1.0, max_batch=64,
                                  objective_wait=True))
    curator = service.new_session(batch=batch).curator()
    assert curator.noise.size == size and len(curator.noise._ahead) == size
    curator.source = curator.noise.source = CountingSource()
    for seq in range(1, batch + 1):
        curator.start(seq, seq % 7)
    before = CountingSource.draws
    for seq in range(1, batch + 1):
        curator.complete(seq, 0.25)
    assert CountingSource.draws == before  # every answer took a noise drawn ahead


@pytest.mark.parametrize("budget", [None, 5.0])
def test_a_curator_that_loses_the_race_to_store_the_projection_serves_the_stored_one(
        tmp_path, monkeypatch, budget):
    """Two curators starting at once on one journal both find no projection; the second
    to store it was refused with a raw IntegrityError (or, under a budget with room for
    one, PrivacyBudgetExceeded) although the projection it needs was stored and paid
    for. It now serves the stored one, charged once, and leaves no file of its own."""
    from pobo.parties.journal import Journal as J
    config = cfg(**({} if budget is None else {"budget_epsilon": budget}))
    first = prepare_service(config, journal=Journal(tmp_path / "j.db"))
    looked = []
    real = J.projection

    def not_yet(self, key):  # the second looked before the first had stored
        looked.append(key)
        return None if len(looked) == 1 else real(self, key)

    monkeypatch.setattr(J, "projection", not_yet)
    second = prepare_service(config, journal=Journal(tmp_path / "j.db"))
    assert np.array_equal(second.release.Z, first.release.Z)
    kinds = Counter(e["mechanism"] for e in first.journal.central_entries())
    assert all(count == 1 for count in kinds.values()), kinds
    assert len(list(first.journal.projection_dir.glob("*.npy"))) == 1


def test_the_budget_is_fixed_at_the_first_serve_and_raised_only_by_name(tmp_path, caplog):
    """The budget belongs to the dataset: a later start's budget flag may lower it
    (recorded), but one asking for more is refused in one line unless --raise-budget,
    and the raise is recorded in the journal's history and warned (issue 45: a journal
    restarted with --eps 9 used to spend under a budget moved from 5 to 11 in silence)."""
    import logging

    from pobo.parties.budget_history import BudgetRaiseRefused, budget_history
    journal = tmp_path / "j.db"
    prepare_service(cfg(budget_epsilon=5.0), journal=Journal(journal))
    with caplog.at_level(logging.WARNING, logger="pobo.curator"):
        lowered = prepare_service(cfg(budget_epsilon=4.0), journal=Journal(journal))
        assert not caplog.records and lowered.settings.budget.epsilon == 4.0
        with pytest.raises(BudgetRaiseRefused, match="--raise-budget") as refusal:
            prepare_service(cfg(budget_epsilon=9.0), journal=Journal(journal))
        assert "\n" not in str(refusal.value) and "epsilon 4 -> 9" in str(refusal.value)
        raised = prepare_service(cfg(budget_epsilon=9.0, raise_budget=True),
                                 journal=Journal(journal))
    assert raised.settings.budget.epsilon == 9.0
    assert len(caplog.records) == 1 and "epsilon 4 -> 9" in caplog.records[0].getMessage()
    history = budget_history(Journal(journal))
    assert [h["budget_epsilon"] for h in history] == [5.0, 4.0, 9.0]
    assert "raised by --raise-budget" in history[-1]["why"]
    # a start with no budget flag keeps the raised budget, whatever its defaults derive
    kept = prepare_service(cfg(), journal=Journal(journal))
    assert kept.settings.budget.epsilon == 9.0


def test_flags_of_a_later_start_do_not_widen_the_default_budget(tmp_path):
    """Issue 45's attacks on the default budget: a journal whose row 0 spent its default
    row budget (T x eps_LDP at T = 3) restarted with --T 10 kept the row budget of the
    first serve; a restart with --eps 9 neither draws a second projection nor moves the
    central budget (a second release needs --new-release, and is charged)."""
    from pobo.parties.journal import JournalError
    journal = tmp_path / "j.db"
    first = prepare_service(cfg(T=3, ldp_epsilon=1.0), journal=Journal(journal))
    fixed = first.settings.budget
    assert fixed.row_epsilon == 3.0
    later = prepare_service(cfg(T=10, ldp_epsilon=1.0), journal=Journal(journal))
    assert later.settings.budget == fixed
    with pytest.raises(JournalError, match="--new-release"):
        prepare_service(cfg(epsilon=9.0), journal=Journal(journal))
    assert len(Journal(journal).projection_keys()) == 1
    with pytest.raises(PrivacyBudgetExceeded):  # asked by name: charged, and past the budget
        prepare_service(cfg(epsilon=9.0, new_release=True), journal=Journal(journal))
    assert Journal(journal).central_spent()[0] == pytest.approx(first.settings.epsilon)


@pytest.mark.parametrize("epsilon, delta", [(math.inf, 0.0), (math.nan, 0.0), (-0.5, 0.0),
                                            (0.5, 1.0), (0.5, -1e-9)])
def test_a_charge_no_mechanism_makes_is_refused_and_the_journal_stays_clean(
        tmp_path, epsilon, delta):
    """What the journal calls an edit when it finds it (an infinite, NaN or negative
    epsilon, a delta outside [0, 1)) is refused when it is charged, even under a budget
    that would take it (a review committed an infinite charge on a row with no row
    budget: every later charge of the row failed, and the next start called the journal
    edited)."""
    from pobo.protocol.ledger import LOCAL, Budget, Entry

    journal = Journal(tmp_path / "j.db")
    with pytest.raises(ValueError, match="not a ledger charge"):
        journal.charge("s", [Entry("ldp-ctl", epsilon, delta, LOCAL, 3)], Budget(epsilon=1.0))
    journal.charge("s", [Entry("ldp-ctl", 0.1, 0.0, LOCAL, 3)], Budget(epsilon=1.0))
    assert [e.epsilon for e in journal.entries()] == [0.1]
    journal.close()
    assert Journal(tmp_path / "j.db").bad_entries() == []
