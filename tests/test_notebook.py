"""A notebook-safe API (issue 16 item 3): the synchronous calls work inside a running
event loop (a Jupyter cell runs in one), and their async twins can be awaited."""
from __future__ import annotations

import asyncio

import pytest

from pobo.blocking import run_blocking
from pobo.launch import run, run_async
from pobo.session import RunConfig
from pobo.sweep import SweepSpec, run_sweep

CONFIG = RunConfig("synthetic", T=6, seed=2, options={"grid": 8})


def test_the_readme_snippet_runs_inside_a_running_loop(tmp_path):
    async def cell() -> dict:  # what Jupyter does: the cell's code runs in a live loop
        asyncio.get_running_loop()
        return run(CONFIG, tmp_path / "sync", transport="inproc", verbose=False)

    result = asyncio.run(cell())
    assert result["status"] == "ok" and len(result["queries"]) == 6


def test_the_async_twin_is_awaitable_and_gives_the_same_session(tmp_path):
    async def cell() -> dict:
        return await run_async(CONFIG, tmp_path / "async", transport="inproc", verbose=False)

    awaited = asyncio.run(cell())
    plain = run(CONFIG, tmp_path / "plain", transport="inproc", verbose=False)
    assert awaited["queries"] == plain["queries"] and awaited["rewards"] == plain["rewards"]


def test_a_sweep_runs_inside_a_running_loop(tmp_path):
    spec = SweepSpec("synthetic", seeds=2, T=5, options={"grid": 8})

    async def cell() -> list:
        return run_sweep(spec, tmp_path, workers=1)

    rows = asyncio.run(cell())
    assert len(rows) == 2


def test_run_blocking_raises_the_coroutines_error_in_the_caller():
    async def fails() -> None:
        raise KeyError("inside")

    async def cell() -> None:
        run_blocking(fails())

    with pytest.raises(KeyError, match="inside"):
        asyncio.run(cell())
    with pytest.raises(KeyError, match="inside"):
        run_blocking(fails())


def test_ctrl_c_while_run_blocking_waits_cancels_the_coroutine():
    """Inside a running loop run_blocking runs the coroutine in a worker thread. Ctrl-C
    used to interrupt only the caller's wait: the session went on in the background
    (a notebook cell interrupted, its run still talking to a curator)."""
    import signal
    import threading
    import time

    cancelled = threading.Event()

    async def session() -> None:
        try:
            await asyncio.sleep(20)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def cell() -> None:
        run_blocking(session())

    loop = asyncio.new_event_loop()  # no asyncio.run: its Ctrl-C handler would cancel instead
    ctrl_c = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident,
                                                        signal.SIGINT))
    started = time.monotonic()
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(cell())
    finally:
        ctrl_c.cancel()
        loop.close()
    assert cancelled.wait(5), "the coroutine was not cancelled"
    assert time.monotonic() - started < 10
    workers = [t for t in threading.enumerate() if t.name == "pobo-blocking"]
    for t in workers:
        t.join(5)
    assert not any(t.is_alive() for t in workers)


async def test_a_cancelled_run_async_stops_both_party_processes(tmp_path):
    """run_async waits for the party processes in a worker thread; cancelling it used to
    return at once and leave both processes (and the thread) running the session."""
    import os

    from tests.curator_process import kill_all, wait_gone

    def parties() -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == os.getpid() and b"pobo" in argv:
                found.append(int(entry))
        return found

    config = RunConfig("synthetic", T=5000, seed=2, options={"grid": 40})
    task = asyncio.ensure_future(run_async(config, tmp_path, transport="tcp", verbose=False))
    seen: list[int] = []
    try:
        for _ in range(600):
            if (tmp_path / "curator.transcript").exists() or task.done():
                break
            await asyncio.sleep(0.1)
        seen = parties()
        assert not task.done() and len(seen) == 2, (task, seen)
        task.cancel()
        await asyncio.wait({task}, timeout=40)
        assert task.cancelled()
        assert not wait_gone(seen, 10), "a party process outlived the cancelled run"
    finally:
        task.cancel()
        kill_all(seen)
