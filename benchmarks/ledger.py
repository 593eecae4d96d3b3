"""The privacy ledger's cost against T: charges O(1), the audit's recomputation linear.

    python benchmarks/ledger.py            # T = 1000, 2000, 4000, 8000
    python benchmarks/ledger.py --rows 50  # reports spread over 50 rows (default 200)

Per T, a session's worth of entries -- one central projection and T LDP reports (eps 0.5,
pure) on rows drawn uniformly from `--rows` -- is charged in three ways, each timed in
this run:
  baseline  the plain basic-sum loop: a dict of per-row sums and a central sum;
  charge    `Ledger.charge` for every entry under a row budget the basic sums never
            reach (the path every answer takes);
  audit     `protocol.audit.recompute_ledger` over the same reports as Reward messages
            (what `pobo audit` does per transcript) and its `to_dict` (the worst-off
            row by the PLD accountant: one dp-accounting composition, memoised).
Printed: seconds, microseconds per entry, and the ratio to the baseline. Linear scaling
shows as a per-entry time that stays flat from T = 1000 to 8000 (the quadratic ledger
this replaces took 0.7 s for its charges at T = 8000, growing 4x per doubling).
The accountant's first composition (importing dp-accounting and scipy, ~1 s) is paid
once before the timings, as a long-lived curator or audit pays it once.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from pobo.protocol.audit import recompute_ledger
from pobo.protocol.ledger import CENTRAL, LOCAL, Budget, Entry, Ledger
from pobo.protocol.messages import (
    PROTOCOL_VERSION, KernelParams, Mechanism, Reward, SessionParams, Welcome,
)
from pobo.protocol.policy import DP_PROJECTION, LDP_REWARD
from pobo.protocol.transcript import Record

EPS = 0.5


def entries(T: int, rows: int, seed: int = 0) -> list[Entry]:
    """One projection and T LDP reports on uniformly drawn rows."""
    picks = np.random.default_rng(seed).integers(0, rows, T)
    return [Entry(DP_PROJECTION, 2.0, 1e-5, CENTRAL)] + [
        Entry(LDP_REWARD, EPS, 0.0, LOCAL, int(r)) for r in picks]


def baseline(es: list[Entry]) -> float:
    """The plain basic-sum loop."""
    start = time.perf_counter()
    rows: dict[int, float] = {}
    central = 0.0
    for e in es:
        if e.scope == CENTRAL:
            central += e.epsilon
        else:
            rows[e.row] = rows.get(e.row, 0.0) + e.epsilon
    max(rows.values())
    return time.perf_counter() - start


def charge(es: list[Entry], T: int) -> float:
    """Ledger.charge for every entry under a budget the sums never reach."""
    ledger = Ledger(Budget(100.0, 1e-3, row_epsilon=EPS * T + 1))
    start = time.perf_counter()
    for e in es:
        ledger.charge(e)
    return time.perf_counter() - start


def audit(es: list[Entry]) -> float:
    """recompute_ledger over Reward messages, then the ledger's summary."""
    params = SessionParams("bench", 1000, 4, len(es), "private",
                           (Mechanism(DP_PROJECTION, 2.0, 1e-5), Mechanism(LDP_REWARD, EPS, 0.0)),
                           KernelParams("se", 1.0, 1.0, 1e-3), "seeded")
    sent = Record(0, 0.0, "welcome", "", "sent")
    messages = [(sent, Welcome(PROTOCOL_VERSION, "s", params))] + [
        (Record(i, 0.0, "reward", "", "sent"), Reward(i, e.row, 0.0, LDP_REWARD))
        for i, e in enumerate(es[1:], start=1)]
    start = time.perf_counter()
    recompute_ledger(messages, Welcome(PROTOCOL_VERSION, "s", params)).to_dict()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--T", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    args = parser.parse_args()
    Ledger().to_dict()
    audit(entries(50, 2))  # warm: dp-accounting imported once, as a long-lived process does
    print(f"{'T':>6} {'baseline s':>11} {'charge s':>9} {'us/entry':>9} {'x base':>7} "
          f"{'audit s':>8} {'us/entry':>9} {'x base':>7}")
    for T in args.T:
        es = entries(T, args.rows)
        base = min(baseline(es) for _ in range(3))
        ch = min(charge(es, T) for _ in range(3))
        au = min(audit(es) for _ in range(3))
        n = len(es)
        print(f"{T:>6} {base:>11.4f} {ch:>9.4f} {1e6 * ch / n:>9.2f} {ch / base:>7.1f} "
              f"{au:>8.4f} {1e6 * au / n:>9.2f} {au / base:>7.1f}")


if __name__ == "__main__":
    main()
