"""Messages, encoding, boundary policy, transcripts and the channel seam of pobo.

Knows no sockets and no Bayesian optimisation: everything here is about what may
cross between the curator and the modeler, and in what form.
"""
__all__ = [
    "PROTOCOL_VERSION", "ChunkError", "Dataset", "End", "Error", "ErrorCode", "Hello", "KernelParams",
    "Mechanism", "Message", "PeerError", "PeerGone", "PeerTimeout", "PoboError", "PolicyViolation",
    "ProjectedDataset", "ProtocolError", "Query", "Reward", "SessionParams", "Welcome",
]

_HOMES = {name: "errors" for name in (
    "ChunkError", "ErrorCode", "PeerError", "PeerGone", "PeerTimeout", "PoboError", "PolicyViolation",
    "ProtocolError")}


def __getattr__(name: str) -> object:
    """The names above, imported from their module on first use (PEP 562): importing
    pobo.protocol.errors alone then imports no numpy."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_HOMES.get(name, 'messages')}"), name)
