"""One PO-GP-UCB session, wired from a scenario: each side's setup, run and result.

Everything the CLI does goes through these functions, so a notebook can drive the
same code path: `run_inproc(RunConfig(...), out)` in one process, or `launch(...)`
in scenarios.launch for two OS processes.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from parties.curator import Curator, Oracle
from parties.ldp import ConvertToLaplace, subweibull_clip
from parties.noise import NoiseSource
from parties.modeler import HyperFit
from parties.projection import identity_release, project, singular_values
from parties.runners import ResumeState, run_modeler, serve_session
from parties.strategies import make_strategy
from protocol.channel import Channel
from parties.journal import Journal, JournaledSession
from protocol.codec import decode, encode
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    PROTOCOL_VERSION, Dataset, Hello, Mechanism, ProjectedDataset, ReleaseRequest,
    SessionParams, Welcome,
)
from protocol.ledger import Entry, Ledger
from protocol.policy import (
    CURATOR, DP_PROJECTION, LDP_REWARD, MODELER, NON_PRIVATE, PRIVATE, Boundary,
)

LDP_DELTA = 1e-6  # the (eps, delta)-LDP delta when unbounded noise is clipped
from protocol.transcript import Transcript
from scenarios.problem import Problem, rng_for
from scenarios.registry import PUBLIC_INPUTS, build_problem
from scenarios.releases import release_handler


@dataclass(frozen=True)
class RunConfig:
    """Parameters of a run; None means the scenario's paper default."""

    scenario: str = "synthetic"
    epsilon: float | None = None
    delta: float | None = None
    r: int | None = None
    T: int | None = None
    seed: int | None = 0
    non_private: bool | None = None  # None: the scenario's default (public inputs or not)
    strategy: str = "gp-ucb"
    hyper: HyperFit = HyperFit()
    timeout: float = 60.0
    options: dict = field(default_factory=dict)
    ldp_epsilon: float | None = None  # local DP on every reward (CTL of Zhou & Tan)
    beta_scale: float | None = None  # None: the strategy's documented default
    release: str | None = None  # DP release of the result: noisy, noise-free, lipschitz
    release_epsilon: float = 1.0
    release_delta: float = 1e-3
    budget_epsilon: float | None = None  # the curator's central privacy budget
    budget_delta: float | None = None

    def __post_init__(self) -> None:
        if self.non_private is None:
            object.__setattr__(self, "non_private", self.scenario in PUBLIC_INPUTS)


@dataclass(frozen=True)
class CuratorSide:
    """Everything the curator prepares before a modeler connects."""

    config: RunConfig
    problem: Problem
    params: SessionParams
    release: ProjectedDataset
    report: dict
    session_id: str
    ldp: ConvertToLaplace | None = None
    ledger: Ledger = field(default_factory=Ledger)
    restored: JournaledSession | None = None  # a session resumed from the curator's journal


def prepare_curator(config: RunConfig, problem: Problem | None = None) -> CuratorSide:
    """Build the scenario's data (unless given), project it (or not), and fix the public
    parameters."""
    if problem is None:
        problem = build_problem(config.scenario, config.seed, **config.options)
    eps = problem.epsilon if config.epsilon is None else config.epsilon
    delta = problem.delta if config.delta is None else config.delta
    r = problem.r if config.r is None else config.r
    T = problem.T if config.T is None else config.T
    config = replace(config, epsilon=eps, delta=delta, r=r, T=T)
    ledger = Ledger(config.budget_epsilon or math.inf, config.budget_delta or 1.0)
    if not config.non_private:  # refused here, before the projection draws its matrix
        ledger.charge(Entry(DP_PROJECTION, eps, delta))
    if config.non_private:
        release = identity_release(problem.X)
        sigma = singular_values(problem.X)
        report = {"sigma_min": float(sigma[-1]), "omega": None, "lifted": False}
        mechanisms: tuple[Mechanism, ...] = ()
    else:
        release, rep = project(problem.X, eps, delta, r, privacy_source(config.seed, "projection"))
        report = {"sigma_min": rep.sigma_min, "omega": rep.omega, "lifted": rep.lifted}
        mechanisms = (Mechanism(release.mechanism, eps, delta),)
    ldp = None
    if config.ldp_epsilon is not None:
        ldp = ldp_mechanism(problem, config.ldp_epsilon, T)
        mechanisms += (Mechanism(LDP_REWARD, ldp.epsilon, ldp.delta),)
    report["noise_bound"] = problem.R if ldp is None else ldp.R
    n, r_out = release.Z.shape
    policy = NON_PRIVATE if config.non_private else PRIVATE
    params = SessionParams(problem.name, n, r_out, T, policy.name, mechanisms, problem.kernel,
                           privacy_source(config.seed, "ldp-noise").mode,
                           reward_bound=problem.B or 0.0, noise_bound=report["noise_bound"],
                           noise=problem.noise, budget_epsilon=config.budget_epsilon or 0.0,
                           budget_delta=config.budget_delta or 0.0)
    session_id = rng_for(config.seed, "session").bytes(8).hex()
    return CuratorSide(config, problem, params, release, report, session_id, ldp, ledger)


def release_request(config: RunConfig) -> ReleaseRequest | None:
    """The modeler's release request that `config` asks for, if any."""
    if config.release is None:
        return None
    return ReleaseRequest(config.release, config.release_epsilon, config.release_delta)


def journal_config(config: RunConfig) -> dict:
    """The curator's part of a run configuration, as JSON for the journal."""
    keep = ("scenario", "epsilon", "delta", "r", "T", "seed", "non_private", "timeout",
            "options", "ldp_epsilon", "budget_epsilon", "budget_delta")
    return {k: getattr(config, k) for k in keep}


def digest(f: np.ndarray) -> str:
    """SHA-256 of the objective's bytes: a resumed session must see the same data."""
    return hashlib.sha256(np.ascontiguousarray(f, dtype=np.float64).tobytes()).hexdigest()


def resume_side(journal: Journal, session: str, timeout: float | None = None) -> CuratorSide:
    """The CuratorSide of a journaled session, rebuilt to continue it after a restart.

    The data are rebuilt from the scenario (the same seed or --data) and must match the
    journaled digest; the public parameters and the released dataset are the journaled
    frames themselves, and the ledger is restored entry by entry.
    """
    saved = journal.load(session)
    if saved is None:
        raise ProtocolError(f"no session {session[:40]!r} in this curator's journal",
                            ErrorCode.SEQUENCE)
    config = RunConfig(**{**saved.config, **({"timeout": timeout} if timeout else {})})
    problem = build_problem(config.scenario, config.seed, **config.options)
    if digest(problem.f) != saved.f_digest:
        raise ProtocolError("the scenario's data differ from the journaled session's "
                            "(another seed or data file?)", ErrorCode.INTERNAL)
    welcome, dataset = decode(saved.welcome), decode(saved.dataset)
    ledger = Ledger(config.budget_epsilon or math.inf, config.budget_delta or 1.0)
    ledger.entries = list(saved.ledger)
    ldp = ldp_mechanism(problem, config.ldp_epsilon, config.T) if config.ldp_epsilon else None
    sigma = float(singular_values(problem.X)[-1])
    report = {"sigma_min": sigma, "omega": dataset.release.omega or None,
              "lifted": bool(dataset.release.omega and sigma < dataset.release.omega),
              "noise_bound": welcome.params.noise_bound}
    return CuratorSide(config, problem, welcome.params, dataset.release, report, session, ldp,
                       ledger, saved)


def privacy_source(seed: int | None, stream: str) -> NoiseSource:
    """Randomness that protects privacy: seeded for simulation, the OS CSPRNG without a seed."""
    return NoiseSource(None if seed is None else rng_for(seed, stream))


def ldp_mechanism(problem: Problem, epsilon: float, T: int) -> ConvertToLaplace:
    """CTL(epsilon) for a scenario: its declared B, and R = its noise bound, or for
    Gaussian noise the sub-Gaussian clip K ln(T/delta)^1/2, K = sqrt(2 noise_var), at
    delta = LDP_DELTA (sec. 4.5: the reward is then (epsilon, delta)-LDP)."""
    if problem.B is None:
        raise ValueError(f"scenario {problem.name} declares no bound B on |f|: no LDP rewards")
    if problem.noise == "gaussian" and problem.noise_var > 0:
        R = subweibull_clip(math.sqrt(2 * problem.noise_var), 0.5, T, LDP_DELTA)
        return ConvertToLaplace(epsilon, problem.B, R, LDP_DELTA)
    if problem.noise == "student-t":
        raise ValueError("Student-t noise has no sub-Weibull clip: run it without --ldp-eps")
    return ConvertToLaplace(epsilon, problem.B, problem.R)


def open_channel(pipe, role: str, non_private: bool, out: Path | None,
                 timeout: float, resume: bool = False) -> Channel:
    """A channel for `role` over `pipe`, transcribed to out/<role>.transcript (continuing
    that transcript's chain when `resume`)."""
    policy = NON_PRIVATE if non_private else PRIVATE
    transcript = Transcript(out / f"{role}.transcript", resume) if out is not None else None
    return Channel(pipe, Boundary(policy, role), transcript, timeout=timeout)


async def curate(channel: Channel, side: CuratorSide, out: Path | None = None, *,
                 verbose: bool = True, peer: str = "in-process", hello: Hello | None = None,
                 journal: Journal | None = None) -> dict:
    """Serve one modeler session; return the curator's result, written to
    out/curator.json even when the session fails part-way.

    With a `journal`, every answer is committed to it before its reward is sent, and a
    session restored from it (`side.restored`) continues where it stopped.
    """
    problem, T = side.problem, side.params.T
    source = privacy_source(side.config.seed, "ldp-noise")
    curator = Curator(Oracle(problem.f, problem.noise_var, problem.noise, problem.R), T,
                      rng_for(side.config.seed, "measurement-noise"), side.ldp, source,
                      side.ledger)
    sid = side.session_id
    if side.restored is not None:
        for seq, row, measured, value in side.restored.answers:
            curator.replay(seq, row, measured, value)
    elif journal is not None:
        journal.open_session(sid, journal_config(side.config), encode(Welcome(
            PROTOCOL_VERSION, sid, side.params)), encode(Dataset(side.release)),
            digest(problem.f), list(side.ledger.entries))
    released: list = [side.restored.release] if side.restored and side.restored.release else []

    def record_release(result) -> None:
        released.append(asdict(result))
        if journal is not None:
            journal.record_release(sid, released[-1], side.ledger.entries[-1:])

    handler = release_handler(problem, side.release.Z, side.params.kernel, curator, side.ledger,
                              privacy_source(side.config.seed, "release-noise"),
                              record=record_release)

    def commit(seq: int, index: int, value: float) -> None:
        if journal is not None:
            entries = side.ledger.entries[-1:] if side.ldp is not None else []
            journal.record_answer(sid, seq, index, curator.measured[-1], value, entries)

    def progress(seq: int, index: int, value: float) -> None:
        if verbose:
            simple, _ = curator.regret()
            print(f"[curator] t={seq:>4}/{T} row={index:>7} y={value:+.5f} "
                  f"simple_regret={simple[-1]:.5f}", flush=True)

    started, status, reason = time.perf_counter(), "error", None
    try:
        reason = await serve_session(
            channel, curator, side.params, side.release, sid, on_answer=progress,
            on_release=handler, on_commit=commit, hello=hello,
            asked={seq: row for seq, (row, _) in curator.answered.items()})
        status = "ok"
    finally:
        if journal is not None:
            journal.set_status(sid, status)
        result = curator_result(side, curator, status, reason, time.perf_counter() - started)
        result["release"] = released[0] if released else None
        result["transcript_head"] = channel.transcript.head if channel.transcript else None
        result["security"], result["peer"] = side.params.security, peer
        if out is not None:
            write_json(out / "curator.json", result)
    return result


def curator_result(side: CuratorSide, curator: Curator, status: str, reason: str | None,
                   seconds: float) -> dict:
    """The curator's record of a session: parameters, answers and regret (from true f)."""
    cfg, problem, T = side.config, side.problem, side.params.T
    simple, cumulative = curator.regret()
    return {
        "scenario": problem.name, "seed": cfg.seed, "randomness": side.params.randomness,
        "policy": side.params.policy, "session": side.session_id, "status": status,
        "end_reason": reason, "n": int(problem.X.shape[0]), "d": int(problem.X.shape[1]),
        "r": side.params.r, "epsilon": None if cfg.non_private else cfg.epsilon,
        "delta": None if cfg.non_private else cfg.delta, **side.report, "T": side.params.T,
        "ldp_epsilon": None if side.ldp is None else side.ldp.epsilon,
        "ldp_delta": None if side.ldp is None else side.ldp.delta,
        "ldp_scale": None if side.ldp is None else side.ldp.scale,
        "queries": curator.queries, "rewards": curator.rewards, "measured": curator.measured,
        "simple_regret": simple.tolist(), "cumulative_regret": cumulative.tolist(),
        "hits": np.cumsum(problem.f[curator.queries]).tolist() if problem.metric == "hits" else None,
        "sense": problem.sense, "metric": problem.metric,
        "random_hits_expected": (float(T * problem.f.mean()) if problem.metric == "hits"
                                 else None),
        "f_star": float(np.max(problem.f)), "sigma_f": float(np.std(problem.f)),
        "kernel": asdict(problem.kernel), "noise_var": problem.noise_var,
        "source": problem.source, "dropped": problem.dropped, "seconds": seconds,
        "ledger": side.ledger.to_dict(),
    }


async def optimise(channel: Channel, seed: int | None, strategy: str = "gp-ucb",
                   out: Path | None = None, *, hyper: HyperFit = HyperFit(),
                   beta_scale: float | None = None, release: ReleaseRequest | None = None,
                   resume: ResumeState | None = None, verbose: bool = False) -> dict:
    """Run the modeler's side of one session (asking for a DP `release` of the result at
    the end, if given); return what it saw and chose, written to out/modeler.json even
    when the session fails part-way."""
    started, status, fits, released = time.perf_counter(), "error", [], {}
    queries: list[int] = []
    rewards: list[float] = []

    def progress(seq: int, index: int, value: float) -> None:
        queries.append(index)
        rewards.append(value)
        if verbose:
            print(f"[modeler] t={seq:>4} row={index:>7} y={value:+.5f}", flush=True)

    try:
        modeler = await run_modeler(channel, make_strategy(strategy, beta_scale),
                                    rng_for(seed, "modeler"),
                                    hyper=hyper, on_step=progress, release=release,
                                    resume=resume)
        released = {"release": None if modeler.release is None else asdict(modeler.release),
                    "release_error": modeler.release_error}
        fits = [{"kernel": f.kernel.name, "lengthscales": list(f.kernel.lengthscales),
                 "signal_var": f.kernel.variance, "noise_var": f.noise_var,
                 "prior_mean": f.prior_mean, "log_likelihood": f.log_likelihood}
                for f in modeler.fits]
        status = "ok"
    finally:
        best = int(np.argmax(rewards)) if rewards else None
        result = {"seed": seed, "strategy": strategy, "beta_scale": beta_scale,
                  "hyper": asdict(hyper), "fits": fits,
                  "status": status, "queries": queries,
                  "rewards": rewards,
                  "best_index": None if best is None else queries[best],
                  "best_reward": None if best is None else rewards[best],
                  **released, "seconds": time.perf_counter() - started,
                  "transcript_head": channel.transcript.head if channel.transcript else None}
        if out is not None:
            write_json(out / "modeler.json", result)
    return result


def merge_results(curator: dict, modeler: dict, out: Path) -> dict:
    """result.json: the curator's record plus the modeler's view and the transcript paths."""
    result = dict(curator)
    result["modeler"] = modeler
    result["consistent"] = (modeler.get("queries") == curator["queries"]
                            and modeler.get("rewards") == curator["rewards"])
    result["transcripts"] = {role: str(out / f"{role}.transcript") for role in (CURATOR, MODELER)
                             if (out / f"{role}.transcript").exists()}
    write_json(out / "result.json", result)
    return result


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename), so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


async def run_inproc(config: RunConfig, out: Path | str, *, verbose: bool = False,
                     problem: Problem | None = None, transcripts: bool = True) -> dict:
    """Run curator and modeler in this process over an in-process pipe; write result.json.

    `problem` reuses an already built dataset (sweeps share one per seed); without
    `transcripts` the channels still encode, decode and police every message.
    """
    from transport.inproc import pipe_pair  # scenarios choose the transport

    out = Path(out)
    side = prepare_curator(config, problem)
    cpipe, mpipe = pipe_pair()
    where = out if transcripts else None
    cchan = open_channel(cpipe, CURATOR, config.non_private, where, config.timeout)
    mchan = open_channel(mpipe, MODELER, config.non_private, where, config.timeout)
    try:
        cres, mres = await asyncio.gather(
            curate(cchan, side, out, verbose=verbose),
            optimise(mchan, config.seed, config.strategy, out, hyper=config.hyper,
                     beta_scale=config.beta_scale, release=release_request(config)))
    finally:
        cchan.close()
        mchan.close()
    return merge_results(cres, mres, out)
