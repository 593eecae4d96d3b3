"""An event loop that polls briefly before it sleeps, while frames come close together.

A process that sleeps in `epoll_wait` between two frames pays, on waking, more than the
wake-up itself: on a virtual machine's cores the ~40 Python calls that handle the next
frame run 2-3x slower than the same calls in a loop (docs/performance.md, "The round
trip"). `SpinningSelector` is the hybrid polling of network stacks (Linux's busy_poll,
Aeron's back-off idle strategy): when the loop has nothing to run it polls the selector
without blocking, yielding its core at each turn, and only then sleeps. It polls

- only while traffic is dense: the last wait that ended in an event lasted no longer
  than `spin` (a longer one, such as a modeler's GP step, an objective that takes
  seconds or an idle curator, turns polling off until a wait is short again);
- only until `spin` after the last event (short timers alone never keep it polling);
- for at most SHARE of any WINDOW seconds (the polls of the last WINDOW seconds are
  kept, so a burst may poll through but no span of WINDOW holds more): a peer sending
  frames just under `spin` apart costs the loop at most that share of a core in
  polling, not all of it.

So an idle or slow session costs no CPU. It changes when the loop looks, never what it
sees: the same events, in the same order, and a timer is never late (a poll stops at the
loop's next timer). `spin=0` is asyncio's own loop; `spin` is at most
MAX_SPIN. `event_loop(spin)` is the loop factory (`asyncio.Runner(loop_factory=...)`),
`run(main, spin)` the `asyncio.run` of it.
"""
from __future__ import annotations

import math
import os
import selectors
import time
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")
_yield = getattr(os, "sched_yield", lambda: None)

SPIN = 500e-6  # seconds a loop polls before it sleeps, while frames come this close
MAX_SPIN = 0.01  # the most: a window as long as the loop's timers would never stop polling
SHARE, WINDOW = 0.5, 0.1  # a loop polls at most SHARE of any WINDOW seconds


class SpinningSelector(selectors.DefaultSelector):  # type: ignore[misc, valid-type]
    """The platform's default selector, which polls (timeout 0) before a blocking wait
    while frames come close together: only while the last wait that ended in an event
    lasted no longer than `spin`, only until `spin` after that event, and for at most
    `share` of the time (see the module's docstring)."""

    def __init__(self, spin: float = SPIN, share: float = SHARE) -> None:
        super().__init__()
        self.spin = checked_spin(spin)
        if not (isinstance(share, (int, float)) and 0 <= share <= 1):
            raise ValueError(f"share must be a fraction in [0, 1], not {share!r}")
        self.share = float(share)
        self.dense = False  # the last wait that ended in an event lasted <= spin
        self.event_at = -math.inf  # when the last wait that found an event ended
        self.spins = 0  # waits that ended in an event while polling (a statistic)
        self.polled = 0.0  # seconds spent polling, in all (a statistic)
        self._recent: deque[tuple[float, float]] = deque()  # (end, seconds) of recent polls
        self._recent_polled = 0.0  # their sum

    def select(self, timeout: float | None = None) -> list:
        """The ready keys, as the default selector's `select(timeout)` returns them."""
        poll = super().select
        if timeout is not None and timeout <= 0:  # a busy loop's look: never polls
            ready = poll(0)
            if ready:  # an event all the same: the next idle wait may poll after it
                self.event_at = time.perf_counter()
            return ready
        started = now = time.perf_counter()
        until = self.event_at + self.spin  # never longer than `spin` after an event
        if timeout is not None:
            until = min(until, started + timeout)  # nor past the loop's next timer
        if self.dense and until > started:
            until = min(until, started + self._share_left(started))
            while now < until:
                ready = poll(0)
                if ready:
                    self.event_at = time.perf_counter()
                    self._polled(started, self.event_at)
                    self.spins += 1
                    return ready
                _yield()  # a thread ready on this core (ZeroMQ's I/O thread) runs now
                now = time.perf_counter()
            self._polled(started, now)
            if timeout is not None:
                timeout = max(0.0, timeout - (now - started))
        ready = poll(timeout)
        if ready:
            self.event_at = time.perf_counter()
            self.dense = self.event_at - started <= self.spin
        elif timeout is None or timeout >= self.spin:
            self.dense = False  # a quiet spell: poll again once a wait is short
        return ready

    def _share_left(self, now: float) -> float:
        """Seconds this loop may still poll from `now`: SHARE of WINDOW less the polls of
        the last WINDOW seconds (one that began before them counts whole: never less
        than the span holds), so that no WINDOW-long span holds more than SHARE."""
        recent = self._recent
        while recent and recent[0][0] <= now - WINDOW:
            self._recent_polled -= recent.popleft()[1]
        if not recent:
            self._recent_polled = 0.0  # (no rounding kept across quiet spells)
        return self.share * WINDOW - self._recent_polled

    def _polled(self, started: float, ended: float) -> None:
        """Count a poll from `started` to `ended`."""
        seconds = ended - started
        self.polled += seconds
        self._recent.append((ended, seconds))
        self._recent_polled += seconds


def checked_spin(spin: object) -> float:
    """`spin` as seconds in [0, MAX_SPIN]; ValueError naming it otherwise."""
    if isinstance(spin, bool) or not isinstance(spin, (int, float)) \
            or not 0 <= spin <= MAX_SPIN:
        raise ValueError(f"spin must be a number of seconds in [0, {MAX_SPIN:g}], not "
                         f"{spin!r}")
    return float(spin)


def event_loop(spin: float = SPIN) -> asyncio.AbstractEventLoop:
    """A new event loop whose selector is a SpinningSelector(`spin`); for `spin=0` the
    loop asyncio itself would make (the installed policy's: uvloop, say)."""
    import asyncio  # not at import: `pobo --help` reads SPIN without it

    spin = checked_spin(spin)
    if not spin:
        return asyncio.new_event_loop()
    return asyncio.SelectorEventLoop(SpinningSelector(spin))


def run(main: Coroutine[Any, Any, T], spin: float = SPIN) -> T:
    """`asyncio.run(main)` on an `event_loop(spin)`: what `pobo curator` and `pobo
    modeler` run their party on (`--spin`, in microseconds there); `spin=0` is
    `asyncio.run(main)` itself."""
    import asyncio

    spin = checked_spin(spin)
    with asyncio.Runner(loop_factory=(lambda: event_loop(spin)) if spin else None) as runner:
        return runner.run(main)
