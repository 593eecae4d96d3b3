"""The privacy ledger: every mechanism that touched the curator's data, and its budget.

Central mechanisms (the projection of PO-GP-UCB Algorithm 1, its private lift test, the
releases of Kusner et al.) protect the whole dataset and add up by basic composition; a
budget caps their total and a charge that would exceed it is refused before any noise
is drawn. Local-DP rewards (CTL of Zhou & Tan) each protect the one individual behind
the queried row, so they are kept apart: per row, reports compose (a row queried k
times has spent k eps, across every session), a row budget caps that, and the
guarantee of the dataset is that of its worst-off row.

`Ledger` is the in-memory form the audit recomputes from messages; the curator's
ledger lives in its journal (parties.budget.DatasetLedger) and uses the same
`Budget` rule and the same dictionary layout (`ledger_dict`).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass

from pobo.protocol.errors import ErrorCode, ProtocolError

CENTRAL, LOCAL = "central", "local"
_TOL = 1e-12  # relative slack for floating-point sums against a budget


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
    """The dataset's budget: central (epsilon, delta) under basic composition, and the
    local epsilon any one row may accumulate over all its LDP reports."""

    epsilon: float = math.inf
    delta: float = 1.0
    row_epsilon: float = math.inf

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and 0 < self.delta <= 1 and self.row_epsilon > 0):
            raise ValueError("a budget needs epsilon > 0, 0 < delta <= 1 and a row budget > 0")

    def refusal(self, entry: Entry, spent: tuple[float, float]) -> str | None:
        """Why `entry` may not be charged on top of `spent` ((eps, delta) so far, central
        or that row's), or None when it fits."""
        eps, dlt = spent
        if entry.scope == CENTRAL:
            if (eps + entry.epsilon <= self.epsilon * (1 + _TOL)
                    and dlt + entry.delta <= self.delta * (1 + _TOL)):
                return None
            return (f"{entry.mechanism} (eps={entry.epsilon:g}, delta={entry.delta:g}) would "
                    f"take the dataset's spent ({eps:g}, {dlt:g}) past its budget "
                    f"({self.epsilon:g}, {self.delta:g})")
        if eps + entry.epsilon <= self.row_epsilon * (1 + _TOL):
            return None
        return (f"{entry.mechanism} on row {entry.row} (eps={entry.epsilon:g}) would take "
                f"that individual's spent eps {eps:g} past the row budget {self.row_epsilon:g}")

    def to_dict(self) -> dict:
        """JSON-ready (None for no limit)."""
        return {"budget_epsilon": None if math.isinf(self.epsilon) else self.epsilon,
                "budget_delta": self.delta,
                "row_budget_epsilon": None if math.isinf(self.row_epsilon) else self.row_epsilon}


class Ledger:
    """Entries and totals in memory; `charge` refuses what the budget does not allow."""

    def __init__(self, budget: Budget = Budget()) -> None:
        self.budget = budget
        self.entries: list[Entry] = []

    def charge(self, entry: Entry) -> None:
        """Record an entry; one past the budget raises PrivacyBudgetExceeded."""
        spent = self.central() if entry.scope == CENTRAL else self.row(entry.row)
        why = self.budget.refusal(entry, spent)
        if why is not None:
            raise PrivacyBudgetExceeded(why)
        self.entries.append(entry)

    def central(self) -> tuple[float, float]:
        """(sum eps, sum delta) of the central entries: basic composition."""
        c = [e for e in self.entries if e.scope == CENTRAL]
        return sum(e.epsilon for e in c), sum(e.delta for e in c)

    def row(self, row: int) -> tuple[float, float]:
        """(sum eps, sum delta) of the local reports on one row."""
        c = [e for e in self.entries if e.scope == LOCAL and e.row == row]
        return sum(e.epsilon for e in c), sum(e.delta for e in c)

    def local(self) -> dict:
        """Per-individual LDP: reports per row composed, and the worst-off row."""
        per_row: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        for e in self.entries:
            if e.scope == LOCAL:
                acc = per_row[e.row]
                acc[0] += e.epsilon
                acc[1] += e.delta
                acc[2] += 1
        worst = max(per_row.items(), key=lambda kv: (kv[1][0], kv[1][1]), default=None)
        return local_summary(sum(int(v[2]) for v in per_row.values()), len(per_row),
                             None if worst is None else (worst[0], *worst[1]))

    def to_dict(self) -> dict:
        """The ledger as JSON-ready data (see `ledger_dict`)."""
        return ledger_dict([asdict(e) for e in self.entries if e.scope == CENTRAL],
                           self.local(), self.budget)

    def describe(self) -> str:
        """Lines for the end of `pobo run`."""
        return describe_ledger(self.to_dict())


def local_summary(reports: int, rows: int, worst: tuple | None) -> dict:
    """The local part of a ledger: how many reports on how many rows, the worst-off row
    (`worst` = (row, eps, delta, reports)) and its composed (eps, delta)."""
    row, eps, dlt, count = worst if worst is not None else (None, 0.0, 0.0, 0)
    return {"reports": int(reports), "rows": int(rows), "worst_row": row,
            "worst_row_reports": int(count), "max_row_epsilon": float(eps),
            "max_row_delta": float(dlt)}


def ledger_dict(central_entries: list[dict], local: dict, budget: Budget) -> dict:
    """The one layout of a ledger everywhere (result.json, `pobo ledger --json`, audit):
    `central` {epsilon, delta, budget_epsilon, budget_delta, composition}, `local` (see
    `local_summary`, plus row_budget_epsilon) and `entries` (the central entries)."""
    limits = budget.to_dict()
    eps = sum(e["epsilon"] for e in central_entries)
    dlt = sum(e["delta"] for e in central_entries)
    return {"central": {"epsilon": eps, "delta": dlt, "budget_epsilon": limits["budget_epsilon"],
                        "budget_delta": limits["budget_delta"], "composition": "basic"},
            "local": {**local, "row_budget_epsilon": limits["row_budget_epsilon"]},
            "entries": central_entries}


def describe_ledger(ledger: dict) -> str:
    """Human lines for a ledger in the layout of `ledger_dict`."""
    c = ledger["central"]
    lines = [f"privacy ledger: central (basic composition) eps = {c['epsilon']:.4g}, "
             f"delta = {c['delta']:.3g}"
             + ("" if c.get("budget_epsilon") is None else
                f" of budget ({c['budget_epsilon']:g}, {c['budget_delta']:g})")]
    for e in ledger["entries"]:
        who = f" [session {e['session'][:12]}]" if e.get("session") else ""
        lines.append(f"  {e['mechanism']}: eps = {e['epsilon']:.4g}, delta = {e['delta']:.3g}{who}")
    loc = ledger["local"]
    if loc["reports"]:
        cap = ("" if loc.get("row_budget_epsilon") is None
               else f" of row budget {loc['row_budget_epsilon']:g}")
        lines.append(f"  local DP rewards: {loc['reports']} reports on {loc['rows']} rows; "
                     f"worst-off row {loc['worst_row']} ({loc['worst_row_reports']} reports): "
                     f"eps = {loc['max_row_epsilon']:.4g}{cap}, delta = "
                     f"{loc['max_row_delta']:.3g} (separate: it protects individuals, not "
                     "the dataset)")
    return "\n".join(lines)
