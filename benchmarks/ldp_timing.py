"""Does the time to answer reveal the LDP noise? Spearman(answer time, |noise|), pool vs draw.

    python benchmarks/ldp_timing.py             # 10^4 answers per path, eps = 1
    python benchmarks/ldp_timing.py --answers 2000 --epsilon 2

The exact discrete Laplace sampler's running time grows with |noise| (its loops), so an
answer whose noise is drawn on the request path takes longer the larger its noise: a
peer timing the answers learns about the noise (issue 21). pobo draws the noise ahead
(parties.ldp.NoisePool, refilled after the reward is sent). Both paths run here on the
same curator code (`Curator.respond`: range, T and budget checks, the measurement, the
journal transaction in memory, the LDP release), with the OS CSPRNG, interleaved in
blocks of 100 answers so that machine load hits both alike:
  draw on request  a pool of size 0 (the path pobo had before);
  pool             the default pool, `Curator.refill()` after each answer, untimed (it
                   runs after the reward is sent, off the answer path).
Printed: the Spearman rank correlation between each answer's time and |noise|, and the
median answer time. Target: |rho| < 0.05 for the pool over 10^4 answers.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from pobo.parties.curator import Curator, Oracle
from pobo.parties.ldp import POOL_SIZE, ConvertToLaplace
from pobo.parties.noise import NoiseSource

ROWS = 100


def curator(ldp: ConvertToLaplace, answers: int, pool: int) -> Curator:
    """A curator over ROWS rows of f = 0 with Gaussian measurement noise."""
    return Curator(Oracle(np.zeros(ROWS), 0.01), answers, np.random.default_rng(0), ldp,
                   NoiseSource(), pool_size=pool)


def answer(c: Curator, ldp: ConvertToLaplace, seq: int, refill: bool) -> tuple[float, float]:
    """(seconds to answer, |noise|) of query `seq`."""
    start = time.perf_counter()
    value = c.respond(seq, seq % ROWS)
    took = time.perf_counter() - start
    if refill:
        c.refill()  # after the answer left: not part of its time
    return took, abs(value - ldp.clip(c.measured[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=10_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    ldp = ConvertToLaplace(args.epsilon, 1.0, 0.5)
    old, new = curator(ldp, args.answers, 0), curator(ldp, args.answers, POOL_SIZE)
    res: dict[str, list[tuple[float, float]]] = {"draw on request": [], "pool": []}
    for block in range(0, args.answers, 100):
        for seq in range(block + 1, min(block + 100, args.answers) + 1):
            res["draw on request"].append(answer(old, ldp, seq, False))
        for seq in range(block + 1, min(block + 100, args.answers) + 1):
            res["pool"].append(answer(new, ldp, seq, True))
    print(f"{args.answers} answers per path, eps = {args.epsilon:g}, OS CSPRNG, pool size "
          f"{POOL_SIZE}")
    for name, pairs in res.items():
        t, z = np.array(pairs).T
        rho = stats.spearmanr(t, z).statistic
        print(f"  {name:<16} Spearman(time, |noise|) = {rho:+.4f}   median answer "
              f"{1e6 * np.median(t):.1f} us")


if __name__ == "__main__":
    main()
