"""CURVE with ZAP: an allowed key completes a run and is named as the peer; an unknown
key and a plaintext client are refused, the refusal logged by the curator and reported
to the modeler. One curator serves several sessions at once. Key files are private and
never silently overwritten."""
import asyncio
import json
import contextlib
import logging
import os
import stat
import time
from pathlib import Path

import pytest
import zmq
import zmq.asyncio
import zmq.auth
from waits import result_within, stop  # test helper: waits on tasks that are really bounded

from pobo.protocol.errors import AuthenticationFailed, HandshakeFailed, PeerTimeout
from pobo.remote import connect_modeler, serve_curator
from pobo.session import RunConfig, prepare_service
from pobo.transport.security import (
    CurveClient, CurveServer, LoggingAuthenticator, make_keys, secure_client, start_authenticator,
)
from pobo.transport.sockets import DealerPipe, RouterHub, close_context, new_context

CFG = RunConfig(T=4, seed=2, options={"grid": 8}, timeout=10.0)


async def _start(tmp_path, curve=None, sessions=1):
    bound = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(serve_curator(
        prepare_service(CFG), "tcp://127.0.0.1:0", tmp_path / "curator",
        sessions=sessions, accept_timeout=10.0, curve=curve, verbose=False,
        on_bound=bound.set_result))
    return task, await asyncio.wait_for(bound, 10)


async def _finish(task):
    await stop(task, 15)  # bounded: wait_for would wait for ever on a task stuck in its cancel


@pytest.fixture
def keys(tmp_path) -> dict:
    return make_keys(tmp_path / "keys")


async def test_allowed_key_completes_a_run_and_is_the_recorded_peer(tmp_path, keys):
    server = CurveServer(keys["curator_secret"], keys["allowed"])
    task, endpoint = await _start(tmp_path, server)
    try:
        mres = await result_within(connect_modeler(
            endpoint, tmp_path / "m", seed=2, timeout=10.0,
            curve=CurveClient(keys["modeler_secret"], keys["curator_public"])), 60)
        cres = await result_within(task, 15)
    finally:
        await _finish(task)
    assert mres["status"] == "ok" and cres["queries"] == mres["queries"]
    assert cres["security"] == "curve"
    public = keys["modeler_public"].read_text()
    assert cres["peer"] in public  # the z85 public key from ZAP's User-Id


async def test_unknown_key_is_refused(tmp_path, keys):
    stranger = make_keys(tmp_path / "stranger")
    task, endpoint = await _start(tmp_path, CurveServer(keys["curator_secret"], keys["allowed"]))
    try:
        with pytest.raises(AuthenticationFailed):  # was PeerTimeout: now told why, at once
            await result_within(connect_modeler(
                endpoint, tmp_path / "m", timeout=1.5,
                curve=CurveClient(stranger["modeler_secret"], keys["curator_public"])), 30)
        assert not task.done()  # the curator is still waiting for a legitimate modeler
    finally:
        await _finish(task)


async def test_plaintext_client_is_refused_by_a_curve_curator(tmp_path, keys):
    task, endpoint = await _start(tmp_path, CurveServer(keys["curator_secret"], keys["allowed"]))
    try:
        with pytest.raises(PeerTimeout):
            await result_within(connect_modeler(endpoint, tmp_path / "m", timeout=1.5), 30)
    finally:
        await _finish(task)


async def test_plaintext_client_whose_hello_cannot_be_queued_is_refused_too(tmp_path, keys,
                                                                        monkeypatch):
    """The test above when the Hello is sent after the failed handshake has left the
    DEALER no pipe (on a loaded machine; forced here with ZMQ_IMMEDIATE): the send
    waited for ever, with the event loop idle -- how CI hung for 90 minutes."""
    from pobo.transport import sockets

    apply = sockets.SocketOptions.apply

    def immediate(self, sock):
        apply(self, sock)
        if sock.type == zmq.DEALER:
            sock.setsockopt(zmq.IMMEDIATE, 1)

    monkeypatch.setattr(sockets.SocketOptions, "apply", immediate)
    task, endpoint = await _start(tmp_path, CurveServer(keys["curator_secret"], keys["allowed"]))
    try:
        with pytest.raises(PeerTimeout):
            await result_within(connect_modeler(endpoint, tmp_path / "m", timeout=1.5), 30)
    finally:
        await _finish(task)


async def test_one_curator_serves_concurrent_sessions_with_their_own_projection(tmp_path):
    task, endpoint = await _start(tmp_path, sessions=3)
    try:
        modelers = await asyncio.gather(*(
            connect_modeler(endpoint, tmp_path / f"m{i}", seed=i, timeout=10.0)
            for i in range(3)))
        results = await result_within(task, 20)
    finally:
        await _finish(task)
    assert all(m["status"] == "ok" for m in modelers)
    assert len(results) == 3 and len({r["session"] for r in results}) == 3
    folders = [p for p in (tmp_path / "curator").iterdir() if p.is_dir()]
    assert len(folders) == 3 and all((p / "curator.json").exists() for p in folders)
    # three sessions, one dataset: the projection was drawn and charged once
    assert all(len(r["ledger"]["entries"]) == 1 for r in results)
    assert len({r["ledger"]["central"]["epsilon"] for r in results}) == 1
    by_queries = sorted(tuple(m["queries"]) for m in modelers)
    assert by_queries == sorted(tuple(r["queries"]) for r in results)


# --- refused keys are loud on both sides; key files; the authenticator stays up ---------

def _public_z85(path: Path) -> str:
    public, _ = zmq.auth.load_certificate(path)
    return public.decode("ascii")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_refused_key_is_logged_by_the_curator_and_the_modeler_is_told_at_once(
        tmp_path, keys, caplog):
    stranger = make_keys(tmp_path / "stranger")
    task, endpoint = await _start(tmp_path, CurveServer(keys["curator_secret"], keys["allowed"]))
    try:
        with caplog.at_level(logging.WARNING, logger="pobo.transport"):
            started = time.monotonic()
            with pytest.raises(AuthenticationFailed) as info:
                await result_within(connect_modeler(
                    endpoint, tmp_path / "m", timeout=30.0,
                    curve=CurveClient(stranger["modeler_secret"], keys["curator_public"])), 60)
            took = time.monotonic() - started
        assert took < 5, "the modeler waited for a timeout instead of being told"
        assert "refused this modeler's CURVE key (ZAP status 400)" in str(info.value)
        assert info.value.status == 400
        refusals = [r.getMessage() for r in caplog.records if r.name == "pobo.transport"
                    and "refused" in r.getMessage()]
        assert any(_public_z85(stranger["modeler_public"]) in m and "Unknown key" in m
                   for m in refusals), refusals
        assert not task.done()  # the curator still waits for a legitimate modeler
    finally:
        await _finish(task)


@contextlib.asynccontextmanager
async def curve_hub(keys):
    """(ctx, authenticator, CURVE hub on a free loopback port, pipes to close): all torn
    down on exit, pass or fail."""
    ctx = new_context()
    server = CurveServer(keys["curator_secret"], keys["allowed"])
    auth = start_authenticator(ctx, server)
    hub = RouterHub.bind(ctx, "tcp://127.0.0.1:0", curve=server)
    pipes: list = []
    try:
        yield ctx, auth, hub, pipes
    finally:
        for pipe in pipes:
            pipe.close()
        await hub.aclose()
        await auth.aclose()
        close_context(ctx)


async def test_transport_reports_refusal_counts_and_keeps_serving_allowed_keys(tmp_path, keys):
    stranger = make_keys(tmp_path / "stranger")
    async with curve_hub(keys) as (ctx, auth, hub, pipes):
        for _ in range(3):
            pipe = DealerPipe.connect(ctx, hub.endpoint, curve=CurveClient(
                stranger["modeler_secret"], keys["curator_public"]))
            pipes.append(pipe)
            await pipe.send(b"hello")
            with pytest.raises(AuthenticationFailed):
                await pipe.recv(10)
        assert auth.stats() == {"refusals": 3, "refused_keys": 1}
        assert auth.refused_keys == {_public_z85(stranger["modeler_public"]): 3}
        good = DealerPipe.connect(ctx, hub.endpoint, curve=CurveClient(
            keys["modeler_secret"], keys["curator_public"]))
        pipes.append(good)
        await good.send(b"hello")
        peer = await hub.accept(10)
        assert peer.peer == _public_z85(keys["modeler_public"])
        assert await peer.recv(5) == b"hello"
        await peer.send(b"welcome")
        assert await good.recv(5) == b"welcome"


async def test_a_failing_zap_handler_refuses_with_500_and_stays_up(tmp_path, keys, monkeypatch,
                                                                caplog):
    client = CurveClient(keys["modeler_secret"], keys["curator_public"])
    original = LoggingAuthenticator._authenticate_curve

    async def broken(self, domain, key):
        raise RuntimeError("boom")

    async with curve_hub(keys) as (ctx, auth, hub, pipes):
        monkeypatch.setattr(LoggingAuthenticator, "_authenticate_curve", broken)
        pipe = DealerPipe.connect(ctx, hub.endpoint, curve=client)
        pipes.append(pipe)
        await pipe.send(b"hello")
        with caplog.at_level(logging.WARNING, logger="pobo.transport"):
            with pytest.raises(AuthenticationFailed, match="500") as info:
                await pipe.recv(10)
        assert info.value.status == 500
        assert any("ZAP handler failed" in r.getMessage() for r in caplog.records)
        monkeypatch.setattr(LoggingAuthenticator, "_authenticate_curve", original)
        again = DealerPipe.connect(ctx, hub.endpoint, curve=client)
        pipes.append(again)
        await again.send(b"hello")
        assert await (await hub.accept(10)).recv(5) == b"hello"


async def test_plaintext_or_wrong_server_key_names_the_handshake_failure(tmp_path, keys):
    async with curve_hub(keys) as (ctx, auth, hub, pipes):
        plain = DealerPipe.connect(ctx, hub.endpoint)
        wrong = DealerPipe.connect(ctx, hub.endpoint, curve=CurveClient(
            keys["modeler_secret"], keys["modeler_public"]))  # not the curator's key
        pipes += [plain, wrong]
        with pytest.raises(HandshakeFailed, match="CURVE and the other plaintext"):
            await plain.recv(1.0)
        with pytest.raises(HandshakeFailed, match="--curve-server"):
            await wrong.recv(1.0)
        assert issubclass(HandshakeFailed, PeerTimeout)  # callers that retry timeouts still do


async def test_a_frame_that_cannot_be_queued_after_a_failed_handshake_fails_at_once(keys):
    """The CI hang (test_plaintext_client_is_refused_by_a_curve_curator, 90 min): after
    a plaintext DEALER's handshake with a CURVE curator fails, libzmq may leave it with
    no pipe for good; a Hello sent after that waited for ever in pyzmq's send (no send
    timeout, no timer: the event loop idle in select). Here the DEALER has no pipe by
    construction (ZMQ_IMMEDIATE: a pipe only after a handshake succeeds)."""
    import time

    from pobo.transport.sockets import DealerPipe, SocketOptions, _monitor

    async with curve_hub(keys) as (ctx, auth, hub, pipes):
        sock = ctx.socket(zmq.DEALER)
        SocketOptions().apply(sock)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        monitor = _monitor(ctx, sock)
        sock.connect(hub.endpoint)
        pipe = DealerPipe(sock, monitor, endpoint=hub.endpoint)
        pipes.append(pipe)
        started = time.monotonic()
        with pytest.raises(HandshakeFailed, match="CURVE and the other plaintext"):
            await result_within(pipe.send(b"hello"), 30)
        assert time.monotonic() - started < 5


def test_refusal_logging_is_rate_limited_and_counts_stay_bounded(caplog):
    ctx = new_context()
    auth = LoggingAuthenticator(ctx, log_burst=3, log_window=60.0, max_keys=5)
    try:
        with caplog.at_level(logging.WARNING, logger="pobo.transport"):
            for i in range(10):
                auth._request = [b"1.0", b"id", b"", b"10.0.0.9", b"", b"CURVE", bytes([i]) * 32]
                auth._refused(b"400", b"Unknown key")
            assert len(caplog.records) == 3
            auth._window_start -= 61
            auth._refused(b"400", b"Unknown key")
        assert auth.refusals == 11 and len(auth.refused_keys) == 5
        assert "7 earlier refusals not logged" in caplog.records[-1].getMessage()
    finally:
        close_context(ctx)


def test_key_files_have_private_modes(tmp_path):
    paths = make_keys(tmp_path / "new" / "keys")
    assert _mode(tmp_path / "new" / "keys") == 0o700
    for role in ("curator", "modeler"):
        assert _mode(paths[f"{role}_secret"]) == 0o600
        assert _mode(paths[f"{role}_public"]) == 0o644
        assert _mode(paths[f"{role}_sign_secret"]) == 0o600
        assert _mode(paths[f"{role}_sign_public"]) == 0o644
    assert _mode(paths["allowed"] / "modeler.key") == 0o644
    assert sorted(p.name for p in (tmp_path / "new" / "keys").iterdir()) == [
        "allowed", "curator.key", "curator.key_secret", "curator.sign_public",
        "curator.sign_secret", "modeler.key", "modeler.key_secret", "modeler.sign_public",
        "modeler.sign_secret"]
    assert zmq.auth.load_certificate(paths["curator_secret"])[1] is not None


def test_existing_keys_are_never_overwritten_without_force(tmp_path):
    first = make_keys(tmp_path / "keys")
    before = {k: p.read_bytes() for k, p in first.items() if p.is_file()}
    with pytest.raises(FileExistsError) as info:
        make_keys(tmp_path / "keys")
    message = str(info.value)
    assert "\n" not in message and "--force" in message and "curator.key" in message
    assert {k: first[k].read_bytes() for k in before} == before  # untouched
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "modeler.key_secret").write_text("mine")
    with pytest.raises(FileExistsError, match="modeler.key_secret"):
        make_keys(tmp_path / "other")
    assert (tmp_path / "other" / "modeler.key_secret").read_text() == "mine"
    assert not (tmp_path / "other" / "curator.key_secret").exists()


def test_force_replaces_the_key_pair_with_the_same_modes(tmp_path):
    first = make_keys(tmp_path / "keys")
    old = first["modeler_secret"].read_bytes()
    os.chmod(first["modeler_secret"], 0o644)
    again = make_keys(tmp_path / "keys", force=True)
    assert again["modeler_secret"].read_bytes() != old
    assert _mode(again["modeler_secret"]) == 0o600 and _mode(again["modeler_public"]) == 0o644
    assert (again["allowed"] / "modeler.key").read_bytes() == again["modeler_public"].read_bytes()
    assert not [p for p in (tmp_path / "keys").iterdir() if p.name.startswith(".pobo-keys-")]


def test_a_world_readable_secret_key_is_warned_about(tmp_path, keys, caplog):
    os.chmod(keys["modeler_secret"], 0o644)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        with caplog.at_level(logging.WARNING, logger="pobo.transport"):
            secure_client(sock, CurveClient(keys["modeler_secret"], keys["curator_public"]))
        assert any("readable by others" in r.getMessage() for r in caplog.records)
    finally:
        sock.close(0)
        close_context(ctx)


async def test_a_curve_curator_that_cannot_bind_leaves_no_authenticator_or_context(
        tmp_path, keys, monkeypatch):
    """The port is taken: serve_curator used to raise BindError with its ZAP
    authenticator still running (a task polling for ever) and its context never
    terminated."""
    import socket

    from pobo import remote
    from pobo.transport.sockets import BindError

    made = []
    monkeypatch.setattr(remote, "new_context", lambda: made.append(new_context()) or made[-1])
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(BindError):
            await asyncio.wait_for(serve_curator(
                prepare_service(CFG), f"tcp://127.0.0.1:{port}", tmp_path / "curator",
                curve=CurveServer(keys["curator_secret"], keys["allowed"]), verbose=False), 20)
    await asyncio.sleep(0.05)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not left, left
    assert made and made[0].closed


async def test_the_authenticator_ends_its_task_before_its_zap_socket_closes(keys):
    """pyzmq's stop() closes the ZAP socket while the authenticator's task still polls
    it (cancelled, not yet finished: its reader stays on a descriptor a new socket may
    reuse, and a loop closed meanwhile destroys it pending); aclose() ends it first."""
    ctx = new_context()
    auth = start_authenticator(ctx, CurveServer(keys["curator_secret"], keys["allowed"]))
    task = auth._AsyncioAuthenticator__task
    try:
        await asyncio.sleep(0.05)  # polling the ZAP socket
        await asyncio.wait_for(auth.aclose(), 5)
        assert task.done() and auth.zap_socket is None
    finally:
        if auth.zap_socket is not None:
            auth.stop()
        close_context(ctx)


async def test_a_curator_serving_one_folder_twice_keeps_the_first_sessions_record(tmp_path):
    """`pobo curator --sessions 1 --out DIR` run twice: the second session kept the
    first one's transcript (curator.transcript.1) but overwrote its curator.json, so its
    audit failed. The record is kept with it (curator.json.1)."""
    sessions = []
    for seed in (2, 3):
        task, endpoint = await _start(tmp_path)
        try:
            await result_within(connect_modeler(endpoint, tmp_path / f"m{seed}", seed=seed,
                                                timeout=10.0), 60)
            sessions.append((await result_within(task, 15))["session"])
        finally:
            await _finish(task)
    folder = tmp_path / "curator"
    kept = json.loads((folder / "curator.json.1").read_text())
    assert kept["session"] == sessions[0] != sessions[1]
    assert json.loads((folder / "curator.json").read_text())["session"] == sessions[1]
    from pobo.auditing import anchor_for
    assert anchor_for(folder / "curator.transcript.1", "curator") == kept["transcript_head"]


async def test_a_session_this_curator_cannot_replay_is_refused_typed_not_a_dead_task(
        tmp_path, monkeypatch, caplog):
    """A review's finding: a curator restarted with other settings (--ldp-eps) than the
    one that answered a session could not replay its answers; the connection's task died
    with a traceback ('Task exception was never retrieved') and the modeler waited out
    its patience. It is refused at once with a typed `internal` Error, one log line."""
    import pobo.remote as remote
    from pobo.parties.curator import ReplayMismatch
    from pobo.protocol.errors import PeerError

    async def unreplayable(*args, **kwargs):
        raise ReplayMismatch("replaying query 1: the LDP noise does not reproduce ...")
    monkeypatch.setattr(remote, "curate", unreplayable)
    task, endpoint = await _start(tmp_path)
    try:
        with pytest.raises(PeerError, match="cannot resume the session: its settings differ"):
            await result_within(connect_modeler(endpoint, tmp_path / "m", seed=2,
                                                timeout=10.0), 30)
    finally:
        await _finish(task)
    assert any("cannot resume it: replaying query 1" in r.getMessage() for r in caplog.records)
    assert not any(r.exc_info for r in caplog.records)


def test_a_curator_with_other_ldp_settings_cannot_replay_a_session(tmp_path):
    """What the refusal above stands for: the journal's LDP answers do not reproduce
    under another --ldp-eps: ReplayMismatch, typed `internal`, before anything changes."""
    from pobo.parties.curator import ReplayMismatch
    from pobo.parties.journal import Journal

    journal = tmp_path / "j.db"
    config = RunConfig(T=4, seed=2, options={"grid": 8}, ldp_epsilon=1.0)
    j = Journal(journal)
    session = prepare_service(config, journal=j).new_session()
    session.curator().start(1, 3)
    j.close()
    j = Journal(journal)
    try:
        other = prepare_service(RunConfig(T=4, seed=2, options={"grid": 8}, ldp_epsilon=2.0),
                                journal=j)
        with pytest.raises(ReplayMismatch) as caught:
            other.resume(session.session_id).curator()
        assert caught.value.code.value == "internal"
    finally:
        j.close()
