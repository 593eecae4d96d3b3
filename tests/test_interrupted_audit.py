"""Audits of interrupted sessions pass, and stay strict.

Unit checks of the paired audit (`protocol.audit_pair.compare`) on one real session's records:
a lost tail is unacknowledged, anything else that differs is a violation. Then 10 kill -9
points over real processes (seeded: the curator or the modeler, alternately, after k of T
answered queries), each followed by a clean resume: exactly T evaluations, the ledger of
an uninterrupted run, and `pobo audit curator.transcript modeler.transcript` exits 0.

A party is killed at a known point by giving it a one-page stdout pipe filled so that
only its first k progress lines fit: it cannot get past printing line k + 1 (which it
prints after answering, or receiving, query k + 1), and the test kills it once line k is
in the pipe, after a seeded delay, so that frames are sometimes in flight. Every wait is
bounded and every process is killed in a finally.
"""
import asyncio
import contextlib
import dataclasses
import fcntl
import io
import json
import os
import random
import select
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from pobo.protocol.audit import audit_session, compare, readable_records
from pobo.protocol.codec import encode
from pobo.protocol.messages import PROTOCOL_VERSION, Hello, Reward
from pobo.cli import main as pobo_main
from pobo.remote import LISTENING
from pobo.session import RunConfig, run_inproc
from pobo.transport.security import make_signing_keys

POBO = [sys.executable, "-m", "pobo"]
T, SEED = 8, 4
# kill points, alternating the side killed: by default one curator and one modeler
# (pytest --full: 10)
TRIALS = 10 if os.environ.get("POBO_FULL") else 2
SCENARIO = ["synthetic", "--grid", "10", "--T", str(T), "--seed", str(SEED), "--ldp-eps", "2"]
F_SETPIPE_SZ = 1031


# ---- the paired audit on records -------------------------------------------------------

@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """The curator's and the modeler's records of one uninterrupted in-process session."""
    out = tmp_path_factory.mktemp("session")
    asyncio.run(run_inproc(RunConfig(T=5, options={"grid": 10}, ldp_epsilon=2.0), out))
    return (readable_records(out / "curator.transcript"),
            readable_records(out / "modeler.transcript"))


def _upto(records, kind, direction, nth=1):
    """The records up to and including the nth of `kind` in `direction`."""
    seen = 0
    for i, r in enumerate(records):
        if r.kind == kind and r.dir == direction:
            seen += 1
            if seen == nth:
                return records[:i + 1]
    raise AssertionError(f"no {kind} {direction} #{nth}")


def test_a_clean_session_agrees_with_nothing_unacknowledged(records):
    result = compare(*records)
    assert not result.violations and result.unacknowledged == {"curator->modeler": 0,
                                                               "modeler->curator": 0}


def test_frames_in_flight_at_a_kill_are_unacknowledged_not_a_disagreement(records):
    curator, modeler = records
    # the curator answered query 3, the modeler died before receiving the reward
    result = compare(_upto(curator, "reward", "sent", 3), _upto(modeler, "query", "sent", 3))
    assert not result.violations, result.violations
    assert result.unacknowledged == {"curator->modeler": 1, "modeler->curator": 0}
    assert any("unacknowledged, curator->modeler: 1 frames" in n for n in result.notes)
    # the modeler asked query 4 (and retried it twice), the curator died before reading it
    lost = _upto(modeler, "query", "sent", 4)
    lost = lost + [dataclasses.replace(lost[-1], seq=lost[-1].seq + i) for i in (1, 2)]
    result = compare(_upto(curator, "reward", "sent", 3), lost)
    assert not result.violations and result.unacknowledged["modeler->curator"] == 3


def test_a_connection_that_never_reached_the_curator_is_unacknowledged(records):
    curator, modeler = records
    hello = encode(Hello(PROTOCOL_VERSION, "pobo", "some-session"))
    tail = modeler[-1]
    retry = [dataclasses.replace(tail, seq=tail.seq + 1, dir="sent", kind="hello", frame=hello)]
    result = compare(curator, modeler + retry)
    assert not result.violations and result.unacknowledged["modeler->curator"] == 1
    assert any("never reached the session" in n for n in result.notes)
    # but a connection that received something the curator never sent is a disagreement
    got = dataclasses.replace(tail, seq=tail.seq + 2, dir="recv", kind="reward",
                              frame=encode(Reward(1, 0, 0.5, "ctl-laplace")))
    assert compare(curator, modeler + retry + [got]).violations


@pytest.mark.parametrize("edit", ["drop-middle", "alter", "extra", "swap", "extra-curator"])
def test_anything_but_a_lost_tail_is_a_violation(records, edit):
    curator, modeler = (list(r) for r in records)
    rewards = [i for i, r in enumerate(modeler) if r.kind == "reward"]
    if edit == "drop-middle":  # a frame missing before frames that did arrive
        del modeler[rewards[1]]
    elif edit == "alter":
        r = modeler[rewards[2]]
        k = len(r.frame) // 2  # a byte inside the envelope's body
        modeler[rewards[2]] = dataclasses.replace(
            r, frame=r.frame[:k] + bytes([r.frame[k] ^ 1]) + r.frame[k + 1:])
    elif edit == "extra":  # received, never sent
        modeler.insert(rewards[2], modeler[rewards[1]])
    elif edit == "swap":
        modeler[rewards[1]], modeler[rewards[2]] = modeler[rewards[2]], modeler[rewards[1]]
    else:  # the curator holds a connection the modeler never opened
        curator = curator + curator
    assert compare(curator, modeler).violations


# ---- kill -9 over real processes ------------------------------------------------------

def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


KEYS: list[Path] = []  # the signing keys of every party process (set by `signing_keys`)


@pytest.fixture(scope="module", autouse=True)
def signing_keys(tmp_path_factory) -> Path:
    """One pair of Ed25519 signing keys for every curator and modeler of this module: every
    session is signed, and its audit must say `signatures: verified`."""
    folder = tmp_path_factory.mktemp("signing") / "keys"
    make_signing_keys(folder)
    KEYS[:] = [folder]
    yield folder
    KEYS.clear()


def _curator(where: Path, port: int, stdout) -> subprocess.Popen:
    return subprocess.Popen([*POBO, "curator", *SCENARIO, "--bind", f"tcp://127.0.0.1:{port}",
                             "--journal", str(where / "journal.db"), "--sessions", "0",
                             "--timeout", "5", "--out", str(where / "c"),
                             "--sign-secret", str(KEYS[0] / "curator.sign_secret"),
                             "--sign-allow", str(KEYS[0] / "allowed")],
                            stdout=stdout, stderr=subprocess.DEVNULL)


def _modeler(where: Path, port: int, stdout, *extra: str,
             timeout: str = "20") -> subprocess.Popen:
    """A modeler with a generous reply timeout unless told (one whose curator is killed
    is given a short one, to give up soon), its stderr kept for a failure's message."""
    err = where / f"modeler-{len(list(where.glob('modeler-*.err')))}.err"
    with open(err, "w") as stderr:
        proc = subprocess.Popen([*POBO, "modeler", "--connect", f"tcp://127.0.0.1:{port}",
                                 "--seed", str(SEED), "--timeout", timeout, "--out",
                                 str(where / "m"),
                                 "--sign-secret", str(KEYS[0] / "modeler.sign_secret"),
                                 "--curator-sign-key", str(KEYS[0] / "curator.sign_public"),
                                 "--verbose", *extra], stdout=stdout, stderr=stderr)
    proc.err_path = err
    return proc


def _said(proc: subprocess.Popen) -> str:
    """A modeler's stderr, for an assertion's message."""
    return f"modeler stderr:\n{proc.err_path.read_text()[-3000:]}"


def _readline(fd: int, timeout: float) -> bytes:
    """One line from a raw pipe, within `timeout` seconds."""
    line, deadline = b"", time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"no line within {timeout} s (got {line!r})")
        byte = os.read(fd, 1)
        if not byte:
            raise EOFError(f"pipe closed (got {line!r})")
        line += byte
    return line


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _stall_after(room: int) -> tuple[int, int, int]:
    """(read end, write end, bytes in it) of a one-page pipe filled so that only `room`
    more bytes fit: a child writing lines to it blocks at the first line that does not."""
    r, w = os.pipe()
    size = fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
    filler = size - room
    assert filler > 0
    os.write(w, b"#" * filler)
    return r, w, filler


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.005)


def _session_record(where: Path, timeout: float = 15) -> tuple[Path, dict]:
    """The curator's session folder and its record, once the session has ended ok."""
    def done() -> bool:
        found = list((where / "c").glob("*/curator.json"))
        return bool(found) and json.loads(found[0].read_text()).get("status") == "ok"

    _wait(done, timeout, "the curator's session record")
    [record] = list((where / "c").glob("*/curator.json"))
    return record.parent, json.loads(record.read_text())


def _stop(*procs) -> None:
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            p.wait(15)


def _progress(lines: list[bytes], prefix: bytes) -> list[int]:
    return [len(line) for line in lines if line.startswith(prefix)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """An uninterrupted run over the same processes: its records and each side's output."""
    where = tmp_path_factory.mktemp("reference")
    port = _port()
    curator = modeler = None
    try:
        curator = _curator(where, port, subprocess.PIPE)
        fd = curator.stdout.fileno()
        listening = _readline(fd, 30)
        assert listening.startswith(LISTENING.encode())
        modeler = _modeler(where, port, subprocess.PIPE)
        out, _ = modeler.communicate(timeout=60)
        assert modeler.returncode == 0, _said(modeler)
        folder, record = _session_record(where)
        lines = []  # the privacy statement's lines, then one line per answer
        while len(_progress(lines, b"[curator] t=")) < T:
            lines.append(_readline(fd, 10))
        first = next(i for i, line in enumerate(lines) if line.startswith(b"[curator] t="))
    finally:
        _stop(modeler, curator)
    return {"curator": record, "modeler": json.loads((where / "m" / "modeler.json").read_text()),
            "curator_lines": _progress(lines, b"[curator] t="),
            "curator_preamble": sum(map(len, lines[:first])),  # (names its journal's path)
            "journal": str(where / "journal.db"),
            "modeler_lines": _progress(out.splitlines(keepends=True), b"[modeler] t=")}


def _kill_points() -> list[tuple[str, int, float]]:
    rng = random.Random(20240612)
    return [("curator" if i % 2 == 0 else "modeler", rng.randint(1, T - 1),
             rng.choice([0.0, 0.0, 0.005, 0.02, 0.05])) for i in range(TRIALS)]


def _interrupt(where: Path, side: str, k: int, delay: float, reference: dict) -> None:
    """Run a session, kill -9 `side` after k answered queries, resume it to the end."""
    port = _port()
    procs: list[subprocess.Popen] = []
    fds: list[int] = []
    try:
        if side == "curator":
            listening = (len(f"{LISTENING}tcp://127.0.0.1:{port}\n")
                         + reference["curator_preamble"]  # and its privacy statement,
                         - len(reference["journal"])  # its ledger's line naming this
                         + len(str(where / "journal.db")))  # trial's journal
            r, w, filler = _stall_after(listening + sum(reference["curator_lines"][:k]))
            fds.append(r)
            try:
                victim = _curator(where, port, w)
            finally:
                os.close(w)
            procs.append(victim)
            _wait(lambda: _pending(r) >= filler + listening or victim.poll() is not None, 30,
                  "the curator binding")
            procs.append(_modeler(where, port, subprocess.DEVNULL, timeout="2"))
        else:
            curator = _curator(where, port, subprocess.PIPE)
            procs.append(curator)
            assert _readline(curator.stdout.fileno(), 30).startswith(LISTENING.encode())
            r, w, filler = _stall_after(sum(reference["modeler_lines"][:k]))
            fds.append(r)
            try:
                victim = _modeler(where, port, w)
            finally:
                os.close(w)
            procs.append(victim)
        expected = filler + (listening if side == "curator" else 0) + \
            sum(reference[f"{side}_lines"][:k])
        _wait(lambda: _pending(r) >= expected or victim.poll() is not None, 30,
              f"the {side}'s {k}th answer")
        assert victim.poll() is None, f"the {side} ended before the kill point"
        time.sleep(delay)
        victim.send_signal(signal.SIGKILL)
        victim.wait(15)
        if side == "curator":
            old_modeler = procs[-1]
            old_modeler.wait(30)  # it retries, then gives up (or it had finished)
            restarted = _curator(where, port, subprocess.PIPE)
            procs.append(restarted)
            assert _readline(restarted.stdout.fileno(), 30).startswith(LISTENING.encode())
        again = _modeler(where, port, subprocess.DEVNULL, "--resume")
        procs.append(again)
        assert again.wait(120) == 0, f"the resumed modeler failed; {_said(again)}"
        _session_record(where)
    finally:
        _stop(*procs)
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_9_and_resume_ends_with_T_evaluations_the_same_ledger_and_a_passing_audit(
        tmp_path, reference, trial):
    side, k, delay = _kill_points()[trial]
    _interrupt(tmp_path, side, k, delay, reference)
    folder, record = _session_record(tmp_path)
    modeler = json.loads((tmp_path / "m" / "modeler.json").read_text())
    assert modeler["status"] == "ok"
    assert record["queries"] == reference["curator"]["queries"] == modeler["queries"]
    assert record["rewards"] == reference["curator"]["rewards"]
    with sqlite3.connect(tmp_path / "journal.db") as db:
        assert db.execute("SELECT COUNT(*) FROM answers WHERE session = ?",
                          (record["session"],)).fetchone()[0] == T  # f evaluated T times
    for part in ("central", "local"):
        assert record["ledger"]["session"][part] == reference["curator"]["ledger"]["session"][part]
    assert record["ledger"]["central"] == reference["curator"]["ledger"]["central"]
    paths = [str(folder / "curator.transcript"), str(tmp_path / "m" / "modeler.transcript")]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        status = pobo_main(["audit", *paths, "--keys", str(KEYS[0])])
    assert status == 0, text.getvalue()
    assert text.getvalue().count("signatures: verified") == 2, text.getvalue()
    reports = audit_session(*paths)
    print(f"\n{side} killed after {k} answers (+{delay * 1000:.0f} ms): unacknowledged "
          f"{reports[0].unacknowledged}")


def test_a_sessionless_error_is_excused_only_as_a_connections_last_frame():
    """The paired audit sets aside an Error with no session that the modeler received last
    on a connection (a restarted curator's session_lost: in no curator transcript); one
    with a frame of the session after it is matched like any other frame, so a curator
    cannot slip unrecorded frames into a live connection under that rule."""
    from pobo.protocol.audit import compare
    from pobo.protocol.messages import Error
    from pobo.protocol.signing import ZERO, Link, seal
    from pobo.protocol.transcript import Record

    def frame(message, session: str) -> bytes:
        return seal(encode(message), Link(session, 0, ZERO, ZERO), None)

    hello = frame(Hello(PROTOCOL_VERSION, "m"), "")
    reward = frame(Reward(1, 2, 0.5), "s" * 32)
    lost = frame(Error("session_lost", "no session on this connection"), "")

    def records(*items) -> list[Record]:
        return [Record(i, 0.0, kind, "0" * 64, direction, data)
                for i, (kind, direction, data) in enumerate(items)]

    curator = records(("hello", "recv", hello), ("reward", "sent", reward))
    last = records(("hello", "sent", hello), ("reward", "recv", reward), ("error", "recv", lost))
    inside = records(("hello", "sent", hello), ("error", "recv", lost), ("reward", "recv", reward))
    excused = compare(curator, last)
    assert not excused.violations and any("no session" in n for n in excused.notes)
    assert compare(curator, inside).violations  # not excused mid-connection
    # an Error record whose envelope is malformed (a crafted transcript) is a violation,
    # not an audit that stops with an error (a second review's repro)
    import msgpack
    bad = msgpack.packb({"body": b"x", "link": {"session": "", "seq": -1, "prev": ZERO,
                                                "peer": ZERO}, "sig": b""})
    crafted = records(("hello", "sent", hello), ("reward", "recv", reward), ("error", "recv", bad))
    assert compare(curator, crafted).violations


def test_a_resume_refused_before_its_dataset_carries_the_queries_asked_before(params, release):
    """A review's finding: a resume the curator refused (one it cannot replay: a typed
    Error, no Welcome), then an honest resume, failed the audit: the queries asked before
    were dropped at the refused Hello, so the session's release request after its T-th
    answer read as one before it ("2 of 3 answered")."""
    from pobo.protocol.audit import AUDITED_VERSIONS, AuditReport, _replay
    from pobo.protocol.messages import (
        PROTOCOL_VERSION, Dataset, Error, Hello, Query, ReleaseRequest, Reward, Welcome,
    )
    from pobo.protocol.policy import CURATOR, PRIVATE, Boundary
    from pobo.protocol.transcript import Record

    frames = [("recv", Hello(PROTOCOL_VERSION, "m")),
              ("sent", Welcome(PROTOCOL_VERSION, "s", params)), ("sent", Dataset(release)),
              ("recv", Query(1, 0)), ("sent", Reward(1, 0, 0.5)),
              ("recv", Hello(PROTOCOL_VERSION, "m", "s")),  # refused: no Welcome
              ("sent", Error("internal", "this curator cannot resume the session", 0)),
              ("recv", Hello(PROTOCOL_VERSION, "m", "s")),  # resumed
              ("sent", Welcome(PROTOCOL_VERSION, "s", params)), ("sent", Dataset(release)),
              ("recv", Query(2, 1)), ("sent", Reward(2, 1, 0.5)),
              ("recv", Query(3, 2)), ("sent", Reward(3, 2, 0.5)),
              ("recv", ReleaseRequest("lipschitz", 1.0, 1e-3))]
    messages = [(Record(i, float(i), type(m).__name__.lower(), "", d), m)
                for i, (d, m) in enumerate(frames)]
    report = AuditReport("curator.transcript")
    _replay(messages, Boundary(PRIVATE, CURATOR, versions=AUDITED_VERSIONS), report)
    assert report.violations == [] and not any("forbidden" in n for n in report.notes), \
        report.notes
