"""The cost of the ledger's Merkle log (protocol version 6) against the hash chain alone.

    python benchmarks/merkle_log.py              # N = 8000 entries, 200 Welcomes
    python benchmarks/merkle_log.py --n 64000    # a longer ledger

Both sides run in this process on one on-disk journal of N LDP entries (charged through
`Journal.charge`, the answer path's transaction), each timed in this run:

  per charge   after each entry is appended, the curator's head follows it: the chain
               alone (`checkpoints.LedgerChain.current`, the version-5 head) against the
               chain and the tree together (`ledger_log.LedgerLog.current`);
  per Welcome  a head as a Welcome carries it: the chain's `current` and the totals
               (`ledger_head`), against the same with the tree's root and a consistency
               proof from a uniformly drawn earlier size (`LedgerLog.consistency`, which
               reads back at most one block of 16 entries from the journal);
  audit        `pobo ledger`'s pass over the N entries against a signed head
               (`checkpoints.unheld_heads`): chain and totals (a version-5 head) against
               chain, totals and the Merkle root (a version-6 head); and the transcripts'
               side, `checkpoint.inconsistencies` over 200 heads linked by proofs.

Printed: microseconds per operation (the best of --repeats interleaved runs) and the
ratio Merkle / chain. The tree's memory is
printed too: the hashes kept per entry (levels of 16 entries and up, plus the open block).
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from pobo.parties.checkpoints import LedgerChain, unheld_heads
from pobo.parties.journal import Journal
from pobo.parties.ledger_log import LedgerLog
from pobo.protocol.checkpoint import Checkpoint, inconsistencies, ledger_head
from pobo.protocol.ledger import LOCAL, Budget, Entry


def fill(journal: Journal, n: int, seed: int = 0) -> None:
    """N LDP entries (eps 0.5, pure) on rows drawn uniformly from 200, in batches."""
    rng = random.Random(seed)
    budget = Budget()
    for start in range(0, n, 500):
        journal.charge("bench", [Entry("ldp-reward", 0.5, 0.0, LOCAL, rng.randrange(200))
                                 for _ in range(min(500, n - start))], budget)


def per_charge(path: Path, n: int, cls) -> float:
    """Seconds per `current()` that takes in one new entry, over the last n entries."""
    journal = Journal(path)
    follower = cls(journal)
    rows = journal.ledger_rows()
    follower._extend(len(rows) - n)  # noqa: SLF001 (the first entries: taken in untimed)
    total = 0.0
    for i in range(len(rows) - n + 1, len(rows) + 1):
        start = time.perf_counter()
        follower._extend(i)  # noqa: SLF001 (what `current` does, one entry further)
        total += time.perf_counter() - start
    assert follower.entries == len(rows)
    journal.close()
    return total / n


def per_welcome(path: Path, welcomes: int, merkle: bool, seed: int = 1) -> tuple[float, int]:
    """Seconds per Welcome's head (and proof), and the proof nodes sent in all."""
    journal = Journal(path)
    log = LedgerLog(journal) if merkle else LedgerChain(journal)
    log.current()  # a running curator's state: the ledger taken in at start
    rng = random.Random(seed)
    nodes = 0
    start = time.perf_counter()
    for _ in range(welcomes):
        with journal.snapshot():
            entries, chain = log.current()
            if merkle:
                head = ledger_head(entries, chain, journal.basic_totals(), log.root(entries),
                                   log.log)
                nodes += len(log.consistency(rng.randrange(1, entries), entries))
            else:
                head = ledger_head(entries, chain, journal.basic_totals())
    elapsed = (time.perf_counter() - start) / welcomes
    assert head.entries == entries
    journal.close()
    return elapsed, nodes


def audit(path: Path, merkle: bool) -> float:
    """Seconds for `pobo ledger`'s pass over the journal against its last head."""
    journal = Journal(path)
    log = LedgerLog(journal)
    entries, chain = log.current()
    head = ledger_head(entries, chain, journal.basic_totals(),
                       *((log.root(entries), log.log) if merkle else ()))
    start = time.perf_counter()
    found = unheld_heads(journal, [("head", head)])
    elapsed = time.perf_counter() - start
    assert found == [], found
    journal.close()
    return elapsed


def transcript_heads(path: Path, count: int) -> float:
    """Seconds for `inconsistencies` over `count` heads, each proven from the one before."""
    journal = Journal(path)
    log = LedgerLog(journal)
    n, chain = log.current()
    sizes = sorted(random.Random(2).sample(range(1, n + 1), count))
    points, before = [], 0
    for i, m in enumerate(sizes):
        head = ledger_head(m, chain, journal.basic_totals(), log.root(m), log.log)
        points.append(Checkpoint(f"s{i}", "welcome", float(i), head, "t", i, i - 0.5,
                                 before or -1, log.consistency(before, m) if before else ()))
        before = m
    start = time.perf_counter()
    found, notes = inconsistencies(points)
    elapsed = time.perf_counter() - start
    assert found == [] and notes == [], (found, notes)
    journal.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8000, help="ledger entries (default 8000)")
    parser.add_argument("--welcomes", type=int, default=200)
    parser.add_argument("--charges", type=int, default=2000,
                        help="the last entries taken in one at a time (default 2000)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each measurement, the best kept (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.journal"
        journal = Journal(path)
        fill(journal, args.n)
        journal.close()
        print(f"journal of {args.n} entries: {path.stat().st_size / 1e6:.1f} MB")
        best: dict[str, list[float]] = {}

        def keep(name: str, chain: float, tree: float) -> None:  # the best of the repeats
            old = best.setdefault(name, [chain, tree])
            best[name] = [min(old[0], chain), min(old[1], tree)]
        for _ in range(args.repeats):  # interleaved: a busy machine slows both alike
            keep("per charge", per_charge(path, args.charges, LedgerChain),
                 per_charge(path, args.charges, LedgerLog))
            (chain_w, _), (tree_w, nodes) = (per_welcome(path, args.welcomes, False),
                                             per_welcome(path, args.welcomes, True))
            keep("per Welcome (head + proof)", chain_w, tree_w)
            keep(f"audit of {args.n} entries", audit(path, False), audit(path, True))
        rows = [(name, *pair) for name, pair in best.items()]
        for name, chain, tree in rows:
            print(f"{name:<28} chain {chain * 1e6:>10.1f} us   Merkle {tree * 1e6:>10.1f} us"
                  f"   ratio {tree / chain:5.2f}x")
        print(f"consistency proof: {nodes / args.welcomes:.1f} nodes on average "
              f"({nodes / args.welcomes * 64:.0f} hex characters)")
        print(f"transcripts' side: inconsistencies over 200 linked heads "
              f"{transcript_heads(path, 200) * 1e3:.1f} ms")
        journal = Journal(path)
        log = LedgerLog(journal)
        log.current()
        kept = sum(len(level) for level in log.tree.levels) + len(log.tree.tail)
        print(f"tree memory: {kept} hashes for {log.entries} entries "
              f"({32 * kept / log.entries:.2f} bytes an entry)")
        journal.close()


if __name__ == "__main__":
    main()
