"""Run a coroutine from synchronous code, inside or outside a running event loop.

`asyncio.run` refuses to start inside a running loop (a Jupyter cell, an async web
handler). `run_blocking` uses `asyncio.run` where it can and otherwise runs the
coroutine on its own loop in a worker thread, blocking the caller until it ends --
so pobo's synchronous calls (`pobo.launch.run`, `run_sweep`) work in a
notebook, and the async ones (`run_async`, `run_inproc`) are there to `await`.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


STOP_WAIT = 30.0  # seconds an interrupted run may take to unwind (write its records)


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """The result of `coro`, run to completion on a fresh event loop (in this thread if
    no loop runs here, else in a worker thread); its exception is raised here. Ctrl-C
    (or any exception) while the caller waits for the worker cancels the coroutine and
    waits up to STOP_WAIT s for it to unwind, so that no session goes on behind it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    outcome: dict[str, Any] = {}
    running: dict[str, Any] = {}
    started = threading.Event()

    async def main() -> T:
        running["loop"], running["task"] = asyncio.get_running_loop(), asyncio.current_task()
        started.set()
        return await coro

    def worker() -> None:
        try:
            outcome["value"] = asyncio.run(main())
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            started.set()

    thread = threading.Thread(target=worker, name="pobo-blocking", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        _cancel(running, started)
        thread.join(STOP_WAIT)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _cancel(running: dict[str, Any], started: threading.Event) -> None:
    """Cancel the worker's main task (once it exists) from the caller's thread."""
    started.wait(STOP_WAIT)
    loop, task = running.get("loop"), running.get("task")
    if loop is not None:
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:  # its loop has already closed: nothing runs any more
            pass
