"""The real-estate scenario (PO-GP-UCB sec. 4): find the cheapest private properties.

Inputs (d = 2): `lat`, `long` of Singapore private residential projects; objective,
**minimised**: log price per square metre (`avg_price_per_sqm`). The modeler maximises
its negative and regret is reported in the paper's sense, log price(x_t) - min log
price. Paper settings: r = 15, delta = 1e-4, T = 100; epsilon = e^2.8, the largest of
Fig. 2c with sigma_min >= omega there. Declared bound for LDP rewards: |f| <= 11 (prices
below e^11, about 60,000 per square metre).
"""
from __future__ import annotations

import math

import numpy as np

from pobo.scenarios.loaders import read_columns
from pobo.parties.domain import KM_PER_DEG_LAT, km_per_deg_lon
from pobo.scenarios.problem import Problem, PublicDomain, data_problem, rng_for

EMBEDDED_N = 2362  # projects in the public file
CBD = (1.285, 103.851)
# Singapore's bounding box; equal length-scales in kilometres (0.05 degrees, about 5.6 km),
# so that one isotropic kernel fits distances on the ground
DOMAIN = PublicDomain(("lat", "long"), (1.15, 103.59), (1.48, 104.09), (0.05, 0.05),
                      ("deg", "deg"), "Singapore's bounding box (lat 1.15-1.48, long "
                      "103.59-104.09); length-scale 0.05 deg on both axes",
                      conversions=((KM_PER_DEG_LAT, "km"), (km_per_deg_lon(1.35), "km")))


PREPS = ("default", "paper")


def build(seed: int | None, data: str | None = None, n: int | None = None,
          prep: str = "default") -> Problem:
    """The real-estate problem from a URA-derived CSV (`data`) or generated from the seed;
    prep="paper" (the fidelity presets): the paper's preprocessing, inputs divided by
    their ARD length-scales fitted on the rows, outside the privacy claim."""
    if prep not in PREPS:
        raise ValueError(f"realestate prep must be one of {PREPS}, got {prep!r}")
    if data is None:
        X_raw, log_price = generate(rng_for(seed, "realestate/data"), EMBEDDED_N)
        source, dropped = "embedded synthetic Singapore-like projects", {}
    else:
        table = read_columns(data, ["lat", "long", "avg_price_per_sqm"],
                             keep=lambda row: None if row["avg_price_per_sqm"] > 0
                             else "non-positive price")
        c = table.columns
        X_raw, log_price = np.column_stack([c["lat"], c["long"]]), np.log(c["avg_price_per_sqm"])
        source, dropped = table.describe(), table.dropped
    if prep == "paper":
        return data_problem("realestate", X_raw, log_price, seed, sense="minimise", n=n,
                            source=source, dropped=dropped, scaling="ard",
                            row_unit="one project (not a person)", epsilon=math.exp(2.8),
                            delta=1e-4, r=15, T=100, noise_var=1e-6, B=11.0)
    return data_problem("realestate", X_raw, log_price, seed, sense="minimise", n=n,
                        source=source, dropped=dropped, domain=DOMAIN,
                        row_unit="one project (not a person)", epsilon=math.exp(2.8), delta=1e-4,
                        r=15, T=100, noise_var=1e-6, B=11.0)


def generate(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Projects around Singapore: prices peak at the CBD and fall with distance, with a
    few cheaper suburban clusters and lognormal scatter."""
    lat = np.clip(rng.normal(1.33, 0.05, n), 1.20, 1.45)
    lon = np.clip(rng.normal(103.87, 0.06, n), 103.62, 104.02)
    d_cbd = np.hypot(lat - CBD[0], lon - CBD[1])
    log_price = 9.35 + 0.9 * np.exp(-d_cbd**2 / (2 * 0.04**2)) - 1.2 * d_cbd
    for c_lat, c_lon in rng.uniform([1.30, 103.70], [1.44, 103.98], size=(4, 2)):
        log_price -= 0.25 * np.exp(-((lat - c_lat) ** 2 + (lon - c_lon) ** 2) / (2 * 0.02**2))
    log_price += rng.normal(0, 0.15, n)
    return np.column_stack([lat, lon]), log_price
