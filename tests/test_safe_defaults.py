"""Safe with no flags: the defaults a new user (or an attacker against a README curator)
meets -- budgets, loud non-DP modes -- each tried as the issue's attack (issue 22)."""
import asyncio
import math
import subprocess
import sys

import pytest

from pobo.parties.journal import Journal
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.runspec import startup_warnings
from pobo.session import (
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
    lift test) and one default release, with LDP on. (Hospital's rule `distinct` grants
    no noisy release, PROTOCOL.md 10.1: lifted here, the budget is the point.)"""
    config = RunConfig(scenario, T=3, seed=0, options=options, release="noisy",
                       ldp_epsilon=1.0, distinct=False)
    service = prepare_service(config)
    cres, mres = asyncio.run(_session(service, tmp_path, release=release_request(config)))
    assert cres["status"] == "ok" and mres["release"] is not None, mres.get("release_error")


def _pobo(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pobo", *argv], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`pobo run` with no signing flag: both parties sign with the key store's keys."""
    out = tmp_path_factory.mktemp("signed") / "run"
    done = _pobo("run", "synthetic", "--grid", "8", "--T", "4", "--out", str(out), "-q")
    assert done.returncode == 0, done.stderr
    return out


def test_a_run_with_no_flags_is_signed_and_audits_verified_naming_the_keys(cli_run):
    from pobo.transport.keyfiles import pobo_home
    done = _pobo("audit", str(cli_run / "curator.transcript"), str(cli_run / "modeler.transcript"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("signatures: verified") == 2
    assert "trusted curator key" in done.stdout and str(pobo_home() / "keys") in done.stdout


def test_a_fabricated_unsigned_session_does_not_exit_0(tmp_path):
    """The issue's attack: without signatures, whoever holds the transcripts can replace
    them with a consistent pair of their making (here: a whole session with other
    rewards, chains and links all intact). The audit cannot tell, so it must not exit 0."""
    from pobo.session import run_inproc
    out = tmp_path / "run"
    asyncio.run(run_inproc(cfg(T=4, seed=5), out))  # no signing: anyone could write it
    paths = [str(out / "curator.transcript"), str(out / "modeler.transcript")]
    done = _pobo("audit", *paths)
    assert done.returncode == 3, done.stdout
    assert "not verified: the curator did not sign" in done.stdout
    assert "not every frame verifies" in done.stderr
    assert _pobo("audit", *paths, "--allow-unsigned").returncode == 0  # said, and opted in


def test_a_run_resigned_with_new_keys_and_its_keys_folder_replaced_is_not_trusted(tmp_path):
    """The issue's attack: a run signed with other keys, its keys/ folder holding those
    keys. `pobo audit` with no key flag trusts the user's store, not keys/: exit 3,
    naming the untrusted key; given the keys explicitly (a flag), it verifies."""
    from pobo.launch import publish_keys
    from pobo.session import Signing, run_inproc
    out = tmp_path / "run"
    other = Signing.throwaway()
    asyncio.run(run_inproc(cfg(T=4), out, signing=other))
    publish_keys(other.curator.public_hex, other.modeler.public_hex, out)
    paths = [str(out / "curator.transcript"), str(out / "modeler.transcript")]
    done = _pobo("audit", *paths)
    assert done.returncode == 3, done.stdout
    assert f"signed with {other.curator.public_hex[:16]}" in done.stdout
    done = _pobo("audit", *paths, "--keys", str(out / "keys"))
    assert done.returncode == 0 and "trusted curator key" in done.stdout


def test_the_key_store_is_made_once_private_and_kept(tmp_path):
    import os
    import stat
    from pobo.transport.keyfiles import store_signing_key, trusted_signing_keys
    first = store_signing_key("curator", tmp_path)
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(first.parent).st_mode) == 0o700
    assert store_signing_key("curator", tmp_path).read_bytes() == first.read_bytes()
    assert list(trusted_signing_keys(tmp_path).values()) == [first.with_suffix(".sign_public")]


@pytest.mark.parametrize("setting, reason", [
    (dict(lift="paper", seed=None), "lift paper"), (dict(non_private=True, seed=None), "non-private"),
    (dict(seed=3), "seeded randomness")])
def test_a_non_dp_mode_says_so_on_the_wire_in_the_result_and_in_the_audit(setting, reason,
                                                                          tmp_path):
    """The issue: --lift paper (and --non-private, seeded randomness) looked exactly like
    a DP release on the wire and in `pobo audit`. Now the Dataset carries dp: false,
    result.json starts with it, the curator warns at start and the audit says 'not DP'."""
    from pobo.protocol.audit import audit_transcript
    from pobo.protocol.codec import decode
    from pobo.protocol.signing import body_of
    from pobo.protocol.transcript import read_transcript
    from pobo.session import run_inproc
    config = cfg(**setting)
    result = asyncio.run(run_inproc(config, tmp_path))
    assert list(result)[0] == "dp" and result["dp"] is False
    assert any(reason in why for why in result["not_dp"])
    sent = next(r for r in read_transcript(tmp_path / "curator.transcript")
                if r.kind == "dataset")
    from pobo.protocol.transcript import blob_dirs, resolve
    frame = resolve(sent, blob_dirs(tmp_path / "curator.transcript", None), {}).frame
    assert decode(body_of(frame)).release.dp is False
    report = audit_transcript(tmp_path / "curator.transcript")
    assert report.dp is False and "not DP" in report.text()
    assert any(reason.split()[0] in w for w in startup_warnings(config))


def test_a_deployed_private_run_is_dp_and_says_nothing_of_the_kind(tmp_path):
    from pobo.protocol.audit import audit_transcript
    from pobo.session import run_inproc
    result = asyncio.run(run_inproc(cfg(seed=None), tmp_path))
    assert result["dp"] is True and result["not_dp"] == []
    report = audit_transcript(tmp_path / "curator.transcript")
    assert report.dp is True and "not DP" not in report.text()
    assert startup_warnings(cfg(seed=None)) == []


def test_resuming_a_finished_session_says_so_at_once_and_changes_nothing(tmp_path):
    """The issue's mistake: `pobo modeler --resume` of a finished session overwrote
    modeler.json with an empty error record after a timeout (and appended to the
    transcript, failing the paired audit). Now: 'nothing to resume', at once, nothing
    written (the curator's endpoint here is not even listening)."""
    import time
    from pobo.session import run_inproc
    asyncio.run(run_inproc(cfg(T=3), tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    start = time.monotonic()
    done = _pobo("modeler", "--connect", "tcp://127.0.0.1:9", "--resume", "--out",
                 str(tmp_path), "--timeout", "30")
    assert done.returncode != 0 and "nothing to resume" in done.stderr, done.stderr
    assert time.monotonic() - start < 20
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is `pid` (from /proc)."""
    from pathlib import Path
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                out.append((int(stat.parent.name), cmd))
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_pobo_run_ends_when_its_curator_is_killed(tmp_path):
    """The issue: after kill -9 of the curator under `pobo run` (a query pending, so the
    modeler would retry for its one-day --patience) the run was silent 100 s later. Now
    the modeler is stopped and the run ends with a one-line error."""
    import os
    import signal
    import time
    run = subprocess.Popen(
        [sys.executable, "-m", "pobo", "run", "synthetic", "--grid", "8", "--T", "3",
         "--objective-wait", "--journal", str(tmp_path / "j.db"), "--out",
         str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        curator = []
        while not curator and time.monotonic() < deadline:
            time.sleep(0.5)
            curator = [p for p, cmd in _children(run.pid) if " curator " in cmd]
            if curator and not (tmp_path / "run" / "modeler.transcript").exists():
                curator = []  # wait until the session runs (the modeler has a transcript)
        assert curator, "the curator never started"
        time.sleep(1.0)
        os.kill(curator[0], signal.SIGKILL)
        out, err = run.communicate(timeout=40)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode != 0 and "curator exited" in err, err


def test_a_modeler_not_told_distinct_honours_the_rule_the_welcome_carries(tmp_path):
    """The issue: a standalone hospital modeler tested one row 9 times, 'distinct' held
    only under `pobo run`. The curator announces the scenario's rule in the Welcome and a
    plain GP-UCB modeler (no +distinct) follows it; without the rule it repeats rows."""
    service = prepare_service(cfg(T=40, distinct=True, ldp_epsilon=1.0))
    assert service.params.distinct
    cres, mres = asyncio.run(_session(service, tmp_path / "d", strategy="gp-ucb"))
    assert len(set(mres["queries"])) == len(mres["queries"]) == 40
    free = prepare_service(cfg(T=40, distinct=False, ldp_epsilon=1.0))
    cres, mres = asyncio.run(_session(free, tmp_path / "f", strategy="gp-ucb"))
    assert len(set(mres["queries"])) < 40  # the same modeler repeats rows when allowed


def test_pobo_ledger_json_into_head_ends_quietly(tmp_path):
    """`pobo ledger --json | head -1` ended in a BrokenPipeError traceback."""
    from pobo.session import prepare_service
    journal = Journal(tmp_path / "j.db")
    prepare_service(cfg(), journal=journal)
    journal.close()
    done = subprocess.run(f"{sys.executable} -m pobo ledger --journal {tmp_path / 'j.db'} "
                          "--json | head -c 1", shell=True, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout == "{" and "BrokenPipe" not in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_public_key_as_curve_secret_is_named_as_such(tmp_path):
    from pobo.transport.security import make_keys
    paths = make_keys(tmp_path / "keys")
    done = _pobo("curator", "synthetic", "--grid", "8", "--bind", "tcp://127.0.0.1:0", "--curve-secret",
                 str(paths["curator_public"]), "--curve-allow", str(paths["allowed"]),
                 "--out", str(tmp_path / "o"))
    assert done.returncode == 1 and "is a public key, not a secret one" in done.stderr
    assert "chmod" not in done.stderr


def test_a_second_session_keeps_the_first_ones_record(tmp_path):
    """modeler.json was overwritten while modeler.transcript.1 was kept: now both
    move together (.json.1 beside .transcript.1)."""
    from pobo.session import run_inproc
    first = asyncio.run(run_inproc(cfg(T=3), tmp_path))
    asyncio.run(run_inproc(cfg(T=3, seed=4), tmp_path))
    import json
    for role in ("curator", "modeler"):
        assert (tmp_path / f"{role}.transcript.1").exists()
        old = json.loads((tmp_path / f"{role}.json.1").read_text())
        assert old["queries"] == first["queries"] and old["rewards"] == first["rewards"]
    assert json.loads((tmp_path / "curator.json.1").read_text())["session"] == first["session"]


def test_pobo_run_prints_its_summary_once(tmp_path):
    done = _pobo("run", "synthetic", "--grid", "8", "--T", "3", "--out", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("synthetic: n=64") == 1, done.stdout


def test_pobo_report_on_a_malformed_runs_csv_is_one_line(tmp_path):
    (tmp_path / "runs.csv").write_text("run,scenario,strategy,epsilon,r,seed,T,n,lifted,"
                                       "simple_regret\nx,synthetic,gp-ucb,1,2,0,3,4,true,0.5\n")
    done = _pobo("report", str(tmp_path))
    assert done.returncode == 1 and "malformed" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_dataset_digest_is_the_same_under_1_and_2_blas_threads():
    """The issue (items 8, 9): with OPENBLAS_NUM_THREADS=1 the prepared X differed by
    4.5e-11, so its digest -- which binds the journal and `pobo audit --data` -- changed
    (and the threaded fit thrashed: 44 s against 5 s). The fit now runs on one BLAS thread
    whatever the environment says."""
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    code = ("from pobo.scenarios.registry import build_problem; "
            "from pobo.parties.dataset import dataset_digest; "
            "print(dataset_digest(build_problem('examples/my_scenario.py', 0, n=200)))")
    digests = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads,
               "MKL_NUM_THREADS": threads}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300, env=env, cwd=root)
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout.strip())
    assert len(digests) == 1, digests


def test_pobo_run_waits_for_a_curator_that_says_it_is_preparing():
    """The issue (item 9): `pobo run` gave up after 60 s ('did not bind') on a curator
    still preparing its dataset. It now waits as long as the curator says it works (a line
    every 10 s), and still gives up on one that is silent."""
    import threading
    import time
    from pobo.launch import LaunchError, Spawned, _wait_for_endpoint
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ready, errors = threading.Event(), []

        def talk():  # 'preparing' every 0.3 s for 2 s, then the endpoint
            for _ in range(7):
                time.sleep(0.3)
                errors.append("pobo curator: preparing the dataset")
            ready.set()

        reader = threading.Thread(target=talk, daemon=True)
        reader.start()
        working = Spawned("curator", process, [], reader, errors)
        _wait_for_endpoint(working, ready, timeout=1.0)  # 2 s > 1 s, but never silent 1 s
        silent = Spawned("curator", process, [], reader, [])
        with pytest.raises(LaunchError, match="said nothing for 0.5 s"):
            _wait_for_endpoint(silent, threading.Event(), timeout=0.5)
    finally:
        process.kill()
        process.wait()
