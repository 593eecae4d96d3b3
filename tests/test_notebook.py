"""A notebook-safe API (issue 16 item 3): the synchronous calls work inside a running
event loop (a Jupyter cell runs in one), and their async twins can be awaited."""
from __future__ import annotations

import asyncio

import pytest

from pobo.scenarios.blocking import run_blocking
from pobo.scenarios.launch import run, run_async
from pobo.scenarios.session import RunConfig
from pobo.scenarios.sweep import SweepSpec, run_sweep

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
