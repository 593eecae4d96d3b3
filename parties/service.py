"""The long-lived curator: one prepared dataset, one projection, one ledger, many sessions.

A `CuratorService` is built once per curator process from the prepared dataset and its
settings. It binds its journal to the dataset's digest, prepares the projection for
its (epsilon, delta, r, lift) once -- or finds it in the journal, so a restarted curator
serves the same Z -- and charges it once to the dataset's ledger. A session is then
cheap: a random id, a journal row and a reference to the prepared release. Every
session's LDP reports and releases charge the same ledger, whose budget is the
dataset's (DESIGN.md, threat model: the dataset, not the session, owns the budget).
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import sqlite3
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from pobo.parties.choices import DEFAULT_LIFT, LIFT_MODES  # noqa: F401  (re-exported)
from pobo.parties.budget import DatasetLedger, ledger_scope_of, session_ledger
from pobo.parties.budget_history import fixed_budget
from pobo.parties.checkpoints import (
    HeadFile, LedgerBehind, check_head_kept, check_not_behind,
)
from pobo.parties.curator import Curator, Oracle
from pobo.parties.dataset import Problem, dataset_digest
from pobo.parties.journal import (
    Journal, JournalError, JournalFault, JournaledSession, Superseded,
)
from pobo.parties.ledger_log import LedgerLog
from pobo.parties.ldp import POOL_SIZE, ConvertToLaplace, subweibull_clip
from pobo.parties.noise import SECURE, SEEDED, NoiseSource, rng_for
from pobo.parties.objective import (
    EvaluationFailed, EvaluationRequest, FunctionObjective, Objective,
)
from pobo.parties.projection import (
    choose_projection, identity_release, lift_test_needed, release_mechanism, singular_values,
)
from pobo.parties.release import MAX_RELEASE_EPSILON, MIN_RELEASE_EPSILON
from pobo.parties.row_order import (
    DATA_ORDER, in_release_order, order_source, permute_rows, randomness_id, row_order,
)
from pobo.parties.statement import release_statement
from pobo.protocol.checkpoint import ledger_head
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ErrorCode, PoboError, ProtocolError
from pobo.protocol.ledger import Budget, Entry, PrivacyBudgetExceeded
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, LedgerHead, Mechanism, ProjectedDataset, SessionParams, Welcome,
)
from pobo.protocol.policy import DP_PROJECTION, LDP_REWARD, LIFT_TEST, MAX_BATCH, NON_PRIVATE, PRIVATE
from pobo.protocol.chunks import shared_dataset

log = logging.getLogger("pobo.curator")
MAX_FAILURES = 5  # failed evaluations of one query before it is evaluated no more
LDP_DELTA = 1e-6  # P(some of T Gaussian noises exceeds the clip): a utility figure, not privacy


@dataclass(frozen=True)
class CuratorSettings:
    """What the curator announces and enforces for its dataset.

    `r` is an int or "auto" (the largest r whose omega passes the lift test). `lift`:
    'paper' (Algorithm 1 as published: the sigma_min branch is not covered by the DP
    claim), 'always' (Blocki et al.) or 'private' (a noisy sigma_min test charging
    (lift_epsilon, lift_delta), default 0.1 epsilon and delta). `reward_bound` and
    `noise_bound` override the scenario's declared B and R. `additive_lift` (lift
    'paper' only): lift sigma + omega as the authors' code does, a reproduction switch.
    """

    epsilon: float
    delta: float
    r: int | str
    T: int
    non_private: bool = False
    lift: str = DEFAULT_LIFT
    lift_epsilon: float | None = None
    lift_delta: float | None = None
    ldp_epsilon: float | None = None
    budget: Budget = Budget()
    seed: int | None = None
    reward_bound: float | None = None
    noise_bound: float | None = None
    additive_lift: bool = False
    distinct: bool = False  # the scenario's rule, announced in the Welcome: no row twice
    inputs_public: bool = False  # X is public (no projection): a finite budget still holds
    budget_given: tuple[str, ...] = ()  # the limits of `budget` the operator set (not defaults)
    raise_budget: bool = False  # `budget` may exceed the one the journal holds (recorded)
    new_release: bool = False  # a release beside the one the journal holds may be drawn

    def __post_init__(self) -> None:
        if self.lift not in LIFT_MODES:
            raise ValueError(f"--lift must be one of {LIFT_MODES}, got {self.lift!r}")
        if self.additive_lift and self.lift != "paper":
            raise ValueError("--authors-code reproduces the authors' lift of Algorithm 1 as "
                             f"published: it needs --lift paper, not {self.lift}")
        if not (self.r == "auto" or (isinstance(self.r, (int, np.integer)) and self.r >= 1)):
            raise ValueError(f"r must be a positive integer or 'auto', got {self.r!r}")
        if not (isinstance(self.T, (int, np.integer)) and self.T >= 1):
            raise ValueError(f"T must be a positive integer, got {self.T!r}")
        for name in ("reward_bound", "noise_bound"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")

    def test_budget(self, n: int, d: int) -> tuple[float, float]:
        """The private lift test's (epsilon, delta) for an n x d dataset: (0, 0) unless
        lift = private and the test can matter (n - 1 <= d; n and d are public, and for
        n - 1 > d the unlifted release is never DP, so the lift needs no test)."""
        if self.non_private or not lift_test_needed(n, d, self.lift):
            return 0.0, 0.0
        return (0.1 * self.epsilon if self.lift_epsilon is None else float(self.lift_epsilon),
                self.delta if self.lift_delta is None else float(self.lift_delta))


def release_is_dp(settings: CuratorSettings, problem: Problem | None = None) -> bool:
    """Whether a release under `settings` can carry a DP claim: not the non-private
    baseline (X itself), not the paper's lift (it branches on the exact sigma_min), not
    seeded randomness (whoever knows the seed recomputes the noise), and not rows prepared
    from the data themselves (`problem.preparation`: the unit of the neighbouring relation
    then depends on X, so the stated epsilon covers no fixed relation). What the Dataset
    says as `dp`, result.json at its top and `pobo audit` as "not DP"."""
    return not (settings.non_private or settings.lift == "paper" or settings.seed is not None
                or (problem is not None and bool(problem.preparation)))


@dataclass(frozen=True)
class CuratorSession:
    """One modeler session of a service: its id, public parameters and journal record."""

    service: CuratorService
    session_id: str
    ordinal: int
    params: SessionParams
    release: ProjectedDataset
    owner: str
    generation: int = 1  # this connection's fencing token (a resume takes the next one)
    restored: JournaledSession | None = None

    @property
    def ledger(self) -> DatasetLedger:
        """The dataset's ledger, charging on behalf of this session's connection."""
        return self.service.ledger.for_session(self.session_id, self.generation)

    @property
    def current(self) -> bool:
        """Whether this connection still owns the session (no resume took it over)."""
        return self.service.journal.current(self.session_id, self.generation)

    def stream(self, name: str) -> np.random.Generator:
        """This session's simulation randomness for one use (OS entropy without a seed);
        the first session of a seeded curator keeps the run's own streams."""
        suffix = "" if self.ordinal == 0 else f"/{self.ordinal}"
        return rng_for(self.service.settings.seed, name + suffix)

    def source(self, name: str) -> NoiseSource:
        """This session's privacy noise: seeded in simulation, the OS CSPRNG without a seed."""
        seed = self.service.settings.seed
        return NoiseSource(None if seed is None else self.stream(name))

    def curator(self) -> Curator:
        """The synchronous curator of this session, with a restored session's answers
        and reserved evaluations re-entered from the journal."""
        problem = self.service.problem
        oracle = (None if self.service.objective is not None else  # f in released order
                  Oracle(self.service.released_f, problem.noise_var, problem.noise, problem.R))
        curator = Curator(oracle, self.params.T, self.stream("measurement-noise"),
                          self.service.ldp, self.source("ldp-noise"), self.ledger,
                          n=problem.X.shape[0],  # as many noises ahead as answers in a
                          pool_size=max(POOL_SIZE, self.params.batch))  # turn: its batch
        for seq, row, measured, value in (self.restored.answers if self.restored else ()):
            curator.replay(seq, row, measured, value)
        for seq, (row, requested) in (self.restored.pending if self.restored else {}).items():
            curator.reserved[seq], curator.requested[seq] = row, requested
        return curator

    async def measure(self, seq: int, index: int) -> float:
        """The on-demand objective's measured value for query `seq` at row `index`.

        One measurement per query at a time for the whole service: a connection that
        takes the session over waits for the measurement already running instead of
        starting another (and a cancelled connection does not stop it, except a wait
        for a value entered later, which loses nothing). A value entered with `pobo
        answer` is used whatever the objective. After MAX_FAILURES failed
        evaluations of one query (counted in the journal, over every connection and
        restart) it is not evaluated again: only a value entered can answer it. A
        superseded connection measures nothing."""
        service, key = self.service, (self.session_id, seq)
        if not self.current:
            raise Superseded(self.session_id)
        entered = service.journal.supplied(self.session_id, seq)
        if entered is not None:
            return entered
        task = service.measuring.get(key)
        if task is not None and task.done() and (task.cancelled() or task.exception()):
            task = None  # a failed measurement: counted, may run again
        if task is None:
            failures = service.journal.failures(self.session_id, seq)
            if failures >= MAX_FAILURES:
                raise EvaluationFailed(f"query {seq} failed {failures} times: it is not "
                                       "evaluated again; the curator may enter its value "
                                       "(pobo answer)", public=True)
            task = asyncio.ensure_future(service.objective.measure(  # at the DATA row
                EvaluationRequest(self.session_id, seq, int(service.row_order[index]),
                                  service.journal)))
            task.add_done_callback(lambda t: self._failed(seq, t))
            service.measuring[key] = task
        service.waiters[key] = service.waiters.get(key, 0) + 1
        try:
            return await asyncio.shield(task)
        finally:
            service.waiters[key] -= 1
            if not service.waiters[key]:
                del service.waiters[key]
                if not task.done() and service.objective.name == "deferred":
                    task.cancel()  # nobody waits: the value, when entered, stays in the journal
                    service.measuring.pop(key, None)

    def _failed(self, seq: int, task: asyncio.Task) -> None:
        """Count a measurement that failed (not one cancelled) in the journal."""
        if not task.cancelled() and task.exception() is not None:
            try:
                self.service.journal.record_failure(self.session_id, seq)
            except PoboError:
                pass  # the journal is failing: the service refuses new work anyway

    def measured(self, seq: int) -> None:
        """Forget the measurement of an answered query."""
        self.service.measuring.pop((self.session_id, seq), None)

    def ledger_view(self) -> dict:
        """The dataset's ledger, with this session's own part as its messages imply it."""
        data = self.service.ledger.for_session(self.session_id).to_dict()
        carried = [Entry(m.name, m.epsilon, m.delta) for m in self.params.mechanisms
                   if m.name != LDP_REWARD]
        own = self.service.journal.entries(self.session_id)
        data["session"] = {"id": self.session_id,
                           **session_ledger(carried, own, self.service.settings.budget)}
        return data


class CuratorService:
    """A curator serving one prepared dataset to any number of sessions.

    With a `head_file` (a path outside the journal) it keeps there the last ledger head
    it committed to in a Welcome or an End, and refuses (LedgerBehind) to start on a
    journal whose ledger does not hold that head (protocol.checkpoint)."""

    def __init__(self, problem: Problem, settings: CuratorSettings,
                 journal: Journal | None = None, config: dict | None = None,
                 objective: Objective | None = None, max_batch: int = 1,
                 head_file: str | Path | None = None) -> None:
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"--max-batch must lie in [1, {MAX_BATCH}], got {max_batch}")
        if objective is None and problem.f is None:
            if problem.evaluate is None:
                raise ValueError(f"scenario {problem.name} tabulates no objective: give "
                                 "--objective-cmd, --objective-wait or a script's evaluate")
            objective = FunctionObjective(problem.evaluate)
        self.objective = objective  # None: the tabulated f, measured at once
        self.measuring: dict[tuple[str, int], asyncio.Task] = {}  # (session, seq) -> running
        self.waiters: dict[tuple[str, int], int] = {}
        self.max_batch = int(max_batch)
        self.problem = problem
        self.settings = settings
        self.journal = journal if journal is not None else Journal()
        self.config = dict(config or {})
        self.digest = dataset_digest(problem)
        held = self.journal.bind("dataset", self.digest)
        if held != self.digest:
            raise JournalError(f"{self.journal.path} is the journal of another dataset "
                               f"(digest {held[:16]}..., this curator prepared "
                               f"{self.digest[:16]}...): each dataset keeps its own journal "
                               "(a dataset generated from the seed needs the same --seed; a "
                               "file, the same --data)")
        self.chain = LedgerLog(self.journal)  # the hash chain and the Merkle log
        self.head_file = None if head_file is None else HeadFile(Path(head_file), self.digest)
        self._committed = self.head_file.read() if self.head_file is not None else None
        if self.head_file is not None and self._committed is None:
            check_head_kept(self.journal, self.head_file.path)
        bad = self.journal.bad_entries(limit=1)  # first: the chain hashes numbers only
        if bad:
            raise JournalError(f"{bad[0]}; refusing to start on it")
        if self._committed is not None:  # before anything is charged: refused, not spent
            check_not_behind(self.chain, self._committed, self.head_file.path)
        self.journal.check_row_totals()
        uncharged = self.journal.uncharged_answers(limit=1)
        if uncharged:
            raise LedgerBehind(f"{uncharged[0]}; refusing to start on it")
        self.journal.sweep_projections()  # files of stores killed before their commit
        self.journal.sweep_answer_logs()  # logs of sessions killed as they finished
        budget, note = fixed_budget(self.journal, settings.budget, settings.budget_given,
                                    settings.raise_budget)
        if note is not None:
            log.warning("%s", note)
        self.settings = settings = replace(settings, budget=budget)
        self.ledger = DatasetLedger(self.journal, budget)
        self.ldp = ldp_mechanism(problem, settings)
        self.test_epsilon, self.test_delta = settings.test_budget(*problem.X.shape)
        self.projection_key, release, self.report, owned = self._prepare_projection()
        # released row j is data row row_order[j]: a secret order (parties/row_order.py);
        # the paper's Algorithm 1 (no DP claim) releases its rows in their own order
        self.order_source = order_source(settings.lift, settings.inputs_public, settings.seed)
        self.row_order = (np.arange(problem.X.shape[0]) if self.order_source == DATA_ORDER
                          else row_order(self.journal, problem.X.shape[0], self.order_source,
                                         NoiseSource(None if settings.seed is None
                                                     else rng_for(settings.seed, "row-order"))))
        self.release = self._in_release_order(release, owned)
        self.released_f = None if problem.f is None else problem.f[self.row_order]
        # the Dataset every session sends: encoded, hashed and kept once (memory under a
        # flood of Hellos is one copy, not one per session); a Z larger than one chunk is
        # sent in chunk frames that are views of the release's own array (protocol.chunks)
        self.dataset_body = shared_dataset(Dataset(self.release))
        self.params = self._session_params()
        # the release's statement, computed once (the chi^2 bound takes ~0.2 s a call)
        self.statement = (None if settings.non_private else release_statement(
            self.release, problem, settings.seed is not None, paper=settings.lift == "paper"))
        if not settings.non_private:  # `pobo ledger` shows what the release protects
            self.journal.set_meta("privacy_statement", json.dumps(self.privacy_unit()["dataset"]))

    @property
    def randomness(self) -> str:
        """'seeded' (simulation) or 'os-csprng' (deployment)."""
        return SECURE if self.settings.seed is None else SEEDED

    @property
    def randomness_id(self) -> str:
        """Which randomness drew a projection: 'os-csprng', or 'seeded:' + SHA-256 of the
        seed. Part of the projection's key, so that a deployed curator never serves a Z
        that a seeded run left in its journal (the seed would give M and G away)."""
        return randomness_id(self.settings.seed)

    def _in_release_order(self, release: ProjectedDataset, owned: bool) -> ProjectedDataset:
        """The prepared release with its rows in `row_order`, one Z in memory: an array this
        process owns (drawn now, or read from the journal's file) is permuted in place and
        an in-memory journal that keeps it is told (Z[order] beside it was a second Z, 1.6
        GB at n = 1e7: docs/performance.md); one it shares (an in-memory journal's, read
        back) is copied. The data's own order (DATA_ORDER) is served as it is."""
        if self.order_source == DATA_ORDER:
            return release
        Z = release.Z
        try:
            Z.flags.writeable = True  # (read-only since the release was built)
        except ValueError:  # a view of memory this process may not write: copied
            owned = False
        if not owned:
            return in_release_order(release, self.row_order)
        permute_rows(Z, self.row_order)
        Z.flags.writeable = False
        self.journal.hold_permuted(self.projection_key, Z, self.row_order)
        return release

    def _prepare_projection(self) -> tuple[str, ProjectedDataset, dict, bool]:
        """The projection for the settings, from the journal or drawn and charged once, and
        whether this process alone holds its Z (drawn now, or read from a file)."""
        s = self.settings
        key = json.dumps({"mechanism": "identity"} if s.non_private else
                         {"mechanism": DP_PROJECTION, "epsilon": s.epsilon, "delta": s.delta,
                          "r": s.r, "lift": s.lift, "test_epsilon": self.test_epsilon,
                          "test_delta": self.test_delta, "randomness": self.randomness_id,
                          # which sampler drew it: a journal's Z from before the exact
                          # lattice noise is never served under the exact statement
                          **({"noise": "lattice-rounded"} if s.lift == "gaussian" else {}),
                          **({"additive_lift": True} if s.additive_lift else {})},
                         sort_keys=True)
        stored = self.journal.projection(key)
        if stored is not None:
            release, report = stored
            return key, release, report, self.journal.path != ":memory:"
        self._check_single_release(key)
        if s.non_private:
            if math.isfinite(s.budget.epsilon) and not s.inputs_public:
                raise PrivacyBudgetExceeded("the non-private baseline releases X itself, which "
                                            "no finite budget covers: run it without a budget")
            release = identity_release(self.problem.X)
            report = {"sigma_min": float(singular_values(self.problem.X)[-1]), "omega": None,
                      "lifted": False, "lift": None}
            entries: list[Entry] = []
        else:
            entries = [Entry(release_mechanism(s.lift), s.epsilon, s.delta)]
            if self.test_epsilon:
                entries.append(Entry(LIFT_TEST, self.test_epsilon, self.test_delta))
            try:
                self.ledger.check(entries)  # refused before the projection draws anything
            except PrivacyBudgetExceeded as exc:
                return self._stored_meanwhile(key, exc)
            seed = s.seed
            release, rep = choose_projection(
                self.problem.X, s.epsilon, s.delta, s.r,
                NoiseSource(None if seed is None else rng_for(seed, "projection")),
                lift=s.lift, test_epsilon=s.lift_epsilon, test_delta=s.lift_delta,
                test_source=NoiseSource(None if seed is None else rng_for(seed, "lift-test")),
                r_fallback=self.problem.r, additive_lift=s.additive_lift)
            report = asdict(rep)
        release = replace(release, dp=release.dp and release_is_dp(s, self.problem))
        try:
            self.journal.store_projection(key, release, report, entries, s.budget)
        except (PrivacyBudgetExceeded, sqlite3.IntegrityError) as exc:
            return self._stored_meanwhile(key, exc)  # this draw: never released nor charged
        return key, release, report, True

    def _check_single_release(self, key: str) -> None:
        """Refuse (one line) to draw a release of a dataset whose journal holds another one
        of the same randomness, unless `--new-release` asks for it by name (it is then
        charged like the first): a restart with other flags (--eps, --r, --lift) would
        otherwise hand out a second, independent view of the same X."""
        if self.settings.new_release:
            return
        mine = json.loads(key).get("randomness")
        held = [k for k in self.journal.projection_keys()
                if json.loads(k).get("randomness") == mine and k != key]
        if held:
            was = json.loads(held[0])
            raise JournalError(
                f"the journal {self.journal.path} already holds a release of this dataset "
                f"({was.get('mechanism')} at eps {was.get('epsilon')}, delta {was.get('delta')}, "
                f"r {was.get('r')}, lift {was.get('lift')}), which a start with the same flags "
                "serves again; a second release needs --new-release (charged to the dataset's "
                "budget)")

    def _stored_meanwhile(self, key: str, refusal: Exception
                          ) -> tuple[str, ProjectedDataset, dict, bool]:
        """The projection another curator on this journal stored under `key` since this one
        looked (two starting at once: the second is refused its charge, or its row, and
        serves the first one's, charged once); else the refusal stands."""
        stored = self.journal.projection(key)
        if stored is None:
            raise refusal
        return key, *stored, self.journal.path != ":memory:"

    def _session_params(self) -> SessionParams:
        s, problem = self.settings, self.problem
        mechanisms: tuple[Mechanism, ...] = ()
        if not s.non_private:
            mechanisms = (Mechanism(self.release.mechanism, s.epsilon, s.delta),)
            if self.test_epsilon:
                mechanisms += (Mechanism(LIFT_TEST, self.test_epsilon, self.test_delta),)
        if self.ldp is not None:
            mechanisms += (Mechanism(LDP_REWARD, self.ldp.epsilon, self.ldp.delta),)
        n, r = self.release.Z.shape
        budget = s.budget.to_dict()
        return SessionParams(
            problem.name, n, r, s.T, (NON_PRIVATE if s.non_private else PRIVATE).name,
            mechanisms, problem.kernel, self.randomness,
            reward_bound=declared_bound(problem, s), noise_bound=noise_bound(problem, s,
                                                                             self.ldp),
            noise=problem.noise, budget_epsilon=budget["budget_epsilon"] or 0.0,
            budget_delta=s.budget.delta if budget["budget_epsilon"] else 0.0,
            distinct=bool(s.distinct), ledger_scope=ledger_scope_of(self.journal),
            row_budget_epsilon=budget["row_budget_epsilon"] or 0.0,
            row_budget_delta=s.budget.row_delta if budget["row_budget_epsilon"] else 0.0,
            budget_releases=-1 if budget["budget_releases"] is None
            else budget["budget_releases"])

    def new_session(self, security: str = "in-process", owner: str = "in-process",
                    batch: int = 1) -> CuratorSession:
        """Open a session for `owner` (its authenticated key, or 'plaintext'): O(1), it
        references the prepared release and the ledger. It may keep `batch` queries
        outstanding (what its Hello asked), at most the service's `max_batch`."""
        self._check_journal()
        sid = secrets.token_hex(16)  # 128 bits from the OS CSPRNG, never from a seed
        params = replace(self.params, security=security,
                         batch=max(1, min(int(batch), self.max_batch)))
        ordinal = self.journal.open_session(sid, self.config,
                                            encode(Welcome(PROTOCOL_VERSION, sid, params)),
                                            self.projection_key, self.digest, owner)
        return CuratorSession(self, sid, ordinal, params, self.release, owner)

    def resume(self, session_id: str, owner: str = "in-process") -> CuratorSession:
        """A journaled session of this dataset, continued by a new connection of the peer
        that opened it: refused (typed) for another key, an unknown or a finished
        session; the new connection's generation fences every older one."""
        self._check_journal()
        generation = self.journal.claim(session_id, owner)
        saved = self.journal.load(session_id)
        if saved.f_digest != self.digest:
            raise ProtocolError("the journaled session is of another dataset", ErrorCode.INTERNAL)
        theirs, s = saved.config, self.settings  # (the journal's record of its curator)
        if order_source(theirs.get("lift", s.lift), s.inputs_public,
                        theirs["seed"] if "seed" in theirs else s.seed) != self.order_source:
            raise ProtocolError(  # its released indices name other data rows here
                "the journaled session's release was served in another row order (its "
                "curator's --lift or seed): resume it with the settings that started it",
                ErrorCode.INTERNAL)
        stored = ((self.release, self.report) if saved.projection == self.projection_key
                  else self.journal.projection(saved.projection))  # (this one: read once)
        if stored is None:
            raise ProtocolError("the journal lost the session's projection", ErrorCode.INTERNAL)
        welcome = decode(saved.welcome)
        release = (stored[0] if saved.projection == self.projection_key
                   else in_release_order(stored[0], self.row_order))
        return CuratorSession(self, session_id, saved.ordinal, welcome.params,
                              release, owner, generation, saved)

    def checkpoint(self) -> LedgerHead:
        """The dataset ledger's head now, for a Welcome or an End: kept in the head file
        (when there is one) before it is returned, so no frame commits to a head the
        file does not hold or extend. It commits to what is durable only: a group of
        answers staged in this loop turn is committed first (JournalFault if it fails)."""
        self.journal.flush()
        with self.journal.snapshot():  # count, chain and totals of the same entries
            entries, chain = self.chain.current()
            head = ledger_head(entries, chain, self.journal.basic_totals(),  # no accountant
                               self.chain.root(entries), self.chain.log)
        if self.head_file is not None and (self._committed is None
                                           or head.entries > self._committed.entries):
            self.head_file.write(head)
            self.journal.note_head_file(self.head_file.path)  # where its heads are kept now
            self._committed = head
        return head

    def consistency(self, seen_log: str, seen: int, head: LedgerHead) -> tuple[str, ...]:
        """The RFC 9162 consistency proof from the head of `seen` entries of log
        `seen_log` (a Hello's) to `head` (a checkpoint's): empty when that is another log,
        no earlier head or one this ledger does not reach (a journal rolled back past it:
        logged, the modeler refuses)."""
        if seen_log != head.log or not 0 < seen < head.entries:
            if seen_log == head.log and seen > head.entries:
                log.warning("a modeler has seen a ledger head of %d entries, this journal's "
                            "ledger holds %d: it was rolled back", seen, head.entries)
            return ()
        return self.chain.consistency(seen, head.entries)

    def keep_head(self, session_id: str) -> None:
        """`checkpoint` as a session ends, however it ends (a modeler that vanished sends
        no End, and its session's charges were committed to by no head): the entries it
        charged can then never be taken out of the journal unseen, since the next start
        is LedgerBehind. A failure is logged, never raised over the session's outcome.
        Without a head file (a journal in memory: a sweep's run) there is nothing to keep."""
        if self.head_file is None:
            return
        try:
            self.checkpoint()
        except Exception as exc:  # the session's own result says what happened to it
            log.warning("session %s: the ledger head could not be kept at its end: %s: %s",
                        session_id[:12], type(exc).__name__, exc)

    def _check_journal(self) -> None:
        """Refuse new work once a journal write has failed (disk full, I/O error)."""
        if self.journal.fault is not None:
            raise JournalFault(self.journal.fault)

    def privacy_unit(self) -> dict:
        """What each mechanism protects, and what no mechanism covers (DESIGN.md)."""
        unit = privacy_unit(self.settings, self.ldp, self.test_epsilon, self.test_delta,
                            self.problem)
        if self.statement is not None:
            statement = json.loads(json.dumps(self.statement))  # the caller's own copy
            unit["dataset"].update(statement, epsilon=self.settings.epsilon + self.test_epsilon,
                                   delta=self.settings.delta + self.test_delta)
            if self.test_epsilon and statement["dp"]:  # the claim is the whole release's
                unit["dataset"]["claim"] = (
                    f"({self.settings.epsilon + self.test_epsilon:.4g}, "
                    f"{self.settings.delta + self.test_delta:.3g})-DP for "
                    f"{self.problem.row_unit} moved by at most 1 preprocessed unit: the "
                    f"projection ({self.settings.epsilon:.4g}, {self.settings.delta:.3g}) and "
                    f"the private lift test ({self.test_epsilon:.4g}, {self.test_delta:.3g}), "
                    "composed; the figures by distance are the projection's alone (the test "
                    "is not analysed past a move of 1)")
            unit["epsilon_whole_row"] = statement["epsilon_whole_row"]
            unit["epsilon_by_distance"] = statement["epsilon_by_distance"]
        if self.objective is not None:
            unit["not_covered"].append(
                f"f is measured on demand ({self.objective.name}): how long an evaluation "
                "takes, and whether it fails, is seen by the modeler (when its Reward or a "
                "typed evaluation_failed comes); the failure's cause is not sent")
        return unit


def declared_bound(problem: Problem, s: CuratorSettings) -> float:
    """B, the public bound on |f|: the settings' --reward-bound, else the scenario's
    declared constant (never computed from f); 0 when none is declared."""
    if s.reward_bound is not None:
        return float(s.reward_bound)
    return float(problem.B or 0.0)


def noise_bound(problem: Problem, s: CuratorSettings, ldp: ConvertToLaplace | None) -> float:
    """R, the public bound on the measurement noise (the CTL clip with LDP)."""
    if ldp is not None:
        return ldp.R
    return float(problem.R if s.noise_bound is None else s.noise_bound)


def ldp_mechanism(problem: Problem, s: CuratorSettings) -> ConvertToLaplace | None:
    """CTL(epsilon) for the dataset: the declared B, and R = the declared noise bound, or
    for Gaussian noise the sub-Gaussian clip K ln(T/delta)^1/2, K = sqrt(2 noise_var),
    at delta = LDP_DELTA (Zhou & Tan sec. 4.5).

    Every reward is pure eps-LDP, with no delta, whatever the noise: pobo clips the
    measured value to [-(B + R), B + R] before the Laplace noise of scale 2(B + R)/eps,
    so any two values of the reward are within the sensitivity the noise covers. Zhou &
    Tan's delta is the chance that the noise exceeds R when nothing clips; here it is
    only the chance that the clip biases a reward (a utility matter), so the ledger
    charges no delta for it."""
    if s.ldp_epsilon is None:
        return None
    B = declared_bound(problem, s)
    if s.reward_bound is None and problem.B is None:
        raise ValueError(f"scenario {problem.name} declares no bound B on |f|: give "
                         "--reward-bound for LDP rewards")
    if s.noise_bound is not None:
        return ConvertToLaplace(s.ldp_epsilon, B, float(s.noise_bound))
    if problem.noise == "gaussian" and problem.noise_var > 0:
        R = subweibull_clip(math.sqrt(2 * problem.noise_var), 0.5, s.T, LDP_DELTA)
        return ConvertToLaplace(s.ldp_epsilon, B, R)
    if problem.noise == "student-t":
        raise ValueError("Student-t noise has no sub-Weibull clip: run it without --ldp-eps, "
                         "or declare --noise-bound")
    return ConvertToLaplace(s.ldp_epsilon, B, problem.R)


NOT_COVERED = (
    "the number of rows n and the dimension d are public",
    "the objective's declared bounds B and R are public constants, not computed from f",
    "the ledger's rollback protection: a curator refuses a journal behind the ledger head "
    "it keeps outside it, and every Welcome and End carries a signed head; an operator who "
    "restores or deletes both the journal and the head file can spend a row's budget again, "
    "which only an audit of the modelers' transcripts (a fork) then shows",
)
FLOAT_GAP = ("the sketch's Gaussian noise and map are drawn as floating-point normals "
             "(Box-Muller on 53-bit CSPRNG uniforms, |g| <= 8.5717): the floating-point "
             "attack on textbook samplers (Mironov 2012) is not closed for it, as it is for "
             "the Laplace noise and the Gaussian rows' exact lattice noise")


def privacy_unit(s: CuratorSettings, ldp: ConvertToLaplace | None, test_epsilon: float,
                 test_delta: float, problem: Problem | None = None) -> dict:
    """Per mechanism: its (eps, delta), neighbouring relation and what it does not cover."""
    unit: dict = {"not_covered": list(NOT_COVERED)}
    if problem is not None and problem.domain is None:
        unit["not_covered"].append(
            "data-dependent preprocessing: " + (problem.preparation or "the scenario's rows "
            "as given, with no public domain declared") + "; the neighbouring relation is "
            "defined on the preprocessed rows, whose units then depend on the data")
    elif problem is not None:
        unit["not_covered"].append(
            "the kernel length-scales the modeler fits on Z and the rewards are its own; the "
            "curator's preprocessing uses only the declared public domain")
    if s.seed is not None:
        unit["not_covered"].append("seeded randomness: a simulation, no DP claim at all")
    if ldp is None:
        unit["not_covered"].append("rewards: without --ldp-eps each reward is f at the row "
                                   "(plus measurement noise) and no mechanism protects it")
    if s.non_private:
        unit["dataset"] = {"mechanism": "identity", "claim": "none: X itself crosses "
                           "(the explicitly non-private baseline)"}
    else:
        lifted = ("Z = r^-1/2 (X_c M + omega G): the released columns have covariance "
                  "X_c X_c^T + omega^2 I, (eps, delta)-DP for every dataset by Blocki et al. "
                  "Thm 3.1 after a rotation (parties/projection.py)")
        branch = {
            "gaussian": "the Gaussian mechanism on the rows, calibrated exactly (analytic "
                        "Gaussian, Balle & Wang 2018) and drawn exactly on a lattice (the "
                        "rows rounded to it, the Gaussian rounded to it: a post-processing "
                        "of the continuous mechanism, the move enlarged by gamma sqrt(d)), "
                        "centred, then a random orthonormal map into r >= d dimensions (a "
                        "JL map when r < d): post-processing",
            "jl": "Z = r^-1/2 (X_c M + omega G), omega calibrated by the chi^2-mixture bound "
                  "on the exact Gaussian profile (parties/gaussian.py)",
            "paper": "Algorithm 1 as published: NOT covered by any DP claim -- for n - 1 > d "
                     "neither branch is DP (every column of Z lies in the column space of "
                     "X_c; an adversary knowing the other rows reconstructs the last one), "
                     "and the sigma_min branch is decided on the exact sigma_min" + (" (lifted as the authors' code does, sigma + omega: "
                                                   "--authors-code)" if s.additive_lift else ""),
            "always": f"always lifted: {lifted}",
            "private": (f"lifted ({lifted}) unless a noisy sigma_(n-1) test charged "
                        f"({test_epsilon:g}, {test_delta:g}) passes; the whole release is "
                        f"({s.epsilon + test_epsilon:g}, {s.delta + test_delta:g})-DP" if
                        test_epsilon else
                        f"n - 1 > d, so the unlifted release is never DP and no test is run: "
                        f"always lifted: {lifted}")}[s.lift]
        if s.lift == "jl":
            unit["not_covered"].append(FLOAT_GAP)
        unit["dataset"] = {
            "mechanism": "PO-GP-UCB Algorithm 1 (random projection)",
            "epsilon": s.epsilon + test_epsilon, "delta": s.delta + test_delta,
            "dp": s.lift != "paper" and not (problem is not None and problem.preparation),
            "neighbouring": "one row of the preprocessed X changed by at most 1 in l2 norm "
                            "(rows within radius 25); n and d public; epsilon_by_distance "
                            "gives larger moves",
            "lift": s.lift, "branch": branch, "r_auto": s.r == "auto"}
    if ldp is not None:
        unit["rewards"] = {
            "mechanism": "CTL Laplace (Zhou & Tan)", "epsilon": ldp.epsilon,
            "delta": ldp.delta,
            "neighbouring": f"any two values of one individual's reward in [-{ldp.bound:g}, "
                            f"{ldp.bound:g}] (clipped to B + R)",
            "pure": "pure eps-LDP, no delta: the clip to B + R, not the noise, bounds the "
                    "sensitivity (a sub-Gaussian clip's delta only bounds how often it "
                    "biases a reward)",
            "composition": "reports on the same row compose across every session: the row "
                           "budget is enforced on dp-accounting's PLD accountant at the row "
                           f"delta ({s.budget.row_delta:g}), the basic sum beside it"}
    unit["releases"] = {
        "mechanism": "Kusner et al. Algorithms 1-3",
        "neighbouring": "datasets differing in one record, with similarity k(D, D') >= 0.9 "
                        "(Algorithms 1-2) or one validation record (Algorithm 3)",
        "once": "one release per session, for ever: a resume or a restart grants no other",
        "charged": "before anything is computed from the data; a request whose noise could "
                   f"not be a number (epsilon outside [{MIN_RELEASE_EPSILON:g}, "
                   f"{MAX_RELEASE_EPSILON:g}], or Algorithm 1's C1 or q not finite) is refused "
                   "first, uncharged, from public values only; a computation that fails "
                   "after its charge keeps it and says nothing of why",
        "assumptions": [
            "Algorithms 1-2 are conditional claims: their delta holds with probability "
            "over the GP prior (f drawn from the GP with the declared kernel, Kusner et al. "
            "Assumption 1), not for every f",
            "the similarity k(D, D') = 0.9 of neighbouring datasets is an assumption of the "
            "multi-task kernel, not a property pobo checks on the data",
            "the kernel must have k(x, x) = 1: the curator checks it on every row and "
            "refuses a release otherwise",
            "Algorithm 1's row is drawn by the exponential mechanism exactly (integer "
            "arithmetic); Algorithm 3 is pure eps-DP for its Lipschitz constants"]}
    return unit
