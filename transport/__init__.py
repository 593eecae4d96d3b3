"""Frame pipes that carry pobo's encoded messages: ZeroMQ (tcp, ipc) or in-process.

Knows ZeroMQ and asyncio, nothing of Bayesian optimisation; a pipe is wrapped in a
`protocol.channel.Channel` before any party sees it.
"""
__all__ = ["DealerPipe", "QueuePipe", "RouterHub", "RouterPipe", "SocketOptions", "pipe_pair"]


def __getattr__(name: str) -> object:
    """The names above, imported from their module on first use (PEP 562): the
    in-process pipe then imports no ZeroMQ."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    home = "inproc" if name in ("QueuePipe", "pipe_pair") else "sockets"
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
