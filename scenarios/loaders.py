"""Robust readers for the public CSV files the scenarios run on.

Real files are messy: gzip or not, CRLF line ends, extra index columns, `?` or empty
for missing values, percent signs (` 10.65%`), thousands separators, short or long
rows, and duplicates. `read_columns` picks the named columns by their standard
names, parses them, and drops what cannot be used, counting every dropped row by
its reason so that a scenario can say how many rows it lost and why.
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
