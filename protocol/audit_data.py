"""The audit's data check: given the curator's data, that no row of X appears in a
private release, no raw objective value in an LDP reward, and no scalar sent is one
individual's value (`_check_data`; benchmarks/audit_data.py times its numpy search)."""
from __future__ import annotations

import dataclasses

import numpy as np

from pobo.protocol.audit_records import AuditReport
from pobo.protocol.messages import Dataset, Release, Reward, Welcome
from pobo.protocol.policy import CURATOR, LDP_REWARD


def numeric_fields(message: object, path: str = "") -> list[tuple[str, float]]:
    """Every scalar number a message carries, with its field path (arrays excluded: the
    released dataset is checked row by row)."""
    out: list[tuple[str, float]] = []
    if dataclasses.is_dataclass(message):
        for f in dataclasses.fields(message):
            out += numeric_fields(getattr(message, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(message, (tuple, list)):
        for i, item in enumerate(message):
            out += numeric_fields(item, f"{path}[{i}]")
    elif isinstance(message, (int, float)) and not isinstance(message, bool):
        out.append((path, float(message)))
    return out


# fields whose value is a count or an index, not a measurement: they may equal a value
# of f or an entry of X by coincidence (a row index 1 where f is binary, say)
_STRUCTURAL = {"version", "seq", "index", "params.n", "params.r", "params.T"}


_EXACT = 1e6  # from here on a float64 is coarser than 1e-12: rounding would not change it


def _round12(values) -> np.ndarray:
    """`values` rounded to 12 decimals, where that changes them (numpy's rounding, which
    would overflow on magnitudes past ~1e296, is not applied to |x| >= 1e6)."""
    a = np.asarray(values, dtype=float)
    return np.where(np.abs(a) < _EXACT, np.round(np.clip(a, -_EXACT, _EXACT), 12), a)


def _row_keys(A: np.ndarray) -> np.ndarray:
    """Each row of A rounded to 12 decimals as one opaque value (its bytes; -0 as 0), so
    that rows are compared all at once by numpy, not as n Python tuples."""
    rounded = np.ascontiguousarray(_round12(A) + 0.0)
    return rounded.view(np.dtype((np.void, rounded.itemsize * rounded.shape[1]))).ravel()


def _rounded_abs(values) -> np.ndarray:
    """|values| rounded to 12 decimals, sorted: a multiset that `_held` counts in."""
    return np.sort(_round12(np.abs(np.asarray(values, dtype=float))).ravel())


def _scalar_keys(v: float) -> set[float]:
    """|v| at 12 decimals by numpy's rounding (the data's) and by Python's (correctly
    rounded decimal): a value one ulp from a tie is looked up both ways."""
    return {float(_round12(abs(v))), round(abs(v), 12)}


def _held(multiset: np.ndarray, value: float) -> int:
    """How many times `value` occurs in a sorted multiset (binary search, O(log n))."""
    return int(np.searchsorted(multiset, value, "right") - np.searchsorted(multiset, value))


def _check_data(messages: list, welcome: Welcome, X: np.ndarray, f: np.ndarray | None,
                report: AuditReport) -> None:
    """No row of X in a private release, no raw f in an LDP reward, and no public number
    that is one individual's value: a scalar field of any message sent that equals a
    value of f (or its negation) held by exactly one row, or (under the private policy)
    an entry of X held by exactly one row, crossed outside any mechanism. A value many rows share (a clip
    bound, a binary outcome) is reported as a note: a declared constant may equal it.
    Values compare at 12 decimals; X and f are searched with numpy (sorted copies, one
    binary search per scalar sent), so that data of 1e7 rows are checked in seconds."""
    ldp = any(m.name == LDP_REWARD for m in welcome.params.mechanisms)
    private = welcome.params.policy == "private"
    # |value| -> how many rows hold it (a sign hides nothing)
    raw = _rounded_abs(f if f is not None else [])
    entries = _rounded_abs(X if private else [])
    rows = None  # X's rows as keys, made when a release has X's width
    noted: set[str] = set()
    for r, m in messages:
        if r.dir != "sent" and report.role == CURATOR:
            continue
        if isinstance(m, Dataset):
            Z = m.release.Z
            if Z.ndim == 2 and Z.shape[1] == X.shape[1] and Z.shape[0]:
                rows = _row_keys(X) if rows is None else rows
                leaked = int(np.isin(_row_keys(Z), rows).sum())
                if leaked:
                    text = (f"record {r.seq}: {leaked} rows of X appear verbatim in the released "
                            f"dataset ({m.release.mechanism})")
                    if private:
                        report.violations.append(text)
                    else:
                        report.notes.append(text + " under the declared non-private policy")
        if m is None or isinstance(m, Dataset):
            continue
        for name, v in numeric_fields(m):
            keys = _scalar_keys(v)
            if name in _STRUCTURAL or not any(keys):
                continue
            in_f, in_x = max(((_held(raw, key), _held(entries, key)) for key in keys), key=sum)
            if not (in_f or in_x):
                continue
            if isinstance(m, (Reward, Release)) and name == "value":
                text = f"record {r.seq}: {r.kind} carries a raw objective value {v:.6g}"
                (report.violations if ldp else report.notes).append(
                    text + ("" if ldp else " (allowed: this session has no LDP rewards)"))
                continue
            what = "a value of f" if in_f else "an entry of X"
            held = in_f + in_x
            text = f"record {r.seq}: {r.kind} field {name} = {v:.6g} equals {what}"
            if held == 1:
                report.violations.append(text + " held by exactly one row: one individual's "
                                         "value crossed outside any mechanism")
            elif name not in noted:
                noted.add(name)
                report.notes.append(text + f" shared by {held} rows (a declared constant "
                                    "such as a clip bound may coincide with it)")
