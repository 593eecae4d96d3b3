"""What an operator running a curator for strangers expects: faults are loud and typed,
mistakes are one line before anything binds, and a restarted curator finds its data."""
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pobo.parties.journal import Journal, JournalFault
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.session import RunConfig, prepare_service

POBO = [sys.executable, "-m", "pobo"]
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sg-private-projects.csv"


def _fill(journal: Journal) -> None:
    """Make the journal's disk full: no page beyond those it has (SQLITE_FULL)."""
    (pages,) = journal._db.execute("PRAGMA page_count").fetchone()
    journal._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_is_reported_with_its_cause_and_refuses_new_work(tmp_path, caplog):
    journal = Journal(tmp_path / "j.db")
    service = prepare_service(RunConfig(T=400, seed=1, options={"grid": 8}), journal=journal)
    curator = service.new_session().curator()
    curator.respond(1, 0)
    _fill(journal)
    with caplog.at_level(logging.ERROR, logger="pobo.journal"):
        with pytest.raises(ProtocolError) as failed:
            for seq in range(2, 400):  # until a write needs a new page
                curator.respond(seq, seq % 64)
    assert failed.value.code is ErrorCode.INTERNAL and "full" in str(failed.value)
    assert any("full" in r.getMessage() for r in caplog.records)
    with pytest.raises(JournalFault, match="accepts no new work"):
        service.new_session()
    answered = len(curator.queries)
    journal.close()
    again = Journal(tmp_path / "j.db")  # every answer the modeler saw is still there
    (rows,) = again._db.execute("SELECT COUNT(*) FROM answers").fetchone()
    assert rows == answered
    again.close()


@pytest.mark.skipif(not DATA.exists(), reason=f"the public file is not at {DATA}")
def test_a_curator_on_data_restarts_on_its_journal_without_a_seed(tmp_path):
    config = RunConfig("realestate", seed=None, T=3, options={"data": str(DATA), "n": 300})
    ids = []
    for _ in range(2):
        journal = Journal(tmp_path / "j.db")
        service = prepare_service(config, journal=journal)  # same prepared X: same digest
        ids.append(service.new_session().session_id)
        journal.close()
    assert ids[0] != ids[1]


def _one_line_error(args, **kw):
    with tempfile.TemporaryDirectory() as here:  # a default out folder (runs/) goes there
        run = subprocess.run([*POBO, *args], capture_output=True, text=True, timeout=120,
                             **{"cwd": here, **kw})
    lines = run.stderr.strip().splitlines()
    assert run.returncode != 0 and len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


def test_an_unwritable_out_is_refused_before_binding(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    line = _one_line_error(["curator", "synthetic", "--grid", "6", "--bind",
                            "tcp://127.0.0.1:0", "--out", str(blocker / "out")])
    assert "pobo curator: error" in line


def test_plaintext_beyond_loopback_needs_insecure():
    line = _one_line_error(["curator", "synthetic", "--grid", "6", "--bind",
                            "tcp://0.0.0.0:0", "--accept-timeout", "1"])
    assert "--insecure" in line


@pytest.mark.parametrize("endpoint", ["127.0.0.1:5555", "tcp://127.0.0.1:70000"])
def test_a_bad_endpoint_is_one_line(endpoint):
    _one_line_error(["curator", "synthetic", "--grid", "6", "--bind", endpoint])


def test_keys_are_private_and_never_overwritten_without_force(tmp_path):
    subprocess.run([*POBO, "keys", str(tmp_path / "k")], check=True, timeout=60,
                   capture_output=True)
    assert os.stat(tmp_path / "k" / "curator.key_secret").st_mode & 0o777 == 0o600
    line = _one_line_error(["keys", str(tmp_path / "k")])
    assert "--force" in line
    subprocess.run([*POBO, "keys", str(tmp_path / "k"), "--force"], check=True, timeout=60,
                   capture_output=True)


def test_sigterm_stops_a_serving_curator_without_a_traceback(tmp_path):
    curator = subprocess.Popen([*POBO, "curator", "synthetic", "--grid", "6", "--bind",
                                "tcp://127.0.0.1:0", "--sessions", "0", "--out",
                                str(tmp_path / "c")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert curator.stdout.readline().startswith("[curator] listening on ")
        time.sleep(0.3)
        curator.send_signal(signal.SIGTERM)
        curator.wait(30)
        err = curator.stderr.read()
    finally:
        if curator.poll() is None:
            curator.kill()
            curator.wait(10)
    assert "Traceback" not in err, err
    assert curator.returncode in (0, 1)
