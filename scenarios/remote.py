"""Each party on its own over ZeroMQ: the curator binds, the modeler connects.

These are the functions behind `pobo curator` and `pobo modeler`; `pobo run` starts
one of each as separate OS processes (scenarios.launch). The same functions run a
party on a separate machine.
"""
from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import zmq.asyncio

from parties.modeler import HyperFit
from protocol.messages import ReleaseRequest
from protocol.policy import CURATOR, MODELER
from scenarios.session import CuratorSide, curate, open_channel, optimise
from transport.security import CurveClient, CurveServer, start_authenticator
from transport.sockets import DealerPipe, RouterHub

LISTENING = "[curator] listening on "


async def serve_curator(side: CuratorSide | Callable[[int], CuratorSide], bind: str,
                        out: Path | None, *, sessions: int = 1, accept_timeout: float = 120.0,
                        curve: CurveServer | None = None, verbose: bool = True,
                        on_bound: Callable[[str], None] | None = None) -> dict | list[dict]:
    """Bind a ROUTER at `bind` and serve modeler sessions; return the result(s).

    One session (the default) is written to `out` and its result returned. With
    `sessions` > 1 (0: until stopped) the sessions run concurrently, each with its own
    CuratorSide from `side(i)` -- its own projection, budget and ledger -- in
    out/<session id>/, and the list of results is returned. With `curve` only modelers
    whose keys are in the allowlist get in, and each result names its peer's key.
    Prints the actual endpoint as `[curator] listening on ENDPOINT` (`pobo run` reads it).
    SIGINT and SIGTERM stop the curator after every open session has written its record.
    """
    make_side = side if callable(side) else (lambda i: side)
    ctx = zmq.asyncio.Context()
    auth = start_authenticator(ctx, curve) if curve is not None else None
    hub = RouterHub.bind(ctx, bind, curve=curve)
    stop = _stop_on_signals()
    tasks: list[asyncio.Task] = []
    try:
        if on_bound is not None:
            on_bound(hub.endpoint)
        if verbose:
            print(LISTENING + hub.endpoint, flush=True)
        index = 0
        while sessions == 0 or index < sessions:
            accepting = asyncio.ensure_future(hub.accept(accept_timeout))
            done, _ = await asyncio.wait({accepting, stop}, return_when=asyncio.FIRST_COMPLETED)
            if stop in done:
                accepting.cancel()
                break
            pipe = accepting.result()
            this = make_side(index)
            this = replace(this, params=replace(this.params, security=hub.security))
            where = out if sessions == 1 or out is None else out / this.session_id
            tasks.append(asyncio.ensure_future(_session(pipe, this, where, verbose)))
            index += 1
        waiting = asyncio.ensure_future(asyncio.gather(*tasks, return_exceptions=True))
        await asyncio.wait({waiting, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()  # on a signal: each session still writes its record
        results = await waiting
        if sessions == 1 and isinstance(results[0], BaseException):
            raise results[0]
        return results[0] if sessions == 1 else [r for r in results if isinstance(r, dict)]
    finally:
        stop.cancel()
        await hub.aclose()
        if auth is not None:
            auth.stop()
        ctx.term()


async def _session(pipe, side: CuratorSide, out: Path | None, verbose: bool) -> dict:
    channel = open_channel(pipe, CURATOR, side.config.non_private, out, side.config.timeout)
    try:
        result = await curate(channel, side, out, verbose=verbose, peer=pipe.peer)
    finally:
        channel.close()
    return result


def _stop_on_signals() -> asyncio.Future:
    """A future that completes on SIGINT or SIGTERM (where the loop can watch signals)."""
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(True))
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here: nothing to watch
    stop.add_done_callback(lambda _: [_remove(loop, s) for s in (signal.SIGINT, signal.SIGTERM)])
    return stop


def _remove(loop: asyncio.AbstractEventLoop, sig: int) -> None:
    try:
        loop.remove_signal_handler(sig)
    except (NotImplementedError, RuntimeError, ValueError):
        pass


async def connect_modeler(connect: str, out: Path | None, *, seed: int | None = 0,
                          strategy: str = "gp-ucb", hyper: HyperFit = HyperFit(),
                          beta_scale: float | None = None, release: ReleaseRequest | None = None,
                          non_private: bool = False, curve: CurveClient | None = None,
                          timeout: float = 60.0, verbose: bool = False) -> dict:
    """Connect a DEALER to the curator at `connect` (CURVE-encrypted to its key when
    `curve` is given) and run one session as the modeler."""
    ctx = zmq.asyncio.Context()
    channel = open_channel(DealerPipe.connect(ctx, connect, curve=curve), MODELER, non_private,
                           out, timeout)
    try:
        return await optimise(channel, seed, strategy, out, hyper=hyper, beta_scale=beta_scale,
                              release=release, verbose=verbose)
    finally:
        channel.close()
        ctx.term()
