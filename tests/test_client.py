"""The ask/tell modeler client (scenarios.client) against `pobo curator` in a subprocess:
scikit-learn's GaussianProcessRegressor chooses the rows over a CURVE-encrypted, signed
session whose transcripts audit; the sync API called from inside a running event loop;
the one-line refusals. Every wait is bounded; every process is killed in a finally."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from curator_process import CuratorProcess, free_port  # test helper: runs the CLI

from pobo.protocol.errors import PeerError, PeerTimeout
from pobo.protocol.signing import load_signing_key, load_verify_key
from pobo.client import ClientError, ModelerClient
from pobo.session import Signing
from pobo.transport.security import CurveClient

ROOT = Path(__file__).resolve().parents[1]
N = 64  # synthetic --grid 8


def _pobo() -> list[str]:
    script = Path(sys.executable).with_name("pobo")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pobo"]


def _ucb_choice(Z: np.ndarray, history: list[tuple[int, float]], rng) -> int:
    """scikit-learn's GP fit on the rows queried so far; the row of largest UCB."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    if len(history) < 2:
        return int(rng.integers(len(Z)))
    rows = np.array([i for i, _ in history])
    y = np.array([v for _, v in history])
    gp = GaussianProcessRegressor(ConstantKernel() * RBF() + WhiteKernel(1e-3),
                                  normalize_y=True, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiny samples: hyperparameters at their bounds
        gp.fit(Z[rows], y)
    mean, std = gp.predict(Z, return_std=True)
    return int(np.argmax(mean + 2.0 * std))


def test_client_sklearn_gp_signed_curve_session_audits(tmp_path):
    pytest.importorskip("sklearn")
    keys = tmp_path / "keys"
    made = subprocess.run([*_pobo(), "keys", str(keys)], check=False, capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    T = 8
    curator = CuratorProcess(tmp_path / "curator", T, [
        "--curve-secret", str(keys / "curator.key_secret"),
        "--curve-allow", str(keys / "allowed"),
        "--sign-secret", str(keys / "curator.sign_secret"),
        "--sign-allow", str(keys / "allowed")])
    out = tmp_path / "modeler"
    try:
        curator.wait_listening()
        signing = Signing(modeler=load_signing_key(keys / "modeler.sign_secret"),
                          curator_key=load_verify_key(keys / "curator.sign_public"))
        curve = CurveClient(keys / "modeler.key_secret", keys / "curator.key")
        rng = np.random.default_rng(0)
        with ModelerClient.connect(curator.endpoint, out=out, curve=curve, signing=signing,
                                   timeout=30.0) as client:
            params, Z = client.params, client.Z
            assert (params.n, params.T) == (N, T) and Z.shape == (N, params.r)
            assert not Z.flags.writeable
            rewards = []
            for _ in range(params.T):
                rewards.append(client.query(_ucb_choice(Z, client.history, rng)))
            assert client.remaining == 0
            # an external optimizer declares no Kusner GP-UCB: the noisy release is refused
            with pytest.raises(PeerError) as refused:
                client.release("noisy", epsilon=1.0, delta=1e-3)
            assert refused.value.code == "policy"
            assert "Algorithm 1" in refused.value.peer_message
        record = curator.finish()
        assert len(rewards) == T and all(np.isfinite(rewards))
        assert record["status"] == "ok", record
        assert record["queries"] == client.queries and record["rewards"] == rewards
        assert record["release"] is None
        assert record["signatures"] == "signed" and record["security"] == "curve"
        mine = json.loads((out / "modeler.json").read_text())
        assert mine["status"] == "ok" and mine["rewards"] == rewards
        assert mine["signatures"] == "signed" and mine["release_error"].startswith("policy:")
        assert mine["sign_keys"]["curator"] == signing.curator_key
        audited = subprocess.run([*_pobo(), "audit", str(curator.out / "curator.transcript"),
                                  str(out / "modeler.transcript"), "--keys", str(keys),
                                  "--json"], check=False, capture_output=True, text=True,
                                  timeout=60)
        assert audited.returncode == 0, audited.stdout + audited.stderr
        assert [r["signatures"] for r in json.loads(audited.stdout)] == ["verified", "verified"]
        # the curator's closing End reached the client: its signed ledger head is recorded
        assert [len(r["ledger_heads"]) for r in json.loads(audited.stdout)] == [2, 2]
        assert mine["ledger_head"]["entries"] == 1 and len(mine["ledger_head"]["chain"]) == 64
    finally:
        curator.kill()


async def test_client_sync_calls_inside_a_running_loop(tmp_path):
    """The sync API called directly in a coroutine (as in a Jupyter cell): the client's own
    loop runs on its thread, so blocking this loop does not deadlock it."""
    T = 4
    curator = CuratorProcess(tmp_path / "curator", T)
    try:
        curator.wait_listening()
        client = ModelerClient.connect(curator.endpoint, out=tmp_path / "modeler", timeout=20.0)
        try:
            rewards = [client.query(i) for i in (0, 9, 18, 27)]
        finally:
            client.close()
        assert client._thread is not None and not client._thread.is_alive()
        record = curator.finish()
        assert record["status"] == "ok" and record["queries"] == [0, 9, 18, 27]
        # signed by default, with the user's key-store key, as `pobo modeler` is (a review
        # found the client alone unsigned, silently)
        assert record["rewards"] == rewards and record["signatures"] == "signed"
        assert record["sign_keys"]["modeler"] == Signing.modeler_from_store().modeler.public_hex
    finally:
        curator.kill()


def test_client_one_line_errors(tmp_path):
    T = 2
    curator = CuratorProcess(tmp_path / "curator", T)
    errors: list[str] = []

    def refused(call, *args, **kwargs) -> None:
        with pytest.raises(ClientError) as caught:
            call(*args, **kwargs)
        errors.append(str(caught.value))

    try:
        curator.wait_listening()
        refused(ModelerClient.connect, curator.endpoint, timeout=0)
        client = ModelerClient.connect(curator.endpoint, out=tmp_path / "modeler",
                                       timeout=20.0)
        with client:
            refused(client.query, -1)
            refused(client.query, N)
            refused(client.query, 1.5)
            refused(client.query, True)
            refused(client.release, "noisy")  # before the last query
            client.query(np.int64(3))
            client.query(5)
            refused(client.query, 0)  # past T
            refused(client.release, "bogus")
        refused(client.query, 0)  # after close
        refused(client.release, "lipschitz")
        assert client.close() is None  # idempotent
        record = curator.finish()
        assert record["status"] == "ok" and record["queries"] == [3, 5]  # nothing else sent
    finally:
        curator.kill()
    assert len(errors) == 10
    assert all(e and "\n" not in e for e in errors), errors
    assert "out of range [0, 64)" in errors[1] and "out of range [0, 64)" in errors[2]
    assert "T=2" in errors[6] and "after close" in errors[8]


def test_client_connect_to_nobody_times_out_bounded(tmp_path):
    started = time.monotonic()
    with pytest.raises(PeerTimeout):
        ModelerClient.connect(f"tcp://127.0.0.1:{free_port()}", out=tmp_path / "m",
                              timeout=1.0)
    assert time.monotonic() - started < 15
    assert not [t for t in threading.enumerate() if t.name == "pobo-modeler-client"]


def test_a_client_whose_transcript_cannot_open_closes_at_once(tmp_path, caplog):
    """`out` is a file: the DEALER connected before the transcript failed was never
    closed, so closing the client's context waited out close_context's 5 s and left
    its termination hanging in a thread."""
    import logging
    import time

    from pobo.client import ModelerClient

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="pobo.transport"):
        with pytest.raises(OSError):
            ModelerClient.connect(f"tcp://127.0.0.1:{free_port()}", not_a_folder, timeout=2.0)
    assert time.monotonic() - started < 4.0
    assert not [r.getMessage() for r in caplog.records], "a socket was left open"
