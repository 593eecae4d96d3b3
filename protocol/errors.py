"""Typed errors shared by every layer: one class per failure a caller must tell apart."""
from __future__ import annotations

from enum import Enum


class ErrorCode(str, Enum):
    """Machine-readable codes carried by an `Error` message and by `ProtocolError`."""

    MALFORMED = "malformed"
    UNKNOWN_KIND = "unknown_kind"
    VERSION_MISMATCH = "version_mismatch"
    POLICY = "policy"
    INDEX_OUT_OF_RANGE = "index_out_of_range"
    BUDGET_EXHAUSTED = "budget_exhausted"
    SEQUENCE = "sequence"
    DUPLICATE = "duplicate"
    OVERSIZED = "oversized"
    TIMEOUT = "timeout"
    PRIVACY_BUDGET = "privacy_budget"
    NOT_OWNER = "not_owner"  # a session another peer key opened
    SESSION_CLOSED = "session_closed"  # a finished or failed session cannot be resumed
    SUPERSEDED = "superseded"  # a resume took this connection's session over
    BUSY = "busy"  # the curator serves as many sessions as it may
    BAD_SIGNATURE = "bad_signature"  # a frame whose signature or links do not verify
    WRONG_KEY = "wrong_key"  # a peer signing key other than the one expected (or none)
    EVALUATION_FAILED = "evaluation_failed"  # the objective could not be evaluated: retry
    SESSION_LOST = "session_lost"  # a message on a connection with no session: resume it
    REPLAY = "replay"  # a Hello whose nonce the curator has seen already
    LEDGER_INCONSISTENT = "ledger_inconsistent"  # a ledger head that does not extend one seen
    INTERNAL = "internal"


class PoboError(Exception):
    """Base of every error pobo raises on purpose."""


class ProtocolError(PoboError):
    """A frame or message that is not a valid, allowed protocol message."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.MALFORMED, seq: int = 0) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.seq = int(seq)  # the query refused (Error.seq on the wire), 0 for none

    @property
    def recoverable(self) -> bool:
        """Whether the session can go on after refusing the offending message."""
        return self.code in (ErrorCode.MALFORMED, ErrorCode.UNKNOWN_KIND,
                             ErrorCode.INDEX_OUT_OF_RANGE, ErrorCode.BUDGET_EXHAUSTED,
                             ErrorCode.SEQUENCE, ErrorCode.OVERSIZED, ErrorCode.POLICY,
                             ErrorCode.PRIVACY_BUDGET, ErrorCode.DUPLICATE,
                             ErrorCode.BAD_SIGNATURE, ErrorCode.EVALUATION_FAILED)


class ChunkError(ProtocolError):
    """A chunked Dataset body that cannot be accepted (protocol.chunks): a head announcing
    too much, a chunk frame that is oversized, short, out of order, missing or after the
    end, or a body that does not match its digest. Its code says which kind of fault."""


class PolicyViolation(ProtocolError):
    """A message the boundary policy forbids in this direction or with this payload."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.POLICY)


class PeerTimeout(PoboError):
    """The peer sent nothing before the deadline (it may have vanished)."""


class ChunksStopped(ChunkError, PeerTimeout):
    """A chunked Dataset whose chunk frames stopped: no chunk came where one was due,
    within the receiver's timeout (`timeout`, PROTOCOL.md 5.1). The Dataset is refused;
    a PeerTimeout too, since the peer may have vanished."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.TIMEOUT)


class PeerError(PoboError):
    """The peer answered with an `Error` message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"peer reported {code}: {message}")
        self.code = code
        self.peer_message = message


class PeerGone(PoboError):
    """The peer cannot be reached any more (disconnected or unroutable)."""


class HandshakeFailed(PeerTimeout):
    """Nothing arrived before the deadline and libzmq reported why: the security
    handshake failed (mechanism mismatch, wrong server key). A PeerTimeout with a cause."""


class AuthenticationFailed(PoboError):
    """The curator's ZAP handler refused this side's CURVE key (raised at once, no retry helps)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class LedgerInconsistent(ProtocolError):
    """A curator's ledger head that is not an extension of one the modeler saw before
    (protocol.checkpoint.extends): fewer entries, another root at the same size, or a
    consistency proof that fails. The session cannot go on: the history was rewritten."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.LEDGER_INCONSISTENT)
