"""The lean GP cache (float32 storage of V, float64 arithmetic) against the float64 engine.

Stated tolerance: with signal variance ~1 and observations O(1), the posterior mean and
standard deviation of the float32 cache stay within 2e-5 of the float64 engine's at every
step of 80 (sequential and batched, SE, ARD-SE and Matern 5/2, noise variance 1e-2 and
1e-4); the float64 engine itself matches the textbook formula to 1e-8 (tests/test_gp.py).
Measured worst cases: 6e-7 (noise 1e-2), 1e-5 (noise 1e-4).
"""
import math
import tracemalloc

import numpy as np
import pytest

from pobo.parties import gp as gp_module
from pobo.parties.gp import IncrementalGP, cache_dtype, posterior_dense
from pobo.parties.kernels import ard_squared_exponential, matern52, squared_exponential
from pobo.parties.strategies import GPUCB, Distinct

KERNELS = {
    "se": squared_exponential(1.0),
    "ard-se": ard_squared_exponential([0.7, 1.5, 3.0]),
    "matern52": matern52(1.1),
}
TOL = 2e-5


def _pair(Z, kernel, noise, capacity):
    return (IncrementalGP(Z, kernel, noise, capacity, cache="float64"),
            IncrementalGP(Z, kernel, noise, capacity, cache="float32"))


def _gap(a: IncrementalGP, b: IncrementalGP) -> tuple[float, float]:
    return (float(np.abs(a.mean - b.mean).max()),
            float(np.abs(np.sqrt(a.var) - np.sqrt(b.var)).max()))


@pytest.mark.parametrize("noise", [1e-2, 1e-4])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_float32_cache_tracks_the_float64_engine_at_every_step(name, noise):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(3000, 3))
    ref, lean = _pair(Z, KERNELS[name], noise, 80)
    assert lean.V.dtype == np.float32 and lean.V.nbytes == ref.V.nbytes // 2
    for t in range(80):  # UCB choices (rows near the data), random rows, repeats
        i = (int(np.argmax(ref.ucb_score(4.0))) if t % 3 else
             int(rng.integers(3000)) if t % 2 else (int(ref.indices[t - 1]) if t else 0))
        y = float(np.sin(Z[i]).sum() + math.sqrt(noise) * rng.normal())
        ref.add(i, y)
        lean.add(i, y)
        assert max(_gap(ref, lean)) <= TOL, (t, _gap(ref, lean))
    mean, var = posterior_dense(Z, *ref.observations(), KERNELS[name], noise)
    assert np.abs(lean.mean - mean).max() <= TOL
    assert np.abs(np.sqrt(lean.var) - np.sqrt(var)).max() <= TOL


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_float32_cache_batches_resolved_out_of_order_match(name):
    """GP-BUCB: pending rows swapped past each other (Givens rotations of stored float32
    rows), resolved in shuffled order."""
    rng = np.random.default_rng(1)
    Z = rng.normal(size=(2000, 3))
    ref, lean = _pair(Z, KERNELS[name], 1e-3, 80)
    for _ in range(20):
        rows = [int(i) for i in rng.integers(2000, size=4)]
        slots = [(ref.add_pending(i), lean.add_pending(i), i) for i in rows]
        assert max(_gap(ref, lean)) <= TOL
        for k in rng.permutation(4):
            a, b, i = slots[k]
            y = float(np.cos(Z[i]).sum())
            ref.resolve(a, y)
            lean.resolve(b, y)
            assert max(_gap(ref, lean)) <= TOL
    assert np.array_equal(ref.observations()[0], lean.observations()[0])


def test_gp_ucb_makes_the_same_choices_with_either_cache():
    """60 rounds of GP-UCB on a smooth function: the same rows, in the same order."""
    rng = np.random.default_rng(2)
    Z = rng.uniform(-3, 3, size=(20000, 2))
    f = np.sin(Z[:, 0]) * np.cos(0.7 * Z[:, 1])
    strategy = GPUCB()
    chosen = []
    for cache in ("float64", "float32"):
        gp = IncrementalGP(Z, squared_exponential(0.8), 1e-3, 60, cache=cache)
        picks, draw = [], np.random.default_rng(3)
        for t in range(1, 61):
            i = strategy.select(gp, t, draw)
            gp.add(i, float(f[i]))
            picks.append(i)
        chosen.append(picks)
    assert chosen[0] == chosen[1]


def test_auto_stores_float32_only_past_the_threshold(monkeypatch):
    Z = np.random.default_rng(4).normal(size=(1000, 2))
    assert IncrementalGP(Z, squared_exponential(1.0), 0.1, 10).V.dtype == np.float64
    assert cache_dtype("auto", 10**7, 100) == np.float32  # n = 1e7, T = 100: 4 GB, not 8
    assert cache_dtype("auto", 10**6, 100) == np.float64
    monkeypatch.setattr(gp_module, "LEAN_CACHE_BYTES", 8 * 1000 * 10 - 1)
    gp = IncrementalGP(Z, squared_exponential(1.0), 0.1, 10)
    assert gp.V.dtype == np.float32 and gp.V.nbytes == 4 * 1000 * 10
    assert gp.rebuilt(squared_exponential(2.0), 0.1).V.dtype == np.float32
    with pytest.raises(ValueError, match="cache"):
        IncrementalGP(Z, squared_exponential(1.0), 0.1, 10, cache="float16")


@pytest.mark.parametrize("cache", ["float64", "float32"])
def test_a_step_allocates_no_candidate_sized_float_vector(cache):
    """Choosing a row (UCB argmax, GP-UCB and the distinct rule) and conditioning on it
    allocate less than one float64 vector over the n candidates: the scores go into the
    engine's scratch, the float32 product works block by block."""
    n = 1_000_000
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(n, 3))
    gp = IncrementalGP(Z, squared_exponential(1.0), 1e-2, 30, cache=cache)
    strategies = [GPUCB(), Distinct(GPUCB())]
    for t in range(1, 21):
        gp.add(strategies[t % 2].select(gp, t, rng), float(rng.normal()))
    tracemalloc.start()
    try:
        for t in range(21, 25):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            i = strategies[t % 2].select(gp, t, rng)
            gp.add(i, float(rng.normal()))
            peak = tracemalloc.get_traced_memory()[1] - before
            assert peak < 8 * n, f"step {t}: {peak / 1e6:.1f} MB of temporaries"
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("cache", ["float64", "float32"])
def test_a_rebuild_in_place_takes_the_cache_over_and_matches_a_fresh_one(cache):
    """The modeler's refit keeps one T x n cache, not two, and gets the same engine."""
    rng = np.random.default_rng(6)
    Z = rng.normal(size=(2000, 3))
    gp = IncrementalGP(Z, squared_exponential(1.0), 1e-2, 30, cache=cache)
    for i in rng.integers(2000, size=20):
        gp.add(int(i), float(np.sin(Z[i]).sum()))
    fresh = gp.rebuilt(squared_exponential(0.7), 2e-2, 0.1)
    cache_memory = gp.V
    taken = gp.rebuilt(squared_exponential(0.7), 2e-2, 0.1, in_place=True)
    assert taken.V is cache_memory and gp.V is None
    assert np.array_equal(taken.mean, fresh.mean) and np.array_equal(taken.var, fresh.var)
    assert np.array_equal(taken.V[:20], fresh.V[:20])


class _RecordingNumpy:
    """numpy for parties.gp, recording each vector-matrix `dot` (a block of the float32
    cache's product): its matrix's elements and the most BLAS threads any library may use."""

    def __init__(self) -> None:
        self.products: list[tuple[int, int]] = []

    def __getattr__(self, name):
        return getattr(np, name)

    def dot(self, a, b, out=None):
        if np.ndim(a) == 1 and np.ndim(b) == 2:
            threads = 0
            if not self.products:  # (a step's products share one limit: its first tells)
                from threadpoolctl import threadpool_info
                threads = max(i["num_threads"] for i in threadpool_info()
                              if i["user_api"] == "blas")
            self.products.append((b.size, threads))
        return np.dot(a, b, out=out)


def test_the_float32_product_keeps_its_blocks_small_and_on_one_blas_thread(monkeypatch):
    """Issue 47: at n = 1e7, T = 100 steps 89-100 were 5-7x slower than step 88. The blocks
    were capacity-sized (5242 candidates x t rows), so at t = 88 each of the ~1900 block
    products a step crossed OpenBLAS's threading threshold (460,800 elements) and forked and
    joined a second thread, on a loaded 2-core machine a wait for a core every time. Now a
    block product holds SCRATCH / t candidates, the same size at every t, and runs with the
    BLAS limited to one thread; the blocks cover all n candidates every step."""
    n, capacity = 70_000, 100
    Z = np.random.default_rng(7).normal(size=(n, 3))
    gp = IncrementalGP(Z, squared_exponential(1.0), 1e-2, capacity, cache="float32")
    recorder = _RecordingNumpy()
    monkeypatch.setattr(gp_module, "np", recorder)
    largest = {}
    for t in range(capacity):
        recorder.products.clear()
        gp.add(int(np.argmax(gp.ucb_score(4.0))) if t % 2 else 7 * t, float(np.sin(t)))
        if t == 0:
            assert not recorder.products  # no stored row yet: no product
            continue
        sizes = [size for size, _ in recorder.products]
        assert sum(sizes) == t * n, t  # every stored row times every candidate, once
        assert max(sizes) <= gp_module.SCRATCH, (t, max(sizes))
        assert recorder.products[0][1] == 1, t
        largest[t] = max(sizes)
    # the block's size does not grow with t (it did, 20x from t = 5 to t = 99)
    assert largest[capacity - 1] <= largest[5] and largest[5] >= gp_module.SCRATCH // 2
