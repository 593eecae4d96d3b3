"""The curator's side of a session: answers queries with noisy evaluations of f, within T
evaluations and the dataset's privacy budget."""
from __future__ import annotations

import bisect
import math
from collections.abc import Awaitable
from dataclasses import dataclass

import numpy as np

from pobo.parties.budget import DatasetLedger
from pobo.parties.journal import Journal, Superseded
from pobo.parties.ldp import POOL_SIZE, ConvertToLaplace, NoisePool
from pobo.parties.noise import NoiseSource
from pobo.parties.objective import EvaluationFailed
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import LOCAL, Entry
from pobo.protocol.policy import LDP_REWARD

NOISE_MODELS = ("gaussian", "uniform", "student-t")


@dataclass(frozen=True)
class Oracle:
    """Noisy measurement y = f(x_i) + eta of a tabulated objective f.

    eta ~ N(0, noise_var) ('gaussian'), U[-R, R] ('uniform', the LDP paper's bounded
    noise) or Student-t with 3 degrees of freedom ('student-t', its heavy-tailed case).
    """

    f: np.ndarray
    noise_var: float = 0.0
    noise: str = "gaussian"
    R: float = 0.0

    def __post_init__(self) -> None:
        if self.noise not in NOISE_MODELS:
            raise ValueError(f"unknown noise model {self.noise!r}; choose from {NOISE_MODELS}")

    def measure(self, index: int, rng: np.random.Generator) -> float:
        """One fresh noisy evaluation at row `index`: an evaluation of f."""
        return float(self.f[index] + self.eta(rng))

    def eta(self, rng: np.random.Generator) -> float:
        """One draw of the measurement noise alone (a replay advances it without
        evaluating f again)."""
        if self.noise == "uniform":
            return float(rng.uniform(-self.R, self.R))
        if self.noise == "student-t":
            return float(rng.standard_t(3))
        return math.sqrt(self.noise_var) * float(rng.standard_normal())


def regret_traces(f: np.ndarray, queried: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(simple, cumulative) regret per iteration of maximising f: r_t = max f - f(x_t)."""
    inst = float(np.max(f)) - np.asarray(f)[np.asarray(queried, dtype=np.int64)]
    return np.minimum.accumulate(inst), np.cumsum(inst)


class ReplayMismatch(ProtocolError):
    """A journaled answer this curator's randomness does not reproduce as it replays a
    session (another seed, or other LDP settings, than the curator that answered it):
    the session cannot be resumed by it. The text names the query and the values, which
    are the curator's: it stays in its log; the modeler is told `PUBLIC`."""

    PUBLIC = ("this curator cannot resume the session: its settings differ from those of "
              "the curator that answered it (its log says why); the session stays as it was")

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.INTERNAL)


class Curator:
    """Synchronous curator state for one session: the oracle, the evaluation budget T, and
    the record of answers, each committed to the dataset's journal with its ledger entry.

    With a tabulated `oracle` a query is measured and answered at once (`respond`). With
    `oracle=None` (an objective evaluated on demand, `n` rows) a query is first reserved
    (`start`: range, T and budget checked, ledger charged, journaled) and answered when
    its measured value comes (`complete`): the reservation survives a restart.
    """

    def __init__(self, oracle: Oracle | None, budget: int, rng: np.random.Generator,
                 ldp: ConvertToLaplace | None = None, source: NoiseSource | None = None,
                 ledger: DatasetLedger | None = None, n: int | None = None,
                 pool_size: int = POOL_SIZE) -> None:
        if oracle is None and n is None:
            raise ValueError("a curator without a tabulated objective needs n, its rows")
        self.oracle = oracle
        self._n = int(oracle.f.shape[0] if oracle is not None else n)
        self.ledger = ledger if ledger is not None else DatasetLedger(Journal())
        self.budget = int(budget)
        self.rng = rng
        self.ldp = ldp
        self.source = source if source is not None else NoiseSource()
        # LDP noise drawn ahead of the requests (refilled by `refill` after each reward)
        self.noise = None if ldp is None else NoisePool(ldp, self.source, pool_size)
        self.queries: list[int] = []
        self.measured: list[float] = []  # raw measurements: never sent when LDP is on
        self.rewards: list[float] = []  # what was released
        self.answered: dict[int, tuple[int, float]] = {}  # query seq -> (row, released value)
        self.reserved: dict[int, int] = {}  # seq -> row of evaluations not answered yet
        self.requested: dict[int, float] = {}  # seq -> when it was reserved (time.time())
        self._drawn: dict[int, tuple[float, float]] = {}  # seq -> (measured, released), uncommitted
        self._seqs: list[int] = []  # the answered seqs, sorted (the lists above follow them)

    def replay(self, seq: int, index: int, measured: float, value: float) -> None:
        """Re-enter an answer from the journal after a restart, without evaluating f. With
        seeded randomness the noises are drawn again (and must reproduce the record), so
        that the generators continue exactly where an uninterrupted run would be; the
        ledger entry is already in the journal, not charged again."""
        if self.source.mode == "seeded" and self.oracle is None:  # f itself is not drawn
            if self.ldp is not None and self.noise.privatise(measured) != value:
                raise ReplayMismatch(f"replaying query {seq}: the LDP noise does not "
                                     "reproduce the journal's value: not the same seed")
        elif self.source.mode == "seeded":
            again = float(self.oracle.f[index] + self.oracle.eta(self.rng))
            noisy = again if self.ldp is None else self.noise.privatise(again)
            if (again, noisy) != (measured, value):
                raise ReplayMismatch(f"replaying query {seq} drew ({again}, {noisy}), the "
                                     f"journal holds ({measured}, {value}): not the same "
                                     "seed or data")
        self._keep(seq, index, measured, value)

    def respond(self, seq: int, index: int) -> float:
        """The reward for query `seq`: a retry of an answered seq gets the recorded value
        (no new evaluation, no new noise, no new ledger entry)."""
        if seq in self.answered:
            row, value = self.answered[seq]
            if row != index:
                raise ProtocolError(f"query {seq} was for row {row}, not {index}",
                                    ErrorCode.SEQUENCE)
            return value
        return self.answer(seq, index)

    @property
    def n(self) -> int:
        """Number of candidate rows."""
        return self._n

    @property
    def tabulated(self) -> bool:
        """Whether f is known for every row (measured at once; regret is defined)."""
        return self.oracle is not None

    def start(self, seq: int, index: int) -> float | None:
        """Begin answering query `seq`: the recorded or (tabulated f) the new value at
        once, or None when its evaluation is now reserved, charged and pending (also
        for a retry of a query already pending). Refused, before anything is
        evaluated, like `answer`."""
        if seq in self.answered:
            return self.respond(seq, index)
        if self.oracle is not None:
            return self.answer(seq, index)
        if seq in self.reserved:
            if self.reserved[seq] != index:
                raise ProtocolError(f"query {seq} was for row {self.reserved[seq]}, not "
                                    f"{index}", ErrorCode.SEQUENCE)
            ledger = self.ledger
            if ledger.generation is not None and not ledger.journal.current(ledger.session,
                                                                            ledger.generation):
                raise Superseded(ledger.session)  # a newer connection owns the session
            return None
        entries = self._admit(index, len(self.reserved))
        self.requested[seq] = self.ledger.journal.reserve(
            self.ledger.session, self.ledger.generation, seq, int(index), entries,
            self.ledger.budget)
        self.reserved[seq] = int(index)
        return None

    def complete(self, seq: int, measured: float) -> float:
        """Answer the reserved query `seq` with the value measured for it: the released
        value (through the LDP mechanism, if any), committed before it is returned."""
        row = self.reserved[seq]
        if seq not in self._drawn:  # a retry after a failed commit keeps the first draw
            if not math.isfinite(measured):
                raise EvaluationFailed(f"the value measured for query {seq} is {measured}")
            self._drawn[seq] = (measured, measured if self.ldp is None
                                else self.noise.privatise(measured))
        measured, value = self._drawn[seq]
        self.ledger.journal.complete(self.ledger.session, self.ledger.generation, seq, row,
                                     float(measured), float(value))
        del self.reserved[seq], self._drawn[seq]
        self.requested.pop(seq, None)
        self._keep(seq, row, measured, value)
        return value

    def _admit(self, index: int, reserved: int = 0) -> list[Entry]:
        """The ledger entries of one more answer at row `index`, after refusing an
        out-of-range row, a spent T and a row past its LDP budget."""
        if not 0 <= index < self._n:
            raise ProtocolError(f"row index {index} out of range [0, {self._n})",
                                ErrorCode.INDEX_OUT_OF_RANGE)
        if len(self.queries) + reserved >= self.budget:
            raise ProtocolError(f"the budget of {self.budget} evaluations is spent",
                                ErrorCode.BUDGET_EXHAUSTED)
        if self.ldp is None:
            return []
        entries = [Entry(LDP_REWARD, self.ldp.epsilon, self.ldp.delta, LOCAL, int(index))]
        self.ledger.check(entries)  # a cheap early refusal; the journal checks again
        return entries

    def answer(self, seq: int, index: int) -> float:
        """Evaluate f at row `index` (plus noise) for query `seq` and commit the answer with
        its LDP ledger entry in one journal transaction, before it can be sent. Refused
        before anything is evaluated or drawn: an out-of-range row, a spent T, and a report
        that would take the row past the dataset's LDP row budget."""
        entries = self._admit(index)

        def evaluate() -> tuple[float, float]:
            measured = self.oracle.measure(index, self.rng)
            return measured, (measured if self.ldp is None
                              else self.noise.privatise(measured))

        measured, value = self.ledger.journal.record_answer(
            self.ledger.session, self.ledger.generation, seq, int(index), entries,
            self.ledger.budget, evaluate)
        self._keep(seq, index, measured, value)
        return value

    def committed(self) -> Awaitable[None]:
        """To await: returns once every answer and reservation made so far is committed
        to the journal (group commit: several sessions' answers share one COMMIT); raises
        JournalFault once a journal write has failed. (The journal's own coroutine: no
        layer per answer.)"""
        return self.ledger.journal.committed()

    def refill(self) -> None:
        """Draw the LDP noises used since the last call (after a reward is sent: off the
        answer path, so that no answer's latency depends on its noise)."""
        if self.noise is not None:
            self.noise.refill()

    def _keep(self, seq: int, index: int, measured: float, value: float) -> None:
        """Record an answer, keeping the lists in query order (batches answer out of it)."""
        at = bisect.bisect(self._seqs, seq)
        self._seqs.insert(at, seq)
        self.queries.insert(at, int(index))
        self.measured.insert(at, float(measured))
        self.rewards.insert(at, float(value))
        self.answered[seq] = (int(index), float(value))

    @property
    def noise_tag(self) -> str:
        """The mechanism name rewards carry ('' without LDP)."""
        return "" if self.ldp is None else LDP_REWARD

    def regret(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(simple, cumulative) regret so far, from the true f (simulation only); None
        when f is not tabulated for every row (it is then not known)."""
        if self.oracle is None:
            return None
        return regret_traces(self.oracle.f, np.asarray(self.queries, dtype=np.int64))
