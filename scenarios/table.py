"""Tabular data without code: any CSV, the feature columns and the objective column named.

`pobo run table --data FILE.csv --features a,b,c --objective y [--minimise]` (and the
same for `pobo curator`): the curator reads the named columns with the messy-CSV
loader (missing cells, percent signs, thousands separators, duplicates: dropped and
counted) and serves the objective column as a tabulated f. With `--bounds LO:HI,...`
(one pair per feature, public) X is prepared from them alone (rows clipped to the box,
length-scales a quarter of each range: parties/domain.py); without them, as the paper
does (length-scales fitted on the rows, centring, max norm 25), which the privacy unit
lists as not covered. The objective is exact
(noise 0); the modeler fits its kernel (declared as initial values only). No bound B on
|f| is computed from the data: LDP rewards need `--reward-bound B`.
"""
from __future__ import annotations

import numpy as np

from pobo.scenarios.loaders import read_columns
from pobo.scenarios.problem import (
    PREPARATION_SEED, Problem, box_domain, data_problem, fitted_prior, subsample,
)


def columns(names: str | list[str] | tuple[str, ...]) -> list[str]:
    """Column names from 'a,b,c' or a list; a one-line error for an empty list."""
    parts = names.split(",") if isinstance(names, str) else list(names)
    parts = [p.strip() for p in parts if p.strip()]
    if not parts:
        raise ValueError("--features names no column (give them as a,b,c)")
    return parts


def build(seed: int | None, data: str | None = None, features: str | None = None,
          objective: str | None = None, minimise: bool = False,
          n: int | None = None, bounds: str | None = None) -> Problem:
    """The Problem of a CSV file's `features` columns and its `objective` column; with
    public `bounds` and no objective column, the rows alone, for an objective measured on
    demand (--objective-cmd, --objective-wait)."""
    if data is None or features is None:
        raise ValueError("the table scenario needs --data FILE.csv and --features a,b,c")
    names = columns(features)
    if objective is None:
        return rows_only(data, names, bounds, n)
    if objective in names:
        raise ValueError(f"--objective {objective!r} is also a feature")
    table = read_columns(data, [*names, objective])
    if table.n < 2:
        raise ValueError(f"{data}: fewer than 2 usable rows ({table.describe()})")
    c = table.columns
    domain = None if bounds is None else declared_domain(names, bounds)
    return data_problem("table", np.column_stack([c[name] for name in names]), c[objective], seed,
                        sense="minimise" if minimise else "maximise", n=n, domain=domain,
                        scaling="ard" if domain is None else "public",
                        source=f"{table.describe()}; features {names}, objective {objective!r}",
                        dropped=table.dropped, epsilon=1.0, delta=min(1e-5, 0.1 / table.n),
                        r=10, T=50, noise_var=0.0, B=None)


def rows_only(data: str, names: list[str], bounds: str | None, n: int | None) -> Problem:
    """The table's rows with no objective column: f is measured on demand by the curator
    (a command or values entered later). Preparation needs no f only from public bounds."""
    if bounds is None:
        raise ValueError("without --objective the table needs --bounds LO:HI,... (its "
                         "preparation cannot be fitted on an objective it does not have), "
                         "and an on-demand objective: --objective-cmd or --objective-wait")
    table = read_columns(data, names)
    if table.n < 2:
        raise ValueError(f"{data}: fewer than 2 usable rows ({table.describe()})")
    domain = declared_domain(names, bounds)
    (X_raw,) = subsample((np.column_stack([table.columns[k] for k in names]),), n,
                         PREPARATION_SEED)
    X, clipped = domain.prepare(X_raw)
    return Problem("table", X, None, fitted_prior(lengthscale=domain.kernel_lengthscale),
                   epsilon=1.0, delta=min(1e-5, 0.1 / X.shape[0]), r=10, T=50,
                   source=f"{table.describe()}; features {names}, f measured on demand",
                   dropped=table.dropped, domain=domain, clipped=clipped)


def declared_domain(names: list[str], bounds: str):
    """The public domain of `--bounds LO:HI,LO:HI,...`, one pair per feature."""
    pairs = [part.strip() for part in bounds.split(",") if part.strip()]
    if len(pairs) != len(names):
        raise ValueError(f"--bounds gives {len(pairs)} pairs for {len(names)} features")
    try:
        lo, hi = zip(*((float(a), float(b)) for a, b in (p.split(":") for p in pairs)))
    except ValueError:
        raise ValueError(f"--bounds must be LO:HI pairs separated by commas, got {bounds!r}"
                         ) from None
    return box_domain(names, lo, hi, ("",) * len(names), f"declared --bounds {bounds}")
