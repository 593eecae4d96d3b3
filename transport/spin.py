"""An event loop that polls briefly before it sleeps, while frames come close together.

A process that sleeps in `epoll_wait` between two frames pays, on waking, more than the
wake-up itself: on a virtual machine's cores the ~40 Python calls that handle the next
frame run 2-3x slower than the same calls in a loop (docs/performance.md, "The round
trip"). `SpinningSelector` is the hybrid polling of network stacks (Linux's busy_poll,
Aeron's back-off idle strategy): when the loop has nothing to run it polls the selector
without blocking for up to `spin` seconds, and only then sleeps. It polls only while
traffic is dense: when the last wait that ended in an event lasted no longer than
`spin`. A wait longer than that (a modeler's GP step, an objective that takes seconds,
an idle curator) turns polling off until a wait is short again, so an idle or slow
session costs no CPU, and a run of frames spends at most `spin` CPU-seconds a wait.

It changes when the loop looks, never what it sees: the same events, in the same order,
and a timer is never late (a poll stops at the loop's next timer). `spin=0` is the plain
selector. `event_loop(spin)` is the loop factory (`asyncio.Runner(loop_factory=...)`).
"""
from __future__ import annotations

import math
import os
import selectors
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")
_yield = getattr(os, "sched_yield", lambda: None)

SPIN = 500e-6  # seconds a loop polls before it sleeps, while frames come this close


class SpinningSelector(selectors.DefaultSelector):  # type: ignore[misc, valid-type]
    """The platform's default selector, which polls (timeout 0) for up to `spin` seconds
    before a blocking wait, as long as the last wait that ended in an event was no
    longer than `spin` (see the module's docstring)."""

    def __init__(self, spin: float = SPIN) -> None:
        super().__init__()
        self.spin = checked_spin(spin)
        self.dense = False  # the last wait that ended in an event lasted <= spin
        self.spins = 0  # waits that ended in an event while polling (a statistic)

    def select(self, timeout: float | None = None) -> list:
        """The ready keys, as the default selector's `select(timeout)` returns them."""
        if timeout is not None and timeout <= 0:
            return super().select(0)
        poll = super().select
        started = time.perf_counter()
        if self.dense:
            until = started + (self.spin if timeout is None else min(self.spin, timeout))
            while True:
                ready = poll(0)
                if ready:
                    self.spins += 1
                    return ready
                now = time.perf_counter()
                if now >= until:
                    break
                _yield()  # a thread ready on this core (ZeroMQ's I/O thread) runs now
            if timeout is not None:
                timeout = max(0.0, timeout - (now - started))
        ready = poll(timeout)
        if ready:
            self.dense = time.perf_counter() - started <= self.spin
        elif timeout is None or timeout >= self.spin:
            self.dense = False  # a quiet spell: poll again once a wait is short
        return ready


def checked_spin(spin: object) -> float:
    """`spin` as seconds >= 0; ValueError naming it otherwise."""
    if isinstance(spin, bool) or not isinstance(spin, (int, float)) \
            or not math.isfinite(spin) or spin < 0:
        raise ValueError(f"spin must be a number of seconds >= 0, not {spin!r}")
    return float(spin)


def event_loop(spin: float = SPIN) -> asyncio.AbstractEventLoop:
    """A new event loop whose selector is a SpinningSelector(`spin`); a plain selector
    loop for `spin=0`."""
    import asyncio  # not at import: `pobo --help` reads SPIN without it

    spin = checked_spin(spin)
    return asyncio.SelectorEventLoop(SpinningSelector(spin) if spin else
                                     selectors.DefaultSelector())


def run(main: Coroutine[Any, Any, T], spin: float = SPIN) -> T:
    """`asyncio.run(main)` on an `event_loop(spin)`: what `pobo curator` and `pobo
    modeler` run their party on (`--spin`, in microseconds there)."""
    import asyncio

    spin = checked_spin(spin)
    with asyncio.Runner(loop_factory=lambda: event_loop(spin)) as runner:
        return runner.run(main)
