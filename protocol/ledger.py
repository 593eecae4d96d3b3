"""The privacy ledger of a session: every mechanism that touched the curator's data.

Central mechanisms (the projection of PO-GP-UCB Algorithm 1, the releases of Kusner et
al.) protect the whole dataset and add up by basic composition; a budget caps their
total and a charge that would exceed it is refused before any noise is drawn. Local-DP
rewards (CTL of Zhou & Tan) each protect the one individual behind the queried row,
so they are kept apart: per row, reports compose (a row queried k times has spent
k eps), and the guarantee of the run is that of its worst-off row.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass

from protocol.errors import ErrorCode, ProtocolError

CENTRAL, LOCAL = "central", "local"


class PrivacyBudgetExceeded(ProtocolError):
    """A mechanism that would take the central (epsilon, delta) past the budget."""

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


class Ledger:
    """Entries and totals; `charge` refuses a central entry beyond the budget."""

    def __init__(self, budget_epsilon: float = math.inf, budget_delta: float = 1.0) -> None:
        if not (budget_epsilon > 0 and 0 < budget_delta <= 1):
            raise ValueError("a budget needs epsilon > 0 and 0 < delta <= 1")
        self.budget_epsilon, self.budget_delta = float(budget_epsilon), float(budget_delta)
        self.entries: list[Entry] = []

    def affordable(self, epsilon: float, delta: float) -> bool:
        """Whether a central (epsilon, delta) still fits the budget."""
        eps, dlt = self.central()
        tol = 1e-12
        return (eps + epsilon <= self.budget_epsilon * (1 + tol)
                and dlt + delta <= self.budget_delta * (1 + tol))

    def charge(self, entry: Entry) -> None:
        """Record an entry; a central one past the budget raises PrivacyBudgetExceeded."""
        if entry.scope == CENTRAL and not self.affordable(entry.epsilon, entry.delta):
            eps, dlt = self.central()
            raise PrivacyBudgetExceeded(
                f"{entry.mechanism} (eps={entry.epsilon:g}, delta={entry.delta:g}) would take the "
                f"spent ({eps:g}, {dlt:g}) past the budget ({self.budget_epsilon:g}, "
                f"{self.budget_delta:g})")
        self.entries.append(entry)

    def central(self) -> tuple[float, float]:
        """(sum eps, sum delta) of the central entries: basic composition."""
        c = [e for e in self.entries if e.scope == CENTRAL]
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
        if not per_row:
            return {"reports": 0, "rows": 0, "worst_row": None, "epsilon": 0.0, "delta": 0.0}
        row, (eps, dlt, count) = max(per_row.items(), key=lambda kv: (kv[1][0], kv[1][1]))
        return {"reports": sum(v[2] for v in per_row.values()), "rows": len(per_row),
                "worst_row": row, "worst_row_reports": count, "epsilon": eps, "delta": dlt}

    def to_dict(self) -> dict:
        """The ledger for result.json: entries (local ones summarised per mechanism) and totals."""
        central = [asdict(e) for e in self.entries if e.scope == CENTRAL]
        eps, dlt = self.central()
        return {"central_entries": central,
                "central": {"epsilon": eps, "delta": dlt, "composition": "basic"},
                "local": self.local(),
                "budget": {"epsilon": None if math.isinf(self.budget_epsilon) else self.budget_epsilon,
                           "delta": self.budget_delta}}

    def describe(self) -> str:
        """Lines for the end of `pobo run`."""
        return describe_ledger(self.to_dict())


def describe_ledger(ledger: dict) -> str:
    """Human lines for a ledger as stored in result.json."""
    c, budget = ledger["central"], ledger["budget"]
    lines = [f"privacy ledger: central (basic composition) eps = {c['epsilon']:.4g}, "
             f"delta = {c['delta']:.3g}"
             + ("" if budget["epsilon"] is None else
                f" of budget ({budget['epsilon']:g}, {budget['delta']:g})")]
    for e in ledger["central_entries"]:
        lines.append(f"  {e['mechanism']}: eps = {e['epsilon']:.4g}, delta = {e['delta']:.3g}")
    loc = ledger["local"]
    if loc["reports"]:
        lines.append(f"  local DP rewards: {loc['reports']} reports on {loc['rows']} rows; "
                     f"worst-off row {loc['worst_row']} ({loc['worst_row_reports']} reports): "
                     f"eps = {loc['epsilon']:.4g}, delta = {loc['delta']:.3g} (separate: it "
                     "protects individuals, not the dataset)")
    return "\n".join(lines)
