"""Each party on its own over ZeroMQ: the curator binds, the modeler connects.

These are the functions behind `pobo curator` and `pobo modeler`; `pobo run` starts
one of each as separate OS processes (scenarios.launch). The same functions run a
party on a separate machine.
"""
from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import zmq.asyncio

from parties.modeler import HyperFit
from parties.runners import receive_hello, resume_state
from parties.service import CuratorService
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import Error, ReleaseRequest
from protocol.policy import CURATOR, MODELER, NON_PRIVATE, PRIVATE, Boundary
from protocol.transcript import Transcript
from scenarios.session import curate, open_channel, optimise
from transport.security import CurveClient, CurveServer, start_authenticator
from transport.sockets import DealerPipe, RouterHub

LISTENING = "[curator] listening on "


async def serve_curator(service: CuratorService, bind: str, out: Path | None, *,
                        sessions: int = 1, accept_timeout: float = 120.0,
                        curve: CurveServer | None = None, verbose: bool = True,
                        on_bound: Callable[[str], None] | None = None) -> dict | list[dict]:
    """Bind a ROUTER at `bind` and serve modeler sessions of `service`; return the result(s).

    One session (the default) is written to `out` and its result returned. With
    `sessions` > 1 (0: until stopped) the sessions run concurrently in out/<session id>/,
    and the list of results is returned. Every session shares the service's prepared
    projection and the dataset's ledger and budget; a Hello naming a session in the
    service's journal resumes it (after a crash of either side). With `curve` only
    modelers whose keys are in the allowlist get in, and each result names its peer's
    key. Prints the actual endpoint as `[curator] listening on ENDPOINT` (`pobo run`
    reads it). SIGINT and SIGTERM stop the curator after every open session has written
    its record.
    """
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
            tasks.append(asyncio.ensure_future(_session(
                pipe, service, out, sessions != 1, hub.security, verbose)))
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


async def _session(pipe, service: CuratorService, out: Path | None,
                   per_session_folder: bool, security: str, verbose: bool) -> dict:
    """One session: read the Hello, then open a new session or resume a journaled one."""
    channel = open_channel(pipe, CURATOR, False, None, 60.0)
    try:
        hello = await receive_hello(channel)
        try:
            session = (service.resume(hello.resume) if hello.resume
                       else service.new_session(security))
        except ProtocolError as exc:
            await channel.send(Error(exc.code.value, str(exc)[:1000]))
            raise
        where = out / session.session_id if per_session_folder and out is not None else out
        boundary = Boundary(NON_PRIVATE if service.settings.non_private else PRIVATE, CURATOR)
        boundary.incoming(hello)
        transcript = (Transcript(where / "curator.transcript", resume=bool(hello.resume))
                      if where is not None else None)
        channel.settle(boundary, transcript)
        channel.timeout = float(service.config.get("timeout", 60.0))
        return await curate(channel, session, where, verbose=verbose, peer=pipe.peer,
                            hello=hello)
    finally:
        channel.close()


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
                          timeout: float = 60.0, resume: bool = False,
                          verbose: bool = False) -> dict:
    """Connect a DEALER to the curator at `connect` (CURVE-encrypted to its key when
    `curve` is given) and run one session as the modeler; with `resume`, continue the
    session recorded in out/modeler.transcript (same seed and options as before)."""
    state = None
    if resume:
        if out is None:
            raise ValueError("resuming needs the output folder holding the modeler's transcript")
        state = resume_state(out / "modeler.transcript")
    ctx = zmq.asyncio.Context()
    channel = open_channel(DealerPipe.connect(ctx, connect, curve=curve), MODELER, non_private,
                           out, timeout, resume=resume)
    try:
        return await optimise(channel, seed, strategy, out, hyper=hyper, beta_scale=beta_scale,
                              release=release, resume=state, verbose=verbose)
    finally:
        channel.close()
        ctx.term()
