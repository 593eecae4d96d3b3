"""A ledger entry's canonical record (protocol.checkpoint.entry_record) is byte for byte the
compact JSON array its definition names, whatever the entry holds: the chain's heads are
signed in Welcomes and Ends, so a faster formatting must never change one byte."""
import json
import math

import numpy as np
import pytest

from pobo.protocol.checkpoint import GENESIS_HEAD, chain_head, entry_record


def defined(session, mechanism, epsilon, delta, scope, row, time) -> bytes:
    """The record as its definition gives it."""
    return json.dumps([session, mechanism, float(epsilon).hex(), float(delta).hex(), scope,
                       int(row), float(time).hex()], separators=(",", ":"),
                      ensure_ascii=True).encode()


STRINGS = ["", "ldp-reward", "gaussian-rows", "central", "local", "0" * 32, 'quote"d',
           "back\\slash", "tab\tnew\nline\r", "\x00\x01\x1f\x7f", "é ü ß", "日本語", "\U0001f600",
           "\ud800", "</script>"]
FLOATS = [0.0, -0.0, 0.5, 1e-300, 5e-324, 1.7976931348623157e308, math.inf, -math.inf,
          math.nan, 1764180000.123456, 3, True]
ROWS = [0, -1, 1, 2**63 - 1, 2**80, True, np.int64(7)]


@pytest.mark.parametrize("text", STRINGS)
def test_every_string_is_escaped_as_json_escapes_it(text):
    for args in [(text, "ldp-reward", 0.5, 0.0, "local", 3, 1.5),
                 ("s", text, 0.5, 0.0, "central", 0, 1.5), ("s", "m", 0.5, 0.0, text, 0, 1.5)]:
        assert entry_record(*args) == defined(*args)


def test_numbers_of_every_kind_give_the_defined_bytes():
    rng = np.random.default_rng(0)
    for x in FLOATS + list(rng.standard_normal(200) * 10.0 ** rng.integers(-300, 300, 200)):
        for row in ROWS:
            args = ("s" * 32, "gaussian", x, x, "local", row, x)
            assert entry_record(*args) == defined(*args)


@pytest.mark.parametrize("odd", [None, b"blob", 5, 2.5])
def test_an_edited_journals_odd_values_give_the_defined_bytes_or_its_error(odd):
    """A mechanism, session or scope that is not text (SQLite holds what an edit wrote)."""
    for args in [(odd, "m", 0.5, 0.0, "local", 1, 1.0), ("s", odd, 0.5, 0.0, "local", 1, 1.0),
                 ("s", "m", 0.5, 0.0, odd, 1, 1.0)]:
        try:
            expected = defined(*args)
        except TypeError:
            with pytest.raises(TypeError):
                entry_record(*args)
        else:
            assert entry_record(*args) == expected


def test_a_chain_of_random_entries_has_the_defined_head():
    rng = np.random.default_rng(1)
    entries = [(rng.bytes(16).hex(), str(rng.choice(["ldp-reward", "gaussian-rows"])),
                float(rng.exponential()), float(rng.uniform(0, 1e-3)),
                str(rng.choice(["local", "central"])), int(rng.integers(0, 10**6)),
                float(rng.uniform(1.7e9, 1.8e9))) for _ in range(500)]
    assert chain_head(entry_record(*e) for e in entries) == \
        chain_head(defined(*e) for e in entries) != GENESIS_HEAD
