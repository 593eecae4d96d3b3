"""The message kinds of the pobo protocol, one frozen dataclass each.

Curator -> modeler: Welcome, Dataset, Reward, Pending, Release, End, Error; Retry before any
session (the cookie round, protocol.cookie).
Modeler -> curator: Hello, Query, ReleaseRequest, End, Error.
Field annotations are the schema: the codec validates every field against them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

PROTOCOL_VERSION = 6  # 2: signed, cross-linked envelopes (protocol.signing); 3: Pending, batches,
# Error.seq; 4: Hello.nonce, every per-query Error names its query, refused queries are not
# asked, session_lost and replay; 5: a Dataset's Z in chunk frames (protocol.chunks,
# PROTOCOL.md); 6: the cookie round (Retry, Hello.cookie: protocol.cookie), the ledger
# as a Merkle log (LedgerHead.root and .log, Hello.ledger_seen, Welcome's and End's
# consistency proofs: protocol.merkle, PROTOCOL.md section 4.2)


@dataclass(frozen=True)
class Mechanism:
    """A privacy mechanism in force for the session, with its (epsilon, delta)."""

    name: str
    epsilon: float
    delta: float


@dataclass(frozen=True)
class KernelParams:
    """Kernel and hyperparameters the curator declares public for the session.

    `kernel` is 'se' (the paper's isotropic squared exponential) or 'matern52'.
    `status` is 'public' when these are the values to use, or 'initial' when they are
    only starting values and the modeler is expected to fit its own (maximum likelihood
    on Z and the rewards): the curator's own fits never cross the boundary.
    """

    kernel: str
    lengthscale: float
    signal_var: float
    noise_var: float
    status: str = "public"


@dataclass(frozen=True)
class SessionParams:
    """Public parameters of a session, announced by the curator in its Welcome."""

    scenario: str
    n: int
    r: int
    T: int
    policy: str
    mechanisms: tuple[Mechanism, ...]
    kernel: KernelParams
    randomness: str
    reward_bound: float = 0.0  # B: declared bound on |f| (0 = none declared)
    noise_bound: float = 0.0  # R: declared bound on the measurement noise
    noise: str = "gaussian"  # the measurement noise: 'gaussian', 'uniform' or 'student-t'
    budget_epsilon: float = 0.0  # the curator's central privacy budget (0 = none)
    budget_delta: float = 0.0
    security: str = "in-process"  # 'curve', 'plaintext' (ZeroMQ) or 'in-process'
    batch: int = 1  # queries the modeler may keep outstanding (its Hello's, capped by the curator)
    distinct: bool = False  # the scenario's public rule: never query a row twice (a test result)
    # version 6: where the budget holds: 'dataset' (a journal on disk: every restart of the
    # curator on the data), 'process' (memory: this curator process only); '' = unstated
    ledger_scope: str = ""
    # version 6: the rest of the dataset's budget in force (fixed at its first serve): the
    # LDP epsilon and delta any one row may accumulate (0: none), and how many results may
    # ever be released (-1: no limit but the central budget)
    row_budget_epsilon: float = 0.0
    row_budget_delta: float = 0.0
    budget_releases: int = -1


@dataclass(frozen=True)
class ProjectedDataset:
    """The released candidate matrix Z (n x r) and the mechanism that produced it.

    Only the curator's release functions build one (PO-GP-UCB Algorithm 1, the Gaussian
    releases, or the explicitly non-private identity release); the policy refuses a bare
    array. `omega` is the mechanism's noise parameter; `noise_std` the standard deviation
    of the independent Gaussian noise on each coordinate of a row of Z (public: a modeler
    widens its kernel by it); `dp` is False for a release outside every DP claim (the
    paper's unlifted branch, seeded simulation, the identity, rows prepared from the data
    themselves), so an audit can say so.
    """

    mechanism: str
    epsilon: float
    delta: float
    omega: float
    Z: np.ndarray
    noise_std: float = 0.0
    dp: bool = True

    def __post_init__(self) -> None:
        self.Z.flags.writeable = False

    def __eq__(self, other: object) -> bool:
        fields = lambda d: (d.mechanism, d.epsilon, d.delta, d.omega, d.noise_std, d.dp)  # noqa: E731
        return (isinstance(other, ProjectedDataset) and fields(self) == fields(other)
                and self.Z.dtype == other.Z.dtype and np.array_equal(self.Z, other.Z))

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class LedgerHead:
    """A checkpoint of the dataset's privacy ledger, signed with the frame that carries it
    (protocol.checkpoint): `chain` is the SHA-256 hash chain over its first `entries`
    entries in journal order (64 hex digits; '' = no checkpoint, an older curator), with
    the totals the ledger reported at that point: the central (epsilon, delta) and the
    worst-off row's local (epsilon, delta). From version 6 the head is also a Merkle tree
    head (protocol.merkle, RFC 9162): `root` over the same entries, of the ledger `log`,
    which consistency proofs show to extend every earlier head of that log."""

    entries: int
    chain: str
    central_epsilon: float
    central_delta: float
    max_row_epsilon: float
    max_row_delta: float
    root: str = ""  # version 6: the RFC 9162 tree head of those entries (64 hex; '' = none)
    log: str = ""  # version 6: the ledger's id, 32 hex digits fixed when its journal began


NO_LEDGER_HEAD = LedgerHead(0, "", 0.0, 0.0, 0.0, 0.0)  # a frame without a checkpoint


@dataclass(frozen=True)
class Hello:
    """Modeler's opening message: its protocol version, a free-form client name, the
    id of a session to resume ('' for a new one), and the acquisition it declares:
    `strategy` its registered name ('' undeclared) and `release_delta` > 0 when it is
    GP-UCB with Kusner et al.'s beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) at that delta
    (Algorithm 1 line 3; 0 for any other beta). `sign_key` is the key that signs every
    frame the modeler sends ('' when it signs none). `batch` is how many queries it
    would like to keep outstanding at once (GP-BUCB); the Welcome grants at most that.
    `nonce` (32 hex digits, 128 random bits from `secrets`; '' = none) makes every
    opening frame unique: the curator refuses one it has seen (`replay`). `cookie` echoes
    the curator's Retry (64 hex digits; '' in a first Hello): only a Hello with a valid,
    fresh cookie for this connection and nonce is admitted (protocol.cookie).
    `ledger_log` and `ledger_seen` name the last ledger head the modeler saw signed by
    the curator key it expects (version 6; '' and 0: none), for the Welcome's
    consistency proof."""

    version: int
    client: str
    resume: str = ""
    strategy: str = ""
    release_delta: float = 0.0
    sign_key: str = ""  # the modeler's Ed25519 public key (hex); '' = an unsigned modeler
    batch: int = 1
    nonce: str = ""  # version 4: 32 lowercase hex digits, fresh per Hello
    cookie: str = ""  # version 6: the curator's Retry cookie, echoed (64 hex digits)
    ledger_log: str = ""  # version 6: the log of the last ledger head the modeler saw
    ledger_seen: int = 0  # ... signed by the curator key it expects, and its size (0: none)


def new_nonce() -> str:
    """A Hello's nonce: 128 bits from the OS CSPRNG, as 32 lowercase hex digits."""
    import secrets

    return secrets.token_hex(16)


@dataclass(frozen=True)
class Welcome:
    """Curator's answer to Hello: its version, a session id, the public parameters and
    the dataset ledger's head as the session starts (NO_LEDGER_HEAD: none kept) and, when
    the Hello named an earlier head of the same log, the RFC 9162 consistency proof from
    it (hex node hashes, protocol.merkle.consistency_proof)."""

    version: int
    session: str
    params: SessionParams
    sign_key: str = ""  # the curator's Ed25519 public key (hex); '' = an unsigned curator
    ledger: LedgerHead = NO_LEDGER_HEAD
    consistency: tuple[str, ...] = ()  # version 6: from the Hello's ledger_seen to `ledger`


@dataclass(frozen=True)
class Dataset:
    """The released dataset, sent once after Welcome.

    With `rows` = 0 (the default) Z is `release.Z` itself, in this frame. With `rows` > 0
    the frame carries `release.Z` as an empty (0, r) array (its dtype and r) and Z's
    `rows` rows follow in chunk frames of `chunk_rows` rows each, whose bytes hash to
    `digest` (SHA-256, lowercase hex): protocol.chunks, PROTOCOL.md section 5.1. A
    receiver hands the party the Dataset with the whole Z and these fields as sent."""

    release: ProjectedDataset
    rows: int = 0  # version 5: rows of Z sent in chunk frames after this one (0: none)
    chunk_rows: int = 0  # rows per chunk frame (the last one may hold fewer)
    digest: str = ""  # SHA-256 of Z's bytes (little-endian, C order), 64 hex digits


@dataclass(frozen=True)
class Query:
    """Modeler asks for the reward of row `index`; `seq` counts queries from 1."""

    seq: int
    index: int


@dataclass(frozen=True)
class Reward:
    """Curator's noisy measurement of f at row `index`, answering query `seq`.

    `noise` names the local-DP mechanism the value came out of ('' for none); in a
    session that announces one, the policy refuses a reward that did not.
    """

    seq: int
    index: int
    value: float
    noise: str = ""


@dataclass(frozen=True)
class Pending:
    """Curator: query `seq` (row `index`) is being evaluated and has no reward yet; sent
    when the evaluation starts and in answer to every retry of the query meanwhile.
    `waited` is the seconds since the curator first received the query (it carries no
    data: the value is not known yet)."""

    seq: int
    index: int
    waited: float = 0.0


@dataclass(frozen=True)
class ReleaseRequest:
    """Modeler asks, once and after the last query, for a DP release of the result
    (Kusner et al.: 'noisy' Algorithm 1, 'noise-free' Algorithm 2, 'lipschitz' Algorithm 3),
    with the kernel its GP used for the whole session -- post-processing of released data
    -- for the curator to replay the queries with ('' and 0: the curator's declared one)."""

    algorithm: str
    epsilon: float
    delta: float
    kernel: str = ""
    lengthscale: float = 0.0
    signal_var: float = 0.0
    noise_var: float = 0.0


@dataclass(frozen=True)
class Release:
    """Curator's DP release: the chosen row (-1 when the algorithm releases no row) and
    the noisy best value, with the noise scale it used."""

    algorithm: str
    epsilon: float
    delta: float
    index: int
    value: float
    scale: float


@dataclass(frozen=True)
class End:
    """Either side closes the session, with a reason; the curator answers the modeler's
    End with its own, carrying the dataset ledger's head as the session ends and the
    consistency proof from the head of this connection's Welcome (a modeler's End carries
    neither)."""

    reason: str
    ledger: LedgerHead = NO_LEDGER_HEAD
    consistency: tuple[str, ...] = ()  # version 6: from this connection's Welcome's head


@dataclass(frozen=True)
class Error:
    """A refused message or failed session, with a machine-readable code; `seq` names
    the query it concerns (0: none), e.g. an evaluation that failed and may be retried."""

    code: str
    message: str
    seq: int = 0


@dataclass(frozen=True)
class Retry:
    """The curator's answer to a Hello without a valid cookie, before any session: say
    Hello again, on this connection and with the same nonce, echoing `cookie` (64 hex
    digits). A peer that never reads never gets one, and so never takes a session slot
    (the cookie round of PROTOCOL.md 3.7, as QUIC's Retry and DTLS's HelloVerifyRequest)."""

    cookie: str


Message = Union[Hello, Welcome, Dataset, Query, Reward, Pending, ReleaseRequest, Release, End,
                Error, Retry]

KINDS: dict[str, type] = {
    "hello": Hello, "welcome": Welcome, "dataset": Dataset, "query": Query,
    "reward": Reward, "pending": Pending, "release_request": ReleaseRequest, "release": Release, "end": End,
    "error": Error, "retry": Retry,
}
KIND_OF: dict[type, str] = {cls: kind for kind, cls in KINDS.items()}


def kind_of(message: object) -> str:
    """The wire name of a message's kind; raises KeyError for a non-message."""
    return KIND_OF[type(message)]
