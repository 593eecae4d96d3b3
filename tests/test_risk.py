"""`pobo risk`: the modeler's attacks on a release, measured (parties/risk.py, pobo/risk.py).

The two statistical checks use pobo's own release path on the embedded hospital data
(n = 4,000, seed 0, fixed anchors): at sigma = 0.1 preprocessed units every feature whose
grid step is at least one unit is recovered for >= 98% of rows and flagged; at eps = 0.01
(sigma ~ 300) both attacks recover within 2 points of the public marginal's best guess
for every feature and nothing is flagged (the standard error of a rate over 4,000 rows is
below 0.8 points).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pobo.cli import main
from pobo.parties import risk
from pobo.risk import folder_risk, risk_lines, scenario_risk
from pobo.runspec import RunConfig
from pobo.scenarios.hospital import DOMAIN

N = 4000
COARSE = ("age", "time_in_hospital", "num_procedures", "number_outpatient",
          "number_emergency", "number_inpatient", "number_diagnoses")  # step >= 1 unit


def test_coarse_features_are_the_ones_a_unit_resolves():
    """The features the sigma = 0.1 test holds to 98%: grid step >= 1 preprocessed unit."""
    step = {name: 1.0 / (ls / DOMAIN.scale) for name, ls in zip(DOMAIN.names,
                                                                 DOMAIN.lengthscales)}
    step["age"] *= 10  # decades
    assert {name for name, s in step.items() if s >= 1.0} == set(COARSE)


def by_feature(measured: dict) -> dict:
    return {f["feature"]: f for f in measured["features"]}


def test_a_release_with_little_noise_is_flagged():
    """sigma = 0.1: 20 known rows and Procrustes recover the coarse features of almost
    every other row, and `pobo risk` flags them (fails if the alignment is not centred,
    or decodes to the wrong grid)."""
    measured = scenario_risk(RunConfig("hospital", epsilon=100.0, options={"n": N}))
    assert measured["noise_std"] == pytest.approx(0.1, rel=0.03)
    assert measured["alignment"] == "orthogonal Procrustes"
    features = by_feature(measured)
    for name in COARSE:
        assert features[name]["anchored"] >= 0.98, (name, features[name])
        assert name in measured["flagged"]
    assert measured["summary"]["anchored"] > measured["summary"]["baseline"] + 0.3
    assert any("flagged" in line and "age" in line for line in risk_lines(measured))


def test_a_release_with_huge_noise_falls_to_the_marginal_baseline():
    """eps = 0.01 (sigma ~ 300 units): neither attack beats the marginal's best guess by
    more than 2 points on any feature, nor falls 2 points below it, and nothing is
    flagged (fails with the nearest-grid decoder alone, which decodes the noise to the
    grid's ends)."""
    measured = scenario_risk(RunConfig("hospital", epsilon=0.01, options={"n": N}))
    assert measured["noise_std"] > 100
    for f in measured["features"]:
        assert abs(f["anchored"] - f["baseline"]) <= 0.02, f
        assert abs(f["unanchored"] - f["baseline"]) <= 0.02, f
    assert measured["flagged"] == []


def test_decoders_and_grids():
    """Exact grids match values; binned ones count within one bin; the Bayes decoder with
    no information gives the mode, with little noise the nearest value."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.choice([0.0, 1.0, 5.0], size=500, p=[0.6, 0.3, 0.1]),
                         rng.uniform(0, 10, 500)])
    exact, binned = risk.feature_grids(X, ["a", "b"], (np.array([0, 0]), np.array([5, 10])))
    assert exact.exact and list(exact.values) == [0.0, 1.0, 5.0]
    assert not binned.exact and len(binned.values) == risk.GRID_BINS
    assert binned.step == pytest.approx(10 / risk.GRID_BINS)
    est = np.array([0.9, 4.0, 2.6])
    assert list(risk.decode(exact, est, 0.0, "nearest")) == [1.0, 5.0, 1.0]
    assert list(risk.decode(exact, est, 1e-3)) == [1.0, 5.0, 1.0]
    assert list(risk.decode(exact, est, 1e6)) == [0.0, 0.0, 0.0]  # the mode
    assert risk.recovered(binned, np.array([5.1, 5.0]), np.array([5.0, 5.0 + 0.21])).tolist() \
        == [True, False]
    assert risk.marginal_baseline(exact, X[:, 0]) == pytest.approx(np.mean(X[:, 0] == 0.0))


def test_rotation_and_translation_are_undone():
    """With no noise, an unknown rotation and shift of the rows is undone from 5 anchors
    exactly (Procrustes after centring), and by least squares for a general linear map."""
    rng = np.random.default_rng(1)
    X = rng.integers(0, 5, size=(300, 3)).astype(float)
    Q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    Z = (X - X.mean(axis=0)) @ Q[:3] + 7.0
    anchors = np.arange(5)
    assert np.allclose(risk.anchored_estimate(Z, anchors, X[anchors]), X)
    M = rng.standard_normal((3, 4))
    assert np.allclose(risk.anchored_estimate(X @ M, np.arange(10), X[:10], isometric=False), X)
    with pytest.raises(ValueError, match="more anchors than r"):
        risk.anchored_estimate(X @ M, np.arange(4), X[:4], isometric=False)


def test_run_folder_risk_is_recorded_and_reported(tmp_path, capsys):
    """`pobo run --risk` measures the run's own release into result.json and `pobo report`
    shows it beside the epsilon table; `pobo risk RUN_DIR` without the run's options
    cannot rebuild X and says what it needs (one line, exit 1)."""
    out = tmp_path / "run"
    assert main(["run", "hospital", "--n", "1500", "--T", "3", "--transport", "inproc",
                 "--out", str(out), "--risk", "10", "-q"]) == 0
    printed = capsys.readouterr().out
    assert "risk: what a modeler recovers" in printed
    result = json.loads((out / "result.json").read_text())
    assert result["risk"]["anchors"] == 10 and len(result["risk"]["features"]) == 9
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "id='risk'" in page and "10 known rows" in page
    assert main(["risk", str(out)]) == 1  # no --n 1500: another dataset
    err = capsys.readouterr().err
    assert "dataset_digest" in err and "--data" in err and len(err.strip().splitlines()) == 1
    again = folder_risk(out, {"n": 1500}, anchors=10, record=False)
    assert again["features"] == result["risk"]["features"]  # the same Z, the same anchors


def test_run_folder_without_transcript_says_what_it_needs(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "result.json").write_text(json.dumps({"scenario": "hospital", "seed": 0}))
    with pytest.raises(ValueError, match="holds no transcript"):
        folder_risk(out)


def test_sweep_records_risk_per_release(tmp_path):
    """A sweep with risk_anchors keeps each release's risk in its runs' result.json and
    the CSV, and the table shows it beside the frontier; more epsilon, more recovered."""
    from pobo.report import frontier_risk, frontier_risk_table
    from pobo.sweep import SweepSpec, run_sweep

    spec = SweepSpec("hospital", epsilons=(0.5, 16.0), seeds=1, T=2,
                     options={"n": 1500}, risk_anchors=20)
    rows = run_sweep(spec, tmp_path, workers=1, progress=None)
    assert all(r["risk_anchored"] is not None for r in rows)
    points = frontier_risk(rows)["gaussian"]
    assert [p[0] for p in points] == [0.5, 16.0]
    assert points[1][1] > points[0][1] + 0.2
    assert "Measured risk" in frontier_risk_table(rows)
    assert not math.isnan(frontier_risk(rows)["baseline"])


def test_the_papers_release_gives_every_row_back():
    """--lift paper (Z = X_c T, no noise; outside every DP claim): 20 known rows give
    every other row back exactly by least squares, as parties/projection.py says; a JL
    release into r < d dimensions is measured too (fewer axes, no crash)."""
    paper = scenario_risk(RunConfig("hospital", lift="paper", options={"n": 1500}))
    assert paper["alignment"] == "least squares"
    assert all(f["anchored"] == 1.0 for f in paper["features"])
    narrow = scenario_risk(RunConfig("hospital", r=5, options={"n": 1500}))
    assert narrow["r"] == 5 and narrow["alignment"] == "least squares"


def test_a_release_in_another_row_order_is_refused_not_measured_as_safe():
    """Z's rows shuffled against X's (a release in a secret order measured without the
    curator's permutation) would read as marginal-level risk: refused, one line (fails
    without the anchors' fit check)."""
    from dataclasses import replace

    from pobo.risk import RiskError, release_risk
    from pobo.session import prepare_service

    from pobo.parties.row_order import in_data_order

    service = prepare_service(RunConfig("hospital", options={"n": 1500}))
    ordered = in_data_order(service.release, service.row_order)  # the curator's view
    fine = release_risk(service.problem, ordered)
    assert 0.5 < fine["anchor_fit_rms"] / service.release.noise_std < 1.5
    shuffled = np.random.default_rng(0).permutation(ordered.Z)
    with pytest.raises(RiskError, match="do not line up"):
        release_risk(service.problem, replace(ordered, Z=shuffled))
    with pytest.raises(RiskError, match="do not line up"):  # as served: the secret order
        release_risk(service.problem, service.release)


def test_a_measurement_charges_no_dataset_ledger(tmp_path, monkeypatch):
    """`pobo risk` on a deployment's settings (no seed: the OS CSPRNG draws the release)
    prepares it with an in-memory ledger: nothing is written where the dataset's own
    journal lives (fails if it prepares the service with the default journal)."""
    ledgers = tmp_path / "ledgers"
    monkeypatch.setenv("POBO_LEDGERS", str(ledgers))
    measured = scenario_risk(RunConfig("hospital", seed=None, options={"n": 600}))
    assert measured["features"]
    assert not ledgers.exists() or not any(ledgers.iterdir())
