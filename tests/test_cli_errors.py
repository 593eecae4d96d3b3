"""Ordinary mistakes get one line, not a traceback (issue 16 item 4): bad flags, a port in
use, an endpoint without a scheme or with a port past 65535, a curator that exits early,
and Ctrl-C in the middle of `pobo run`, which still writes what it has."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

POBO = [sys.executable, "-m", "pobo"]


def _pobo(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as here:  # a default out folder (runs/) goes there
        return subprocess.run([*POBO, *argv], capture_output=True, text=True,
                              timeout=timeout, cwd=here)


def _one_line(done: subprocess.CompletedProcess) -> str:
    """The error output, asserted to be one line with no traceback."""
    err = done.stderr.strip()
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "warning:" not in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv, says", [
    (["run", "synthetic", "--T", "0"], "--T: expected an integer >= 1"),
    (["run", "synthetic", "--T", "-5"], "--T: expected an integer >= 1"),
    (["sweep", "synthetic", "--seeds", "0", "--out", "x"], "--seeds: expected an integer >= 1"),
    (["sweep", "synthetic", "--seeds", "-2", "--out", "x"], "--seeds: expected an integer >= 1"),
    (["run", "synthetic", "--delta", "1.5"], "--delta: expected a number in [0, 1)"),
    (["run", "synthetic", "--timeout", "nan"], "--timeout: expected a number > 0"),
    (["run", "synthetic", "--batch", "0"], "--batch: expected an integer >= 1"),
    (["curator", "synthetic", "--sessions", "-1"], "--sessions: expected an integer >= 0"),
    (["run", "synthetic", "--seed", "-1"], "--seed: expected an integer >= 0"),
    (["run", "nosuchscenario"], "unknown scenario 'nosuchscenario'"),
    (["run", "synthetic", "--beta-scale", "1e308"], "--beta-scale: expected a number in (0, 1e6]"),
    (["sweep", "synthetic", "--beta-scales", "1", "1e308", "--out", "x"],
     "--beta-scales: expected a number in (0, 1e6]"),
    (["sweep", "synthetic", "--log-eps", "1000", "--out", "x"],
     "--log-eps: expected a number in [-100, 100]"),
])
def test_a_bad_flag_is_one_line(argv, says):
    done = _pobo(*argv)
    assert done.returncode == 2
    assert says in _one_line(done)


def _busy_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


def test_a_port_in_use_and_bad_endpoints_are_one_line():
    holder, port = _busy_port()
    with holder:
        done = _pobo("curator", "synthetic", "--bind", f"tcp://127.0.0.1:{port}")
        assert done.returncode == 1
        assert "BindError: cannot bind" in _one_line(done) and "in use" in done.stderr
    for endpoint, says in [("127.0.0.1:5555", "expected tcp://HOST:PORT"),
                           ("tcp://127.0.0.1:70000", "invalid port '70000'")]:
        done = _pobo("curator", "synthetic", "--bind", endpoint)
        assert done.returncode == 1 and says in _one_line(done)


def test_a_curator_that_cannot_bind_writes_no_journal_and_no_folder(tmp_path):
    """A review's finding: a curator started on a port in use prepared its dataset first,
    so a start that never served wrote its budget into the journal (replacing a running
    curator's) and charged the projection, and left an empty --out. The port is checked
    before anything is written."""
    holder, port = _busy_port()
    journal, out = tmp_path / "j.db", tmp_path / "out"
    with holder:
        done = _pobo("curator", "synthetic", "--seed", "1", "--journal", str(journal),
                     "--budget-eps", "5", "--out", str(out), "--bind",
                     f"tcp://127.0.0.1:{port}")
    assert done.returncode == 1 and "in use" in _one_line(done)
    assert not journal.exists() and not out.exists(), list(tmp_path.iterdir())


def test_pobo_run_notices_at_once_when_the_curator_exits_early(tmp_path):
    started = time.monotonic()
    done = _pobo("run", "hospital", "--data", str(tmp_path / "missing.csv"), "--out",
                 str(tmp_path / "out"))
    assert done.returncode == 1 and time.monotonic() - started < 20
    assert "exited with code 1 before binding" in done.stderr
    assert "missing.csv" in done.stderr and "Traceback" not in done.stderr
    # a review's finding: the modeler's record of a Hello nobody received, and the keys,
    # were left in a folder `pobo runs` then listed as an incomplete run
    assert not (tmp_path / "out").exists(), list((tmp_path / "out").rglob("*"))
    keep = tmp_path / "kept"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    done = _pobo("run", "hospital", "--data", str(tmp_path / "missing.csv"), "--out", str(keep))
    assert done.returncode == 1 and sorted(p.name for p in keep.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("transport", ["tcp", "inproc"])
def test_ctrl_c_mid_run_still_writes_what_it_has(tmp_path, transport):
    """SIGINT to the whole process group, as a terminal's Ctrl-C: every process writes its
    record, `pobo run` merges them into result.json (status interrupted) and exits 130."""
    out = tmp_path / "out"
    run = subprocess.Popen([*POBO, "run", "synthetic", "--T", "5000", "--grid", "40",
                            "--transport", transport, "--out", str(out)],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "curator.transcript").exists():
            time.sleep(0.2)
        time.sleep(2.0)  # mid-run: some queries answered
        os.killpg(run.pid, signal.SIGINT)
        stdout, stderr = run.communicate(timeout=60)
    finally:  # the whole group: a party that outlived `pobo run` too
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if run.poll() is None:
            run.wait(10)
    assert run.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "pobo run: interrupted" in stderr, stderr
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "interrupted" and 0 < len(result["queries"]) < 5000
    mine, theirs = result["modeler"]["queries"], result["queries"]
    # the modeler may have been stopped before it read the last reward the curator sent
    assert theirs[:len(mine)] == mine and len(theirs) - len(mine) <= 1
    assert result["modeler"]["status"] != "ok"
    assert "result (interrupted)" in stdout


def test_the_parties_stop_when_pobo_run_is_killed(tmp_path):
    """`pobo run` killed by SIGKILL (a CI job's timeout, the OOM killer, a test's
    subprocess timeout) used to leave the curator and the modeler running the session
    on their own; they now see their stdin pipe close and stop like on SIGTERM."""
    from curator_process import in_group, kill_all, wait_gone

    out = tmp_path / "out"
    run = subprocess.Popen([*POBO, "run", "synthetic", "--T", "5000", "--grid", "40",
                            "--out", str(out)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    parties: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (out / "curator.transcript").exists():
            time.sleep(0.2)
        parties = [pid for pid in in_group(run.pid) if pid != run.pid]
        assert len(parties) == 2, parties
        run.kill()
        run.wait(10)
        assert not wait_gone(parties, 15), "a party outlived its pobo run by 15 s"
    finally:
        kill_all(in_group(run.pid) + parties)
        if run.poll() is None:
            run.kill()
            run.wait(10)


def test_version_and_module_entry_point():
    import pobo

    done = _pobo("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"pobo {pobo.__version__}"
    listing = _pobo("run", "--help").stdout
    assert all(name in listing for name in ("synthetic", "hospital", "bank", "table"))


def test_a_modeler_that_gives_up_ends_the_run_at_once(tmp_path):
    """A command objective that always fails: the modeler retries, gives up and says so
    (End), so the curator does not wait out its 60 s timeout; the session is left
    interrupted (resumable), not ok."""
    started = time.monotonic()
    done = _pobo("run", "synthetic", "--grid", "8", "--T", "3", "--objective-cmd",
                 'sh -c "exit 3; echo {index}"', "--out", str(tmp_path))
    assert done.returncode == 1 and time.monotonic() - started < 30, done.stderr
    record = json.loads((tmp_path / "curator.json").read_text())
    assert record["status"] == "interrupted" and record["queries"] == []


@pytest.mark.parametrize("sessions, code", [("0", 0), ("1", 130)])
def test_a_curator_stopped_by_sigterm_exits_cleanly(tmp_path, sessions, code):
    """A service (--sessions 0) stopped by SIGTERM exits 0; a one-session curator stopped
    before its session exits 130 (interrupted), with one line and no traceback."""
    holder, port = _busy_port()
    holder.close()
    curator = subprocess.Popen([*POBO, "curator", "synthetic", "--grid", "8", "--bind",
                                f"tcp://127.0.0.1:{port}", "--sessions", sessions, "--out",
                                str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        from curator_process import Lines

        lines = Lines(curator.stdout)  # bounded: no readline waiting on a silent curator,
        while "listening" not in (line := lines.next(60)):  # no spin after its exit
            assert line, "the curator exited before listening"
        curator.send_signal(signal.SIGTERM)
        curator.wait(30)  # its stdout is the reader thread's; stderr is small
        err = curator.stderr.read()
    finally:
        if curator.poll() is None:
            curator.kill()
            curator.wait(10)
    assert curator.returncode == code and "Traceback" not in err, err


@pytest.mark.parametrize("command", [["ledger"], ["answer"]])
def test_a_command_that_reads_a_journal_never_makes_one(tmp_path, command):
    """An empty file or a folder given as --journal is refused in one line and left as it
    was (a review's repro: `pobo ledger` turned an empty file into a 68 KB journal)."""
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for given, says in ((empty, "an empty file, not a journal"),
                        (tmp_path, "a folder, not a journal")):
        done = _pobo(*command, "--journal", str(given))
        assert done.returncode == 1 and says in _one_line(done)
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_export_data_writes_the_file_it_names(tmp_path):
    """`--out xdata` writes xdata, the file it reports (numpy's savez added .npz to it)."""
    import numpy as np

    done = _pobo("export-data", "synthetic", "--grid", "5", "--out", str(tmp_path / "xdata"))
    assert done.returncode == 0 and str(tmp_path / "xdata") in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["xdata"]
    with np.load(tmp_path / "xdata") as data:
        assert data["X"].shape[0] == data["f"].shape[0] == 25


def test_a_curator_whose_session_failed_says_which_and_why(capsys):
    """`pobo curator --sessions 1` exited 1 with no error line when its session failed (a
    review's repro: a flood past the refusal limit); now each failed session is named."""
    from pobo.cli_sessions import curator_status

    ok = {"session": "a" * 32, "status": "ok", "error": None}
    failed = {"session": "b" * 32, "status": "failed", "error": "ProtocolError: 10001 refusals"}
    cut = {"session": "c" * 32, "status": "interrupted", "error": "PeerTimeout: gone"}
    assert curator_status([ok], service=False) == 0 and capsys.readouterr().err == ""
    assert curator_status([ok, failed], service=False) == 1
    assert capsys.readouterr().err == (f"pobo curator: error: session {'b' * 32} failed: "
                                       "ProtocolError: 10001 refusals\n")
    assert curator_status([ok, cut], service=True) == 0  # a service stopped by a signal
    assert curator_status([cut], service=False) == 1 and "interrupted (resumable): " \
        "PeerTimeout" in capsys.readouterr().err
    # stopped by SIGINT: not an "error" with an empty CancelledError (a review's finding)
    stopped = {**cut, "error": "CancelledError: "}
    assert curator_status([stopped], service=False) == 1
    assert capsys.readouterr().err == (f"pobo curator: session {'c' * 32} interrupted "
                                       "(resumable): the curator was stopped\n")
    assert curator_status([], service=False) == 1 and "no session" in capsys.readouterr().err
    assert curator_status([], service=True) == 0 and capsys.readouterr().err == ""


def test_a_dataset_too_large_for_memory_is_one_line():
    """numpy's MemoryError (a synthetic grid of 1e10 rows) was a traceback (a review's repro)."""
    done = _pobo("curator", "synthetic", "--grid", "100000", "--bind", "tcp://127.0.0.1:0")
    assert done.returncode == 1 and "MemoryError" in _one_line(done)


@pytest.mark.parametrize("argv, says", [
    (["curator", "synthetic", "--grid", "5", "--bind", "tcp://127.0.0.1:0", "--ldp-eps", "1e-310"], "gives a noise scale of inf"),
    (["curator", "synthetic", "--grid", "5", "--bind", "tcp://127.0.0.1:0", "--ldp-eps", "1e-160"], "gives a noise scale of 8"),
    (["run", "synthetic", "--config", "/dev/zero"], "is not a regular file"),
])
def test_values_no_session_could_use_are_one_line(argv, says):
    """A review's repros: an LDP epsilon so small that every reward's noise is infinite was
    accepted (every modeler then failed), and a config that is a device hung or filled
    memory."""
    done = _pobo(*argv)
    assert done.returncode == 1 and says in _one_line(done)


@pytest.mark.parametrize("body, says", [
    ("raise RuntimeError('no such ward')", "failed to build its problem: RuntimeError: no such"),
    ("return len(1)", "failed to build its problem: TypeError"),  # not "takes no options"
])
def test_a_scenario_script_that_fails_inside_build_is_one_line(tmp_path, body, says):
    script = tmp_path / "ward.py"
    script.write_text(f"def build(seed, **options):\n    {body}\n")
    done = _pobo("curator", str(script), "--T", "2", "--bind", "tcp://127.0.0.1:0")
    assert done.returncode == 1 and says in _one_line(done)


def test_a_journal_path_that_names_no_file_is_said_to_start_a_new_ledger(tmp_path):
    """A review's finding: a mistyped --journal started a fresh ledger (nothing spent) in
    silence. It is said, once: a second start on the journal now there says nothing."""
    journal = tmp_path / "typo" / "j.db"
    argv = ["run", "synthetic", "--T", "2", "--grid", "8", "--journal", str(journal)]
    first = _pobo(*argv, "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    assert f"warning: no journal at {journal}: starting a new one" in first.stderr
    second = _pobo(*argv, "--out", str(tmp_path / "b"))
    assert second.returncode == 0 and "no journal at" not in second.stderr, second.stderr


def test_the_ledger_of_a_run_with_no_dp_claim_is_said_to_be_nominal(tmp_path):
    """A review's finding: `pobo run --lift paper` printed "no bound" at every scale and
    then a ledger of eps 3.004 spent, as if the run gave that guarantee."""
    from pobo.cli_sessions import ledger_lines

    journal = tmp_path / "j.db"
    done = _pobo("run", "synthetic", "--T", "2", "--grid", "8", "--lift", "paper",
                 "--journal", str(journal), "--out", str(tmp_path / "paper"))
    assert done.returncode == 0, done.stderr
    assert "privacy ledger (nominal: no DP claim: lift paper" in done.stdout
    ledger = _pobo("ledger", "--journal", str(journal))  # the journal's ledger says it too
    assert ledger.returncode == 0 and "privacy ledger (nominal: no DP claim" in ledger.stdout
    result = json.loads((tmp_path / "paper" / "result.json").read_text())
    assert "nominal" in ledger_lines(result)
    assert "nominal" not in ledger_lines({**result, "dp": True, "not_dp": []})
    from pobo.html_report import run_report_html  # the run's report says it too
    page = run_report_html(tmp_path / "paper")
    assert "privacy ledger (nominal: no DP claim: lift paper" in page


def test_a_delta_given_at_or_above_one_over_n_is_warned():
    """A review's finding: --budget-delta 0.9 and --ldp-row-delta 0.5 were taken in
    silence, and the ledger's epsilon, stated at 0.9, read ~0. A delta the user gives at
    or above 1/n is said to mean little; the defaults and small deltas say nothing."""
    from pobo.runspec import RunConfig, startup_warnings

    loud = startup_warnings(RunConfig(budget_delta=0.9, ldp_row_delta=0.5, delta=1e-6,
                                      seed=None), n=10_000)
    assert [w.split()[0] for w in loud] == ["--budget-delta", "--ldp-row-delta"]
    assert all("at least 1/n = 0.0001" in w for w in loud)
    assert startup_warnings(RunConfig(seed=None), n=10_000) == []
    assert startup_warnings(RunConfig(budget_delta=0.9, seed=None)) == []  # n not known


def test_a_refused_run_into_a_run_folder_leaves_the_earlier_run_as_it_was(tmp_path):
    """A review's finding: a second `pobo run --out R` refused before its curator bound
    (a journal of another dataset) had its modeler move the first run's result.json,
    modeler.json and transcript aside (.1): R was then listed as incomplete and `pobo
    report R` failed. What the refused run moved is put back, byte for byte."""
    journal, out = tmp_path / "j.db", tmp_path / "R"
    argv = ["run", "synthetic", "--grid", "8", "--T", "2", "--journal", str(journal),
            "--out", str(out)]
    assert _pobo(*argv, "--seed", "1").returncode == 0
    (out / "notes.txt").write_text("current")  # a user's file and an older copy of it,
    (out / "notes.txt.1").write_text("old")  # which no run may swap (a review's attack)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    refused = _pobo(*argv, "--seed", "2")  # another dataset: the journal refuses it
    assert refused.returncode == 1 and "journal of another dataset" in refused.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_pobo_run_stops_at_once_when_the_modeler_refuses_its_settings(tmp_path):
    """A review's finding: a modeler that exits at once (--batch 4 with a strategy that
    chooses one query at a time) left the curator waiting for its Hello until the accept
    timeout: the run hung for minutes. (Its first trigger, --batch 4 with Kusner's noisy
    release, is now refused before either party starts: test_distinct_rule.)"""
    started = time.monotonic()
    done = _pobo("run", "ldp-synthetic", "--ldp-eps", "2", "--strategy", "moma-gp-ucb",
                 "--T", "8", "--batch", "4", "--out", str(tmp_path / "r"), timeout=90)
    assert done.returncode == 1 and time.monotonic() - started < 30, done.stderr
    assert "moma-gp-ucb chooses one query at a time" in done.stderr
    assert "the modeler exited (code 1) while the curator was still running" in done.stderr


@pytest.mark.parametrize("where", ["afile", "afile/sub"])
def test_pobo_run_into_a_file_is_one_line_before_any_party_starts(tmp_path, where):
    """`--out` naming a file (or a folder under one) is refused in one line before the
    parties start: a review found both parties started and three error lines, one of
    them a misleading NotADirectoryError about modeler.json."""
    (tmp_path / "afile").write_text("mine")
    done = _pobo("run", "synthetic", "--grid", "5", "--T", "2", "--seed", "1", "--out",
                 str(tmp_path / where))
    assert done.returncode == 1
    assert _one_line(done).startswith("pobo run: error:") and "afile" in done.stderr
    assert "curator" not in done.stderr and "modeler" not in done.stderr
    assert (tmp_path / "afile").read_text() == "mine"


def test_a_service_keeps_its_last_results_in_memory_and_counts_the_earlier_ones(capsys):
    """A service (--sessions 0) kept every session's result in memory (~12 KB each,
    without bound: a review's peer opened 6,000 sessions in 20 s); it keeps the last
    KEPT_RESULTS and counts the earlier ones by status, and its exit status still says
    when an earlier one failed."""
    from pobo.cli_sessions import curator_status
    from pobo.remote import KEPT_RESULTS, Admissions

    slots = Admissions(limit=0, max_live=0)
    for k in range(KEPT_RESULTS + 500):
        status = "failed" if k == 3 else "interrupted" if k % 2 else "ok"
        slots.finish(f"s{k}", object(), {"session": f"s{k}", "status": status, "error": None})
    assert len(slots.results) == KEPT_RESULTS
    assert slots.results[0]["session"] == "s500" and slots.results[-1]["session"] == \
        f"s{KEPT_RESULTS + 499}"
    assert slots.results.earlier == {"ok": 250, "interrupted": 249, "failed": 1}
    assert curator_status(slots.results, service=True, earlier=slots.results.earlier) == 1
    assert "1 earlier session(s) failed" in capsys.readouterr().err
    counted = Admissions(limit=0, max_live=0)
    for k in range(KEPT_RESULTS + 1):
        counted.finish(f"s{k}", object(), {"session": f"s{k}", "status": "ok", "error": None})
    assert curator_status(counted.results, service=True, earlier=counted.results.earlier) == 0
    limited = Admissions(limit=KEPT_RESULTS + 5, max_live=0)  # a number of sessions: all
    for k in range(KEPT_RESULTS + 5):
        limited.finish(f"s{k}", object(), {"session": f"s{k}", "status": "ok", "error": None})
    assert len(limited.results) == KEPT_RESULTS + 5 and not limited.results.earlier
