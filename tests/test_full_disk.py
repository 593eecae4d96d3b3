"""A full disk and a damaged journal file get typed one-line errors naming the file, and
leave nothing half-written (a review's repros: raw sqlite3 errors, an empty temporary
record left behind)."""
import errno
import json
from pathlib import Path

import pytest

from pobo.parties.journal import Journal, JournalError
from pobo.runspec import write_json


def test_a_journal_that_cannot_grow_refuses_a_meta_write_typed(tmp_path):
    path = tmp_path / "journal.db"
    journal = Journal(path)
    try:
        journal.set_meta("budget", "{}")
        pages = journal._db.execute("PRAGMA page_count").fetchone()[0]
        journal._db.execute(f"PRAGMA max_page_count = {pages}")  # full: it cannot grow
        with pytest.raises(JournalError, match=f"cannot write to the journal {path}.*full"):
            journal.set_meta("statement", "x" * 100_000)
    finally:
        journal.close()


@pytest.mark.parametrize("content", [b"this is not a database" * 100, b"SQLite format 3\x00" + bytes(90)])
def test_a_file_that_is_no_journal_is_refused_typed(tmp_path, content):
    path = tmp_path / "journal.db"
    path.write_bytes(content)
    with pytest.raises(JournalError, match=f"cannot open the journal {path}"):
        Journal(path)
    assert path.read_bytes() == content  # left as it was


def test_a_record_that_cannot_be_written_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "run" / "curator.json"
    write_json(target, {"status": "ok"})

    def full(self, other):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Path, "replace", full)
    with pytest.raises(OSError):
        write_json(target, {"status": "failed"})
    assert sorted(p.name for p in target.parent.iterdir()) == ["curator.json"]
    assert json.loads(target.read_text()) == {"status": "ok"}  # the old record, whole


def test_a_record_with_an_epsilon_past_the_calculators_is_strict_json(tmp_path):
    """Issue 46 item 6: result.json holds no Infinity or NaN, not even as strings: a
    figure that does not exist is null, with its reason beside it (`<key>_reason`);
    json.dumps(allow_nan=False) of what is read back proves it; the rest is unchanged."""
    import math

    from pobo.runspec import write_json

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    path = tmp_path / "result.json"
    write_json(path, {"privacy_unit": {"epsilon_whole_row": math.inf,
                                       "epsilon_by_distance": [{"epsilon": math.inf},
                                                               {"epsilon": 3.0}]},
                      "budget": {"budget_epsilon": math.inf, "budget_epsilon_reason": "none"},
                      "x": [1.5, -math.inf, math.nan], "n": 7})
    text = path.read_text()
    data = json.loads(text, parse_constant=refuse)
    json.dumps(data, allow_nan=False)
    assert "Infinity" not in text and "NaN" not in text
    unit = data["privacy_unit"]
    assert unit["epsilon_whole_row"] is None and "unbounded" in unit["epsilon_whole_row_reason"]
    assert unit["epsilon_by_distance"][0] == {"epsilon": None, "epsilon_reason": unit[
        "epsilon_whole_row_reason"]}
    assert unit["epsilon_by_distance"][1]["epsilon"] == 3.0
    assert data["budget"] == {"budget_epsilon": None, "budget_epsilon_reason": "none"}
    assert data["x"] == [1.5, None, None]
    assert data["n"] == 7
