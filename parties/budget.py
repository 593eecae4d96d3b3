"""The dataset's privacy ledger as a curator session sees it: one budget, every session.

The entries live in the curator's journal (a file, or memory for the life of the
process), so the budget belongs to the dataset, not to a session: a second session,
a restart, a resume or a release all charge the same ledger. A charge is checked
against the budget before anything is drawn, and again inside the transaction that
records it.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass

from pobo.parties.statement import statement_lines
from pobo.parties.journal import Journal
from pobo.protocol.accounting import part_of
from pobo.parties.budget_history import budget_history, describe as describe_budget
from pobo.protocol.ledger import (
    CENTRAL, DATASET_SCOPE, LOCAL, PROCESS_SCOPE, Budget, Entry, Ledger,
    PrivacyBudgetExceeded, describe_ledger, ledger_dict,
)


@dataclass(frozen=True)
class DatasetLedger:
    """The journal's ledger with the dataset's budget, charging on behalf of `session`
    (as its connection of `generation`, when given: a superseded one is refused)."""

    journal: Journal
    budget: Budget = Budget()
    session: str = ""
    generation: int | None = None

    def for_session(self, session: str, generation: int | None = None) -> DatasetLedger:
        """The same ledger, charging on behalf of another session."""
        return DatasetLedger(self.journal, self.budget, session, generation)

    def check(self, entries: list[Entry]) -> None:
        """Raise PrivacyBudgetExceeded unless all of `entries` fit the budget now (reads
        only what the entries touch: an answer without LDP reads nothing)."""
        if not entries:
            return
        central = self.central() if any(e.scope == CENTRAL for e in entries) else (0.0, 0.0)
        rows: dict[int, tuple[float, float]] = {}
        added: dict[tuple[str, int], Counter] = defaultdict(Counter)  # checked, not charged
        for e in entries:
            key = (e.scope, e.row if e.scope == LOCAL else -1)
            if e.scope == CENTRAL:
                spent = central
            else:
                spent = rows.get(e.row) or self.journal.row_spent(e.row)

            def parts(key=key) -> Counter:
                held = (self.journal.central_parts() if key[0] == CENTRAL
                        else self.journal.row_parts(key[1]))
                return held + added[key]

            why = self.budget.refusal(e, spent, parts)
            if why is not None:
                raise PrivacyBudgetExceeded(why)
            added[key][part_of(e.mechanism, e.epsilon, e.delta)] += 1
            if e.scope == CENTRAL:
                central = (central[0] + e.epsilon, central[1] + e.delta)
            else:
                rows[e.row] = (spent[0] + e.epsilon, spent[1] + e.delta)

    def charge(self, entry: Entry) -> None:
        """Charge one entry now, in its own transaction (refused past the budget)."""
        self.journal.charge(self.session, [entry], self.budget, self.generation)

    def charge_release(self, entry: Entry, algorithm: str) -> None:
        """Charge a release, refused if this session was ever granted one (Journal)."""
        self.journal.charge_release(self.session, self.generation, [entry], self.budget,
                                    algorithm)

    def central(self) -> tuple[float, float]:
        """The dataset's central (eps, delta) so far, over every session."""
        return self.journal.central_spent()

    def to_dict(self) -> dict:
        """The dataset's ledger (layout of protocol.ledger.ledger_dict), and under
        `session` what this session's own messages released."""
        data = ledger_dict(self.journal.central_entries(),
                           self.journal.local_summary(self.budget), self.budget)
        data["scope"] = ledger_scope_of(self.journal)
        data["session"] = {"id": self.session,
                           "entries": [asdict(e) for e in self.journal.entries(self.session)]}
        return data


def ledger_scope_of(journal: Journal) -> str:
    """'dataset' for a journal on disk (its budget spans every restart on the data),
    'process' for one in memory (PROCESS_ONLY: its budget covers this process only)."""
    return PROCESS_SCOPE if journal.path == ":memory:" else DATASET_SCOPE


def session_ledger(dataset: list[Entry], own: list[Entry], budget: Budget) -> dict:
    """What one session released, as the audit recomputes it from its messages: the
    dataset mechanisms its Dataset message carries (charged once for the dataset, however
    many sessions receive them) plus the session's own releases and LDP reports."""
    ledger = Ledger(Budget())
    for e in [*dataset, *own]:
        ledger.charge(e)
    data = ledger.to_dict()
    limits = budget.to_dict()
    data["central"].update(budget_epsilon=limits["budget_epsilon"], budget_delta=budget.delta,
                           budget_releases=limits["budget_releases"])
    return data



def journal_ledger(journal: Journal) -> dict:
    """`pobo ledger`: the dataset's ledger as its journal holds it, with the budget last
    configured, every central entry with its session, and the per-row LDP totals."""
    budget = Budget.from_dict(json.loads(journal.meta("budget") or "{}"))
    data = ledger_dict(journal.central_entries(), journal.local_summary(budget), budget)
    data["dataset"] = journal.meta("dataset")
    data["scope"] = ledger_scope_of(journal)
    data["budget_history"] = budget_history(journal)
    data["privacy"] = json.loads(journal.meta("privacy_statement") or "null")
    data["sessions"] = [{"id": sid, "status": status} for sid, status in journal.sessions()]
    return data


def describe_journal_ledger(data: dict) -> str:
    """Human lines for `pobo ledger`."""
    head = (f"dataset {str(data.get('dataset'))[:16]}...: {len(data['sessions'])} sessions "
            f"({sum(s['status'] == 'ok' for s in data['sessions'])} ok)")
    privacy = data.get("privacy")
    lines = statement_lines(privacy) if privacy and "epsilon_by_distance" in privacy else []
    nominal = (str(privacy.get("claim") or "dp: false").split(":")[0]  # its first clause
               if isinstance(privacy, dict) and privacy.get("dp") is False else None)
    history = [f"  budget {describe_budget(Budget.from_dict(b))}: {b.get('why', '')}"
               for b in data.get("budget_history") or []]
    if history:
        history.insert(0, "budget history (fixed at the first serve; raised only by "
                          "--raise-budget):")
    return "\n".join([head, describe_ledger(data, nominal), *history, *lines])
