"""Whole sessions: two OS processes over loopback tcp, the two-command setup, and the
in-process channel with hostile or broken peers. Every wait is bounded; every process
is stopped in a finally."""
import asyncio
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from curator_process import Lines  # test helper: bounded reads of a process's lines

from pobo.protocol.signing import body_of
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ErrorCode, PeerTimeout, ProtocolError
from pobo.protocol.messages import PROTOCOL_VERSION, Dataset, End, Error, Hello, Query, Reward, Welcome
from pobo.protocol.policy import CURATOR
from pobo.protocol.transcript import read_transcript
from pobo.remote import LISTENING, connect_modeler
from pobo.session import RunConfig, curate, open_channel, prepare_curator, run_inproc
from pobo.transport.inproc import pipe_pair

SMALL = ["--grid", "12", "--T", "6", "--r", "4"]


def _pobo() -> list[str]:
    script = Path(sys.executable).with_name("pobo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pobo"]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_pobo_run_synthetic_over_tcp_in_two_processes(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([*_pobo(), "run", "synthetic", *SMALL, "--seed", "3", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stdout.splitlines() if line.startswith("[curator] t=")]
    assert len(progress) == 6  # one line per iteration
    result = json.loads((out / "result.json").read_text())
    # pobo run signs with the user's key-store keys: the audit trusts them with no flag
    assert result["signatures"] == result["modeler"]["signatures"] == "signed"
    audited = subprocess.run([*_pobo(), "audit", str(out / "curator.transcript"),
                              str(out / "modeler.transcript"), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert [r["signatures"] for r in json.loads(audited.stdout)] == ["verified", "verified"]
    assert not list(out.glob("**/*.sign_secret"))  # the secret halves are gone with the run
    for key in ("scenario", "seed", "n", "d", "r", "epsilon", "delta", "omega", "sigma_min",
                "lifted", "T", "queries", "rewards", "simple_regret", "cumulative_regret",
                "f_star", "sigma_f", "transcripts"):
        assert key in result, key
    assert (result["n"], result["d"], result["r"], result["T"]) == (144, 2, 4, 6)
    assert result["consistent"] and result["status"] == "ok" and result["policy"] == "private"
    assert len(result["queries"]) == len(result["simple_regret"]) == 6
    assert result["modeler"]["queries"] == result["queries"]
    simple = np.array(result["simple_regret"])
    assert (np.diff(simple) <= 0).all() and (simple >= 0).all()
    # the modeler's transcript holds the dataset it received and nothing of X or f
    kinds = [r.kind for r in read_transcript(result["transcripts"]["modeler"])]
    assert kinds[:3] == ["hello", "welcome", "dataset"] and kinds[-1] == "end"
    assert kinds.count("reward") == 6
    dataset = decode(body_of(next(r.frame for r in read_transcript(result["transcripts"]["modeler"])
                          if r.kind == "dataset")))
    assert dataset.release.mechanism == "gaussian-rows" and dataset.release.Z.shape == (144, 4)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("host", [
    "127.0.0.1",
    # an IPv6 address needs ZeroMQ's IPV6 option on both sockets ('No such device' before)
    pytest.param("[::1]", marks=pytest.mark.skipif(not _ipv6_loopback(),
                                                   reason="this machine has no IPv6 loopback"))])
def test_pobo_curator_and_pobo_modeler_as_two_commands(tmp_path, host):
    curator = subprocess.Popen([*_pobo(), "curator", "synthetic", *SMALL, "--seed", "1",
                                "--bind", f"tcp://{host}:0", "--out", str(tmp_path / "c"),
                                "--accept-timeout", "60"],
                               stdout=subprocess.PIPE, text=True)
    modeler = None
    try:
        line = Lines(curator.stdout).next(60)
        assert line.startswith(LISTENING), line
        endpoint = line[len(LISTENING):].strip()
        assert endpoint.startswith(f"tcp://{host}:") and not endpoint.endswith(":0")
        modeler = subprocess.run([*_pobo(), "modeler", "--connect", endpoint, "--seed", "1",
                                  "--out", str(tmp_path / "m")],
                                 capture_output=True, text=True, timeout=120)
        assert modeler.returncode == 0, modeler.stderr
        assert curator.wait(60) == 0
    finally:
        _stop(curator)
    cres = json.loads((tmp_path / "c" / "curator.json").read_text())
    mres = json.loads((tmp_path / "m" / "modeler.json").read_text())
    assert cres["queries"] == mres["queries"] and cres["rewards"] == mres["rewards"]
    assert len(cres["queries"]) == 6 and cres["randomness"] == "seeded"


def test_non_private_baseline_over_ipc_is_recorded_as_such(tmp_path):
    from pobo.launch import run
    result = run(RunConfig(T=4, non_private=True, options={"grid": 10}), tmp_path, "ipc",
                 verbose=False, wall_timeout=120)
    assert result["policy"] == "non-private" and result["epsilon"] is None
    assert result["r"] == result["d"] == 2 and result["consistent"]


async def test_same_seed_same_run_and_other_seed_other_run(tmp_path):
    cfg = RunConfig(T=8, seed=5, options={"grid": 15})
    a = await run_inproc(cfg, tmp_path / "a")
    b = await run_inproc(cfg, tmp_path / "b")
    c = await run_inproc(RunConfig(T=8, seed=6, options={"grid": 15}), tmp_path / "c")
    assert a["queries"] == b["queries"] and a["rewards"] == b["rewards"]
    assert a["queries"] != c["queries"]
    times = a["modeler"]["step_times"]  # each step's wall time, in order (benchmarks/big_n.py)
    assert len(times) == a["modeler"]["steps"] == 8 and min(times) > 0
    assert sum(times) <= 8 * a["modeler"]["step_seconds"] + 1e-5


async def _serve_and_drive(tmp_path, drive):
    """Run the real curator over an in-process pipe; `drive(raw_pipe)` plays the modeler."""
    side = prepare_curator(RunConfig(T=3, seed=0, timeout=5.0, options={"grid": 6}))
    cpipe, mpipe = pipe_pair()
    channel = open_channel(cpipe, CURATOR, False, tmp_path, 5.0)
    serve = asyncio.ensure_future(curate(channel, side, tmp_path, verbose=False))
    try:
        return await asyncio.wait_for(drive(mpipe), 20), serve
    finally:
        await asyncio.wait({serve}, timeout=20)
        if not serve.done():  # never left running past the test
            serve.cancel()
            await asyncio.wait({serve}, timeout=5)
        channel.close()


async def _recv(pipe):
    return decode(await pipe.recv(5.0))


async def test_curator_refuses_an_out_of_range_index_and_the_session_goes_on(tmp_path):
    async def drive(pipe):
        await pipe.send(encode(Hello(PROTOCOL_VERSION, "t")))
        welcome, dataset = await _recv(pipe), await _recv(pipe)
        assert isinstance(welcome, Welcome) and isinstance(dataset, Dataset)
        n = welcome.params.n
        replies = []
        for msg in (Query(1, n + 5), Query(1, -1), Query(1, 3), Query(2, 4), Query(3, 5),
                    Query(4, 0)):
            await pipe.send(encode(msg))
            replies.append(await _recv(pipe))
        await pipe.send(encode(End("done")))
        return replies

    replies, serve = await _serve_and_drive(tmp_path, drive)
    assert [type(r).__name__ for r in replies] == ["Error", "Error", "Reward", "Reward",
                                                   "Reward", "Error"]
    assert replies[0].code == ErrorCode.INDEX_OUT_OF_RANGE.value
    assert replies[-1].code == ErrorCode.BUDGET_EXHAUSTED.value
    result = serve.result()
    assert result["status"] == "ok" and result["queries"] == [3, 4, 5]
    assert json.loads((tmp_path / "curator.json").read_text())["queries"] == [3, 4, 5]


async def test_version_mismatch_is_refused_at_the_handshake(tmp_path):
    async def drive(pipe):
        await pipe.send(encode(Hello(PROTOCOL_VERSION + 1, "future")))
        return await _recv(pipe)

    reply, serve = await _serve_and_drive(tmp_path, drive)
    assert isinstance(reply, Error) and reply.code == ErrorCode.VERSION_MISMATCH.value
    with pytest.raises(ProtocolError):
        serve.result()
    assert json.loads((tmp_path / "curator.json").read_text())["status"] == "failed"


async def test_garbage_frames_get_typed_errors_and_do_not_end_the_session(tmp_path):
    async def drive(pipe):
        await pipe.send(encode(Hello(PROTOCOL_VERSION, "t")))
        await _recv(pipe), await _recv(pipe)
        replies = []
        for frame in (b"\xc1", b"\x81\xa4kind\xa8teleport", encode(Reward(1, 0, 1.0)),
                      encode(Query(1, 2))):
            await pipe.send(frame)
            replies.append(await _recv(pipe))
        await pipe.send(encode(End("done")))
        return replies

    replies, serve = await _serve_and_drive(tmp_path, drive)
    assert [getattr(r, "code", "reward") for r in replies] == [
        "malformed", "unknown_kind", "policy", "reward"]
    assert serve.result()["queries"] == [2]
    kinds = [r.kind for r in read_transcript(tmp_path / "curator.transcript")]
    assert "refused" in kinds  # refused frames are recorded too (by digest)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_modeler_with_no_curator_times_out_with_a_typed_error(tmp_path):
    """No curator ever listens: the wait for one (its --patience) ends in a typed error."""
    with pytest.raises(PeerTimeout, match="no curator listened at"):
        await asyncio.wait_for(connect_modeler(f"tcp://127.0.0.1:{_free_port()}", tmp_path,
                                               timeout=0.5, patience=1.0), 30)
    assert json.loads((tmp_path / "modeler.json").read_text())["status"] == "error"


def test_console_script_is_installed():
    assert shutil.which("pobo") or Path(sys.executable).with_name("pobo").exists()


async def test_a_modeler_whose_transcript_cannot_open_closes_its_socket_and_context(
        tmp_path, monkeypatch):
    """`out` is a file: opening the transcript fails after the DEALER connected. The
    DEALER (and its monitor) were left open and the context never terminated."""
    from pobo import remote
    from pobo.transport.sockets import new_context

    made = []
    monkeypatch.setattr(remote, "new_context", lambda: made.append(new_context()) or made[-1])
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    with pytest.raises(OSError):
        await asyncio.wait_for(connect_modeler(f"tcp://127.0.0.1:{_free_port()}",
                                               not_a_folder, timeout=1.0), 20)
    assert made and made[0].closed
