"""Sweeps: every combination of epsilon, r, strategy and seed, each a real protocol session.

Runs that share a seed share their dataset, so the runs of one seed form one task; the
tasks go to any `concurrent.futures.Executor` (a local process pool by default, a
dask.distributed cluster with `dask_executor`). A run whose `result.json` already
exists in the output folder is not run again, so an interrupted sweep resumes.
"""
from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

from pobo.parties.modeler import HyperFit
from pobo.scenarios.registry import build_problem, public_inputs
from pobo.parties.service import DEFAULT_LIFT
from pobo.allocator import KEEP_ENV
from pobo.blocking import run_blocking
from pobo.progress import step
from pobo.session import RunConfig, run_inproc
from pobo.runspec import write_json


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep. An epsilon or r of None means the scenario's default."""

    scenario: str
    epsilons: tuple[float | None, ...] = (None,)
    rs: tuple[int | None, ...] = (None,)
    seeds: int = 10
    T: int | None = None
    non_private: bool = False
    strategies: tuple[str, ...] = ("gp-ucb",)
    hyper: HyperFit = HyperFit()
    options: dict = field(default_factory=dict)
    transcripts: bool = False
    ldp_epsilons: tuple[float | None, ...] = (None,)
    beta_scales: tuple[float | None, ...] = (None,)
    lift: str = DEFAULT_LIFT  # the paper presets pin "paper" (Algorithm 1 as published)
    moma_ks: tuple[int | None, ...] = (None,)  # MoMA epoch lengths (moma-gp-ucb runs only)
    authors_code: bool = False  # reproduce the PO-GP-UCB authors' code (RunConfig.authors_code)
    lifts: tuple[str, ...] = ()  # several releases to compare (the frontier); () = (lift,)
    risk_anchors: int | None = None  # measure each release's risk (pobo.risk) with k known rows
    distinct: bool | None = None  # a row at most once (RunConfig.distinct; None: the scenario's rule)

    def runs(self) -> list[tuple[str, RunConfig]]:
        """(run id, config) for every run, seed-major so that a seed's runs are adjacent.

        A scenario with public inputs (no projection) runs only its non-private release.
        """
        lifts = self.lifts or (self.lift,)
        if public_inputs(self.scenario):
            releases = [(None, None, True, lifts[0])]
        else:
            releases = [(e, r, False, lift) for lift in lifts for e in self.epsilons
                        for r in self.rs]
            releases += [(None, None, True, lifts[0])] if self.non_private else []
        out = []
        for seed in range(self.seeds):
            base = RunConfig(self.scenario, T=self.T, seed=seed, hyper=self.hyper,
                             options=dict(self.options), lift=self.lift,
                             authors_code=self.authors_code, distinct=self.distinct)
            for strategy in self.strategies:
                ks = self.moma_ks if strategy == "moma-gp-ucb" else (None,)
                for k in ks:
                    for scale in self.beta_scales:
                        for ldp in self.ldp_epsilons:
                            # random search ignores Z: one private run per seed suffices
                            todo = releases[:1] if strategy == "random" and len(lifts) > 1 else releases
                            for eps, r, nonpriv, lift in todo:
                                cfg = replace(base, epsilon=eps, r=r, non_private=nonpriv,
                                              strategy=strategy, ldp_epsilon=ldp,
                                              beta_scale=scale, moma_k=k, lift=lift)
                                out.append((run_id(cfg, len(lifts) > 1), cfg))
        return out


RISK_SEED = 0  # the anchors' draw of a sweep's risk measurement (the same rows at every eps)


def run_id(cfg: RunConfig, with_lift: bool = False) -> str:
    """A file-name-safe id naming a run's parameters (and its release, when a sweep
    compares several)."""
    privacy = ("nonprivate" if cfg.non_private else
               f"eps{'default' if cfg.epsilon is None else format(cfg.epsilon, '.6g')}"
               f"-r{'default' if cfg.r is None else cfg.r}")
    extra = "" if cfg.ldp_epsilon is None else f"-ldp{cfg.ldp_epsilon:.6g}"
    extra += "" if cfg.beta_scale is None else f"-S{cfg.beta_scale:.6g}"
    extra += "" if cfg.moma_k is None else f"-k{cfg.moma_k}"
    extra += "-authors" if cfg.authors_code else ""
    extra += f"-{cfg.lift}" if with_lift and not cfg.non_private else ""
    return f"{cfg.scenario}-{cfg.strategy}-{privacy}{extra}-seed{cfg.seed}"


def run_group(runs: list[tuple[str, RunConfig]], out: str, transcripts: bool = False,
              risk_anchors: int | None = None) -> list[dict]:
    """Run one seed's runs in this process on one shared dataset; their summaries (with
    each release's measured risk when `risk_anchors` is given).

    Module-level and built from plain data, so any executor (process pool, dask) can
    ship it to a worker.
    """
    first = runs[0][1]
    problem = build_problem(first.scenario, first.seed, **first.options)
    return run_blocking(_run_all(runs, Path(out), problem, transcripts, risk_anchors))


async def _run_all(runs: list[tuple[str, RunConfig]], out: Path, problem,
                   transcripts: bool, risk_anchors: int | None = None) -> list[dict]:
    """The group's runs one after another on one event loop (a loop per run costs more
    than a short run's protocol path); their summaries. With `risk_anchors`, each
    private release's risk is measured once (the seeded release prepared again, the
    same Z the run's curator drew) and kept in the result.json of every run it served."""
    summaries, risks = [], {}
    for rid, cfg in runs:
        result = await run_inproc(cfg, out / "runs" / rid, problem=problem,
                                  transcripts=transcripts, records=False)  # result.json: both
        if risk_anchors and not cfg.non_private and result.get("status") == "ok":
            key = (cfg.epsilon, cfg.r, cfg.lift)
            if key not in risks:
                risks[key] = release_risk_of(cfg, problem, risk_anchors)
            result["risk"] = risks[key]
            write_json(out / "runs" / rid / "result.json", result)
        summaries.append(summarise(rid, cfg, result))
    return summaries


def release_risk_of(cfg: RunConfig, problem, anchors: int) -> dict:
    """The measured risk (pobo.risk) of the release a curator with `cfg` serves on
    `problem`: prepared again from the run's seed, so the very Z of the run."""
    from pobo.parties.journal import Journal
    from pobo.parties.row_order import in_data_order
    from pobo.risk import RiskError, release_risk
    from pobo.session import prepare_service

    service = prepare_service(cfg, problem, journal=Journal())  # in memory: charges nothing
    release = in_data_order(service.release, service.row_order)  # the curator's own order
    try:
        return release_risk(problem, release, anchors, RISK_SEED)
    except RiskError as exc:  # kept in the record, not a lost sweep
        return {"anchors": anchors, "error": str(exc)}


def summarise(rid: str, cfg: RunConfig, result: dict) -> dict:
    """The CSV row of one run (its traces stay in its result.json)."""
    sy = result.get("sigma_y") or result["sigma_f"] or 1.0
    return {
        "run": rid, "scenario": result["scenario"], "strategy": cfg.strategy,
        "moma_k": cfg.moma_k,
        "beta_scale": cfg.beta_scale, "ldp_epsilon": result.get("ldp_epsilon"),
        "metric": result.get("metric", "simple_regret"),
        "policy": result["policy"], "dp": bool(result.get("dp", False)),
        "not_dp": "; ".join(result.get("not_dp") or []),
        "epsilon": result["epsilon"], "r": result["r"], "seed": result["seed"], "T": result["T"], "n": result["n"], "d": result["d"],
        "sigma_min": result["sigma_min"], "omega": result["omega"], "lifted": result["lifted"],
        "lift": result.get("lift"), "authors_code": cfg.authors_code,
        "simple_regret": result["simple_regret"][-1],
        "simple_regret_sigma_y": result["simple_regret"][-1] / sy,
        "simple_regret_sigma_f": result.get("simple_regret_sigma_f"),
        "top1_hits": result.get("top1_hits"), "random_top1_expected": result.get("random_top1_expected"),
        "best_rank": result.get("best_rank"),
        "cumulative_regret": result["cumulative_regret"][-1],
        "hits": None if result.get("hits") is None else result["hits"][-1],
        "random_hits_expected": result.get("random_hits_expected"),
        "random_regret_expected": result.get("random_regret_expected"),
        "sigma_y": sy, "sigma_y_source": result.get("sigma_y_source"),
        "sigma_f": result["sigma_f"], "seconds": result["seconds"],
        **risk_columns(result.get("risk")),
    }


def risk_columns(risk: object) -> dict:
    """A run's measured risk as CSV columns: the mean over features of the share of rows
    recovered with k known rows, with none, and by the marginals' best guess (empty
    cells when the run measured none)."""
    summary = risk.get("summary") if isinstance(risk, dict) else None
    if not isinstance(summary, dict):
        return dict.fromkeys(("risk_anchors", "risk_anchored", "risk_unanchored",
                              "risk_baseline"))
    return {"risk_anchors": risk.get("anchors"), "risk_anchored": summary.get("anchored"),
            "risk_unanchored": summary.get("unanchored"),
            "risk_baseline": summary.get("baseline")}


def finished(out: Path, rid: str) -> dict | None:
    """The result of a run already completed in `out`, or None."""
    path = out / "runs" / rid / "result.json"
    if not path.exists():
        return None
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return result if result.get("status") == "ok" and result.get("consistent") else None


def _say(line: str, done: int | None = None, total: int | None = None) -> None:
    """A sweep's progress line (a bar on a terminal: scenarios.progress)."""
    if done is None:
        SWEEP_LOG.info(line)
    else:
        step(SWEEP_LOG, line, done, total)


@contextlib.contextmanager
def worker_environment():
    """Environment for worker processes started inside (what the caller set wins): one
    BLAS thread each, so W workers on W cores do not oversubscribe them (3-4x faster on
    small matrices), and an allocator that keeps freed memory between runs
    (pobo.allocator: no page faults per step for each run's new GP cache)."""
    wanted = {**{k: "1" for k in _BLAS_THREADS}, **KEEP_ENV}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update({k: v for k, v in wanted.items() if saved[k] is None})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


SWEEP_LOG = logging.getLogger("pobo.sweep")
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def run_sweep(spec: SweepSpec, out: Path | str, *, executor: Executor | None = None,
              workers: int = 2, progress: Callable[[str], None] | None = _say) -> list[dict]:
    """Run every run of `spec` not already finished in `out`; all runs' summaries.

    Runs go to `executor`, else to `workers` spawned processes, one seed's runs per
    task; `workers=1` runs them in this process. Progress: one line per finished run (and
    per skipped one), then the wall time.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows: dict[str, dict] = {}
    todo: dict[int, list[tuple[str, RunConfig]]] = {}
    for rid, cfg in spec.runs():
        done = finished(out, rid)
        if done is not None:
            rows[rid] = summarise(rid, cfg, done)
        else:
            todo.setdefault(cfg.seed, []).append((rid, cfg))
    total = len(rows) + sum(map(len, todo.values()))
    def say(line: str, done: int | None = None, total: int | None = None) -> None:
        if progress is _say:
            _say(line, done, total)  # the default: a bar on a terminal
        elif progress is not None:
            progress(line)  # a caller's callback: one line each
    if rows:
        say(f"[sweep] {len(rows)} of {total} runs already finished in {out}: skipped")
    def take(finished_rows: list[dict]) -> None:
        for row in finished_rows:
            rows[row["run"]] = row
            say(f"[sweep] {len(rows)}/{total} {row['run']}: S_T = {row['simple_regret']:.4g} "
                + (f"({row['simple_regret_sigma_f']:.3g} sigma_f, " if row.get(
                    "simple_regret_sigma_f") is not None else "(")
                + f"{row['simple_regret_sigma_y']:.3g} sigma_y)"
                + (f", hits {row['hits']:.0f}" if row["hits"] is not None else "")
                + (f", top-1% rows {row['top1_hits']}, best row's rank {row['best_rank']}"
                   if row.get("top1_hits") is not None else ""),
                len(rows), total)
    if executor is None and workers == 1:  # in this process, like joblib's n_jobs=1: no
        for group in todo.values():       # interpreter to start, no main-module guard needed
            take(run_group(group, str(out), spec.transcripts, spec.risk_anchors))
    elif todo:
        own = executor is None
        pool = (ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"))
                if own else executor)
        try:
            with worker_environment():  # the pool spawns its workers on these submits
                futures = [pool.submit(run_group, group, str(out), spec.transcripts,
                                       spec.risk_anchors) for group in todo.values()]
            for future in as_completed(futures):
                take(future.result())
        finally:
            if own:
                pool.shutdown(cancel_futures=True)
    say(f"[sweep] {total} runs in {time.perf_counter() - started:.1f} s wall time")
    order = [rid for rid, _ in spec.runs()]
    return [rows[rid] for rid in order]


def dask_executor(address: str) -> Executor:
    """A concurrent.futures executor on the dask.distributed cluster at `address`."""
    try:
        from distributed import Client
    except ImportError:
        raise RuntimeError("--dask needs the optional extra: pip install 'pobo[dask]'") from None
    return Client(address).get_executor()
