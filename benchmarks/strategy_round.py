"""One round (choose + observe) of each heavy-tail strategy against plain GP-UCB.

    python benchmarks/strategy_round.py

On the LDP paper's setting (n = 100 candidates in [0, 1], SE kernel, l = 0.2,
CTL(eps = 1) rewards) and on n = 2000, after t rounds of history, it prints the
median time of one round for GP-UCB (the O(n t) engine), TGP-UCB (the same engine on
truncated rewards), ATA-GP-UCB (Nystrom features and truncation of all past rewards,
every round) and MoMA-GP-UCB (cheap plays inside an epoch, one Nystrom update per
epoch: the figure is the mean over a whole epoch), and each as a ratio to GP-UCB
measured in the same run.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pobo.parties.gp import IncrementalGP  # noqa: E402
from pobo.parties.kernels import squared_exponential  # noqa: E402
from pobo.parties.robust import ROBUST, RewardModel  # noqa: E402
from pobo.parties.strategies import DEFAULT_BETA_SCALE, beta_gp_ucb  # noqa: E402

ROUNDS = 30


class _GPUCB:
    """Plain GP-UCB as a learner, for timing on the same footing."""

    def __init__(self, Z, kernel, T, model, **_):
        self.gp = IncrementalGP(Z, kernel, 1.0 + 2 * model.laplace_scale**2, T)

    def next_index(self, rng):
        return self.gp.ucb_argmax(beta_gp_ucb(self.gp.t + 1, self.gp.n), rng)

    def observe(self, i, y):
        self.gp.add(i, y)


def time_rounds(cls, n: int, t: int, rng: np.random.Generator) -> float:
    """Median seconds of one round after t rounds of history (MoMA: mean over an epoch)."""
    Z = np.linspace(0, 1, n)[:, None]
    f = np.sin(6 * Z[:, 0])
    model = RewardModel(B=1.0, R=1.0, ldp_eps=1.0, noise="uniform")
    kwargs = {"rng": np.random.default_rng(0)} if cls.name in ("ata-gp-ucb", "moma-gp-ucb") else {}
    scale = DEFAULT_BETA_SCALE.get(cls.name, 1.0)
    learner = cls(Z, squared_exponential(0.2), t + 2 * ROUNDS + 400, model, scale=scale, **kwargs)
    noise = lambda: rng.laplace(0, model.laplace_scale)  # noqa: E731
    for _ in range(t):
        i = learner.next_index(rng)
        learner.observe(i, float(f[i] + noise()))
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        i = learner.next_index(rng)
        learner.observe(i, float(f[i] + noise()))
        times.append(time.perf_counter() - start)
    if cls.name == "moma-gp-ucb":  # epoch ends are rare but dominate: average a full epoch
        k = learner.k
        start = time.perf_counter()
        for _ in range(k):
            i = learner.next_index(rng)
            learner.observe(i, float(f[i] + noise()))
        return (time.perf_counter() - start) / k
    return float(np.median(times))


def main() -> None:
    """Print the table."""
    rng = np.random.default_rng(1)
    _GPUCB.name = "gp-ucb"
    learners = {"gp-ucb": _GPUCB, **ROBUST}
    print(f"{'n':>6} {'t':>6} " + " ".join(f"{name:>13}" for name in learners)
          + "   (ms per round; ratio to gp-ucb)")
    for n, t in ((100, 500), (100, 1900), (2000, 500)):
        ms = {name: 1e3 * time_rounds(cls, n, t, rng) for name, cls in learners.items()}
        base = ms["gp-ucb"]
        print(f"{n:>6} {t:>6} " + " ".join(f"{ms[name]:>7.3f} x{ms[name] / base:<5.1f}"
                                             for name in learners), flush=True)
    print(f"MoMA epochs: k = ceil(24 ln(4 e T / 0.05)) = "
          f"{math.ceil(24 * math.log(4 * math.e * 2000 / 0.05))} plays at T = 2000")


if __name__ == "__main__":
    main()
