"""`pobo risk`: what a modeler could learn about individual rows from a release, measured.

The attacks are the modeler's (parties/risk.py): k known rows (anchors) and alignment,
or public statistics alone, then decoding to each feature's grid. Here they are mounted
on a release prepared exactly as the curator would prepare it (`scenario_risk`: before
serving, in simulation), on a run folder's release (`folder_risk`: Z read back from the
modeler's transcript, X rebuilt from the scenario and checked against the run's
dataset digest), or on a release at hand (`release_risk`). The result is a dict, what
result.json keeps under `risk` and `pobo report` shows beside the epsilon table.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pobo.parties.dataset import Problem, dataset_digest
from pobo.parties.risk import GRID_BINS, measure_risk
from pobo.parties.row_order import in_data_order, keeps_data_order, seeded_order
from pobo.protocol.messages import Dataset, ProjectedDataset
from pobo.protocol.policy import GAUSSIAN_ROWS, IDENTITY
from pobo.runspec import RunConfig, write_json
from pobo.scenarios.registry import build_problem

DEFAULT_ANCHORS = 20  # known rows of the anchored attack (the measurement)
# an isometric release whose known rows fit Z more than this many noise stds apart per
# coordinate is not a release of these rows in this order. A true fit is ~0.87 noise std
# (Procrustes takes 45 of 180 degrees of freedom at k = 20, d = 9; its spread ~5%); rows
# out of order add X's own spread (hospital at eps 3: 1.56). Where the noise swamps the
# rows (eps <= 1) the two cannot be told apart, and the measured risk is the baseline's
# either way.
MISMATCH = 1.25


class RiskError(ValueError):
    """A run folder that does not hold what the measurement needs (one line: what)."""


def release_risk(problem: Problem, release: ProjectedDataset, anchors: int = DEFAULT_ANCHORS,
                 seed: int = 0, repeats: int = 1) -> dict:
    """Both attacks on `release` (of `problem`'s prepared rows, in their order), with the
    release's parameters: the dict result.json keeps under `risk`."""
    started = time.perf_counter()
    X, Z = problem.X, np.asarray(release.Z)
    d = X.shape[1]
    domain = problem.domain
    names = list(domain.names) if domain is not None else [f"x{j + 1}" for j in range(d)]
    bounds = None
    if domain is not None:  # the public box in preprocessed units: a binned feature's range
        lo, _ = domain.prepare(np.asarray([domain.lower], dtype=float))
        hi, _ = domain.prepare(np.asarray([domain.upper], dtype=float))
        bounds = (lo[0], hi[0])
    isometric = release.mechanism in (GAUSSIAN_ROWS, IDENTITY) and Z.shape[1] >= d
    measured = measure_risk(X, Z, names, anchors=anchors, seed=seed, repeats=repeats,
                            noise_std=float(release.noise_std), isometric=isometric,
                            bounds=bounds)
    if isometric and release.noise_std > 0 and \
            measured["anchor_fit_rms"] > MISMATCH * release.noise_std:
        raise RiskError(
            f"the release's rows do not line up with the dataset's: the known rows fit Z "
            f"with an error of {measured['anchor_fit_rms']:.3g} units per coordinate, the "
            f"noise is {release.noise_std:.3g} (a release in another row order needs the "
            "curator's permutation to be measured against X)")
    if domain is not None:  # a bin's width in the feature's own units, for a person
        for j, item in enumerate(measured["features"]):
            if not item["exact"]:
                width = (domain.upper[j] - domain.lower[j]) / GRID_BINS
                other = domain.conversions[j] if domain.conversions else None
                item["grid"] = (f"{GRID_BINS} bins, within one bin ({width:.3g} "
                                f"{domain.units[j]}".rstrip()
                                + (f", about {width * other[0]:.3g} {other[1]}" if other
                                   else "") + ")")
    return {"mechanism": release.mechanism, "epsilon": release.epsilon,
            "delta": release.delta, "noise_std": float(release.noise_std),
            "n": int(X.shape[0]), "d": int(d), "r": int(Z.shape[1]), **measured,
            "seconds": time.perf_counter() - started}


def scenario_risk(config: RunConfig, anchors: int = DEFAULT_ANCHORS, repeats: int = 1) -> dict:
    """The risk of the release a curator started with `config` would serve (prepared as
    it would be, with an in-memory ledger: a measurement charges no dataset's journal; a
    `config.seed` of None draws it from the OS CSPRNG, as a deployment does)."""
    from pobo.parties.journal import Journal
    from pobo.session import prepare_service

    service = prepare_service(config, journal=Journal())
    release = in_data_order(service.release, service.row_order)  # the curator's own order
    return {"scenario": service.problem.name, "source": service.problem.source,
            **release_risk(service.problem, release, anchors,
                           0 if config.seed is None else config.seed, repeats)}


def folder_release(folder: Path) -> ProjectedDataset:
    """The release Z a run folder's modeler received, read back from its transcript (or
    the curator's); RiskError naming what is missing."""
    from pobo.protocol.audit import decoded_messages
    from pobo.protocol.transcript import TranscriptError

    for role in ("modeler", "curator"):
        path = folder / f"{role}.transcript"
        if not path.is_file():
            continue
        try:
            messages = decoded_messages(path)
        except (TranscriptError, OSError, ValueError) as exc:
            raise RiskError(f"{path}: cannot read the release: {exc}") from None
        found = next((m for _, m in messages if isinstance(m, Dataset)
                      and m.release.Z.shape[0] > 0), None)
        if found is not None:
            return found.release
    raise RiskError(f"{folder} holds no transcript with the release (modeler.transcript or "
                    "curator.transcript; a sweep keeps them only with --transcripts): "
                    "measure the release with `pobo risk SCENARIO` and the run's options")


def folder_risk(folder: Path | str, options: dict | None = None,
                anchors: int = DEFAULT_ANCHORS, repeats: int = 1, record: bool = True) -> dict:
    """The risk of a run folder's release: Z from its transcript, X rebuilt from the
    scenario, the seed and `options` (the run's --data, --n, ...) and checked against the
    run's dataset digest; with `record`, kept in its result.json under `risk`."""
    from pobo.html_page import ReportError, load_json

    folder = Path(folder)
    try:
        result = load_json(folder / "result.json")
    except ReportError as exc:
        raise RiskError(f"{folder} is not a run folder: {exc}") from None
    release = folder_release(folder)
    scenario, seed = result.get("scenario"), result.get("seed")
    options = dict(options or {})
    try:
        problem = build_problem(scenario, seed, **options)
    except (TypeError, KeyError) as exc:
        raise RiskError(f"cannot rebuild scenario {scenario!r} with {options}: {exc}") from None
    if dataset_digest(problem) != result.get("dataset_digest"):
        given = ", ".join(f"--{k} {v}" for k, v in options.items()) or "no options"
        raise RiskError(
            f"the dataset rebuilt from {scenario} (seed {seed}, {given}) is not the one the "
            f"run in {folder} served (its dataset_digest differs): the measurement needs the "
            "curator's rows X, which a run folder does not hold; pass the scenario options "
            "the run used (--data FILE, --n N, ...). A run without a seed on an embedded "
            "dataset cannot be rebuilt")
    if release.Z.shape[0] != problem.X.shape[0]:
        raise RiskError(f"the release has {release.Z.shape[0]} rows, the dataset "
                        f"{problem.X.shape[0]}")
    if keeps_data_order(str(result.get("lift"))):
        seed = 0 if seed is None else seed  # (no secret order to undo below)
    elif seed is None:
        raise RiskError(f"the release of {folder} is in its curator's secret row order, "
                        "which a run folder does not hold: measure it with `pobo risk "
                        "SCENARIO` and the run's options on the curator's side")
    if not keeps_data_order(str(result.get("lift"))):
        release = in_data_order(release, seeded_order(release.Z.shape[0], int(seed)))
    risk = {"scenario": problem.name, "source": problem.source,
            **release_risk(problem, release, anchors, 0 if seed is None else int(seed),
                           repeats)}
    if record:
        write_json(folder / "result.json", {**result, "risk": risk})
    return risk


def risk_lines(risk: dict) -> list[str]:
    """The measurement for a person: one line of context, one per feature, the flag."""
    if not isinstance(risk, dict) or not risk.get("features"):
        return []
    eps = risk.get("epsilon")
    head = (f"risk: what a modeler recovers from the release ({risk.get('mechanism')}"
            + (f", eps {eps:.4g}, delta {risk.get('delta'):.3g}" if eps else "")
            + f", noise std {risk.get('noise_std', 0):.4g}; n = {risk.get('n')}), per feature:"
            f" share of rows whose value it decodes, against the best guess from the public "
            f"marginal")
    k = risk["anchors"]
    over = f" (mean of {risk['repeats']} draws)" if risk.get("repeats", 1) > 1 else ""
    lines = [head, f"  {'feature':<22} {'grid':<48} {'marginal':>8} {f'{k} known rows':>15}"
                   f" {'none known':>11} {'residual':>9}"]
    for f in risk["features"]:
        sd = f" ±{100 * f['anchored_sd']:.0f}" if f.get("anchored_sd") is not None else ""
        anchored = f"{100 * f['anchored']:.0f}%{sd}"
        lines.append(f"  {f['feature']:<22} {f['grid']:<48} {100 * f['baseline']:>7.0f}% "
                     f"{anchored:>15} {100 * f['unanchored']:>10.0f}% "
                     f"{f.get('residual', 0):>9.2f}")
    lines.append(f"  ({k} known rows: {risk.get('alignment')} on them{over}; none known: "
                 "principal axes and the public marginals; decoded to the nearest grid value or "
                 "by the marginal as prior, whichever recovers more; residual: anonymeter's "
                 "inference risk of the better attack, (recovered - marginal) / (1 - marginal))")
    flagged = risk.get("flagged") or []
    lines.append(f"  flagged (an attack beats the marginal's guess by > 5 points): "
                 + (", ".join(flagged) if flagged else "none"))
    return lines
