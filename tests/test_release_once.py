"""Issue 21 items 3 and 5: one release per session, for ever; Kusner's k(x, x) = 1 checked."""
import asyncio
from dataclasses import replace

import pytest

from pobo.parties.journal import ReleaseAlreadyGranted
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import Ledger
from pobo.protocol.messages import PROTOCOL_VERSION, Hello, ReleaseRequest
from pobo.releases import KernelNotNormalised, release_handler
from pobo.session import prepare_service

from test_dataset_ledger import _request, _session, cfg
from test_release import DELTA, _kusner_hello, _kusner_record, _problem, _source


def test_a_resume_after_T_never_grants_a_second_release(tmp_path):
    """The attack of issue 21: a session reaches T and is granted its noisy release, its
    peer vanishes before End (the journal marks it interrupted, so it may be resumed),
    the owner resumes it and asks for the release again: refused with a typed error, and
    the ledger is charged nothing more -- also after the curator restarts."""
    from pobo.parties.journal import Journal
    config = cfg(T=4, release="noisy", release_epsilon=0.5, release_delta=1e-8)
    journal = Journal(tmp_path / "journal.db")
    service = prepare_service(config, journal=journal)
    cres, mres = asyncio.run(_session(service, tmp_path / "s", release=_request(config)))
    assert mres["release"] is not None and cres["status"] == "ok"
    sid = cres["session"]
    journal.set_status(sid, 1, "interrupted")  # what a peer vanishing before End leaves
    charged = journal.central_entries()
    for attempt in range(2):  # the same curator, then a restarted one on the same journal
        if attempt:
            journal.close()
            journal = Journal(tmp_path / "journal.db")
            service = prepare_service(config, journal=journal)
        resumed = service.resume(sid)
        hello = Hello(PROTOCOL_VERSION, "t", sid, "gp-ucb", 1e-8)
        handle = release_handler(service.problem, resumed.release.Z, resumed.params.kernel,
                                 resumed.curator(), resumed.ledger,
                                 resumed.source("release-noise"), hello=hello)
        with pytest.raises(ReleaseAlreadyGranted) as refusal:
            handle(ReleaseRequest("noisy", 0.5, 1e-8))
        assert refusal.value.code is ErrorCode.POLICY
        assert journal.central_entries() == charged  # no second charge
        journal.set_status(sid, resumed.generation, "interrupted")
    journal.close()


def test_a_release_is_refused_unless_k_x_x_is_one():
    """Kusner et al. assume k(x, x) = 1: a declared kernel with signal variance 2 gets a
    typed refusal and no ledger charge; the same session with variance 1 is granted."""
    problem = _problem()
    for variance, granted in ((2.0, False), (1.0, True)):
        p = replace(problem, kernel=replace(problem.kernel, signal_var=variance))
        curator, _ = _kusner_record(p, 6)
        ledger = Ledger()
        handle = release_handler(p, p.X, p.kernel, curator, ledger, _source(7),
                                 hello=_kusner_hello())
        request = ReleaseRequest("noisy", 1.0, DELTA)
        if granted:
            assert handle(request).algorithm == "noisy"
            assert len(ledger.entries) == 1
        else:
            with pytest.raises(KernelNotNormalised, match="k\\(x, x\\) = 1"):
                handle(request)
            assert ledger.entries == []


def test_privacy_unit_states_kusners_assumptions_and_pure_ldp():
    unit = prepare_service(cfg(ldp_epsilon=1.0, reward_bound=4.0)).privacy_unit()
    text = " ".join(unit["releases"]["assumptions"])
    assert "GP prior" in text and "0.9" in text and "k(x, x) = 1" in text
    assert "one release per session" in unit["releases"]["once"]
    assert "before anything is computed from the data" in unit["releases"]["charged"]
    assert unit["rewards"]["delta"] == 0.0 and "accountant" in unit["rewards"]["composition"]


@pytest.mark.parametrize("request_, says", [
    (ReleaseRequest("noisy", 1e-300, DELTA), "epsilon must lie in"),
    (ReleaseRequest("noisy", 1e300, DELTA), "epsilon must lie in"),
    (ReleaseRequest("noisy", 1.0, DELTA, noise_var=1e308), "no finite sensitivity")])
def test_a_release_whose_noise_could_not_be_a_number_is_refused_free(request_, says):
    """A hostile request whose noise scale overflows (epsilon 1e-300, a noise variance of
    1e308 that still replays as GP-UCB) is refused with a typed policy error, from the
    request and the declarations alone, and charges nothing (a review's repro: charged for
    ever, then the session died with no Error to the modeler)."""
    problem = _problem()
    curator, _ = _kusner_record(problem, 6)
    ledger = Ledger()
    handle = release_handler(problem, problem.X, problem.kernel, curator, ledger, _source(7),
                             hello=_kusner_hello())
    with pytest.raises(ProtocolError, match=says) as refusal:
        handle(request_)
    assert refusal.value.code is ErrorCode.POLICY and ledger.entries == []


def test_a_release_that_fails_after_its_charge_keeps_the_charge_and_says_nothing_of_the_data(
        monkeypatch):
    """Computed before its charge, a release whose failure depends on the data (an
    overflowing score) answered "cannot be computed, nothing charged": a free oracle on
    the data, bisected to 12 digits of max |mu_T| by a second review. Now the charge comes
    first and stands, and the answer carries no text of the failure."""
    import pobo.releases as releases

    problem = _problem()
    curator, _ = _kusner_record(problem, 6)
    ledger = Ledger()

    def failing(*args, **kwargs):
        raise ValueError("max |mu_T| = 2.0085984318171675 overflows")
    monkeypatch.setattr(releases, "compute", failing)
    handle = release_handler(problem, problem.X, problem.kernel, curator, ledger, _source(7),
                             hello=_kusner_hello())
    with pytest.raises(ProtocolError) as failed:
        handle(ReleaseRequest("noisy", 1.0, DELTA))
    assert failed.value.code is ErrorCode.INTERNAL and "2.008" not in str(failed.value)
    assert [e.mechanism for e in ledger.entries] == ["release:noisy"]  # paid for
