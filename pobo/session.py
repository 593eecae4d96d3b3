"""One PO-GP-UCB session, wired from a scenario: each side's setup, run and result.

Everything the CLI does goes through these functions, so a notebook can drive the
same code path: `run_inproc(RunConfig(...), out)` in one process, or `launch(...)`
in scenarios.launch for two OS processes.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from pobo.parties.journal import Journal, JournalFault
from pobo.parties.choices import HyperFit
from pobo.parties.objective import CommandObjective, DeferredObjective, Objective
from pobo.parties.runners import ResumeState, receive_hello, run_modeler, serve_session
from pobo.parties.service import CuratorService, CuratorSession, CuratorSettings
from pobo.parties.strategies import make_strategy
from pobo.protocol.channel import Channel
from pobo.protocol.errors import PeerGone, PeerTimeout
from pobo.protocol.ledger import DATASET_SCOPE, PROCESS_SCOPE, ROW_DELTA, Budget
from pobo.protocol.messages import Hello, ReleaseRequest
from pobo.protocol.policy import CURATOR, MODELER, NON_PRIVATE, PRIVATE, Boundary
from pobo.protocol.signing import Signer
from pobo.protocol.transcript import Transcript
from pobo.transport.keyfiles import pobo_home
from pobo.parties.dataset import dataset_digest, regret_scale
from pobo.scenarios.problem import (
    Problem, best_rank, distinct_hits, random_regret_expected, rng_for, top_hits,
    top_rows_threshold,
)
from pobo.progress import step
from pobo.scenarios.registry import build_problem, public_inputs
from pobo.releases import release_handler
from pobo.runspec import (  # noqa: F401  (re-exported: defined without numpy)
    CURATOR_PRIVATE, LISTENING, RunConfig, merge_results, startup_warnings, write_json,
)


CURATOR_LOG = logging.getLogger("pobo.curator")
AUTHORS_CODE_NOTE = ("reproduction switch --authors-code: lift sigma + omega (the paper's "
                     "text: sqrt(sigma^2 + omega^2)); the modeler's GP-UCB scores mean + "
                     "beta_{t-1}^1/2 variance with delta 0.1 (the text: beta_t^1/2 std, "
                     "delta 0.05)")
DEFAULT_RELEASE_DELTA = 1e-8  # a release's default delta: below 1/n for every n < 5e7
# central (eps, delta) a default budget leaves for one release at the default (1, 1e-8),
# which Kusner's two-part releases charge twice; and one release, at any (eps, delta)
DEFAULT_RELEASE_ALLOWANCE = (2.0, 2 * DEFAULT_RELEASE_DELTA)
DEFAULT_RELEASES = 1
DEFAULT_ROW_REPORTS = 1  # a row's default LDP budget: this many sessions' worth (T reports)
MODELER_LOG = logging.getLogger("pobo.modeler")


@dataclass(frozen=True)
class Signing:
    """Signing keys of a run: each side's own, and what it expects of its peer (None:
    unsigned / any)."""

    curator: Signer | None = None  # the curator's signing key
    modeler: Signer | None = None
    curator_key: str | None = None  # the curator key the modeler expects
    modeler_keys: frozenset[str] | None = None  # the modeler keys the curator accepts

    @classmethod
    def from_store(cls, home: Path | None = None) -> "Signing":
        """Both sides signing with the user's key-store keys (made once; see
        transport.keyfiles.store_signing_key), each expecting the other's: `pobo run`."""
        from pobo.protocol.signing import load_signing_key
        from pobo.transport.keyfiles import store_signing_key

        c, m = (load_signing_key(store_signing_key(role, home)) for role in ("curator", "modeler"))
        return cls(c, m, c.public_hex, frozenset([m.public_hex]))

    @classmethod
    def modeler_from_store(cls, home: Path | None = None) -> "Signing":
        """The modeler signing with its key-store key (made once), as `pobo modeler` does
        by default; any curator key (`pobo audit` checks it against the keys trusted)."""
        from pobo.protocol.signing import load_signing_key
        from pobo.transport.keyfiles import store_signing_key

        return cls(modeler=load_signing_key(store_signing_key("modeler", home)))

    @classmethod
    def throwaway(cls) -> "Signing":
        """Fresh keys for both sides, each expecting the other's."""
        c, m = Signer.generate(), Signer.generate()
        return cls(c, m, c.public_hex, frozenset([m.public_hex]))


def curator_settings(config: RunConfig, problem: Problem) -> CuratorSettings:
    """The curator's settings for `config`, with the scenario's defaults filled in."""
    pick = lambda value, default: default if value is None else value  # noqa: E731
    settings = CuratorSettings(
        epsilon=pick(config.epsilon, problem.epsilon), delta=pick(config.delta, problem.delta),
        r=pick(config.r, problem.r), T=pick(config.T, problem.T),
        non_private=bool(config.non_private), lift=config.lift,
        lift_epsilon=config.lift_epsilon, lift_delta=config.lift_delta,
        ldp_epsilon=config.ldp_epsilon,
        seed=config.seed, reward_bound=config.reward_bound, noise_bound=config.noise_bound,
        distinct=bool(config.distinct), additive_lift=config.authors_code,
        inputs_public=public_inputs(config.scenario) and bool(config.non_private),
        budget_given=budget_given(config), raise_budget=config.raise_budget,
        new_release=config.new_release)
    return replace(settings, budget=dataset_budget(config, settings, problem.X.shape))


def not_dp_reasons(settings: CuratorSettings, problem: Problem | None = None) -> list[str]:
    """Why a run carries no DP claim (empty when it does): result.json's `not_dp`."""
    prepared = problem.preparation if problem is not None else ""
    return [why for flag, why in (
        (bool(prepared) and not settings.non_private, DATA_DEPENDENT_NOT_DP + prepared),
        (settings.non_private, "non-private: X itself was sent"),
        (settings.lift == "paper" and not settings.non_private,
         "lift paper: the published branch on the exact sigma_min"),
        (settings.seed is not None, f"seeded randomness (seed {settings.seed}): the noise "
                                    "can be recomputed")) if flag]


DATA_DEPENDENT_NOT_DP = ("data-dependent preprocessing (the privacy unit itself depends on "
                         "X, so the stated epsilon covers no fixed neighbouring relation): ")


def dataset_budget(config: RunConfig, settings: CuratorSettings,
                   shape: tuple[int, int]) -> Budget:
    """The dataset's budget: what `config` gives, else the documented defaults.

    Central, by default: the projection's (eps, delta), its lift test's, and
    DEFAULT_RELEASE_ALLOWANCE (one release at the default (1, 1e-3), which Kusner's
    two-part releases charge twice) -- enough for one session and one release, over every
    session and restart of the journal. The non-private baseline (X itself) has no
    finite budget. Per row, by default: DEFAULT_ROW_REPORTS x T reports of eps_LDP (one
    session's worth of queries on one row, GP-UCB re-queries its best row). `inf` opts
    out (`--budget-eps inf`), with a warning at start (`startup_warnings`)."""
    n, d = shape
    releases = math.inf
    if config.budget_epsilon is not None:
        epsilon = config.budget_epsilon
        delta = config.budget_delta if config.budget_delta is not None else (
            0.1 / n if math.isfinite(epsilon) else 1.0)
    elif settings.non_private and not settings.inputs_public:
        epsilon, delta = math.inf, 1.0 if config.budget_delta is None else config.budget_delta
    else:  # the release (none for public inputs), its lift test, and one result release
        test_eps, test_delta = settings.test_budget(n, d)
        mine = (0.0, 0.0) if settings.non_private else (settings.epsilon, settings.delta)
        epsilon = mine[0] + test_eps + DEFAULT_RELEASE_ALLOWANCE[0]
        delta = (mine[1] + test_delta + DEFAULT_RELEASE_ALLOWANCE[1]
                 if config.budget_delta is None else config.budget_delta)
        releases = DEFAULT_RELEASES
    if config.budget_releases is not None:
        releases = config.budget_releases
    row = config.ldp_row_budget
    if row is None:
        row = (math.inf if config.ldp_epsilon is None
               else DEFAULT_ROW_REPORTS * settings.T * config.ldp_epsilon)
    row_delta = (min(ROW_DELTA, 0.1 / n) if config.ldp_row_delta is None
                 else config.ldp_row_delta)
    return Budget(epsilon, min(delta, 1.0), row, row_delta, releases)


def budget_given(config: RunConfig) -> tuple[str, ...]:
    """The limits of the budget (Budget's field names) that `config` sets itself, by a
    flag or a key, rather than the defaults that follow from the release and T."""
    pairs = (("epsilon", config.budget_epsilon), ("delta", config.budget_delta),
             ("row_epsilon", config.ldp_row_budget), ("row_delta", config.ldp_row_delta),
             ("releases", config.budget_releases))
    return tuple(name for name, value in pairs if value is not None)


def prepare_service(config: RunConfig, problem: Problem | None = None,
                    journal: Journal | None = None,
                    head_file: str | Path | None = None) -> CuratorService:
    """The long-lived curator of a scenario: its dataset built (unless given), its
    projection prepared once, its ledger in `journal` (memory if None) and its objective
    (the scenario's, or measured on demand as `config` says). A journal on disk keeps
    its ledger head in `head_file` (default: the journal's path + '.head')."""
    if problem is None:
        problem = build_problem(config.scenario, config.seed, **config.options)
    if journal is None and ledger_scope(config) == DATASET_SCOPE:
        journal = Journal(default_journal_path(problem), durability=config.durability)
    if head_file is None and journal is not None and journal.path != ":memory:":
        head_file = ledger_head_path(journal.path)
    return CuratorService(problem, curator_settings(config, problem), journal,
                          journal_config(config), objective_for(config),
                          max_batch=config.max_batch, head_file=head_file)


def ledger_scope(config: RunConfig) -> str:
    """Where the dataset's ledger lives: 'dataset' (a journal on disk, `--journal` or the
    default one under the pobo home: every restart on the same data spends from the same
    budget) or 'process' (memory: `--ephemeral-ledger`, or a run that makes no DP claim --
    seeded, `--lift paper`, the non-private baseline -- whose budget is nominal anyway)."""
    if config.journal:
        return DATASET_SCOPE
    if config.ephemeral_ledger or config.seed is not None or config.lift == "paper" \
            or (config.non_private and not public_inputs(config.scenario)):
        return PROCESS_SCOPE
    return DATASET_SCOPE


def default_journal_path(problem: Problem, home: Path | None = None) -> Path:
    """The embedded journal of a dataset, when the curator names none: keyed by the
    scenario, the SHA-256 of the prepared X and f (which the public domain prepared), and
    the domain's own declaration, in $POBO_LEDGERS, else <pobo home>/ledgers/ (made
    owner-only)."""
    folder = (Path(os.environ["POBO_LEDGERS"]) if home is None and os.environ.get("POBO_LEDGERS")
              else (home or pobo_home()) / "ledgers")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    domain = hashlib.sha256(repr(problem.domain).encode()).hexdigest()[:12]
    return folder / f"{problem.name}-{dataset_digest(problem)[:32]}-{domain}.sqlite"


def ledger_head_path(journal: str | Path) -> Path:
    """Where a journal's ledger head is kept by default: beside it, JOURNAL.head."""
    return Path(f"{journal}.head")


def objective_for(config: RunConfig) -> Objective | None:
    """The on-demand objective `config` asks for (a command, or values entered later),
    or None for the scenario's own (a tabulated f, or its script's evaluate)."""
    if config.objective_cmd is not None and config.objective_wait:
        raise ValueError("give --objective-cmd or --objective-wait, not both")
    if config.results_file is not None and not config.objective_wait:
        raise ValueError("--results-file needs --objective-wait")
    if config.objective_cmd is not None:
        return CommandObjective(config.objective_cmd, config.eval_timeout)
    if config.objective_wait:
        return DeferredObjective(None if config.results_file is None
                                 else Path(config.results_file))
    return None


def prepare_curator(config: RunConfig, problem: Problem | None = None) -> CuratorSession:
    """One new session on a fresh curator (its journal `config.journal`, else in memory):
    what a single run needs; it may keep `config.batch` queries outstanding."""
    warning = new_journal_warning(config)
    if warning is not None:
        CURATOR_LOG.warning("warning: %s", warning)
    journal = Journal(config.journal, durability=config.durability) if config.journal else None
    return prepare_service(config, problem, journal).new_session(batch=config.batch)


def new_journal_warning(config: RunConfig) -> str | None:
    """What to say when `config.journal` names no file yet (None: it does, or there is
    none): a mistyped path would otherwise start a fresh ledger, nothing spent, in
    silence."""
    if not config.journal or Path(config.journal).exists():
        return None
    return (f"no journal at {config.journal}: starting a new one (a new ledger: nothing "
            "spent, no sessions to resume)")


def release_request(config: RunConfig) -> ReleaseRequest | None:
    """The modeler's release request that `config` asks for, if any."""
    if config.release is None:
        return None
    return ReleaseRequest(config.release, config.release_epsilon, config.release_delta)


def journal_config(config: RunConfig) -> dict:
    """The curator's part of a run configuration, as JSON for the journal."""
    keep = ("scenario", "epsilon", "delta", "r", "T", "seed", "non_private", "timeout",
            "options", "ldp_epsilon", "budget_epsilon", "budget_delta", "ldp_row_budget", "ldp_row_delta",
            "lift", "lift_epsilon", "lift_delta", "reward_bound", "noise_bound",
            "objective_cmd", "objective_wait", "results_file", "max_batch", "authors_code")
    return {k: getattr(config, k) for k in keep}


def keep_previous_record(out: Path, role: str) -> None:
    """Before a new session in `out`: move the last session's <role>.json, and a run's
    result.json, beside its transcript's new name (<role>.json.N and result.json.N with
    <role>.transcript.N, which Transcript keeps), so that a second session does not
    overwrite the first one's records, and `pobo audit` of <role>.transcript.N reads
    the records made with it (pobo.auditing.records_beside). Either party may move
    result.json (each in its own process): whichever comes first."""
    transcript = out / f"{role}.transcript"
    if not transcript.exists():
        return
    n = 1
    while transcript.with_name(f"{transcript.name}.{n}").exists():
        n += 1
    for record in (out / f"{role}.json", out / "result.json"):
        try:
            record.rename(record.with_name(f"{record.name}.{n}"))
        except FileNotFoundError:
            pass  # none (the other party moved result.json already)


def open_channel(pipe, role: str, non_private: bool, out: Path | None,
                 timeout: float, resume: bool = False, *, signer: Signer | None = None,
                 peer_key: str | frozenset[str] | None = None) -> Channel:
    """A channel for `role` over `pipe`, transcribed to out/<role>.transcript (continuing
    that transcript's chain when `resume`), signing every frame with `signer` and
    accepting only a peer that signs with `peer_key` (a key, or a set of keys) if given."""
    policy = NON_PRIVATE if non_private else PRIVATE
    if out is not None and not resume:
        keep_previous_record(out, role)
    transcript = Transcript(out / f"{role}.transcript", resume) if out is not None else None
    keys = frozenset([peer_key]) if isinstance(peer_key, str) else peer_key
    return Channel(pipe, Boundary(policy, role), transcript, timeout=timeout, signer=signer,
                   peer_keys=keys)


async def curate(channel: Channel, session: CuratorSession, out: Path | None = None, *,
                 verbose: bool = True, peer: str = "in-process",
                 hello: Hello | None = None, raise_errors: bool = True,
                 keep: list | None = None) -> dict:
    """Serve one modeler session; return the curator's result, written to
    out/curator.json even when the session fails part-way (and appended to `keep`).

    Every answer is committed to the service's journal before its reward is sent, and a
    session restored from it (`session.restored`) continues where it stopped. A failed
    session raises unless `raise_errors` is False (its result then says why); a
    connection superseded by a resume writes nothing.
    """
    service, T, sid = session.service, session.params.T, session.session_id
    curator = session.curator()
    restored = session.restored
    released: list = [restored.release] if restored and restored.release else []

    def record_release(result) -> None:
        released.append(asdict(result))
        service.journal.record_release(sid, session.generation, released[-1])

    best: list[float] = []  # the best f so far (simulation): O(1) per answer line
    f = service.released_f if curator.tabulated else None  # indexed by released rows
    f_star = None if f is None else f_max(service.problem)  # once, not once per answer

    def progress(seq: int, index: int, value: float) -> None:
        if not verbose:
            return
        line = f"[curator] t={seq:>4}/{T} row={index:>7} y={value:+.5f}"
        if f is not None:
            best.append(max(best[-1], float(f[index])) if best else float(f[index]))
            line += f" simple_regret={f_star - best[-1]:.5f}"
        step(CURATOR_LOG, line, len(curator.answered), T)

    def evaluating(seq: int, index: int, waited: float) -> None:
        if not verbose:
            return
        line = (f"[curator] t={seq:>4}/{T} row={index:>7} (data row "
                f"{int(service.row_order[index])}) evaluating ({service.objective.name})")
        if service.objective.name == "deferred":
            line += (f": enter its value with `pobo answer --journal {service.journal.path} "
                     f"{sid} {seq} VALUE`")
        CURATOR_LOG.info(line)

    def ended(reason: str | None) -> str:
        """The session's status once the modeler ends it with `reason`: an End "done"
        finishes it; any other reason before the T-th answer (a modeler that gives up, a
        client closed early) leaves it interrupted, resumable."""
        return "ok" if reason == "done" or len(curator.answered) >= T else "interrupted"

    def record_status(status: str) -> None:
        """Record `status` in the journal (the current connection's only)."""
        if not session.current:  # a superseded connection writes nothing: the new one owns it
            return
        try:
            service.journal.set_status(sid, session.generation, status)
        except JournalFault as exc:  # the session stays open (resumable): nothing of
            CURATOR_LOG.warning("session %s: status %s not recorded: %s", sid[:12],
                                status, exc)  # its lost answers was ever sent

    started, status, reason, error = time.perf_counter(), "failed", None, None
    try:
        if hello is None:  # read here, so that the release handler sees what it declared
            hello = await receive_hello(channel)
        handler = release_handler(service.problem, session.release.Z, session.params.kernel,
                                  curator, session.ledger, session.source("release-noise"),
                                  record=record_release, hello=hello)
        reason = await serve_session(
            channel, curator, session.params, session.release, sid, on_answer=progress,
            on_release=handler, hello=hello, measure=session.measure, on_evaluate=evaluating,
            on_measured=session.measured, checkpoint=service.checkpoint,
            prove=service.consistency, dataset=session.service.dataset_body,
            asked={**{seq: row for seq, (row, _) in curator.answered.items()},
                   **curator.reserved},
            on_end=lambda why: record_status(ended(why)))  # before the End is answered
        status = ended(reason)
    except (PeerTimeout, PeerGone, asyncio.CancelledError) as exc:
        status, error = "interrupted", exc  # the peer vanished or the curator stops: resumable
        if raise_errors or isinstance(exc, asyncio.CancelledError):
            raise
    except Exception as exc:
        error = exc
        if raise_errors:
            raise
    finally:
        result = curator_result(session, curator, status, reason, time.perf_counter() - started)
        result["error"] = None if error is None else f"{type(error).__name__}: {error}"
        result["release"] = released[0] if released else None
        result["transcript_head"] = channel.transcript.anchor() if channel.transcript else None
        result["security"], result["peer"] = session.params.security, peer
        result["signatures"] = channel.signatures
        result["sign_keys"] = {CURATOR: channel.sign_key, MODELER: channel.peer_key or ""}
        if session.current:  # a superseded connection writes nothing: the new one owns it
            record_status(status)
            service.keep_head(sid)  # however it ended: no End comes from a vanished peer
            if out is not None:
                try:
                    write_json(out / "curator.json", result)
                except OSError as exc:  # a full disk: the journal holds the session's
                    CURATOR_LOG.error("session %s: its record %s could not be written: %s",
                                      sid[:12], out / "curator.json", exc)  # answers, status
        else:
            result["status"] = "superseded"
        if keep is not None:
            keep.append(result)
    return result


def curator_result(session: CuratorSession, curator, status: str, reason: str | None,
                   seconds: float) -> dict:
    """The curator's record of a session: parameters, answers and regret (from true f)."""
    service, params = session.service, session.params
    s, problem, T = service.settings, service.problem, params.T
    traces = curator.regret()  # None unless f is known for every row
    simple, cumulative = traces if traces is not None else (None, None)
    f = service.released_f if traces is not None else None  # in the queries' (released) order
    hits = f is not None and problem.metric == "hits"
    ldp = service.ldp
    return {
        "dp": bool(service.release.dp), "not_dp": not_dp_reasons(s, problem),
        "scenario": problem.name, "seed": s.seed, "randomness": params.randomness,
        "policy": params.policy, "session": session.session_id, "status": status,
        "end_reason": reason, "n": int(problem.X.shape[0]), "d": int(problem.X.shape[1]),
        "r": params.r, "epsilon": None if s.non_private else s.epsilon,
        "delta": None if s.non_private else s.delta, **service.report, "T": T,
        "ldp_epsilon": None if ldp is None else ldp.epsilon,
        "ldp_delta": None if ldp is None else ldp.delta,
        "ldp_scale": None if ldp is None else ldp.scale,
        "reward_bound": params.reward_bound, "noise_bound": params.noise_bound,
        "queries": curator.queries, "rewards": curator.rewards, "measured": curator.measured,
        # the data rows f was measured at (released row j is data row row_order[j]): the
        # curator's own record, never sent
        "data_rows": [int(service.row_order[q]) for q in curator.queries],
        "simple_regret": None if f is None else simple.tolist(),
        "cumulative_regret": None if f is None else cumulative.tolist(),
        "hits": distinct_hits(f, curator.queries) if hits else None,
        "sense": problem.sense, "metric": problem.metric,
        # over the queries made (an interrupted run made fewer than T)
        "random_hits_expected": float(len(curator.queries) * f.mean()) if hits else None,
        "random_regret_expected": (problem.once(("random_regret_expected", T),
                                                lambda: random_regret_expected(f, T))
                                   if f is not None and not hits else None),
        "f_star": None if f is None else f_max(problem),
        "sigma_f": None if f is None else problem.once("sigma_f", lambda: float(np.std(f))),
        **top_metrics(problem, f, curator.queries),
        **dict(zip(("sigma_y", "sigma_y_source"),
                   problem.once("regret_scale", lambda: regret_scale(problem))
                   if f is not None else (None, "f not tabulated"))),
        "objective": "tabulated" if service.objective is None else service.objective.name,
        "pending": sorted(curator.reserved), "batch": params.batch,
        "kernel": asdict(problem.kernel), "noise_var": problem.noise_var,
        "source": problem.source, "dropped": problem.dropped, "seconds": seconds,
        "dataset_digest": service.digest, "ledger": session.ledger_view(),
        "privacy_unit": service.privacy_unit(),
        "authors_code": AUTHORS_CODE_NOTE if s.additive_lift else None,
        "curator_private": list(CURATOR_PRIVATE),  # never to leave the curator (runspec)
    }


def top_metrics(problem: Problem, f: np.ndarray | None, queries: list[int]) -> dict:
    """Metrics that separate methods in every scenario: distinct rows queried among the
    top 1% of f ("top1_hits", against random selection's expectation over the queries
    made), the rank of the best row queried among all n ("best_rank", 1 = f*), and
    the final simple regret in units of std(f) over the rows ("simple_regret_sigma_f")."""
    if f is None:
        return {"top1_hits": None, "top1_rows": None, "random_top1_expected": None,
                "best_rank": None, "simple_regret_sigma_f": None}
    threshold = problem.once("top1", lambda: top_rows_threshold(f))
    rows = problem.once("top1_rows", lambda: int(np.count_nonzero(f >= threshold)))
    rank = best_rank(f, queries)
    sigma_f = problem.once("sigma_f", lambda: float(np.std(f))) or 1.0
    return {"top1_hits": top_hits(f, queries, threshold), "top1_rows": rows,
            "random_top1_expected": len(queries) * rows / f.size, "best_rank": rank,
            "simple_regret_sigma_f": None if rank is None else
            (f_max(problem) - float(f[np.asarray(queries, dtype=np.int64)].max())) / sigma_f}


def f_max(problem: Problem) -> float:
    """max f of a tabulated objective, once per Problem (regret is measured from it)."""
    return problem.once("f_max", lambda: float(np.max(problem.f)))


async def optimise(channel: Channel, seed: int | None, strategy: str = "gp-ucb",
                   out: Path | None = None, *, hyper: HyperFit = HyperFit(),
                   beta_scale: float | None = None, release: ReleaseRequest | None = None,
                   resume: ResumeState | None = None, verbose: bool = False,
                   batch: int = 1, keep: list | None = None, heads=None) -> dict:
    """Run the modeler's side of one session (asking for a DP `release` of the result at
    the end, if given); return what it saw and chose, written to out/modeler.json even
    when the session fails part-way (and appended to `keep`). `heads`: the
    parties.ledger_log.SeenHeads the curator's ledger heads are checked against and kept in."""
    started, status, fits, released = time.perf_counter(), "error", [], {}
    answers: dict[int, tuple[int, float]] = {}  # seq -> (row, reward): a batch answers out of order

    def progress(seq: int, index: int, value: float) -> None:
        answers[seq] = (index, value)
        if verbose:
            MODELER_LOG.info(f"[modeler] t={seq:>4} row={index:>7} y={value:+.5f}")

    shown: dict[int, float] = {}  # seq -> the wait last shown (a line a minute, not a poll)

    def pending(seq: int, index: int, waited: float) -> None:
        if verbose and (seq not in shown or waited - shown[seq] >= 60):
            shown[seq] = waited
            MODELER_LOG.info(f"[modeler] t={seq:>4} row={index:>7} pending for {waited:.0f} s")

    try:
        modeler = await run_modeler(channel, make_strategy(strategy, beta_scale),
                                    rng_for(seed, "modeler"),
                                    hyper=hyper, on_step=progress, release=release,
                                    resume=resume, batch=batch, on_pending=pending,
                                    heads=heads)
        released = {**(modeler.timing or {}),
                    "release": None if modeler.release is None else asdict(modeler.release),
                    "release_error": modeler.release_error,
                    "ledger_head": None if modeler.ledger_head is None
                    else asdict(modeler.ledger_head)}
        fits = [{"kernel": f.kernel.name, "lengthscales": list(f.kernel.lengthscales),
                 "signal_var": f.kernel.variance, "noise_var": f.noise_var,
                 "prior_mean": f.prior_mean, "log_likelihood": f.log_likelihood,
                 "declared_log_likelihood": f.declared_log_likelihood, "kept": f.kept,
                 "rebuilt": f.rebuilt,
                 "base_lengthscales": None if f.base is None else list(f.base.lengthscales),
                 "base_signal_var": None if f.base is None else f.base.variance,
                 "base_noise_var": f.base_noise_var}
                for f in modeler.fits]
        released["fit_seconds"] = modeler.fit_seconds
        status = "ok"
    finally:
        queries = [answers[seq][0] for seq in sorted(answers)]
        rewards = [answers[seq][1] for seq in sorted(answers)]
        best = int(np.argmax(rewards)) if rewards else None
        result = {"seed": seed, "strategy": strategy, "beta_scale": beta_scale,
                  "hyper": asdict(hyper), "fits": fits,
                  "status": status, "queries": queries, "rewards": rewards,
                  "batch": batch,
                  "best_index": None if best is None else queries[best],
                  "best_reward": None if best is None else rewards[best],
                  **released, "seconds": time.perf_counter() - started,
                  "transcript_head": channel.transcript.anchor() if channel.transcript else None,
                  "signatures": channel.signatures,
                  "sign_keys": {CURATOR: channel.peer_key or "", MODELER: channel.sign_key}}
        if out is not None:
            write_json(out / "modeler.json", result)
        if keep is not None:
            keep.append(result)
    return result


async def run_inproc(config: RunConfig, out: Path | str, *, verbose: bool = False,
                     modeler_verbose: bool = False,
                     problem: Problem | None = None, transcripts: bool = True,
                     signing: "Signing | None" = None, records: bool = True) -> dict:
    """Run curator and modeler in this process over an in-process pipe; write result.json.

    `problem` reuses an already built dataset (sweeps share one per seed); without
    `transcripts` the channels still encode, decode and police every message. Without
    `records` (a sweep) each party's own record (curator.json, modeler.json: both are in
    result.json) is written only when the run fails before result.json is.
    """
    from pobo.transport.inproc import pipe_pair  # scenarios choose the transport

    out = Path(out)
    session = prepare_curator(config, problem)
    if verbose:  # said once the dataset is built (a broken scenario is one error line)
        for line in startup_warnings(config, session.service.problem.X.shape[0], "run",
                                     session.service.problem.preparation):
            CURATOR_LOG.warning("warning: %s", line)
    cpipe, mpipe = pipe_pair()
    where = out if transcripts else None
    s = signing or Signing()
    cchan = open_channel(cpipe, CURATOR, config.non_private, where, config.timeout,
                         signer=s.curator, peer_key=s.modeler_keys)
    mchan = open_channel(mpipe, MODELER, config.non_private, where, config.timeout,
                         signer=s.modeler, peer_key=s.curator_key)
    own = out if records else None
    kept: dict[str, list] = {"curator.json": [], "modeler.json": []}
    tasks = [asyncio.ensure_future(curate(cchan, session, own, verbose=verbose,
                                          keep=kept["curator.json"])),
             asyncio.ensure_future(optimise(mchan, config.seed, config.strategy_spec, own,
                                            hyper=config.hyper, verbose=modeler_verbose,
                                            beta_scale=config.beta_scale,
                                            release=release_request(config),
                                            batch=config.batch, keep=kept["modeler.json"]))]
    try:
        cres, mres = await asyncio.gather(*tasks)
    finally:
        cchan.close()
        mchan.close()
        if not all(t.done() and not t.cancelled() and t.exception() is None for t in tasks) \
                and not records:  # a failed run: each party's record, as `pobo run` leaves
            for task in tasks:  # as asyncio.run would at its end: each keeps its record
                task.cancel()
            await asyncio.wait(tasks)
            for name, records_kept in kept.items():
                if records_kept:
                    write_json(out / name, records_kept[-1])
    return merge_results(cres, mres, out, transcripts=where is not None)
