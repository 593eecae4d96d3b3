"""The privacy ledger: every mechanism that touched the curator's data, and its budget.

Central mechanisms (the projection of PO-GP-UCB Algorithm 1, its private lift test, the
releases of Kusner et al.) protect the whole dataset and compose; a budget caps their
total and a charge that would exceed it is refused before any noise is drawn. Local-DP
rewards (CTL of Zhou & Tan) each protect the one individual behind the queried row, so
they are kept apart: per row, reports compose across every session, a row budget caps
that, and the guarantee of the dataset is that of its worst-off row. Composition is
dp-accounting's PLD accountant (protocol.accounting) with basic composition (the plain
sums) beside it; the budget is enforced on the tighter of the two. Running sums make a
charge O(1) while the basic sums fit; past them the accountant runs (memoised).

`Ledger` is the in-memory form the audit recomputes from messages; the curator's
ledger lives in its journal (parties.budget.DatasetLedger) and uses the same
`Budget` rule and the same dictionary layout (`ledger_dict`).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from pobo.protocol.accounting import (
    ExactSum, Part, basic, composed_epsilon, part_of, parts_counter, worst_row,
)
from pobo.protocol.errors import ErrorCode, ProtocolError

CENTRAL, LOCAL = "central", "local"
# where a curator's ledger lives: the dataset's journal on disk, or this process's memory
DATASET_SCOPE, PROCESS_SCOPE = "dataset", "process"
PROCESS_ONLY = "budget covers this process only"  # what every record of such a ledger says
_TOL = 1e-12  # relative slack for floating-point sums against a budget
ROW_DELTA = 1e-6  # the delta at which a row's composed LDP epsilon is stated by default


class PrivacyBudgetExceeded(ProtocolError):
    """A mechanism that would take the central (epsilon, delta), or one row's local
    epsilon, past the budget."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.PRIVACY_BUDGET)


@dataclass(frozen=True)
class Entry:
    """One use of a mechanism: central, or local for the individual in row `row`."""

    mechanism: str
    epsilon: float
    delta: float
    scope: str = CENTRAL
    row: int = -1


@dataclass(frozen=True)
class Budget:
    """The dataset's budget: central (epsilon, delta), and the local (row_epsilon,
    row_delta) any one row may accumulate over all its LDP reports.

    A charge fits when basic composition (the plain sums) fits, or else when the PLD
    accountant (protocol.accounting) certifies the composition within epsilon at the
    budget's delta: both are valid bounds, so the tighter one is enforced. Pure-eps
    reports charge no delta; a row's composed epsilon is stated at `row_delta`
    (ROW_DELTA by default; 0 keeps the row budget a pure-eps one, i.e. the basic sum)."""

    epsilon: float = math.inf
    delta: float = 1.0
    row_epsilon: float = math.inf
    row_delta: float = ROW_DELTA
    releases: float = math.inf  # how many results may ever be released (Kusner et al.)

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and 0 < self.delta <= 1 and self.row_epsilon > 0
                and 0 <= self.row_delta < 1 and self.releases >= 0
                and (math.isinf(self.releases) or float(self.releases).is_integer())):
            raise ValueError("a budget needs epsilon > 0, 0 < delta <= 1, a row budget > 0, "
                             "0 <= row delta < 1 and a whole number of releases >= 0")

    def within(self, other: Budget) -> bool:
        """Whether this budget allows nothing that `other` does not (every limit <=)."""
        return all(a <= b for a, b in zip(self.limits(), other.limits()))

    def limits(self) -> tuple[float, float, float, float, float]:
        """(epsilon, delta, row_epsilon, row_delta, releases): what a budget caps."""
        return self.epsilon, self.delta, self.row_epsilon, self.row_delta, self.releases

    def refusal(self, entry: Entry, spent: tuple[float, float],
                parts: Callable[[], Mapping[Part, int]] | None = None) -> str | None:
        """Why `entry` may not be charged on top of `spent` ((eps, delta) so far by basic
        composition, central or that row's), or None when it fits. `parts` (called only
        when the basic sums do not fit) gives the composition so far for the accountant."""
        eps, dlt = spent
        central = entry.scope == CENTRAL
        cap, cap_delta = ((self.epsilon, self.delta) if central
                          else (self.row_epsilon, self.row_delta))
        # a row's basic line caps eps alone, as the row budget always has (its reports'
        # deltas, 0 for pure-eps ones, are reported beside it)
        if (eps + entry.epsilon <= cap * (1 + _TOL)
                and (not central or dlt + entry.delta <= cap_delta * (1 + _TOL))):
            return None
        composed = math.inf
        if parts is not None and math.isfinite(cap):
            after = Counter(parts())
            after[part_of(entry.mechanism, entry.epsilon, entry.delta)] += 1
            composed = composed_epsilon(after, self.target_delta(entry.scope, basic(after)[1]))
            if composed <= cap * (1 + _TOL):
                return None
        acct = "" if not math.isfinite(composed) else f"; accountant {composed:.6g}"
        if central:
            return (f"{entry.mechanism} (eps={entry.epsilon:g}, delta={entry.delta:g}) would "
                    f"take the dataset's spent ({eps:g}, {dlt:g}) past its budget "
                    f"({self.epsilon:g}, {self.delta:g}) (basic sum {eps + entry.epsilon:.6g}"
                    f"{acct})")
        return (f"{entry.mechanism} on row {entry.row} (eps={entry.epsilon:g}) would take "
                f"that individual's spent eps {eps:g} past the row budget {self.row_epsilon:g}"
                f" at delta {self.row_delta:g} (basic sum {eps + entry.epsilon:.6g}{acct})")

    def target_delta(self, scope: str, basic_delta: float) -> float:
        """The delta at which a composed epsilon is stated: the budget's (central: the
        summed deltas when no central delta is set)."""
        if scope == CENTRAL:
            return self.delta if self.delta < 1 else basic_delta
        return max(self.row_delta, basic_delta)

    def to_dict(self) -> dict:
        """JSON-ready (None for no limit)."""
        return {"budget_epsilon": None if math.isinf(self.epsilon) else self.epsilon,
                "budget_delta": self.delta,
                "row_budget_epsilon": None if math.isinf(self.row_epsilon) else self.row_epsilon,
                "row_budget_delta": self.row_delta,
                "budget_releases": None if math.isinf(self.releases) else int(self.releases)}

    @classmethod
    def from_dict(cls, limits: dict) -> Budget:
        """The inverse of `to_dict` (older journals lack the row delta and the releases)."""
        releases = limits.get("budget_releases")
        return cls(limits.get("budget_epsilon") or math.inf, limits.get("budget_delta", 1.0),
                   limits.get("row_budget_epsilon") or math.inf,
                   limits.get("row_budget_delta", ROW_DELTA),
                   math.inf if releases is None else releases)


class Ledger:
    """Entries and running totals in memory (a charge is O(1) while the basic sums fit
    the budget); `charge` refuses what the budget does not allow."""

    def __init__(self, budget: Budget = Budget()) -> None:
        self.budget = budget
        self.entries: list[Entry] = []
        self._central = (ExactSum(), ExactSum())
        self._central_parts: Counter = Counter()
        self._rows: dict[int, list] = {}  # row -> [sum eps, sum delta (ExactSum), reports]
        self._row_parts: dict[int, Counter] = defaultdict(Counter)

    def charge(self, entry: Entry) -> None:
        """Record an entry; one past the budget raises PrivacyBudgetExceeded."""
        if not (math.isfinite(entry.epsilon) and math.isfinite(entry.delta)):
            raise ValueError(f"a ledger entry needs a finite (epsilon, delta), got "
                             f"({entry.epsilon}, {entry.delta})")
        central = entry.scope == CENTRAL
        spent = self.central() if central else self.row(entry.row)
        parts = self._central_parts if central else self._row_parts[entry.row]
        why = self.budget.refusal(entry, spent, lambda: parts)
        if why is not None:
            raise PrivacyBudgetExceeded(why)
        self.entries.append(entry)
        parts[part_of(entry.mechanism, entry.epsilon, entry.delta)] += 1
        if central:
            self._central[0].add(entry.epsilon)
            self._central[1].add(entry.delta)
        else:
            acc = self._rows.get(entry.row)
            if acc is None:
                acc = self._rows[entry.row] = [ExactSum(), ExactSum(), 0]
            acc[0].add(entry.epsilon)
            acc[1].add(entry.delta)
            acc[2] += 1

    def central(self) -> tuple[float, float]:
        """(sum eps, sum delta) of the central entries: basic composition, exactly summed."""
        return float(self._central[0]), float(self._central[1])

    def row(self, row: int) -> tuple[float, float]:
        """(sum eps, sum delta) of the local reports on one row, exactly summed."""
        acc = self._rows.get(row)
        return (0.0, 0.0) if acc is None else (float(acc[0]), float(acc[1]))

    def local(self) -> dict:
        """Per-individual LDP: reports per row composed, and the worst-off row."""
        return local_summary(sum(int(v[2]) for v in self._rows.values()),
                             {r: self._row_parts[r] for r in self._rows}, self.budget,
                             {r: int(v[2]) for r, v in self._rows.items()})

    def to_dict(self) -> dict:
        """The ledger as JSON-ready data (see `ledger_dict`)."""
        return ledger_dict([asdict(e) for e in self.entries if e.scope == CENTRAL],
                           self.local(), self.budget)

    def describe(self) -> str:
        """Lines for the end of `pobo run`."""
        return describe_ledger(self.to_dict())


def local_summary(reports: int, rows: Mapping[int, Mapping[Part, int]], budget: Budget,
                  counts: Mapping[int, int] | None = None) -> dict:
    """The local part of a ledger: how many reports on how many rows, the worst-off row
    under the accountant (its composed eps at the row delta, `max_row_epsilon`, the one
    the row budget enforces) and the largest basic sum over rows (`max_row_epsilon_basic`)."""
    worst = worst_row(rows, lambda parts: budget.target_delta(LOCAL, basic(parts)[1]))
    basics = {r: basic(p) for r, p in rows.items()}
    row = None if worst is None else worst[0]
    top_basic = max(basics.values(), default=(0.0, 0.0))
    count = 0 if row is None else (counts[row] if counts else sum(rows[row].values()))
    return {"reports": int(reports), "rows": len(rows), "worst_row": row,
            "worst_row_reports": int(count),
            "max_row_epsilon": 0.0 if worst is None else float(worst[1]),
            "max_row_delta": (0.0 if row is None
                              else budget.target_delta(LOCAL, basics[row][1])),
            "max_row_epsilon_basic": float(top_basic[0]),
            "max_row_delta_basic": float(top_basic[1]),
            "accountant": "pld (dp-accounting)"}


def ledger_dict(central_entries: list[dict], local: dict, budget: Budget) -> dict:
    """The one layout of a ledger everywhere (result.json, `pobo ledger --json`, audit):
    `central` {epsilon (the accountant's, enforced), delta (at which it is stated),
    epsilon_basic, delta_basic (basic composition), budget_epsilon, budget_delta,
    composition}, `local` (see `local_summary`, plus the row budget) and `entries` (the
    central entries)."""
    limits = budget.to_dict()
    parts = parts_counter((e["mechanism"], e["epsilon"], e["delta"], 1) for e in central_entries)
    eps, dlt = basic(parts)
    at = budget.target_delta(CENTRAL, dlt)
    composed = composed_epsilon(parts, at) if central_entries else 0.0
    central_entries = [{**e, "epsilon_at_ledger_delta": composed_epsilon(
        {part_of(e["mechanism"], e["epsilon"], e["delta"]): 1}, at)} for e in central_entries]
    return {"central": {"epsilon": composed, "delta": at, "epsilon_basic": eps,
                        "delta_basic": dlt, "budget_epsilon": limits["budget_epsilon"],
                        "budget_delta": limits["budget_delta"],
                        "budget_releases": limits["budget_releases"],
                        "composition": "pld (dp-accounting), or basic where tighter"},
            "local": {**local, "row_budget_epsilon": limits["row_budget_epsilon"],
                      "row_budget_delta": limits["row_budget_delta"]},
            "entries": central_entries}


def describe_ledger(ledger: dict, nominal: str | None = None) -> str:
    """Human lines for a ledger in the layout of `ledger_dict` (older layouts, without
    the accountant's figures, read as basic composition). `nominal`: why the run (or
    the curator) it belongs to carries no DP claim (seeded, `--lift paper`, non-private):
    its epsilons are then what the mechanisms would spend, not a guarantee, and the
    heading says so."""
    c = ledger["central"]
    eps_basic, dlt_basic = c.get("epsilon_basic", c["epsilon"]), c.get("delta_basic", c["delta"])
    title = ("privacy ledger" if nominal is None else
             f"privacy ledger (nominal: no DP claim: {nominal})")
    lines = [f"{title}: central eps = {c['epsilon']:.4g} at delta = {c['delta']:.3g} "
             f"(accountant; basic composition {eps_basic:.4g}, {dlt_basic:.3g})"
             + ("" if c.get("budget_epsilon") is None else
                f" of budget ({c['budget_epsilon']:g}, {c['budget_delta']:g})"
                + ("" if c.get("budget_releases") is None else
                   f" and {c['budget_releases']} release(s) of a result"))]
    if ledger.get("scope") == PROCESS_SCOPE:
        lines.append(f"  {PROCESS_ONLY}: the ledger was kept in memory (--ephemeral-ledger, or "
                     "a run with no DP claim); a restart starts it again")
    for e in ledger["entries"]:
        who = f" [session {e['session'][:12]}]" if e.get("session") else ""
        stated = e.get("epsilon_at_ledger_delta")
        same = ("" if stated is None or e["delta"] == c["delta"] else
                f" (eps {stated:.4g} at the ledger's delta {c['delta']:.3g})")
        lines.append(f"  {e['mechanism']}: eps = {e['epsilon']:.4g}, delta = {e['delta']:.3g}"
                     f"{same}{who}")
    loc = ledger["local"]
    if loc["reports"]:
        cap = ("" if loc.get("row_budget_epsilon") is None
               else f" of row budget {loc['row_budget_epsilon']:g}")
        basic_line = ("" if "max_row_epsilon_basic" not in loc else
                      f" (basic sum {loc['max_row_epsilon_basic']:.4g})")
        lines.append(f"  local DP rewards: {loc['reports']} reports on {loc['rows']} rows; "
                     f"worst-off row {loc['worst_row']} ({loc['worst_row_reports']} reports): "
                     f"eps = {loc['max_row_epsilon']:.4g} at delta = {loc['max_row_delta']:.3g}"
                     f"{basic_line}{cap} (separate: it protects individuals, not the dataset)")
    return "\n".join(lines)
