"""The privacy accountant: the epsilon a composition of mechanisms spends at a given delta.

Basic composition (adding eps's and deltas) is sound but loose for a row reported many
times: 1,000 pure-eps Laplace reports at eps = 1 add up to 1,000, while their exact
composition is (486, 1e-6)-DP. `composed_epsilon` takes the tighter of the two: the
basic sum, and the privacy-loss-distribution (PLD) accountant of dp-accounting
(Google's `dp_accounting.pld`, Meiser & Mohammad 2018, Koskela et al. 2020).

Why dp-accounting: it is maintained (the accountant behind Google's DP libraries and
TensorFlow Privacy), it is pure Python on numpy/scipy (its other dependencies -- absl-py,
attrs, mpmath, dm-tree -- ship wheels; it is imported in the curator only), its PLD is tight up to a *pessimistic* discretisation (an upper
bound on the true epsilon, never below it), it composes heterogeneous mechanisms
(Laplace, Gaussian, any (eps, delta) pair) in one object, and it ships an independent
RDP accountant to test it against. OpenDP's accountants are tied to its measurement
combinators (and a Rust wheel) rather than to a ledger of mechanisms already run.

Each ledger entry is one of three kinds (`kind_of`), each given the PLD of a pair of
distributions that dominates it:
- LAPLACE: a pure-eps lattice Laplace mechanism (parties.noise.lattice_laplace: the
  CTL rewards and Kusner's Algorithm 3). Its noise is discrete Laplace of scale
  steps/eps on an integer lattice with sensitivity at most `steps`, a multiple of
  LAPLACE_GRAIN. Writing a fine geometric variable as j * (a coarse geometric) + (an
  independent remainder) shows that such a mechanism is a post-processing of the
  discrete Laplace mechanism with sensitivity LAPLACE_GRAIN and parameter
  eps / LAPLACE_GRAIN, whose PLD dp-accounting computes exactly (up to discretisation).
- GAUSSIAN: a Gaussian mechanism (protocol.policy.GAUSSIAN_ROWS) that is (eps, delta)-DP: its
  sensitivity-to-noise ratio is at most that of the smallest-noise Gaussian with the same
  (eps, delta), whose PLD therefore dominates it.
- APPROX: any other (eps, delta)-DP mechanism: the PLD of the generic (eps, delta) pair
  (randomised response with a delta atom), which dominates every (eps, delta)-DP
  mechanism (Kairouz, Oh & Viswanath 2015).

dp-accounting (and scipy under it) is imported only when a composition of two or more
mechanisms is asked for, and results are memoised per composition, so a ledger that
charges many identical reports computes each (eps, k)-fold composition once.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from functools import lru_cache

LAPLACE, GAUSSIAN, APPROX = "laplace", "gaussian", "approx"
LAPLACE_GRAIN = 1024  # lattice Laplace sensitivities are multiples of this (parties.noise)
# mechanism names as protocol.policy spells them (not imported: it pulls numpy in, and the
# CLI's parser reads ledgers without it; tests/test_accounting.py checks they agree)
LAPLACE_MECHANISMS = frozenset({"ctl-laplace", "release:lipschitz"})
GAUSSIAN_MECHANISMS = frozenset({"gaussian-rows"})
GAUSSIAN_SIGMA_SLACK = 1e-6  # the accountant's sigma is taken this much (relative) smaller
Part = tuple[str, float, float]  # (kind, epsilon, delta) of one mechanism


def kind_of(mechanism: str, delta: float) -> str:
    """The accountant's kind of a ledger entry (see the module docstring)."""
    if mechanism in LAPLACE_MECHANISMS and delta == 0:
        return LAPLACE
    if mechanism in GAUSSIAN_MECHANISMS and 0 < delta < 1:
        return GAUSSIAN
    return APPROX


def part_of(mechanism: str, epsilon: float, delta: float) -> Part:
    """The (kind, eps, delta) key under which an entry is composed."""
    return kind_of(mechanism, delta), float(epsilon), float(delta)


_UNIT = 1 << 1074  # 2^-1074, the smallest double, is 1 / _UNIT
_BITS = 1075  # _UNIT.bit_length()


class ExactSum:
    """A running sum of floats kept exactly (an integer count of 2^-1074, the smallest
    double's value) and read correctly rounded: `float(s)` is `math.fsum` of all that was
    added, in whatever order, in O(1) per addition. Basic composition is then the sum a
    reader recomputes from the entries, not one that drifts with their order (a total of
    1.0 used to absorb every later 1e-16 charge)."""

    __slots__ = ("_units",)

    def __init__(self, values=()) -> None:
        self._units = 0
        for value in values:
            self.add(value)

    def add(self, value: float, times: int = 1) -> None:
        """Add a finite float `times` times, exactly; ValueError for inf or NaN."""
        try:
            num, den = float(value).as_integer_ratio()  # den: 2^k, k <= 1074
        except (OverflowError, ValueError):
            raise ValueError(f"a ledger sum takes finite values, got {value}") from None
        self._units += times * (num << (_BITS - den.bit_length()))  # num * 2^(1074 - k)

    def __float__(self) -> float:
        return self._units / _UNIT  # int / int is correctly rounded


def basic(parts: Mapping[Part, int]) -> tuple[float, float]:
    """(sum eps, sum delta): basic composition, the exactly rounded sum of every entry
    (math.fsum of them one by one, as the ledger and the journal read it)."""
    eps, dlt = ExactSum(), ExactSum()
    for (_, e, d), n in parts.items():
        eps.add(e, n)
        dlt.add(d, n)
    return float(eps), float(dlt)


def composed_epsilon(parts: Mapping[Part, int], delta: float) -> float:
    """The least eps we can certify for the composition of `parts` (each (kind, eps,
    delta) used `count` times) at `delta`: the smaller of basic composition (when its
    summed delta is within `delta`) and the PLD accountant's pessimistic estimate; a
    single entry is its own (eps, delta), unasked (an upper bound). inf when neither
    certifies anything at this delta."""
    key = tuple(sorted((p, int(n)) for p, n in parts.items() if n > 0))
    return _composed(key, float(delta))


@lru_cache(maxsize=65536)
def _composed(key: tuple[tuple[Part, int], ...], delta: float) -> float:
    eps_sum, delta_sum = basic(dict(key))
    plain = eps_sum if delta_sum <= delta * (1 + 1e-12) else math.inf
    if eps_sum == 0 or not 0 < delta < 1:
        return plain
    if sum(n for _, n in key) <= 1:  # one entry, stated at `delta` like any composition
        # (else adding an entry could lower the figure: two projections read 2.978 at the
        # budget's delta, one alone its own 3.004 at 1e-5)
        (part, _), = key
        if delta == part[2]:
            return plain
        return min(plain, gaussian_epsilon_at(part[1], part[2], delta) if part[0] == GAUSSIAN
                   else pld_epsilon(key, delta))
    return min(plain, pld_epsilon(key, delta))


def gaussian_epsilon_at(epsilon: float, delta: float, target: float) -> float:
    """The eps at `target` of the Gaussian mechanism that is exactly (epsilon, delta)-DP:
    its sensitivity-to-noise ratio mu from the analytic profile (Balle & Wang 2018, Thm
    8: delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)), taken at the upper
    end of its bisection (a pessimistic mu), then eps at `target` from the same profile,
    rounded up. Exact up to the bisections' 1e-12 (tests check it against dp-accounting)."""
    from scipy.special import log_ndtr, ndtr  # lazy, as the PLD

    def profile(eps: float, mu: float) -> float:
        return float(ndtr(mu / 2 - eps / mu) - math.exp(eps + log_ndtr(-mu / 2 - eps / mu)))

    lo, hi = 1e-9, 1e3  # mu: the profile grows with it
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if profile(epsilon, mid) < delta else (lo, mid)
        if hi / lo < 1 + 1e-13:
            break
    mu = hi * (1 + GAUSSIAN_SIGMA_SLACK)
    lo, hi = 0.0, max(epsilon, 1.0)  # eps: the profile falls with it
    while profile(hi, mu) > target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if profile(mid, mu) > target else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return hi


def pld_epsilon(key: tuple[tuple[Part, int], ...], delta: float) -> float:
    """dp-accounting's PLD estimate of eps at `delta` for the composition `key`."""
    from dp_accounting.pld import privacy_loss_distribution as pld  # lazy: scipy under it
    from dp_accounting.pld.accountant import get_smallest_gaussian_noise
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    eps_sum = sum(e * n for (_, e, _), n in key)
    step = max(1e-3, 1e-6 * eps_sum)  # pessimistic: a coarser grid only loosens the bound
    total = None
    for (kind, eps, dlt), count in key:
        if kind == LAPLACE:
            one = pld.from_discrete_laplace_mechanism(
                eps / LAPLACE_GRAIN, sensitivity=LAPLACE_GRAIN, value_discretization_interval=step)
        elif kind == GAUSSIAN:  # below the release's own analytic sigma (dp-accounting's
            # bisection stops up to ~2e-7 above it, a review found): a pessimistic PLD
            sigma = get_smallest_gaussian_noise(DifferentialPrivacyParameters(eps, dlt))
            one = pld.from_gaussian_mechanism(sigma / (1 + GAUSSIAN_SIGMA_SLACK),
                                              value_discretization_interval=step)
        else:
            one = pld.from_privacy_parameters(DifferentialPrivacyParameters(eps, dlt),
                                              value_discretization_interval=step)
        if count > 1:
            one = one.self_compose(count)
        total = one if total is None else total.compose(one)
    return float(total.get_epsilon_for_delta(delta))


def worst_row(rows: Mapping[int, Mapping[Part, int]],
              delta: Callable[[Mapping[Part, int]], float]) -> tuple[int, float] | None:
    """(row, composed eps) of the worst-off row, each row's stated at `delta(parts)`, or
    None without rows.

    The composed eps grows with every count, so only rows whose composition no other
    row's dominates (count by count) need the accountant; with one kind of report that
    is the single most-reported row."""
    if not rows:
        return None
    signatures: dict[tuple, int] = {}
    for row, parts in rows.items():
        sig = tuple(sorted((p, n) for p, n in parts.items() if n > 0))
        signatures.setdefault(sig, row)
    sigs = [dict(s) for s in signatures]
    front = [i for i, s in enumerate(sigs)
             if not any(j != i and _dominates(t, s) for j, t in enumerate(sigs))]
    scored = [(composed_epsilon(sigs[i], delta(sigs[i])), basic(sigs[i])[0], i) for i in front]
    eps, _, best = max(scored)
    return list(signatures.values())[best], eps


def _dominates(a: Mapping[Part, int], b: Mapping[Part, int]) -> bool:
    """a >= b count by count, and a != b."""
    return a != b and all(a.get(p, 0) >= n for p, n in b.items())


def parts_counter(items) -> Counter:
    """A Counter of parts from (mechanism, eps, delta, count) rows."""
    out: Counter = Counter()
    for mechanism, eps, dlt, count in items:
        out[part_of(mechanism, eps, dlt)] += int(count)
    return out
