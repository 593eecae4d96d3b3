"""Robust readers for the public CSV files the scenarios run on.

Real files are messy: gzip or not, CRLF line ends, extra index columns, `?` or empty
for missing values, percent signs (` 10.65%`), thousands separators, short or long
rows, and duplicates. `read_columns` picks the named columns by their standard
names, parses them, and drops what cannot be used, counting every dropped row by
its reason so that a scenario can say how many rows it lost and why.

The columns are read by pandas' C parser and parsed column by column (8x faster than
a Python loop over rows: hospital's 101,766 encounters in ~0.4 s); a file whose row
shapes pandas and the csv module would see differently (a blank-looking line of
spaces) is read again by the csv module row by row (`read_columns_by_row`), with the
same result.
"""
from __future__ import annotations

import csv
import gzip
import io
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MISSING = frozenset({"", "?", "na", "n/a", "nan", "null", "none"})


@dataclass(frozen=True)
class Table:
    """Parsed columns (float arrays for numeric, object arrays for text) and what was dropped."""

    columns: dict[str, np.ndarray]
    source: str
    rows_read: int
    dropped: dict[str, int]

    @property
    def n(self) -> int:
        """Rows kept."""
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def describe(self) -> str:
        """One line: rows read, kept, and dropped per reason."""
        why = ", ".join(f"{count} {reason}" for reason, count in sorted(self.dropped.items()))
        return (f"{self.source}: read {self.rows_read} rows, kept {self.n}"
                + (f", dropped {sum(self.dropped.values())} ({why})" if self.dropped else ""))


def parse_number(text: str) -> float:
    """A float from a messy cell: ' 10.65%' -> 10.65, '1,234' -> 1234, '?' -> nan."""
    s = text.strip().strip('"').strip()
    if s.lower() in MISSING:
        return math.nan
    s = s.rstrip("%").replace(",", "").strip()
    try:
        value = float(s)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def open_text(path: str | Path) -> io.TextIOBase:
    """A text stream over a .csv or .csv.gz file (universal newlines left to csv)."""
    path = Path(path)
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    raw = gzip.open(path, "rb") if gz else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


HEADER_SEARCH = 5  # lines a notice may take before the header (LendingClub's export: 1)


def find_header(reader, wanted: Sequence[str], path: str | Path) -> tuple[list[str], int]:
    """The header row (the first of the first HEADER_SEARCH lines naming every wanted
    column) and how many notice lines stood before it; a one-line error otherwise."""
    first = None
    for skipped in range(HEADER_SEARCH):
        try:
            header = [h.strip().lstrip("\ufeff") for h in next(reader)]
        except StopIteration:
            break
        first = header if first is None else first
        if all(c in header for c in wanted):
            return header, skipped
    if first is None:
        raise ValueError(f"{path}: empty file")
    missing = [c for c in wanted if c not in first]
    raise ValueError(f"{path}: no column(s) {missing}; the file has {first[:12]}...")


class _RowByRow(Exception):
    """The columnar read cannot tell this file's row shapes: read it row by row."""


def read_columns(path: str | Path, numeric: Sequence[str], text: Sequence[str] = (),
                 keep: Callable[[dict[str, object]], str | None] | None = None,
                 converters: dict[str, Callable[[str], float]] | None = None) -> Table:
    """The named columns of a CSV file, parsed, with unusable rows dropped and counted.

    Up to HEADER_SEARCH - 1 notice lines before the header are skipped and counted
    ("notice line"). A row is dropped when it has fewer fields than the header (a
    "note or footer line" when at most one field is filled, else a "short row"), when a
    numeric column is missing ("missing <col>": empty, NA, ?) or holds text ("non-numeric
    <col>": a text column named as a number, say), when `keep(row)`
    returns a reason string, or when it repeats an earlier kept row ("duplicate").
    `converters` overrides `parse_number` for some numeric columns (called once per
    distinct cell). Columnar (pandas); `read_columns_by_row` is the same contract.
    """
    try:
        return _read_columnar(path, numeric, text, keep, converters or {})
    except _RowByRow:
        return read_columns_by_row(path, numeric, text, keep, converters)


def parse_numbers(cells: "pandas.Series") -> np.ndarray:
    """`parse_number` over a column of cells at once (pandas string methods)."""
    import pandas as pd
    s = cells.str.strip().str.strip('"').str.strip()
    missing = s.str.lower().isin(MISSING).to_numpy()
    s = s.str.rstrip("%").str.replace(",", "", regex=False).str.strip()
    values = np.array(pd.to_numeric(s, errors="coerce"), dtype=float)
    values[missing | ~np.isfinite(values)] = math.nan
    return values


def _read_columnar(path: str | Path, numeric: Sequence[str], text: Sequence[str],
                   keep, converters: dict) -> Table:
    """`read_columns` by pandas' C parser, column by column."""
    import pandas as pd
    wanted = [*numeric, *text]
    with open_text(path) as fh:
        header, notices = find_header(csv.reader(fh), wanted, path)
    where = {c: header.index(c) for c in wanted}
    width = max(where.values()) + 1
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    used = sorted(set(where.values()) | {width - 1})
    as_text = {where[c] for c in (*text, *converters)} | {width - 1}
    try:  # clean numeric columns come typed (pandas' parser rounds correctly); the rest as text
        frame = pd.read_csv(path, compression="gzip" if gz else None, header=None,
                            skiprows=notices + 1, usecols=used,
                            dtype={i: str for i in as_text}, keep_default_na=False,
                            encoding="utf-8",
                            encoding_errors="replace", skip_blank_lines=True, low_memory=False)
    except (pd.errors.ParserError, ValueError) as exc:  # a first row too short for usecols
        raise _RowByRow() from exc
    rows = len(frame)
    reason = np.full(rows, None, dtype=object)
    if rows and (frame[width - 1] == "").any():  # a row may be short: count its fields
        short, lone = _row_shapes(path, notices, width, rows)
        reason[short & lone] = "note or footer line"
        reason[short & ~lone] = "short row"
    values = {}
    for c in numeric:
        cells = frame[where[c]]
        if c in converters:
            table = {u: converters[c](u) for u in pd.unique(cells)}
            values[c] = cells.map(table).to_numpy(dtype=float)
        elif pd.api.types.is_numeric_dtype(cells.dtype) and not pd.api.types.is_bool_dtype(cells.dtype):
            values[c] = cells.to_numpy(dtype=float, copy=True)
            values[c][~np.isfinite(values[c])] = math.nan
        else:
            values[c] = parse_numbers(cells.astype(str))
        bad = (reason == None) & np.isnan(values[c])  # noqa: E711
        if bad.any():  # an empty or NA cell, or text where a number belongs (as the row reader)
            blank = (cells.astype(str).str.strip().str.strip('"').str.strip().str.lower()
                     .isin(MISSING).to_numpy())
            reason[bad & blank] = f"missing {c}"
            reason[bad & ~blank] = f"non-numeric {c}"
    for c in text:
        values[c] = frame[where[c]].str.strip().to_numpy(dtype=object)
    if keep is not None:
        for i in np.flatnonzero(reason == None):  # noqa: E711
            reason[i] = keep({c: (float(values[c][i]) if c in numeric else values[c][i])
                              for c in wanted})
    ok = reason == None  # noqa: E711
    repeated = pd.DataFrame({c: values[c][ok] for c in wanted}).duplicated().to_numpy()
    reason[np.flatnonzero(ok)[repeated]] = "duplicate"
    ok = reason == None  # noqa: E711
    dropped = Counter({"notice line": notices} if notices else {})
    dropped.update(reason[~ok].tolist())
    columns = {c: (values[c][ok].astype(float) if c in numeric else values[c][ok])
               for c in wanted}
    return Table(columns, str(path), notices + rows, dict(dropped))


def _row_shapes(path: str | Path, notices: int, width: int, rows: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per data row (blank lines skipped, as pandas does): fewer fields than `width`,
    and at most one field filled. Raises _RowByRow when the csv module sees another
    number of rows than pandas did."""
    short, lone = [], []
    with open_text(path) as fh:
        reader = csv.reader(fh)
        for _ in range(notices + 1):
            next(reader, None)
        for fields in reader:
            if not fields:
                continue
            if len(fields) == 1 and not fields[0].strip():
                raise _RowByRow()  # spaces alone: the csv reader's blank, pandas' row
            short.append(len(fields) < width)
            lone.append(sum(bool(f.strip()) for f in fields) <= 1)
    if len(short) != rows:
        raise _RowByRow()
    return np.array(short, dtype=bool), np.array(lone, dtype=bool)


def read_columns_by_row(path: str | Path, numeric: Sequence[str], text: Sequence[str] = (),
                        keep: Callable[[dict[str, object]], str | None] | None = None,
                        converters: dict[str, Callable[[str], float]] | None = None) -> Table:
    """`read_columns` by the csv module, one row at a time (the reference, and the
    fallback for files whose row shapes the columnar read cannot tell).

    Up to HEADER_SEARCH - 1 notice lines before the header are skipped and counted
    ("notice line"). A row is dropped when it has fewer fields than the header (a
    "note or footer line" when at most one field is filled, else a "short row"), when a
    numeric column is missing or unparseable ("missing <col>"), when `keep(row)`
    returns a reason string, or when it repeats an earlier kept row ("duplicate").
    `converters` overrides `parse_number` for some numeric columns.
    """
    converters = converters or {}
    wanted = [*numeric, *text]
    with open_text(path) as fh:
        reader = csv.reader(fh)
        header, notices = find_header(reader, wanted, path)
        where = {c: header.index(c) for c in wanted}
        width = max(where.values()) + 1
        kept: list[tuple] = []
        seen: set[tuple] = set()
        dropped: Counter[str] = Counter({"notice line": notices} if notices else {})
        rows_read = notices
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue  # blank line
            rows_read += 1
            if len(fields) < width:
                lone = sum(bool(f.strip()) for f in fields) <= 1
                dropped["note or footer line" if lone else "short row"] += 1
                continue
            row: dict[str, object] = {}
            reason = None
            for c in numeric:
                value = converters.get(c, parse_number)(fields[where[c]])
                if math.isnan(value):  # an empty or NA cell, or text where a number belongs
                    cell = fields[where[c]].strip().strip('"').strip().lower()
                    reason = f"{'missing' if cell in MISSING else 'non-numeric'} {c}"
                    break
                row[c] = value
            if reason is None:
                for c in text:
                    row[c] = fields[where[c]].strip()
                reason = keep(row) if keep is not None else None
            if reason is not None:
                dropped[reason] += 1
                continue
            key = tuple(row[c] for c in wanted)
            if key in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(key)
            kept.append(key)
    columns = {c: np.array([k[i] for k in kept], dtype=float if c in numeric else object)
               for i, c in enumerate(wanted)}
    return Table(columns, str(path), rows_read, dict(dropped))
