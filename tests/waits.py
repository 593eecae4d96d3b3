"""Bounded waits on asyncio tasks for the tests.

`asyncio.wait_for(task, t)` is not bounded by `t` (Python 3.11): past `t` it cancels the
task and then waits, with no timer at all, for the cancellation to finish -- for ever if
the task is stuck or swallows it. These helpers use `asyncio.wait`, which returns at its
timeout whatever the task does, and say which task would not stop, with its stack.
"""
from __future__ import annotations

import asyncio
import io


def _stack(task: asyncio.Task) -> str:
    """The stack of `task`, then of every other unfinished task of the loop (what the
    stuck task may be waiting for), for the failure message."""
    out = io.StringIO()
    task.print_stack(file=out)
    for other in asyncio.all_tasks():
        if other is not task and other is not asyncio.current_task() and not other.done():
            out.write(f"--- {other!r}\n")
            other.print_stack(file=out)
    return out.getvalue()


async def result_within(task: asyncio.Future, timeout: float, grace: float = 5.0):
    """The task's result within `timeout` s; TimeoutError otherwise, after cancelling the
    task and waiting at most `grace` s more for it."""
    task = asyncio.ensure_future(task)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=grace)
        stuck = "" if task.done() else f"; it ignored its cancellation:\n{_stack(task)}"
        raise TimeoutError(f"no result within {timeout:g} s{stuck}")
    return task.result()


async def stop(task: asyncio.Future, timeout: float = 15.0) -> None:
    """Cancel `task` and wait (at most `timeout` s) until it has ended; its outcome is
    retrieved, never raised. AssertionError, with its stack, if it has not ended."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        raise AssertionError(f"{task!r} still runs {timeout:g} s after its cancellation:\n"
                             f"{_stack(task)}")
    if not task.cancelled():
        task.exception()  # retrieved: the test asserts what it needs elsewhere
