"""`pobo audit --data` at scale: the leak check of a release against the curator's data.

    python benchmarks/audit_data.py [--n 1000000] [--d 2]

The check (protocol.audit_data._check_data) looks for rows of X verbatim in a release of X's
width, and for any scalar sent that equals one row's value of f or entry of X. It now
compares rows as numpy keys (`np.isin`) and counts values by binary search in sorted
copies; the baseline is the plain code it replaced, measured in the same run on the
same data: rows as a set of rounded tuples, values in Counters. Both must find the same
number of leaked rows and the same counts (the script fails otherwise).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pobo.protocol.audit_data import _held, _rounded_abs, _row_keys  # noqa: E402


def plain(X: np.ndarray, Z: np.ndarray, f: np.ndarray, probes: list[float]) -> tuple:
    """The baseline: a set of row tuples and Counters of values."""
    rows = {tuple(np.round(row, 12)) for row in X}
    leaked = sum(tuple(np.round(z, 12)) in rows for z in Z)
    raw = Counter(np.round(np.abs(f), 12).tolist())
    entries = Counter(np.round(np.abs(X), 12).ravel().tolist())
    return leaked, [raw[p] + entries[p] for p in probes]


def vectorised(X: np.ndarray, Z: np.ndarray, f: np.ndarray, probes: list[float]) -> tuple:
    """pobo's check: numpy row keys and sorted multisets."""
    leaked = int(np.isin(_row_keys(Z), _row_keys(X)).sum())
    raw, entries = _rounded_abs(f), _rounded_abs(X)
    return leaked, [_held(raw, p) + _held(entries, p) for p in probes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="rows of X")
    parser.add_argument("--d", type=int, default=2, help="columns of X (and of the release)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, args.d))
    f = rng.standard_normal(args.n)
    Z = rng.standard_normal((args.n, args.d))
    Z[: args.n // 100] = X[rng.integers(0, args.n, args.n // 100)]  # 1% of rows leaked
    probes = [float(np.round(abs(v), 12)) for v in (*f[:50], *X[:25, 0], 0.123, 4.5)]
    times, found = {}, {}
    for name, check in (("plain (set of tuples, Counters)", plain),
                        ("pobo (numpy keys, sorted)", vectorised)):
        start = time.perf_counter()
        found[name] = check(X, Z, f, probes)
        times[name] = time.perf_counter() - start
    (ta, tb), (fa, fb) = times.values(), found.values()
    same = fa == fb
    print(f"n = {args.n:,}, d = {args.d}: X, a release of its width with 1% of its rows, f")
    for name, seconds in times.items():
        print(f"  {name:<34} {seconds:7.2f} s   ({found[name][0]:,} rows found)")
    print(f"  ratio plain / pobo: {ta / tb:.1f}x; the same rows and counts: "
          f"{'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("the two checks disagree")


if __name__ == "__main__":
    main()
