"""Messages, encoding, boundary policy, transcripts and the channel seam of pobo.

Knows no sockets and no Bayesian optimisation: everything here is about what may
cross between the curator and the modeler, and in what form.
"""
from pobo.protocol.errors import (
    ErrorCode,
    PeerError,
    PeerGone,
    PeerTimeout,
    PoboError,
    PolicyViolation,
    ProtocolError,
)
from pobo.protocol.messages import (
    PROTOCOL_VERSION,
    Dataset,
    End,
    Error,
    Hello,
    KernelParams,
    Mechanism,
    Message,
    ProjectedDataset,
    Query,
    Reward,
    SessionParams,
    Welcome,
)

__all__ = [
    "PROTOCOL_VERSION", "Dataset", "End", "Error", "ErrorCode", "Hello", "KernelParams",
    "Mechanism", "Message", "PeerError", "PeerGone", "PeerTimeout", "PoboError", "PolicyViolation",
    "ProjectedDataset", "ProtocolError", "Query", "Reward", "SessionParams", "Welcome",
]
