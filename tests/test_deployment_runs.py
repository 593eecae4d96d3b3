"""`pobo run` without traps (issue 48 item 2): the curator prepares, then binds a port the
system picks and says where, and only then does the modeler start, so a preparation
longer than any peer timeout does not fail the run and no port is chosen long before
it is bound; a second run into a folder in use is refused in one line; a query refused
for its row's spent privacy budget is asked again with another row."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pobo import launch
from pobo.runspec import RunConfig

POBO = [sys.executable, "-m", "pobo"]
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

SLOW_SCRIPT = '''
import time
from pobo.scenarios.synthetic import build as synthetic

def build(seed, **options):
    time.sleep({sleep})  # a preparation longer than the peer timeout (--timeout)
    return synthetic(seed, grid=6)
'''


def _slow_scenario(tmp_path: Path, sleep: float) -> Path:
    script = tmp_path / "slow.py"
    script.write_text(SLOW_SCRIPT.format(sleep=sleep))
    return script


def _pobo(*argv: str, timeout: float = 240, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*POBO, *argv], capture_output=True, text=True, timeout=timeout,
                          env=ENV, cwd=cwd)


def test_a_preparation_longer_than_the_peer_timeout_does_not_fail_the_run(tmp_path):
    """A review's finding: the modeler started with the curator, and its own peer timeout
    (60 s) ran while the curator prepared. Here the timeout is 2 s and the preparation
    5 s: the modeler must not be waiting for a Welcome while the curator prepares."""
    script = _slow_scenario(tmp_path, 5)
    out = tmp_path / "out"
    done = _pobo("run", str(script), "--T", "3", "--timeout", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and len(result["queries"]) == 3


def test_no_port_is_chosen_before_the_curator_prepares(tmp_path, monkeypatch):
    """A review's finding: the port was picked free before the curator prepared and bound
    after it; another process had taken it meanwhile (BindError). Here every port the
    launcher could have picked beforehand is taken: the run must bind one the system
    gives the curator when it binds."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    monkeypatch.setattr(launch, "_free_port", lambda: taken, raising=False)
    try:
        result = launch.run_processes(RunConfig(scenario="synthetic", T=2, seed=1,
                                                options={"grid": 5}, timeout=30.0),
                                      tmp_path / "out", verbose=False)
    finally:
        holder.close()
    assert result["status"] == "ok"


def test_a_second_run_into_a_folder_in_use_is_refused_in_one_line(tmp_path):
    """A review's finding: two runs into one --out clobbered each other (the longer
    printed the shorter's summary, its result.json lost). The second is refused at once,
    the first finishes with its own records."""
    script = _slow_scenario(tmp_path, 6)
    out = tmp_path / "out"
    first = subprocess.Popen([*POBO, "run", str(script), "--T", "3", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=ENV)
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:  # the first holds it
            time.sleep(0.1)
        time.sleep(0.5)
        second = _pobo("run", "synthetic", "--grid", "5", "--T", "2", "--out", str(out),
                       timeout=120)
        stdout, stderr = first.communicate(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    lines = [line for line in second.stderr.splitlines() if "warning:" not in line]
    assert second.returncode == 1 and len(lines) == 1, second.stderr
    assert "in use by another run" in lines[0] and "Traceback" not in second.stderr
    assert first.returncode == 0, stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["T"] == 3 and len(result["queries"]) == 3  # the first run's own (T = 3)
    assert not (out / "result.json.1").exists()  # nothing of the refused run was written


def test_the_folder_is_free_again_once_a_run_ends(tmp_path):
    """The lock goes with the run: a run after it into the same folder is not refused."""
    out = tmp_path / "out"
    for _ in range(2):
        done = _pobo("run", "synthetic", "--grid", "5", "--T", "2", "--out", str(out))
        assert done.returncode == 0, done.stderr[-2000:]


def test_a_query_refused_for_a_spent_row_is_asked_again_with_another_row(tmp_path):
    """A review's finding: `pobo modeler` exited 1 when GP-UCB picked a row whose LDP
    budget was spent. PROTOCOL.md 7.1: a refused query is not asked; the modeler asks
    its seq again with another row. Every row may report once here, so GP-UCB, which
    returns to good rows, is refused and must go on."""
    out = tmp_path / "out"
    done = _pobo("run", "synthetic", "--grid", "4", "--T", "12", "--ldp-eps", "1",
                 "--ldp-row-budget", "1", "--ldp-row-delta", "0", "--out", str(out), "-v")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "privacy budget is spent" in done.stdout + done.stderr  # it was refused, and went on
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "ok" and len(result["queries"]) == 12
    assert len(set(result["queries"])) == 12  # every row reported once, none twice
    audit = _pobo("audit", str(out / "curator.transcript"), str(out / "modeler.transcript"),
                  "--allow-unsigned")
    assert audit.returncode == 0, audit.stdout[-3000:]


def _unused_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_modeler_started_before_the_curator_binds_waits_for_it(tmp_path):
    """A review's finding: `pobo modeler` started against a curator still preparing (it
    binds only when ready) failed after its own peer timeout. No peer timeout runs until
    a curator answers: here the timeout is 1 s and the curator binds 3 s after the
    modeler connects, and the session completes."""
    import asyncio

    from waits import result_within, stop

    from pobo.remote import connect_modeler, serve_curator
    from pobo.session import prepare_service

    endpoint = f"tcp://127.0.0.1:{_unused_loopback_port()}"
    modeler = asyncio.ensure_future(connect_modeler(endpoint, tmp_path / "m", seed=1,
                                                    timeout=1.0, patience=60.0,
                                                    ledger_heads=tmp_path / "heads.json"))
    await asyncio.sleep(3.0)
    assert not modeler.done(), modeler.exception()  # still waiting, past its 1 s timeout
    service = prepare_service(RunConfig("synthetic", T=3, seed=1, options={"grid": 5},
                                        timeout=10.0))
    curator = asyncio.ensure_future(serve_curator(service, endpoint, tmp_path / "c",
                                                  verbose=False, accept_timeout=30.0))
    try:
        result = await result_within(modeler, 60)
        await result_within(curator, 30)
    finally:
        await stop(curator)
        await stop(modeler)
    assert result["status"] == "ok" and len(result["queries"]) == 3


async def test_a_modeler_with_no_curator_ever_listening_stops_after_its_patience(tmp_path,
                                                                                 caplog):
    """The wait for a listener is bounded by --patience, said while it lasts, and ends
    with a PeerTimeout naming the endpoint (not a hang, not the 1 s reply timeout)."""
    import logging

    from waits import result_within

    from pobo.protocol.errors import PeerTimeout
    from pobo.remote import connect_modeler
    from pobo.transport import dealer

    endpoint = f"tcp://127.0.0.1:{_unused_loopback_port()}"
    caplog.set_level(logging.WARNING)
    old, dealer.UNREACHED_EVERY = dealer.UNREACHED_EVERY, 1.0
    started = time.monotonic()
    try:
        with pytest.raises(PeerTimeout, match=f"no curator listened at {endpoint} within 3"):
            await result_within(connect_modeler(endpoint, tmp_path / "m", seed=1,
                                                timeout=1.0, patience=3.0,
                                                ledger_heads=tmp_path / "heads.json"), 30)
    finally:
        dealer.UNREACHED_EVERY = old
    assert 2.5 <= time.monotonic() - started < 20
    assert "no curator listening at" in caplog.text


def test_a_modeler_reads_its_endpoint_from_standard_input_with_connect_dash(tmp_path):
    """`pobo modeler --connect -` takes the curator's endpoint from its standard input's
    first line (how `pobo run` starts its modeler beside a curator still preparing);
    an empty input is a one-line error."""
    from curator_process import CuratorProcess

    curator = CuratorProcess(tmp_path / "c", 2)
    try:
        curator.wait_listening()
        done = subprocess.run([*POBO, "modeler", "--connect", "-", "--seed", "1", "--out",
                               str(tmp_path / "m"), "--timeout", "30"],
                              input=curator.endpoint + "\n", capture_output=True, text=True,
                              timeout=120, env=ENV)
        assert done.returncode == 0, done.stderr[-3000:]
        assert curator.finish()["status"] == "ok"
    finally:
        curator.kill()
    empty = subprocess.run([*POBO, "modeler", "--connect", "-", "--out", str(tmp_path / "e")],
                           input="", capture_output=True, text=True, timeout=60, env=ENV)
    assert empty.returncode != 0 and "no endpoint on the standard input" in empty.stderr
    assert "Traceback" not in empty.stderr


def test_pobo_run_stops_a_preparing_curator_when_its_modeler_fails_first(tmp_path,
                                                                        monkeypatch):
    """The modeler starts beside the curator: one that exits with an error while the
    curator still prepares ends the run at once (the curator stopped, no wait for its
    preparation or its accept timeout)."""
    script = _slow_scenario(tmp_path, 60)
    real = launch.modeler_argv
    monkeypatch.setattr(launch, "modeler_argv",
                        lambda config: [*real(config), "--timeout", "-1"])  # refused at start
    started = time.monotonic()
    with pytest.raises(launch.LaunchError, match="the modeler exited with code 2 before"):
        launch.run_processes(RunConfig(scenario=str(script), T=2, seed=1, timeout=30.0),
                             tmp_path / "out", verbose=False)
    assert time.monotonic() - started < 40
