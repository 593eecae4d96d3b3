"""Run a coroutine from synchronous code, inside or outside a running event loop.

`asyncio.run` refuses to start inside a running loop (a Jupyter cell, an async web
handler). `run_blocking` uses `asyncio.run` where it can and otherwise runs the
coroutine on its own loop in a worker thread, blocking the caller until it ends --
so pobo's synchronous calls (`pobo.scenarios.launch.run`, `run_sweep`) work in a
notebook, and the async ones (`run_async`, `run_inproc`) are there to `await`.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """The result of `coro`, run to completion on a fresh event loop (in this thread if
    no loop runs here, else in a worker thread); its exception is raised here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    outcome: dict[str, Any] = {}

    def worker() -> None:
        try:
            outcome["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=worker, name="pobo-blocking", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
