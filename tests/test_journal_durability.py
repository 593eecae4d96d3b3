"""The journal's durability option: the PRAGMA each setting gives, the flag carried to the
curator process, and kill -9 mid-session at durability=normal losing no committed answer."""
import sqlite3
import subprocess
import sys

import pytest

from pobo.parties.journal import Journal
from pobo.scenarios.cli import build_parser, config_from_args
from pobo.scenarios.launch import scenario_argv
from pobo.scenarios.session import RunConfig

# commits answers until killed, printing each seq only once its transaction has committed
WRITER = """
import sys
from pobo.parties.journal import Journal
from pobo.protocol.ledger import Budget, Entry
journal = Journal(sys.argv[1], durability=sys.argv[2])
budget = Budget(row_epsilon=1e9)
for seq in range(1, 1_000_000):
    journal.record_answer("s", None, seq, seq % 97, [Entry("ldp", 0.5, 0.0, "local", seq % 97)],
                          budget, lambda: (0.25 * seq, 0.5 * seq))
    print("s", seq, flush=True)
"""


@pytest.mark.parametrize("durability, pragma", [("full", 2), ("normal", 1)])
def test_each_durability_sets_wal_and_its_synchronous_level(tmp_path, durability, pragma):
    journal = Journal(tmp_path / "j.db", durability=durability)
    try:
        assert journal._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == pragma
    finally:
        journal.close()


def test_an_unknown_durability_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="durability 'off': expected one of full, normal"):
        Journal(tmp_path / "j.db", durability="off")


def test_the_flag_reaches_the_curator_process_and_full_is_the_default():
    parser = build_parser()
    run = config_from_args(parser.parse_args(["run", "synthetic", "--journal", "j.db",
                                              "--durability", "normal"]))
    assert run.durability == "normal"
    assert "--durability normal" in " ".join(scenario_argv(run))
    curator = config_from_args(parser.parse_args(["curator", "synthetic"]))
    assert curator.durability == RunConfig().durability == "full"
    with pytest.raises(SystemExit):
        parser.parse_args(["curator", "synthetic", "--durability", "off"])


# the same from 4 concurrent sessions in an event loop: group commits, each seq printed
# only once `committed()` returned for it
GROUP_WRITER = """
import asyncio, sys
from pobo.parties.journal import Journal
from pobo.protocol.ledger import Budget, Entry
journal = Journal(sys.argv[1], durability=sys.argv[2])
budget = Budget(row_epsilon=1e9)

async def session(k):
    for seq in range(1, 1_000_000):
        journal.record_answer(f"s{k}", None, seq, seq % 97,
                              [Entry("ldp", 0.5, 0.0, "local", seq % 97)], budget,
                              lambda: (0.25 * seq, 0.5 * seq))
        await journal.committed()
        print(f"s{k}", seq, flush=True)

async def main():
    await asyncio.gather(*(session(k) for k in range(4)))

asyncio.run(main())
"""


@pytest.mark.parametrize("durability", ["normal", "full"])
@pytest.mark.parametrize("script", [WRITER, GROUP_WRITER], ids=["sequential", "grouped"])
def test_kill_9_loses_no_committed_answer(tmp_path, durability, script):
    path = tmp_path / "j.db"
    writer = subprocess.Popen([sys.executable, "-c", script, str(path), durability],
                              stdout=subprocess.PIPE, text=True)
    try:
        committed = [_announced(writer.stdout.readline()) for _ in range(200)]
        writer.kill()  # SIGKILL between (or inside) transactions: no clean shutdown
        writer.wait(15)
        committed += [_announced(line) for line in writer.stdout.read().splitlines()
                      if len(line.split()) == 2]
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(15)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        answers = {(s, q): v for s, q, v in db.execute("SELECT session, seq, value FROM answers")}
        charged = db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0]
    for session in {s for s, _ in committed}:  # each session's announcements in order
        seqs = [q for s, q in committed if s == session]
        assert seqs == list(range(1, len(seqs) + 1))
    assert all(answers.get(key) == 0.5 * key[1] for key in committed)  # every one announced
    assert charged == len(answers) >= len(committed)  # each with its charge, nothing half


def _announced(line: str) -> tuple[str, int]:
    session, seq = line.split()
    return session, int(seq)
