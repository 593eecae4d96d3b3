"""Each party on its own over ZeroMQ: the curator binds, the modeler connects.

These are the functions behind `pobo curator` and `pobo modeler`; `pobo run` starts
one of each as separate OS processes (scenarios.launch). The same functions run a
party on a separate machine.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import zmq.asyncio

from parties.modeler import HyperFit
from protocol.messages import ReleaseRequest
from protocol.policy import CURATOR, MODELER
from scenarios.session import CuratorSide, curate, open_channel, optimise
from transport.sockets import DealerPipe, RouterHub

LISTENING = "[curator] listening on "


async def serve_curator(side: CuratorSide, bind: str, out: Path | None, *,
                        accept_timeout: float = 120.0, verbose: bool = True,
                        on_bound: Callable[[str], None] | None = None) -> dict:
    """Bind a ROUTER at `bind`, serve the first modeler that connects, return the result.

    Prints the actual endpoint (a port of 0 or * is replaced by the one chosen) as
    `[curator] listening on ENDPOINT`, which `pobo run` reads to start the modeler.
    """
    ctx = zmq.asyncio.Context()
    hub = RouterHub.bind(ctx, bind)
    try:
        if on_bound is not None:
            on_bound(hub.endpoint)
        if verbose:
            print(LISTENING + hub.endpoint, flush=True)
        pipe = await hub.accept(accept_timeout)
        channel = open_channel(pipe, CURATOR, side.config.non_private, out, side.config.timeout)
        try:
            return await curate(channel, side, out, verbose=verbose)
        finally:
            channel.close()
    finally:
        await hub.aclose()
        ctx.term()


async def connect_modeler(connect: str, out: Path | None, *, seed: int | None = 0,
                          strategy: str = "gp-ucb", hyper: HyperFit = HyperFit(),
                          beta_scale: float | None = None, release: ReleaseRequest | None = None,
                          non_private: bool = False,
                          timeout: float = 60.0, verbose: bool = False) -> dict:
    """Connect a DEALER to the curator at `connect` and run one session as the modeler."""
    ctx = zmq.asyncio.Context()
    channel = open_channel(DealerPipe.connect(ctx, connect), MODELER, non_private, out, timeout)
    try:
        return await optimise(channel, seed, strategy, out, hyper=hyper, beta_scale=beta_scale,
                              release=release, verbose=verbose)
    finally:
        channel.close()
        ctx.term()
