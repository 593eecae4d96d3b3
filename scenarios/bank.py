"""The bank scenario (PO-GP-UCB sec. 4): pick the LendingClub loans with the best return.

Inputs (d = 3): amount committed by investors (`funded_amnt_inv`), interest rate
(`int_rate`, '19.99', ' 10.65%' or the fraction 0.1065, all read as percent), annual
income (`annual_inc`); the two amounts are
log-transformed for their skew. Objective, maximised: log of the return ratio
`total_pymnt_inv / funded_amnt_inv` (log(1 + ROI), the paper's log-transformed ROI),
with the ratio floored at 0.01 for loans that returned nothing. Completed loans only
(Fully Paid or Charged Off, including the 'Does not meet the credit policy. Status:...'
variants). Reads LendingClub's original export (a notice line before the header, footer
lines after the loans: skipped and counted), the full 2007-2011 file in shared/data
(42,535 loans; `lending-club-2007-2011.csv.gz`; FIDELITY.md's bank rows: prep=paper) and
the course sample.
Paper settings: r = 15, delta = 1e-5, T = 50; epsilon = e^2.9, the largest of Fig. 2b
with sigma_min >= omega there. Declared bound for LDP rewards: |f| <= -ln 0.01.

prep="paper" (what the fidelity presets pass): the paper's n = 36,000 (a seeded random
subset of the completed loans), each input divided by its standard deviation before
centring and the max-norm-25 scaling -- which puts sigma_min at 206, inside the
[202.4, 207.9) that the paper's stated admissible r imply (r = 10, 15, 20 at
eps = e^2.7, e^2.9, e^3.1) -- and regret in units of std(f) over those rows, a stable
unit (the ML sigma_y of 300-row samples ranges 0.05-0.25 on this data; the paper's own
sigma_y is not given).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from pobo.scenarios.loaders import read_columns
from pobo.scenarios.problem import Problem, box_domain, data_problem, rng_for

COLUMNS = ("funded_amnt_inv", "int_rate", "annual_inc")
COMPLETED = ("fully paid", "charged off")
RATIO_FLOOR = 0.01
EMBEDDED_N = 4703  # completed loans in the public sample
PAPER_N = 36000  # "the data of 36000 loan applicants" (PO-GP-UCB sec. 4)
PREPS = ("default", "paper")
PAPER_UNIT = "std(f) over the prepared rows (prep=paper; the paper's sigma_y is not given)"
# LendingClub's published limits for 2007-2011: loans of $500-$35,000 (log), rates of
# 5-25 % (grades A1-G5); declared incomes $4,000-$2,000,000 (log); clipped beyond
DOMAIN = box_domain(
    COLUMNS, (math.log(500), 5.0, math.log(4_000)), (math.log(35_000), 25.0, math.log(2e6)),
    ("log $", "%", "log $"), "LendingClub's published loan limits ($500-$35,000), its "
    "2007-2011 rate range (5-25 %), declared incomes $4,000-$2,000,000; length-scales a "
    "quarter of each range")


def build(seed: int | None, data: str | None = None, n: int | None = None,
          prep: str = "default") -> Problem:
    """The bank problem from a LendingClub CSV (`data`) or generated from the seed;
    prep="paper" prepares it as the fidelity presets need (module docstring)."""
    if prep not in PREPS:
        raise ValueError(f"bank prep must be one of {PREPS}, got {prep!r}")
    if data is None:
        X_raw, roi = generate(rng_for(seed, "bank/data"), EMBEDDED_N)
        source, dropped = "embedded synthetic LendingClub-like loans", {}
    else:
        X_raw, roi, table = load(data)
        source, dropped = table.describe(), table.dropped
    if prep == "default":
        return data_problem("bank", X_raw, roi, seed, n=n, source=source, dropped=dropped,
                            domain=DOMAIN, row_unit="one loan (a borrower may hold several)",
                            epsilon=math.exp(2.9), delta=1e-5, r=15, T=50, noise_var=1e-6,
                            B=-math.log(RATIO_FLOOR))
    problem = data_problem("bank", X_raw, roi, seed, n=PAPER_N if n is None else n,
                           source=source, dropped=dropped, scaling="standardise",
                           epsilon=math.exp(2.9), delta=1e-5, r=15, T=50, noise_var=1e-6,
                           B=-math.log(RATIO_FLOOR))
    return replace(problem, signal_std=float(np.std(problem.f)), signal_std_source=PAPER_UNIT)


def _completed(row: dict) -> str | None:
    status = str(row["loan_status"]).lower()
    if not any(status.endswith(s) for s in COMPLETED):
        return "loan not completed"
    if row["funded_amnt_inv"] <= 0 or row["annual_inc"] <= 0:
        return "non-positive amount"
    return None


def load(path: str):
    """(X_raw, log return ratio, Table) from a LendingClub file by its column names."""
    table = read_columns(path, [*COLUMNS, "total_pymnt_inv"], ["loan_status"], keep=_completed)
    c = table.columns
    X = np.column_stack([np.log(c["funded_amnt_inv"]), rate_percent(c["int_rate"]),
                         np.log(c["annual_inc"])])
    ratio = np.maximum(c["total_pymnt_inv"] / c["funded_amnt_inv"], RATIO_FLOOR)
    return X, np.log(ratio), table


def rate_percent(rate: np.ndarray) -> np.ndarray:
    """Interest rates in percent, whichever way the file wrote them: ' 10.65%' and '10.65'
    parse to 10.65; a file of fractions (0.1065, every rate <= 1: the R-package
    conversion of the 2007-2011 loans) is multiplied by 100."""
    rate = np.asarray(rate, dtype=float)
    return rate * 100 if rate.size and np.max(rate) <= 1.0 else rate


def generate(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """LendingClub-like loans: log amount, rate, log income, and a default-driven return
    (about 17% charged off, more at high rates and low incomes)."""
    amount = np.clip(rng.lognormal(math.log(12000), 0.65, n), 1000, 35000)
    rate = np.clip(rng.normal(14.5, 4.5, n), 6.0, 26.0)
    income = np.clip(rng.lognormal(math.log(65000), 0.5, n), 8000, 900000)
    logit = (-1.8 + 0.17 * (rate - 14.5) - 0.6 * (np.log(income) - math.log(65000))
             + 0.2 * (np.log(amount) - math.log(12000)))
    default = rng.random(n) < 1 / (1 + np.exp(-logit))
    repaid = 1 + rate / 100 * rng.uniform(0.15, 0.9, n)
    lost = rng.uniform(0.0, 0.9, n) ** 1.5
    ratio = np.maximum(np.where(default, lost, repaid), RATIO_FLOOR)
    return np.column_stack([np.log(amount), rate, np.log(income)]), np.log(ratio)
