"""Faults: idempotent retries, a vanished peer, signals. Every wait is bounded and every
process is killed in a finally."""
import asyncio
import json
import signal
import subprocess
import sys
import time

from curator_process import Lines  # test helper: bounded reads of a process's lines

from pobo.protocol.codec import decode, encode
from pobo.protocol.messages import PROTOCOL_VERSION, End, Hello, Query, Reward
from pobo.protocol.policy import CURATOR
from pobo.remote import LISTENING
from pobo.session import RunConfig, curate, open_channel, prepare_curator
from pobo.transport.inproc import pipe_pair

POBO = [sys.executable, "-m", "pobo"]


async def test_a_repeated_sequence_number_is_answered_from_the_record(tmp_path):
    side = prepare_curator(RunConfig(T=3, seed=0, timeout=5.0, ldp_epsilon=1.0,
                                     options={"grid": 6}))
    cpipe, mpipe = pipe_pair()
    channel = open_channel(cpipe, CURATOR, False, tmp_path, 5.0)
    serve = asyncio.ensure_future(curate(channel, side, tmp_path, verbose=False))
    try:
        await mpipe.send(encode(Hello(PROTOCOL_VERSION, "t")))
        await mpipe.recv(5), await mpipe.recv(5)
        replies = []
        for q in (Query(1, 4), Query(1, 4), Query(2, 5), Query(1, 4)):
            await mpipe.send(encode(q))
            replies.append(decode(await mpipe.recv(5)))
        await mpipe.send(encode(End("done")))
        result = await asyncio.wait_for(serve, 10)
    finally:
        channel.close()
    assert all(isinstance(r, Reward) for r in replies)
    assert replies[0] == replies[1] == replies[3]  # same value: no new noise
    assert result["queries"] == [4, 5]  # no new evaluation
    assert result["ledger"]["local"]["reports"] == 2  # no new ledger entry


def _start_curator(tmp_path, *extra):
    proc = subprocess.Popen([*POBO, "curator", "synthetic", "--grid", "10", "--T", "200",
                             "--seed", "1", "--bind", "tcp://127.0.0.1:0", "--timeout", "2",
                             "--out", str(tmp_path / "c"), *extra],
                            stdout=subprocess.PIPE, text=True)
    try:  # a curator that never says where it listens is not left running
        line = Lines(proc.stdout).next(60)
        assert line.startswith(LISTENING), line
    except BaseException:
        _kill(proc)
        raise
    return proc, line[len(LISTENING):].strip()


def _kill(*procs):
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            p.wait(10)


def test_curator_whose_modeler_vanishes_exits_in_time_with_its_record(tmp_path):
    curator, endpoint = _start_curator(tmp_path)
    modeler = subprocess.Popen([*POBO, "modeler", "--connect", endpoint, "--seed", "1",
                                "--out", str(tmp_path / "m"), "--verbose"],
                               stdout=subprocess.PIPE, text=True)
    try:
        lines = Lines(modeler.stdout)
        for _ in range(5):  # let it get going
            assert lines.next(60).startswith("[modeler] t=")
        modeler.kill()  # kill -9
        started = time.monotonic()
        code = curator.wait(30)
        took = time.monotonic() - started
    finally:
        _kill(curator, modeler)
    assert code != 0 and took < 15  # timeout 2 s
    record = json.loads((tmp_path / "c" / "curator.json").read_text())
    assert record["status"] == "interrupted" and len(record["queries"]) >= 5
    assert record["transcript_head"]["records"] >= 3 + 2 * 5


def test_modeler_whose_curator_vanishes_exits_in_time_with_its_record(tmp_path):
    curator, endpoint = _start_curator(tmp_path)
    modeler = subprocess.Popen([*POBO, "modeler", "--connect", endpoint, "--seed", "1",
                                "--timeout", "1", "--out", str(tmp_path / "m"), "--verbose"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = Lines(modeler.stdout)
        for _ in range(5):
            assert lines.next(60).startswith("[modeler] t=")
        curator.kill()
        started = time.monotonic()
        code = modeler.wait(30)
        took = time.monotonic() - started
        err = modeler.stderr.read()
    finally:
        _kill(curator, modeler)
    assert code != 0 and took < 10 and "PeerTimeout" in err  # 1 s x (1 + 2 retries)
    record = json.loads((tmp_path / "m" / "modeler.json").read_text())
    assert record["status"] == "error" and len(record["queries"]) >= 5


def test_sigterm_stops_a_waiting_curator_cleanly(tmp_path):
    curator, _ = _start_curator(tmp_path, "--sessions", "0")
    try:
        time.sleep(0.5)
        curator.send_signal(signal.SIGTERM)
        code = curator.wait(15)
    finally:
        _kill(curator)
    assert code in (0, 1)  # a clean exit (1: no session was served), not a traceback
