"""The columnar CSV reader (pandas) gives the row-by-row reader's table on messy files:
the same rows kept, the same drops by reason, the same values to the bit."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from pobo.scenarios.loaders import _read_columnar, _RowByRow, read_columns, read_columns_by_row

MESSY = ("Notice: loans that do not meet the policy\r\n"
         "id,a,b,rate,status,extra\r\n"
         '1,1.5,"2,000", 10.65%,Fully Paid,x\r\n'     # thousands separator, percent
         "2,?,3,11,Charged Off,y\r\n"                  # missing a
         "3,2.5,4,12,Current,z,extra,fields\r\n"       # a long row: kept
         '4,1.5,"2,000", 10.65%,Fully Paid,dup\r\n'   # a duplicate of row 1
         "5,7,8\r\n"                                   # short row
         "6,1e3,-0.0,13,Fully Paid,w\r\n"
         "7,inf,5,14,Fully Paid,v\r\n"                 # not finite: missing a
         "\r\n"
         "8,3,4,NA,Fully Paid,u\r\n"                   # missing rate
         "Total amount funded: 460296150\r\n")         # footer


def _same(a, b) -> None:
    assert a.rows_read == b.rows_read and a.dropped == b.dropped
    assert a.columns.keys() == b.columns.keys()
    for c in a.columns:
        assert a.columns[c].dtype == b.columns[c].dtype
        assert a.columns[c].tolist() == b.columns[c].tolist(), c


@pytest.mark.parametrize("gz", [False, True])
def test_the_columnar_reader_is_the_row_reader_on_a_messy_file(tmp_path, gz):
    path = tmp_path / ("messy.csv.gz" if gz else "messy.csv")
    if gz:
        with gzip.open(path, "wt", newline="") as fh:
            fh.write(MESSY)
    else:
        path.write_bytes(MESSY.encode())
    keep = lambda row: None if row["status"] != "Current" else "not completed"  # noqa: E731
    args = (path, ["a", "b", "rate"], ["status"])
    columnar = _read_columnar(*args, keep, {})  # (no fallback to the row reader here)
    by_row = read_columns_by_row(*args, keep=keep)
    _same(columnar, by_row)
    assert columnar.dropped == by_row.dropped  # the same reasons, text named as such
    assert columnar.dropped == {"notice line": 1, "missing a": 1, "non-numeric a": 1,
                                "missing rate": 1,
                                "duplicate": 1, "short row": 1, "note or footer line": 1,
                                "not completed": 1}
    assert columnar.columns["b"].tolist() == [2000.0, 0.0]
    converted = _read_columnar(*args, None, {"rate": lambda s: len(s)})
    _same(converted, read_columns_by_row(*args, converters={"rate": lambda s: len(s)}))


def test_a_line_of_spaces_falls_back_to_the_row_reader_with_the_same_table(tmp_path):
    """The csv module calls a line of spaces blank, pandas a row: the columnar read sees
    the disagreement and reads the file row by row."""
    path = tmp_path / "spaces.csv"
    path.write_text("a,b\n1,2\n   \n3,4\n5\n")
    with pytest.raises(_RowByRow):
        _read_columnar(path, ["a", "b"], (), None, {})
    _same(read_columns(path, ["a", "b"]), read_columns_by_row(path, ["a", "b"]))
    assert read_columns(path, ["a", "b"]).n == 2
