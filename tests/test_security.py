"""CURVE with ZAP: an allowed key completes a run and is named as the peer; an unknown
key and a plaintext client are refused. One curator serves several sessions at once."""
import asyncio
from pathlib import Path

import pytest

from protocol.errors import AuthenticationFailed, PeerTimeout
from scenarios.remote import connect_modeler, serve_curator
from scenarios.session import RunConfig, prepare_service
from transport.security import CurveClient, CurveServer, make_keys

CFG = RunConfig(T=4, seed=2, options={"grid": 8}, timeout=10.0)


async def _start(tmp_path, curve=None, sessions=1):
    bound = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(serve_curator(
        prepare_service(CFG), "tcp://127.0.0.1:0", tmp_path / "curator",
        sessions=sessions, accept_timeout=10.0, curve=curve, verbose=False,
        on_bound=bound.set_result))
    return task, await asyncio.wait_for(bound, 10)


async def _finish(task):
    task.cancel()
    try:
        await asyncio.wait_for(task, 15)
    except (asyncio.CancelledError, Exception):
        pass


@pytest.fixture
def keys(tmp_path) -> dict:
    return make_keys(tmp_path / "keys")


async def test_allowed_key_completes_a_run_and_is_the_recorded_peer(tmp_path, keys):
    server = CurveServer(keys["curator_secret"], keys["allowed"])
    task, endpoint = await _start(tmp_path, server)
    try:
        mres = await connect_modeler(endpoint, tmp_path / "m", seed=2, timeout=10.0,
                                     curve=CurveClient(keys["modeler_secret"], keys["curator_public"]))
        cres = await asyncio.wait_for(task, 15)
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
            await connect_modeler(endpoint, tmp_path / "m", timeout=1.5, curve=CurveClient(
                stranger["modeler_secret"], keys["curator_public"]))
        assert not task.done()  # the curator is still waiting for a legitimate modeler
    finally:
        await _finish(task)


async def test_plaintext_client_is_refused_by_a_curve_curator(tmp_path, keys):
    task, endpoint = await _start(tmp_path, CurveServer(keys["curator_secret"], keys["allowed"]))
    try:
        with pytest.raises(PeerTimeout):
            await connect_modeler(endpoint, tmp_path / "m", timeout=1.5)
    finally:
        await _finish(task)


async def test_one_curator_serves_concurrent_sessions_with_their_own_projection(tmp_path):
    task, endpoint = await _start(tmp_path, sessions=3)
    try:
        modelers = await asyncio.gather(*(
            connect_modeler(endpoint, tmp_path / f"m{i}", seed=i, timeout=10.0)
            for i in range(3)))
        results = await asyncio.wait_for(task, 20)
    finally:
        await _finish(task)
    assert all(m["status"] == "ok" for m in modelers)
    assert len(results) == 3 and len({r["session"] for r in results}) == 3
    folders = [p for p in (tmp_path / "curator").iterdir() if p.is_dir()]
    assert len(folders) == 3 and all((p / "curator.json").exists() for p in folders)
    # three sessions, one dataset: the projection was drawn and charged once
    assert all(len(r["ledger"]["entries"]) == 2 for r in results)
    assert len({r["ledger"]["central"]["epsilon"] for r in results}) == 1
    by_queries = sorted(tuple(m["queries"]) for m in modelers)
    assert by_queries == sorted(tuple(r["queries"]) for r in results)
