"""The curator's side of a session: answers queries with noisy evaluations of f, within T
evaluations and the dataset's privacy budget."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parties.budget import DatasetLedger
from parties.journal import Journal
from parties.ldp import ConvertToLaplace
from parties.noise import NoiseSource
from protocol.errors import ErrorCode, ProtocolError
from protocol.ledger import LOCAL, Entry
from protocol.policy import LDP_REWARD

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
        return float(np.sqrt(self.noise_var) * rng.standard_normal())


def regret_traces(f: np.ndarray, queried: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(simple, cumulative) regret per iteration of maximising f: r_t = max f - f(x_t)."""
    inst = float(np.max(f)) - np.asarray(f)[np.asarray(queried, dtype=np.int64)]
    return np.minimum.accumulate(inst), np.cumsum(inst)


class Curator:
    """Synchronous curator state for one session: the oracle, the evaluation budget T, and
    the record of answers, each committed to the dataset's journal with its ledger entry."""

    def __init__(self, oracle: Oracle, budget: int, rng: np.random.Generator,
                 ldp: ConvertToLaplace | None = None, source: NoiseSource | None = None,
                 ledger: DatasetLedger | None = None) -> None:
        self.oracle = oracle
        self.ledger = ledger if ledger is not None else DatasetLedger(Journal())
        self.budget = int(budget)
        self.rng = rng
        self.ldp = ldp
        self.source = source if source is not None else NoiseSource()
        self.queries: list[int] = []
        self.measured: list[float] = []  # raw measurements: never sent when LDP is on
        self.rewards: list[float] = []  # what was released
        self.answered: dict[int, tuple[int, float]] = {}  # query seq -> (row, released value)

    def replay(self, seq: int, index: int, measured: float, value: float) -> None:
        """Re-enter an answer from the journal after a restart, without evaluating f. With
        seeded randomness the noises are drawn again (and must reproduce the record), so
        that the generators continue exactly where an uninterrupted run would be; the
        ledger entry is already in the journal, not charged again."""
        if self.source.mode == "seeded":
            again = float(self.oracle.f[index] + self.oracle.eta(self.rng))
            noisy = again if self.ldp is None else self.ldp.privatise(again, self.source)
            if (again, noisy) != (measured, value):
                raise ValueError(f"replaying query {seq} drew ({again}, {noisy}), the journal "
                                 f"holds ({measured}, {value}): not the same seed or data")
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
        return self.oracle.f.shape[0]

    def answer(self, seq: int, index: int) -> float:
        """Evaluate f at row `index` (plus noise) for query `seq` and commit the answer with
        its LDP ledger entry in one journal transaction, before it can be sent. Refused
        before anything is evaluated or drawn: an out-of-range row, a spent T, and a report
        that would take the row past the dataset's LDP row budget."""
        if not 0 <= index < self.n:
            raise ProtocolError(f"row index {index} out of range [0, {self.n})",
                                ErrorCode.INDEX_OUT_OF_RANGE)
        if len(self.queries) >= self.budget:
            raise ProtocolError(f"the budget of {self.budget} evaluations is spent",
                                ErrorCode.BUDGET_EXHAUSTED)
        entries = ([] if self.ldp is None else
                   [Entry(LDP_REWARD, self.ldp.epsilon, self.ldp.delta, LOCAL, int(index))])
        self.ledger.check(entries)  # a cheap early refusal; the journal checks again

        def evaluate() -> tuple[float, float]:
            measured = self.oracle.measure(index, self.rng)
            return measured, (measured if self.ldp is None
                              else self.ldp.privatise(measured, self.source))

        measured, value = self.ledger.journal.record_answer(
            self.ledger.session, self.ledger.generation, seq, int(index), entries,
            self.ledger.budget, evaluate)
        self._keep(seq, index, measured, value)
        return value

    def _keep(self, seq: int, index: int, measured: float, value: float) -> None:
        self.queries.append(int(index))
        self.measured.append(float(measured))
        self.rewards.append(float(value))
        self.answered[seq] = (int(index), float(value))

    @property
    def noise_tag(self) -> str:
        """The mechanism name rewards carry ('' without LDP)."""
        return "" if self.ldp is None else LDP_REWARD

    def regret(self) -> tuple[np.ndarray, np.ndarray]:
        """(simple, cumulative) regret so far, from the true f (simulation only)."""
        return regret_traces(self.oracle.f, np.asarray(self.queries, dtype=np.int64))
