"""The hospital scenario (PO-GP-UCB's motivating example (a)): test the patients most
likely to be readmitted within 30 days.

Inputs (d = 9) from the UCI Diabetes 130-US hospitals encounters: age bracket midpoint,
time in hospital, numbers of lab procedures, procedures, medications, outpatient,
emergency and inpatient visits, and diagnoses. Objective: f = 1 if `readmitted` is
"<30" else 0 -- the outcome of the test the hospital can afford for T patients. With a
0/1 objective simple regret is trivial, so the metric is hits (positives found), to be
compared with random selection (expected T x base rate) and non-private GP-UCB.

One row is one patient: the public file holds encounters (101,766 from 71,518 patients,
up to 40 each), so the scenario keeps each patient's first encounter (lowest
`encounter_id` of each `patient_nbr`), a public rule, and row-level privacy is then
person-level privacy. Inputs are prepared from the public domain `DOMAIN` (declared
caps, counts above them clipped and counted; length-scales a quarter of each range),
not from the rows. Defaults (no paper values): r = 10, delta = 1e-6 < 1/n, T = 100,
epsilon = 3: the smallest epsilon of hospital's frontier at which GP-UCB finds 1.5x
random selection's expected hits (docs/privacy.md, "The default epsilon"; measured on
the real file, docs/frontier.md).
"""
from __future__ import annotations

import math

import numpy as np

from pobo.scenarios.loaders import read_columns
from pobo.scenarios.problem import Problem, box_domain, data_problem, rng_for

COUNTS = ("time_in_hospital", "num_lab_procedures", "num_procedures", "num_medications",
          "number_outpatient", "number_emergency", "number_inpatient", "number_diagnoses")
EMBEDDED_N = 71_518  # patients in the public file (one row each)
DEFAULT_EPSILON = 3.0  # the frontier rule's choice (docs/privacy.md, docs/frontier.md)
DOMAIN = box_domain(
    ("age", *COUNTS), (0, 1, 0, 0, 0, 0, 0, 0, 1), (100, 14, 120, 6, 80, 10, 10, 10, 16),
    ("years", "days", "tests", "procedures", "medications", "visits", "visits", "visits",
     "diagnoses"),
    "declared caps: ages 0-100 in decades, stays 1-14 days (the dataset's documented range), "
    "visit counts capped at 10 a year, lab tests at 120, medications at 80, diagnoses 1-16; "
    "rows beyond are clipped")
AGE_MIDPOINTS = np.arange(5.0, 100.0, 10.0)
AGE_SHARES = np.array([0.002, 0.007, 0.016, 0.037, 0.095, 0.17, 0.22, 0.256, 0.169, 0.028])


def age_midpoint(text: str) -> float:
    """'[70-80)' -> 75.0; anything else -> nan."""
    try:
        lo, hi = text.strip().strip("[()]").split("-")
        return (float(lo) + float(hi)) / 2
    except ValueError:
        return math.nan


def build(seed: int | None, data: str | None = None, n: int | None = None) -> Problem:
    """The hospital problem from `diabetic_data.csv(.gz)` or generated from the seed."""
    if data is None:
        X_raw, hit = generate(rng_for(seed, "hospital/data"), EMBEDDED_N)
        source, dropped = "embedded synthetic encounters", {}
    else:
        table = read_columns(data, ["encounter_id", "patient_nbr", "age", *COUNTS],
                             ["readmitted"], converters={"age": age_midpoint})
        c = first_per_patient(table.columns)
        X_raw = np.column_stack([c["age"], *(c[k] for k in COUNTS)])
        hit = (c["readmitted"] == "<30").astype(float)
        later = table.n - len(hit)
        source = f"{table.describe()}; kept the first encounter of each of {len(hit)} patients"
        dropped = {**table.dropped, **({"later encounter of a patient": later} if later else {})}
    return data_problem("hospital", X_raw, hit, seed, n=n, source=source, dropped=dropped,
                        domain=DOMAIN, metric="hits", epsilon=DEFAULT_EPSILON, delta=1e-6, r=10,
                        T=100, noise_var=0.0, B=1.0, row_unit="one patient (first encounter)")


def first_per_patient(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The columns restricted to each patient's first encounter (lowest encounter_id per
    patient_nbr), in encounter order: one row per person."""
    order = np.argsort(columns["encounter_id"], kind="stable")
    _, first = np.unique(columns["patient_nbr"][order], return_index=True)
    keep = np.sort(order[first])
    return {k: v[keep] for k, v in columns.items()}


def generate(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Encounters with the real file's marginals (ages skewed old, mostly-zero visit
    counts) and about 11% readmitted within 30 days, driven mainly by prior inpatient
    and emergency visits."""
    age = rng.choice(AGE_MIDPOINTS, size=n, p=AGE_SHARES / AGE_SHARES.sum())
    stay = np.clip(1 + rng.poisson(3.4, n), 1, 14)
    labs = np.clip(np.round(rng.normal(43, 19.7, n)), 1, 132)
    procedures = np.clip(rng.poisson(1.34, n), 0, 6)
    meds = np.clip(np.round(rng.lognormal(math.log(14.5), 0.5, n)), 1, 81)
    outpatient = rng.poisson(rng.gamma(0.25, 1.5, n))
    emergency = rng.poisson(rng.gamma(0.15, 1.3, n))
    inpatient = rng.poisson(rng.gamma(0.5, 1.3, n))
    diagnoses = np.clip(np.round(rng.normal(7.4, 1.9, n)), 1, 16)
    logit = (-2.45 + 0.35 * inpatient + 0.1 * emergency + 0.03 * (stay - 4.4)
             + 0.06 * (diagnoses - 7.4))
    hit = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    X = np.column_stack([age, stay, labs, procedures, meds, outpatient, emergency, inpatient,
                         diagnoses]).astype(float)
    return X, hit
