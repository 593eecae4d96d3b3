"""`pobo audit`: a clean session passes; edits, truncation, reordering, forbidden
messages and leaked data are caught and named."""
import asyncio
import json
import subprocess
import sys

import msgpack
import numpy as np
import pytest

from pobo.protocol.audit import audit_session, audit_transcript
from pobo.protocol.codec import encode
from pobo.protocol.channel import Channel
from pobo.protocol.messages import Dataset, End, Hello, ProjectedDataset, Query, Reward, Welcome
from pobo.protocol.policy import CURATOR, IDENTITY, MODELER, PRIVATE, Boundary
from pobo.protocol.transcript import Transcript, raw_records
from pobo.auditing import audit_files
from pobo.session import RunConfig, run_inproc
from pobo.transport.inproc import pipe_pair


@pytest.fixture
def session(tmp_path):
    cfg = RunConfig(T=5, options={"grid": 10}, ldp_epsilon=2.0, release="noisy")
    asyncio.run(run_inproc(cfg, tmp_path))
    return tmp_path


def _records(path):
    return [raw for raw, _ in raw_records(path.read_bytes())]


def test_a_clean_session_passes_with_the_recomputed_ledger(session):
    reports = audit_files([session / "modeler.transcript", session / "curator.transcript"])
    assert [r.role for r in reports] == ["curator", "modeler"]
    assert all(r.ok for r in reports), [r.violations for r in reports]
    recorded = json.loads((session / "curator.json").read_text())["ledger"]["session"]
    assert reports[0].ledger["central"]["epsilon"] == pytest.approx(recorded["central"]["epsilon"])
    assert reports[0].ledger["local"]["reports"] == 5


@pytest.mark.parametrize("where, value, named", [
    (["randomness"], "os-csprng", "randomness is 'os-csprng'; the signed transcript says"),
    (["dp"], True, "dp is True; the signed transcript says"),
    (["epsilon"], 0.1, "epsilon is 0.1; the signed transcript says"),
    (["privacy_unit", "dataset", "epsilon"], 0.1, "privacy_unit.dataset.epsilon is 0.1"),
    (["privacy_unit", "dataset", "dp"], True, "privacy_unit.dataset.dp is True"),
    (["ledger", "central", "epsilon"], 0.5, "ledger.central.epsilon is 0.5; its own entries"),
    (["ledger", "session", "local", "reports"], 0, "the recorded ledger of this session"),
    (["ledger", "local", "max_row_epsilon_basic"], 0.0, "below the"),
])
def test_a_privacy_claim_edited_in_a_record_fails_the_audit(session, where, value, named):
    """A review's attack: result.json and curator.json were shown as they were (`pobo
    report` rendered a forged "(0.1, 1e-5)-DP, dp yes, os-csprng" beside "Audit OK").
    What a record claims of the session's privacy must be what the signed transcript
    shows (its Welcome, Dataset, messages and the curator's closing ledger head), and its
    dataset ledger what its own entries compose to."""
    paths = [session / "modeler.transcript", session / "curator.transcript"]
    assert all(r.ok for r in audit_files(paths))
    for name in ("curator.json", "result.json"):
        record = session / name
        assert record.exists()
        clean = record.read_text()
        data = json.loads(clean)
        node = data
        for key in where[:-1]:
            node = node[key]
        node[where[-1]] = value
        record.write_text(json.dumps(data))
        reports = audit_files(paths)
        found = [v for r in reports for v in r.violations if name in v]
        assert any(named in v for v in found), (name, found)
        record.write_text(clean)


def test_an_edited_record_breaks_the_chain(session):
    path = session / "curator.transcript"
    raws = _records(path)
    item = msgpack.unpackb(raws[6], raw=False)
    item["time"] += 1.0  # any edit of a record's bytes
    raws[6] = msgpack.packb(item, use_bin_type=True)
    path.write_bytes(b"".join(raws))
    report = audit_transcript(path)
    assert not report.ok and any("record 7: hash chain broken" in v for v in report.violations)


def test_truncation_is_caught_by_the_torn_tail_and_by_the_anchor(session):
    path = session / "curator.transcript"
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    assert any("truncated" in v for v in audit_transcript(path).violations)
    path.write_bytes(data)
    whole = _records(path)
    path.write_bytes(b"".join(whole[:-2]))  # two whole records removed from the tail
    report = audit_files([path])[0]
    assert any("head mismatch" in v for v in report.violations)


def test_reordered_records_are_caught(session):
    path = session / "modeler.transcript"
    raws = _records(path)
    raws[4], raws[5] = raws[5], raws[4]
    path.write_bytes(b"".join(raws))
    violations = audit_transcript(path).violations
    assert any("sequence number" in v for v in violations)


def test_a_forbidden_message_fails_the_audit_naming_the_record(tmp_path):
    """A transcript written without the policy: the curator 'sends' X itself under the
    private policy, and a raw reward in an LDP session."""
    asyncio.run(run_inproc(RunConfig(T=3, options={"grid": 8}, ldp_epsilon=1.0), tmp_path))
    good = [r for _, r in raw_records((tmp_path / "curator.transcript").read_bytes())]
    forged = Transcript(tmp_path / "forged.transcript")
    for r in good[:2]:  # hello, welcome
        forged.append(r.dir, r.kind, r.frame)
    X = np.arange(128, dtype=float).reshape(64, 2)
    forged.append("sent", "dataset", encode(Dataset(ProjectedDataset(IDENTITY, 0.0, 1.0, 0.0, X))))
    forged.append("sent", "reward", encode(Reward(1, 0, 0.5)))
    forged.close()
    report = audit_transcript(tmp_path / "forged.transcript")
    assert any(v.startswith("record 2: sent dataset that the policy forbids") for v in report.violations)
    assert any(v.startswith("record 3: sent reward") for v in report.violations)


def test_the_two_transcripts_must_agree(session, tmp_path):
    other = tmp_path / "other"
    asyncio.run(run_inproc(RunConfig(T=5, seed=9, options={"grid": 10}), other))
    reports = audit_session(session / "curator.transcript", other / "modeler.transcript")
    assert any("transcripts disagree" in v for v in reports[0].violations)


def test_data_check_and_cli_exit_status(tmp_path):
    out = tmp_path / "np"
    asyncio.run(run_inproc(RunConfig(T=3, options={"grid": 8}), out))
    data = tmp_path / "data.npz"
    done = subprocess.run([sys.executable, "-m", "pobo", "export-data", "synthetic",
                           "--grid", "8", "--out", str(data)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    ok = subprocess.run([sys.executable, "-m", "pobo", "audit",
                         str(out / "curator.transcript"), "--data", str(data), "--json",
                         "--allow-unsigned"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and json.loads(ok.stdout)[0]["ok"]
    # a transcript in which X itself crossed under the private policy
    forged = Transcript(tmp_path / "x.transcript")
    good = [r for _, r in raw_records((out / "curator.transcript").read_bytes())]
    for r in good[:2]:
        forged.append(r.dir, r.kind, r.frame)
    X = np.load(data)["X"]
    forged.append("sent", "dataset", encode(Dataset(ProjectedDataset("po-gp-ucb-projection",
                                                                     3.0041660239464334, 1e-5, 1.0, X))))
    forged.close()
    bad = subprocess.run([sys.executable, "-m", "pobo", "audit",
                          str(tmp_path / "x.transcript"), "--data", str(data)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "rows of X appear verbatim" in bad.stdout


def test_a_transcript_cut_before_its_end_is_reported_incomplete(session, tmp_path):
    """Cutting the last records (a release, the End) and rehashing leaves a valid chain,
    but the audit says the session is incomplete instead of a plain OK."""
    import shutil

    from pobo.protocol.audit import audit_transcript
    whole = audit_transcript(session / "curator.transcript")
    assert whole.complete and whole.to_dict()["complete"] is True
    cut = tmp_path / "cut" / "curator.transcript"
    cut.parent.mkdir()
    if (session / "blobs").exists():
        shutil.copytree(session / "blobs", cut.parent / "blobs")
    pairs = list(raw_records((session / "curator.transcript").read_bytes()))
    last_end = max(i for i, (_, r) in enumerate(pairs) if r.kind == "end")
    cut.write_bytes(b"".join(raw for raw, _ in pairs[:last_end - 1]))  # a prefix: valid chain
    report = audit_transcript(cut)
    assert not report.complete
    assert any("session incomplete" in n for n in report.notes)


async def _session_of_version(tmp_path, version, params, release):
    """Both transcripts of a one-query session whose handshake speaks `version`."""
    mpipe, cpipe = pipe_pair()
    versions = frozenset({version})
    mod = Channel(mpipe, Boundary(PRIVATE, MODELER, versions=versions),
                  Transcript(tmp_path / "modeler.transcript"), timeout=5.0)
    cur = Channel(cpipe, Boundary(PRIVATE, CURATOR, versions=versions),
                  Transcript(tmp_path / "curator.transcript"), timeout=5.0)
    await mod.send(Hello(version, "old"))
    await cur.recv()
    await cur.send(Welcome(version, "ab" * 16, params))
    await cur.send(Dataset(release))
    await mod.recv(), await mod.recv()
    await mod.send(Query(1, 0))
    await cur.recv()
    await cur.send(Reward(1, 0, 0.5))
    await mod.recv()
    await mod.send(End("done"))
    await cur.recv()
    mod.close(), cur.close()


@pytest.mark.parametrize("version", [3, 2])
def test_a_version_3_transcript_still_audits_and_a_version_2_one_does_not(
        tmp_path, params, release, version):
    """A transcript kept from before version 4 audits clean; one older than version 3 is
    reported (its Hello's version is not one the audit knows)."""
    asyncio.run(_session_of_version(tmp_path, version, params, release))
    reports = audit_session(tmp_path / "curator.transcript", tmp_path / "modeler.transcript")
    if version == 3:
        assert all(r.ok for r in reports), [r.violations for r in reports]
    else:
        assert not reports[1].ok and "version 2" in " ".join(reports[1].violations)


def test_the_vectorised_data_check_counts_what_row_tuples_and_counters_count():
    """The leak check at scale (numpy keys and sorted multisets) against the plain Python
    it replaced: tuples of rounded rows in a set, and Counters of rounded values."""
    from collections import Counter

    from pobo.protocol.audit_data import _held, _rounded_abs, _row_keys

    rng = np.random.default_rng(7)
    X = np.round(rng.standard_normal((400, 3)), 3)
    X[5] = [0.0, -0.0, 1.5]  # a signed zero must match an unsigned one
    X[6] = X[7]  # a duplicated row
    Z = rng.standard_normal((300, 3))
    Z[:40] = X[rng.integers(0, 400, 40)]  # planted rows of X
    Z[40] = [-0.0, 0.0, 1.5]
    Z[41] = X[9] + 1e-14  # equal at 12 decimals
    Z[42] = X[10] + 1e-9  # not equal at 12 decimals
    rows = {tuple(np.round(row, 12)) for row in X}
    expected = sum(tuple(np.round(z, 12)) in rows for z in Z)
    assert int(np.isin(_row_keys(Z), _row_keys(X)).sum()) == expected >= 42
    entries = Counter(np.round(np.abs(X), 12).ravel().tolist())
    multiset = _rounded_abs(X)
    for value in [*np.round(np.abs(X[:20]), 12).ravel().tolist(), 0.5, 1.5, 12345.0, 1e-3]:
        assert _held(multiset, value) == entries[value]


def test_the_data_check_at_rounding_ties_and_at_huge_magnitudes():
    """A scalar one ulp from one row's f is looked up by both roundings; magnitudes where
    rounding to 12 decimals would overflow are compared exactly, never as infinity."""
    import warnings

    from pobo.protocol.audit_data import _held, _rounded_abs, _row_keys, _scalar_keys

    f = _rounded_abs([0.14097402593749997, 7.0])
    assert any(_held(f, key) == 1 for key in _scalar_keys(0.1409740259375))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow on the way
        X = np.array([[1e300, 0.5], [1.5e300, 0.25]])
        assert not np.isin(_row_keys(np.array([[2e300, 0.5]])), _row_keys(X)).any()
        assert np.isin(_row_keys(np.array([[1.5e300, 0.25]])), _row_keys(X)).all()
        entries = _rounded_abs(X)
        assert max(_held(entries, key) for key in _scalar_keys(1e300)) == 1


def test_a_second_run_in_one_folder_keeps_the_first_ones_records_and_both_audit(tmp_path):
    """A review's finding: a second run into the same --out kept the first one's
    transcripts as .1 but overwrote its result.json and curator.json, so the audit of the
    genuine .1 transcripts reported a tampered tail. Every record of the first run is
    kept with its transcripts (NAME.1), and each pair audits against its own records."""
    cfg = RunConfig(T=4, options={"grid": 8}, ldp_epsilon=2.0)
    first = asyncio.run(run_inproc(cfg, tmp_path))
    second = asyncio.run(run_inproc(RunConfig(T=4, seed=3, options={"grid": 8},
                                              ldp_epsilon=2.0), tmp_path))
    assert first["session"] != second["session"]
    for name in ("result.json", "curator.json", "modeler.json"):
        kept = json.loads((tmp_path / f"{name}.1").read_text())
        assert kept.get("session", first["session"]) == first["session"], name
    for suffix in ("", ".1"):
        reports = audit_files([tmp_path / f"curator.transcript{suffix}",
                               tmp_path / f"modeler.transcript{suffix}"])
        assert all(r.ok for r in reports), (suffix, [r.violations for r in reports])


def test_a_transcript_with_no_anchor_beside_it_says_its_tail_is_unchecked(session):
    """A review's finding: both transcripts cut at a record boundary, their records
    deleted, audited OK with only "no End" noted. Without an anchored head a cut tail
    cannot be seen, and the audit says so (a note: a transcript alone may be audited)."""
    paths = [session / "curator.transcript", session / "modeler.transcript"]
    unanchored = "no anchored head"
    assert not any(unanchored in n for r in audit_files(paths) for n in r.notes)
    for name in ("curator.json", "modeler.json", "result.json"):
        (session / name).unlink()
    reports = audit_files(paths)
    assert all(any(unanchored in n for n in r.notes) for r in reports)
    assert all(any(unanchored in n for n in r.notes) for r in audit_files(paths[:1]))


def test_a_non_private_run_audits_clean_and_its_record_cannot_claim_an_epsilon(tmp_path):
    """A review's finding (a regression of the records check): every honest --non-private
    run failed the audit, its records' epsilon None against the identity release's
    placeholder (0, 1). X itself has no (epsilon, delta): the records say None, and a
    record that claims one is named."""
    asyncio.run(run_inproc(RunConfig(T=4, options={"grid": 8}, non_private=True), tmp_path))
    paths = [tmp_path / "curator.transcript", tmp_path / "modeler.transcript"]
    assert all(r.ok for r in audit_files(paths)), [r.violations for r in audit_files(paths)]
    record = tmp_path / "result.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "epsilon": 0.5}))
    found = [v for r in audit_files(paths) for v in r.violations]
    assert any("epsilon is 0.5; the signed transcript says None" in v for v in found), found
