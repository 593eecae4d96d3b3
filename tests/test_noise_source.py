"""The OS-CSPRNG NoiseSource read in bulk: exact uniforms, normals, fork and thread safety.

The CSPRNG cannot be seeded, so the distribution checks are statistical with the
tolerance stated; the exactness checks feed chosen bytes through `random_bytes`.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np
import pytest
from scipy import stats

from pobo.parties import noise
from pobo.parties.noise import NoiseSource


class ScriptedSource(NoiseSource):
    """A CSPRNG-mode source whose bytes come from a script first, then the OS."""

    def __init__(self, script: list[bytes]) -> None:
        super().__init__()
        self.script = list(script)

    def random_bytes(self, count: int) -> bytes:
        return self.script.pop(0) if self.script else super().random_bytes(count)


def test_uniform_is_on_the_53_bit_grid_inside_the_open_interval():
    """1e6 draws: every one k / 2^53 with 0 < k < 2^53; each of the 53 bits set with
    frequency 1/2 (+- 6 standard errors, 6 * 0.0005); KS against U(0, 1) p > 1e-4."""
    u = NoiseSource().uniform(1_000_000)
    assert u.dtype == np.float64 and u.min() > 0.0 and u.max() < 1.0
    k = u * float(1 << 53)
    assert np.array_equal(k, np.floor(k))
    bits = (k.astype(np.uint64)[:, None] >> np.arange(53, dtype=np.uint64)) & np.uint64(1)
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 6 * 0.0005)
    assert stats.kstest(u, "uniform").pvalue > 1e-4


def test_a_zero_draw_is_redrawn_not_returned():
    """Bytes that make k = 0 for the 2nd of 3 draws: it is redrawn from fresh bytes."""
    top = (5 << 11).to_bytes(8, "little")  # k = 5 once shifted right by 11
    source = ScriptedSource([top + bytes(8) + top, (7 << 11).to_bytes(8, "little")])
    assert list(source.uniform(3) * float(1 << 53)) == [5.0, 7.0, 5.0]


def test_the_largest_draw_stays_below_one():
    """k = 2^53 - 1 (all bits set) gives 1 - 2^-53, not a rounded 1.0."""
    assert ScriptedSource([b"\xff" * 8]).uniform(1)[0] == 1.0 - 2.0 ** -53


def test_standard_normal_across_chunks_is_standard_normal(monkeypatch):
    """2e5 draws in chunks of 999 (odd: the sin half one shorter): mean within 5e-3 x 6
    (6 standard errors), KS p > 1e-4, and the two halves of each Box-Muller pair
    uncorrelated (|rho| < 6 / sqrt(1e5))."""
    monkeypatch.setattr(noise, "NORMAL_CHUNK", 999)
    z = NoiseSource().standard_normal((400, 500))
    assert z.shape == (400, 500) and np.isfinite(z).all()
    flat = z.ravel()
    assert abs(flat.mean()) < 6 / math.sqrt(flat.size)
    assert stats.kstest(flat, "norm").pvalue > 1e-4
    chunk = flat[:999 * 200].reshape(200, 999)
    cos_half, sin_half = chunk[:, :499].ravel(), chunk[:, 500:].ravel()
    assert abs(np.corrcoef(cos_half, sin_half)[0, 1]) < 6 / math.sqrt(cos_half.size)


def test_standard_normal_of_one_and_of_an_int_size():
    assert NoiseSource().standard_normal(1).shape == (1,)
    assert NoiseSource().standard_normal(7).shape == (7,)


@pytest.mark.parametrize("n", [1, 3, 5, 2 ** 100 + 1])
def test_randbelow_is_exactly_in_range_and_uniform(n):
    """60,000 draws: all in [0, n); for small n, chi-square p > 1e-4; for the huge n, the
    top-half frequency 1/2 within 6 standard errors."""
    source = NoiseSource()
    values = [source.randbelow(n) for _ in range(60_000)]
    assert all(0 <= v < n for v in values)
    if n <= 5:
        counts = np.bincount(values, minlength=n)
        assert n == 1 or stats.chisquare(counts).pvalue > 1e-4
    else:
        assert abs(np.mean([v >= n // 2 for v in values]) - 0.5) < 6 * 0.5 / math.sqrt(60_000)


def test_randbelow_rejects_instead_of_folding():
    """n = 3 takes 2 bits: a byte masked to 3 is rejected and the next accepted."""
    assert ScriptedSource([b"\x03", b"\x02"]).randbelow(3) == 2


def test_a_forked_child_never_reuses_its_parents_pool():
    """The parent has drawn from its pool; after fork, parent and child draw 16 bytes
    each: a pool inherited and kept would give both the same bytes."""
    source = NoiseSource()
    source.random_bytes(16)  # the pool is filled, 4080 bytes left in it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, source.random_bytes(16))
        finally:
            os._exit(0)
    os.close(write)
    mine = source.random_bytes(16)
    theirs = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert len(theirs) == 16 and theirs != mine


def _said_by_a_child_forked_while_locked(source: NoiseSource, work) -> bytes:
    """What `work()` returns (bytes) in a child forked while another thread holds the
    source's lock, mid-draw; bounded: the child is killed after 20 s."""
    import select

    read, write = os.pipe()
    with source._lock:  # as another thread inside random_bytes at the fork
        pid = os.fork()
        if pid == 0:  # the child
            try:
                os.write(write, work())
            finally:
                os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 20)
    if not ready:
        os.kill(pid, 9)
    said = os.read(read, 64) if ready else b""
    os.close(read)
    os.waitpid(pid, 0)
    return said


def test_a_forked_child_drops_the_pool_as_the_fork_returns_not_at_its_first_draw():
    """The pool and lock are dropped in the child as fork returns in it, while it has one
    thread: a check at the first draw let two of the child's threads both drop them and
    then draw under two different locks (a review). Here another thread holds the lock
    at the fork; in the child, before any draw, the pool is empty and the lock free,
    and 4 threads drawing at once get distinct bytes."""
    source = NoiseSource()
    source.random_bytes(16)  # the pool is filled

    def work() -> bytes:
        fresh = source._pool == b"" and not source._lock.locked()
        drawn: list[bytes] = []
        threads = [threading.Thread(target=lambda: drawn.extend(
            source.random_bytes(8) for _ in range(500))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        return b"%d %d" % (fresh, len(set(drawn)) == len(drawn) == 2000)

    assert _said_by_a_child_forked_while_locked(source, work) == b"1 1"


def test_threads_never_share_pool_bytes():
    """8 threads x 5,000 draws of 8 bytes from one source: 40,000 distinct values (a
    repeat of a 64-bit value by chance has probability ~1e-10)."""
    source = NoiseSource()
    drawn: list[list[bytes]] = [[] for _ in range(8)]

    def work(out: list[bytes]) -> None:
        for _ in range(5_000):
            out.append(source.random_bytes(8))

    threads = [threading.Thread(target=work, args=(out,)) for out in drawn]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    values = [v for out in drawn for v in out]
    assert len(values) == 40_000 and len(set(values)) == 40_000


def test_seeded_streams_are_unchanged():
    """The seeded branch still draws from the Generator exactly as before: randbelow
    from whole bytes masked and rejected, normals from Generator.standard_normal."""
    rng = np.random.default_rng(11)
    expected = []
    while len(expected) < 20:
        value = int.from_bytes(rng.bytes(2), "little") & 1023
        if value < 1000:
            expected.append(value)
    source = NoiseSource(np.random.default_rng(11))
    assert [source.randbelow(1000) for _ in range(20)] == expected
    source = NoiseSource(np.random.default_rng(11))
    assert np.array_equal(source.standard_normal((3, 4)),
                          np.random.default_rng(11).standard_normal((3, 4)))


def _numbered_pool(monkeypatch) -> None:
    """Make os.urandom return numbered 4-byte words (0, 1, 2, ...): where a draw came from
    in the pool is then readable from its bytes."""
    counter = [0]

    def numbered(count: int) -> bytes:
        words = range(counter[0], counter[0] + (count + 3) // 4)
        counter[0] += len(words)
        return b"".join(i.to_bytes(4, "big") for i in words)[:count]

    monkeypatch.setattr(noise.os, "urandom", numbered)


@pytest.mark.parametrize("bad", [-5000, -1, 2.5, float("nan"), "4", None])
def test_a_bad_count_is_refused_and_never_rewinds_the_pool(monkeypatch, bad):
    """A negative count used to move the pool's cursor back, so the next draws handed
    out bytes already drawn (or, past the start, nothing but zeros); a float left a
    float cursor that broke every later draw. Each is a ValueError now, for every entry
    point, and the draws after it continue where the last one stopped."""
    _numbered_pool(monkeypatch)
    source = NoiseSource()
    assert source.random_bytes(8) == (0).to_bytes(4, "big") + (1).to_bytes(4, "big")
    for draw in (source.random_bytes, source.uniform):
        with pytest.raises(ValueError):
            draw(bad)
    if not (isinstance(bad, int) and bad < 0):  # a negative n has its own message
        with pytest.raises(ValueError, match="integer"):
            source.randbelow(bad)
    assert source.random_bytes(4) == (2).to_bytes(4, "big")  # no byte handed out twice
    assert len(source.uniform(3)) == 3 and source.randbelow(np.int64(7)) in range(7)


def test_a_child_forked_while_the_pool_is_locked_still_draws():
    """A fork while another thread holds the source's lock (mid-draw) used to leave the
    child a lock nobody would release: its next draw hung. The child now starts a lock
    and a pool of its own. (Bounded: the child is killed after 20 s.)"""
    source = NoiseSource()
    source.random_bytes(16)
    theirs = _said_by_a_child_forked_while_locked(source, lambda: source.random_bytes(16))
    assert len(theirs) == 16, "the forked child's draw hung on the inherited lock"
    assert theirs != source.random_bytes(16)
