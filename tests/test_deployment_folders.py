"""A deployment's folders are runs (issue 48 items 1, 3, 7): after a session run as two
commands with keys (`pobo curator` and `pobo modeler`, and an ask/tell client), `pobo
runs` gives each folder its true status and `pobo report` renders each, leading with
what that side can know (the answer, the privacy statement, the ledger, its audit) and
leaving out the curator-private fields. Before: both were listed "incomplete ... a run
stopped before it finished", and `pobo report` refused them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from curator_process import CuratorProcess  # test helper: runs the CLI

from pobo.client import ModelerClient
from pobo.party_records import CURATOR_PRIVATE, status_of
from pobo.protocol.signing import load_signing_key, load_verify_key
from pobo.runs import list_runs, runs_table
from pobo.session import Signing
from pobo.transport.security import CurveClient

POBO = [sys.executable, "-m", "pobo"]
T = 4


def _pobo(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*POBO, *argv], capture_output=True, text=True, timeout=180,
                          env=env)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Path:
    """keys/, a curator serving two sessions (c/<session>/), a `pobo modeler` (m/) and an
    ask/tell client (client/), over CURVE with signing keys exchanged as files."""
    root = tmp_path_factory.mktemp("deploy")
    keys = root / "keys"
    made = _pobo("keys", str(keys))
    assert made.returncode == 0, made.stderr
    curator = CuratorProcess(root / "c", T, [
        "--sessions", "2", "--curve-secret", str(keys / "curator.key_secret"),
        "--curve-allow", str(keys / "allowed"), "--sign-secret",
        str(keys / "curator.sign_secret"), "--sign-allow", str(keys / "allowed")])
    try:
        curator.wait_listening()
        modeler = _pobo("modeler", "--connect", curator.endpoint, "--seed", "1",
                        "--curve-secret", str(keys / "modeler.key_secret"),
                        "--curve-server", str(keys / "curator.key"),
                        "--sign-secret", str(keys / "modeler.sign_secret"),
                        "--curator-sign-key", str(keys / "curator.sign_public"),
                        "--timeout", "30", "--out", str(root / "m"))
        assert modeler.returncode == 0, modeler.stderr[-3000:]
        signing = Signing(modeler=load_signing_key(keys / "modeler.sign_secret"),
                          curator_key=load_verify_key(keys / "curator.sign_public"))
        curve = CurveClient(keys / "modeler.key_secret", keys / "curator.key")
        with ModelerClient.connect(curator.endpoint, out=root / "client", curve=curve,
                                   signing=signing, timeout=30.0) as client:
            for t in range(client.params.T):
                client.query(int(np.argmax(client.Z[:, 0])) if t == 0 else t)
        _, stderr = curator.proc.communicate(timeout=120)
        assert curator.proc.returncode == 0, stderr[-3000:]
    finally:
        curator.kill()
    home = root / "home"  # an auditor's key store that trusts both parties' keys
    (home / "trusted").mkdir(parents=True)
    for role in ("curator", "modeler"):
        shutil.copy(keys / f"{role}.sign_public", home / "trusted" / f"{role}.sign_public")
    return root


def _entries(root: Path) -> dict[str, dict]:
    return {Path(e["path"]).relative_to(root).as_posix(): e for e in list_runs(root)}


def test_pobo_runs_gives_each_side_of_a_deployment_its_true_status(deployment):
    by = _entries(deployment)
    sessions = sorted(p.parent.name for p in (deployment / "c").glob("*/curator.json"))
    assert len(sessions) == 2
    assert sorted(by) == sorted([f"c/{s}" for s in sessions] + ["client", "m"])
    for path, entry in by.items():
        assert entry["status"] == "ok", entry
        assert entry["kind"] == ("curator" if path.startswith("c/") else "modeler"), entry
        assert entry["scenario"] == "synthetic" and entry["result"], entry
        # no seed on the curator: the OS CSPRNG, a DP claim, an epsilon really spent
        assert entry["dp_claim"] is True and entry["epsilon_spent"] > 0, entry
    assert by["m"]["result"].startswith("best reward ") and "(4 queries)" in by["m"]["result"]
    table = runs_table(list(by.values()))
    assert "incomplete" not in table and "no DP claim" not in table


def _report(folder: Path, home: Path) -> str:
    done = _pobo("report", str(folder), env={**os.environ, "POBO_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip()).read_text()


def _section(page: str, ident: str) -> str:
    start = page.index(f"<section id='{ident}'>")
    return page[start:page.index("</section>", start)]


def test_pobo_report_renders_a_curators_folder_leading_with_what_it_knows(deployment):
    [folder, _] = sorted(p.parent for p in (deployment / "c").glob("*/curator.json"))
    record = json.loads((folder / "curator.json").read_text())
    page = _report(folder, deployment / "home")
    lead = _section(page, "result")
    assert "status: ok" in lead and "best f found" in lead  # the answer
    assert record["privacy_unit"]["dataset"]["claim"].split(":")[0] in lead  # the statement
    assert "Privacy ledger" in lead and "central eps" in lead  # the ledger
    assert "OK: 1 transcript(s) audited" in lead  # its transcript, its keys trusted
    assert record["curator_private"] == list(CURATOR_PRIVATE)  # labelled in the record
    for field in CURATOR_PRIVATE:  # the record holds them; the page leaves them out
        assert record[field] is not None
    assert record["dataset_digest"] not in page
    assert f"{record['sigma_min']:.6g}" not in page and "σ_min" not in page
    assert "f*" not in page  # f* itself: its value shows only as the best f a run found
    # (unless the run found the best row: then f* is the best f found, which it shows)
    assert f"{record['f_star']:.6g}" not in page or record["best_rank"] == 1


@pytest.mark.parametrize("side", ["m", "client"])
def test_pobo_report_renders_a_modelers_and_a_clients_folder(deployment, side):
    record = json.loads((deployment / side / "modeler.json").read_text())
    page = _report(deployment / side, deployment / "home")
    lead = _section(page, "result")
    assert "status: ok" in lead
    assert f"Best reward {record['best_reward']:.6g} at row {record['best_index']}" in lead
    assert "DP claim: the release is differentially private" in lead  # from its transcript
    head = record["ledger_head"]  # the ledger head the curator signed at the end
    assert f"central ε {head['central_epsilon']:.4g}" in lead
    assert "OK: 1 transcript(s) audited" in lead


def test_a_failed_run_is_failed_with_its_cause_and_a_stopped_one_interrupted(tmp_path):
    """A review's finding: a failed run was listed as incomplete or interrupted, never as
    failed. A `pobo run` whose modeler failed leaves both records and no result.json."""
    out = tmp_path / "run"
    done = _pobo("run", "synthetic", "--grid", "5", "--T", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (out / "result.json").unlink()
    modeler = json.loads((out / "modeler.json").read_text())
    (out / "modeler.json").write_text(json.dumps(
        {**modeler, "status": "error", "error": "PeerError: peer reported policy: no"}))
    [entry] = list_runs(out)
    assert entry["kind"] == "run" and entry["status"] == "failed"
    assert entry["note"] == "modeler: PeerError: peer reported policy: no"
    assert "failed" in runs_table([entry]) and "PeerError" in runs_table([entry])
    page = _report(out, tmp_path)
    assert "status: failed (modeler: PeerError: peer reported policy: no)" in page
    (out / "modeler.json").unlink()  # killed before it wrote its record
    [entry] = list_runs(out)
    assert entry["status"] == "interrupted" and "no record" in entry["note"]


def test_the_three_words_of_a_status():
    assert status_of({"status": "ok"}) == ("ok", None)
    assert status_of({"status": "ok", "consistent": False})[0] == "failed"
    assert status_of({"status": "interrupted", "error": "PeerGone"}) == ("interrupted",
                                                                         "PeerGone")
    assert status_of({"status": "error", "error": "boom"}) == ("failed", "boom")
    assert status_of({"status": "failed", "end_reason": "gave up"}) == ("failed", "gave up")


def test_a_seeded_run_says_no_dp_claim_in_runs_and_report(tmp_path):
    """A review's finding: `pobo runs` showed "ε spent 8 of 10" for seeded runs, which
    carry no DP claim; and `epsilon_at_delta` in --json held a delta."""
    out = tmp_path / "seeded"
    done = _pobo("run", "synthetic", "--grid", "5", "--T", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    [entry] = list_runs(out)
    assert entry["dp_claim"] is False and "seeded" in entry["no_dp_claim"]
    assert "Ledger: no DP claim (seeded" in _section(_report(out, tmp_path), "result")
    line = runs_table([entry]).splitlines()[1]
    assert "no DP claim" in line and " of " not in line.split("no DP claim")[0]
    assert "epsilon_at_delta" not in entry
    assert entry["stated_at_delta"] == json.loads((out / "result.json").read_text())[
        "ledger"]["central"]["delta"]
    (out / "result.json").unlink()  # the modeler's side alone: from its transcript
    shutil.move(out / "modeler.transcript", tmp_path / "modeler.transcript")
    side = tmp_path / "side"
    side.mkdir()
    shutil.move(tmp_path / "modeler.transcript", side / "modeler.transcript")
    shutil.move(out / "modeler.json", side / "modeler.json")
    [modeler] = list_runs(side)
    assert modeler["kind"] == "modeler" and modeler["dp_claim"] is False
    assert "no DP claim" in runs_table([modeler])
    assert "no DP claim (seeded" in _section(_report(side, tmp_path), "result")


def test_a_folder_a_live_run_holds_is_running_not_interrupted(tmp_path):
    """A `pobo run` still going has transcripts and no record yet: `pobo runs` says it is
    running (it holds the folder: pobo.inuse), not that it was interrupted."""
    from pobo.inuse import holding

    out = tmp_path / "live"
    out.mkdir()
    (out / "curator.transcript").write_bytes(b"")
    (out / "modeler.transcript").write_bytes(b"")
    with holding(out):
        [entry] = list_runs(out)
        assert entry["status"] == "running", entry
    [entry] = list_runs(out)
    assert entry["status"] == "interrupted" and "no record" in entry["note"]
