"""A reader's wake-up: the future one waiting recv awaits, and a deadline timer kept
across frames, so that a pipe creates no timer per frame (transport.dealer,
transport.router, transport.inproc)."""
from __future__ import annotations

import asyncio


class Wakeup:
    """What one waiting reader awaits: `wake` resolves it (a frame queued, the pipe
    closed, or the timer). The timer is armed once and kept across frames while its
    moment comes no later than the waiting reader's deadline (and it is on the reader's
    loop): it may wake a reader early (which then checks its own deadline and waits on),
    never late. One reader at a time: a second one is refused, not left to hang."""

    __slots__ = ("waiter", "timer", "timer_at", "timer_loop")

    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.timer_loop: asyncio.AbstractEventLoop | None = None

    def wake(self) -> None:
        """Resolve the waiting reader's future, if any."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        """Wait until `wake`, or until about `deadline` (loop time; possibly earlier: the
        caller checks which). A cancelled wait drops the timer."""
        if self.waiter is not None:
            raise RuntimeError("another reader already waits on this pipe: one at a time")
        timer = self.timer
        if timer is None or self.timer_at > deadline or self.timer_loop is not loop:
            if timer is not None:
                timer.cancel()
            self.timer, self.timer_at = loop.call_at(deadline, self._ring), deadline
            self.timer_loop = loop
        self.waiter = loop.create_future()
        try:
            await self.waiter
        except asyncio.CancelledError:
            self._drop_timer()
            raise
        finally:
            self.waiter = None

    def _ring(self) -> None:
        self.timer = None
        self.wake()

    def _drop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def stop(self) -> None:
        """Wake the waiting reader and drop the timer (the pipe is gone)."""
        self._drop_timer()
        self.wake()
