"""The dataset's budget, fixed in its journal when the dataset is first served.

The budget belongs to the dataset, not to a start of the curator: the first start that
serves a dataset records its central (epsilon, delta), its per-row (epsilon, delta) and
how many results may be released, and every later start enforces that record whatever
its flags would derive (T, the release's epsilon, --ldp-eps...). A limit the record
leaves unlimited is fixed by the first start that derives a finite one. The operator
may lower a limit with its flag (recorded), and may raise one only with
`--raise-budget` (recorded, and warned). Each change is an entry of `budget_history`
in the journal's meta, shown by `pobo ledger`; every Welcome carries the central budget
in force, signed, so `pobo audit` sees a raise between two sessions' transcripts.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import fields, replace

from pobo.parties.journal import Journal, JournalError
from pobo.protocol.ledger import Budget

BUDGET_KEY, HISTORY_KEY = "budget", "budget_history"
LIMITS = tuple(f.name for f in fields(Budget))  # epsilon, delta, row_epsilon, ...


class BudgetRaiseRefused(JournalError):
    """A start whose flags ask for more than the budget its dataset's journal holds."""


def fixed_budget(journal: Journal, proposed: Budget, given: tuple[str, ...] = (),
                 raise_ok: bool = False) -> tuple[Budget, str | None]:
    """(the budget this start enforces, a line to log or None).

    `proposed` is what this start's flags give; `given` names the limits the operator
    set explicitly (the others are derived defaults); `raise_ok` is `--raise-budget`."""
    held = journal.bind(BUDGET_KEY, json.dumps(proposed.to_dict()))
    if json.loads(held) == proposed.to_dict() and journal.meta(HISTORY_KEY) is None:
        _record(journal, proposed, "fixed at the dataset's first serve")
        return proposed, None
    stored = Budget.from_dict(json.loads(held))
    if journal.meta(HISTORY_KEY) is None:  # a journal from before the history was kept
        _record(journal, stored, "held by the journal when its history began")
    wanted = replace(stored, **{name: getattr(proposed, name) for name in given})
    # a limit the record leaves unlimited is fixed by the first finite one derived
    wanted = replace(wanted, **{name: getattr(proposed, name) for name in LIMITS
                                if name not in given and math.isinf(getattr(stored, name))
                                and math.isfinite(getattr(proposed, name))})
    if wanted == stored:
        derived_other = any(getattr(proposed, n) != getattr(stored, n)
                            for n in LIMITS if n not in given)
        return stored, (None if not derived_other else
                        f"the dataset's budget {describe(stored)} was fixed when it was "
                        f"first served; this start's flags would derive {describe(proposed)}, "
                        "which does not move it (lower it with its flag; raise it with "
                        "--raise-budget)")
    if not wanted.within(stored):
        raised = ", ".join(f"{n} {_num(getattr(stored, n))} -> {_num(getattr(wanted, n))}"
                           for n in LIMITS if getattr(wanted, n) > getattr(stored, n))
        if not raise_ok:
            raise BudgetRaiseRefused(
                f"the dataset's journal {journal.path} holds the budget {describe(stored)}, "
                f"fixed when it was first served; this start asks for more ({raised}): "
                "give --raise-budget to raise it (recorded in the journal and shown by pobo "
                "ledger), or drop the flags")
        _record(journal, wanted, f"raised by --raise-budget ({raised})")
        return wanted, (f"--raise-budget: the dataset's budget is raised ({raised}); the "
                        "journal records the raise")
    _record(journal, wanted, "lowered" if given else "fixed (a limit first derived)")
    return wanted, None


def budget_history(journal: Journal) -> list[dict]:
    """Every budget the dataset has had, oldest first: its limits, why, and when."""
    return json.loads(journal.meta(HISTORY_KEY) or "[]")


def describe(budget: Budget) -> str:
    """A budget in one phrase: central (eps, delta), per-row eps, releases."""
    row = "" if math.isinf(budget.row_epsilon) else f", row eps {budget.row_epsilon:g}"
    releases = "" if math.isinf(budget.releases) else f", {int(budget.releases)} release(s)"
    return f"central ({_num(budget.epsilon)}, {budget.delta:g}){row}{releases}"


def _num(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:g}"


def _record(journal: Journal, budget: Budget, why: str) -> None:
    """Append `budget` to the history and make it the one in force (one meta write each)."""
    history = budget_history(journal)
    history.append({**budget.to_dict(), "why": why, "time": time.time()})
    journal.set_meta(HISTORY_KEY, json.dumps(history))
    journal.set_meta(BUDGET_KEY, json.dumps(budget.to_dict()))
