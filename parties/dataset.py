"""The curator's private data: the dataset X, the objective f and its declared constants."""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from pobo.parties.domain import PublicDomain
from pobo.protocol.messages import KernelParams

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    """A curator's private dataset X (n x d) and its objective (always maximised).

    The objective is tabulated, `f` over every row (the papers' setting: measured at
    once, regret defined), or evaluated on demand by `evaluate(index) -> float` (f is
    then None: only the rows queried are ever measured, and no regret is reported);
    a curator may also measure on demand by a command or a value entered later
    (parties.objective), in which case neither is needed.

    A minimisation scenario stores f = -objective and says `sense = "minimise"`; its
    regret f* - f(x_t) is then the paper's regret objective(x_t) - min objective.
    `kernel` holds what the scenario declares public in the handshake; `noise_var` is
    the curator's true measurement noise. The other fields are the paper's default run
    parameters and where the data came from.
    """

    name: str
    X: np.ndarray
    f: np.ndarray | None
    kernel: KernelParams
    epsilon: float
    delta: float
    r: int
    T: int
    noise_var: float = 0.0
    noise: str = "gaussian"  # measurement noise: gaussian(noise_var), uniform[-R, R], student-t
    R: float = 0.0
    B: float | None = None  # declared public bound on |f| (needed for LDP rewards)
    sense: str = "maximise"
    metric: str = "simple_regret"
    source: str = "embedded"
    dropped: dict = field(default_factory=dict)
    release: dict = field(default_factory=dict)  # constants of Kusner et al.'s releases
    evaluate: Callable[[int], float] | None = None  # f on demand (a scenario script's)
    signal_std: float | None = None  # sigma_y for reporting regret (curator-private, never sent)
    signal_std_source: str = ""  # how signal_std was obtained
    domain: PublicDomain | None = None  # the public preprocessing (None: data-dependent)
    clipped: int = 0  # rows the public domain clipped (curator-private)
    preparation: str = ""  # how X was prepared, when not from `domain`
    row_unit: str = "one row"  # what a row is (a patient, a loan, a project)

    def __post_init__(self) -> None:
        if self.X.ndim != 2 or (self.f is not None and self.f.shape != (self.X.shape[0],)):
            raise ValueError(f"X {self.X.shape} and f {getattr(self.f, 'shape', None)} "
                             "do not match")
        if not (np.isfinite(self.X).all() and (self.f is None or np.isfinite(self.f).all())):
            raise ValueError(f"scenario {self.name}: X or f holds NaN or infinity")
        if self.evaluate is not None and not callable(self.evaluate):
            raise ValueError(f"scenario {self.name}: evaluate must be a function of the row")
        if self.sense not in ("maximise", "minimise"):
            raise ValueError(f"sense must be maximise or minimise, got {self.sense!r}")
        self._read_only()

    def _read_only(self) -> None:
        """Hold X and f as read-only views: what `once` remembers stays true of them (as
        long as nobody writes to the arrays given, which a Problem never does)."""
        for name in ("X", "f"):
            array = getattr(self, name)
            if array is not None and array.flags.writeable:
                view = array.view()
                view.flags.writeable = False
                object.__setattr__(self, name, view)

    def __getstate__(self) -> dict:
        """Pickled without what `once` remembers: a copy computes its own."""
        state = dict(self.__dict__)
        state.pop("_once", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._read_only()

    def once(self, key: Hashable, compute: Callable[[], T]) -> T:
        """`compute()`, computed once per Problem and `key`: for the figures that depend
        only on X and f (digest, max and std of f...), which every run of a sweep's seed
        would otherwise recompute on the one Problem they share. A Problem holds X and f
        as read-only views: nothing writes to them through it."""
        memo = self.__dict__.setdefault("_once", {})  # beside the frozen fields, not one
        if key not in memo:
            memo[key] = compute()
        return memo[key]


def regret_scale(problem: Problem) -> tuple[float, str]:
    """sigma_y, the unit the PO-GP-UCB paper reports regret in, and where it comes from:
    the scenario's own value (declared or the curator's ML fit), else the declared
    public kernel's signal std, else std(f) over the candidates (said so)."""
    if problem.signal_std is not None:
        return float(problem.signal_std), problem.signal_std_source or "scenario"
    if problem.kernel.status == "public" and problem.kernel.signal_var > 0:
        return float(np.sqrt(problem.kernel.signal_var)), "declared kernel"
    return float(np.std(problem.f)) or 1.0, "std(f)"


def dataset_digest(problem: Problem) -> str:
    """SHA-256 of the prepared X and f (shape, dtype and bytes; f empty when evaluated
    on demand): what a journal, a resumed session and an audit check the curator's data
    against."""
    return problem.once("digest", lambda: arrays_digest(
        problem.X, np.empty(0) if problem.f is None else problem.f))


def arrays_digest(X: np.ndarray, f: np.ndarray) -> str:
    """`dataset_digest` of the arrays X and f (what `pobo audit --data` checks a file by)."""
    h = hashlib.sha256()
    for a in (X, f):
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()
