"""The privacy boundary: which message kinds each party may send, with which payloads.

`Policy` is the static rule (data); `Boundary` applies it to one side of one session,
tracking the handshake and the outstanding queries so that a message that is
well-formed but out of place (a reward nobody asked for, a second dataset, an index
past n, a query past the budget T) is refused too. Both parties check what they
send before it is encoded and what they receive after it is decoded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from pobo.protocol.checkpoint import check_head, check_proof, check_seen
from pobo.protocol.errors import ErrorCode, PolicyViolation, ProtocolError
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, Message, Pending, Query, Release, ReleaseRequest, Reward,
    KINDS, SessionParams, Welcome, kind_of,
)

CURATOR, MODELER = "curator", "modeler"
DP_PROJECTION = "po-gp-ucb-projection"  # Algorithm 1's sketch (lift paper/always/private)
GAUSSIAN_ROWS = "gaussian-rows"  # the Gaussian mechanism on the centred rows, then rotated
GAUSSIAN_SKETCH = "gaussian-sketch"  # (X_c M + omega G)/sqrt(r), omega by the chi^2-mixture bound
DP_RELEASES = frozenset({DP_PROJECTION, GAUSSIAN_ROWS, GAUSSIAN_SKETCH})
IDENTITY = "identity"
LDP_REWARD = "ctl-laplace"
# the codes whose Error, naming a query the curator has not answered, says it was not
# asked: its seq and batch slot are free again (PROTOCOL.md 7)
WITHDRAWING = frozenset({"sequence", "index_out_of_range", "budget_exhausted", "policy",
                         "privacy_budget"})
LIFT_TEST = "lift-test"  # the private sigma_min test that decides the lift (parties.projection)


@dataclass(frozen=True)
class Policy:
    """Which kinds each role may send and which dataset releases may cross."""

    name: str
    curator_sends: frozenset[str]
    modeler_sends: frozenset[str]
    dataset_mechanisms: frozenset[str]

    def may_send(self, role: str) -> frozenset[str]:
        """The kinds `role` is allowed to send."""
        return self.curator_sends if role == CURATOR else self.modeler_sends


_C2M = frozenset({"welcome", "dataset", "reward", "pending", "release", "end", "error"})
MAX_BATCH = 1024  # the most queries any Hello may ask to keep outstanding
_M2C = frozenset({"hello", "query", "release_request", "end", "error"})
RELEASE_ALGORITHMS = frozenset({"noisy", "noise-free", "lipschitz"})
# what a Hello may declare (parties.strategies.STRATEGIES, or '' for undeclared), and the
# isotropic kernel families a release request may name ('' for the declared one)
DECLARED_STRATEGIES = frozenset({"", "gp-ucb", "random", "tgp-ucb", "ata-gp-ucb", "moma-gp-ucb"})
KUSNER_UCB = "gp-ucb"
# the declared strategies a session's `distinct` rule binds: those that choose rows freely
# (the heavy-tailed ones, tgp/ata/moma, re-query a row by design and are exempt)
DISTINCT_BOUND = frozenset({"", "gp-ucb", "random"})
RELEASE_KERNELS = frozenset({"", "se", "matern52"})
_PER_QUERY = frozenset({Query, Reward, Pending})  # check_message checks their kind only
PRIVATE = Policy("private", _C2M, _M2C, DP_RELEASES)
NON_PRIVATE = Policy("non-private", _C2M, _M2C, DP_RELEASES | {IDENTITY})
POLICIES = {p.name: p for p in (PRIVATE, NON_PRIVATE)}


def release_refusal(hello: Hello, params: SessionParams) -> str | None:
    """Why a session opened by `hello` with `params` could never be granted the noisy
    release its Hello declares (None: it could): under the `distinct` rule a query may
    not repeat a row, while Kusner et al.'s rule (PROTOCOL.md 10.1) asks the UCB
    maximiser, which may be a row asked before. The rule of the scenario wins: such a
    Hello is refused (`policy`) before any evaluation, not the release after T."""
    if hello.release_delta > 0 and params.distinct:
        return ("this session's rule is distinct (a row at most once), and the noisy "
                "release this Hello declares needs every query to be GP-UCB's maximiser, "
                "which may be a row asked before: no noisy release is granted here (the "
                "curator may lift the rule: --no-distinct)")
    return None


def check_message(policy: Policy, sender: str, message: Message) -> None:
    """Raise PolicyViolation unless `sender` may send this message under `policy`."""
    kind = kind_of(message)
    if kind not in policy.may_send(sender):
        raise PolicyViolation(f"the {sender} may not send a {kind!r} message "
                              f"under the {policy.name!r} policy")
    if type(message) in _PER_QUERY:  # most frames: nothing below concerns them
        return
    if isinstance(message, Welcome) and message.params.policy != policy.name:
        raise PolicyViolation(f"session announces policy {message.params.policy!r}, "
                              f"this side enforces {policy.name!r}")
    if isinstance(message, (Welcome, End)):
        check_head(message.ledger, sender)  # a garbled checkpoint is a typed refusal
        check_proof(message.consistency, message.ledger, sender)
    if isinstance(message, Dataset):
        release = message.release
        if release.mechanism not in policy.dataset_mechanisms:
            raise PolicyViolation(f"dataset released by {release.mechanism!r} may not cross "
                                  f"under the {policy.name!r} policy")
        if release.mechanism != IDENTITY and not (release.epsilon > 0 and 0 < release.delta < 1):
            raise PolicyViolation("a DP release needs epsilon > 0 and 0 < delta < 1")


@dataclass
class Boundary:
    """One side's enforcement of the policy over a whole session (stateful)."""

    policy: Policy
    role: str
    params: SessionParams | None = None
    dataset_sent: bool = False
    hello_seen: bool = False
    outstanding: dict[int, int] = field(default_factory=dict)
    asked: dict[int, int] = field(default_factory=dict)  # seq -> row of every query so far
    fresh: set[int] = field(default_factory=set)  # asked as new, not answered at all yet
    release_requested: bool = False
    released: bool = False
    hello: Hello | None = None  # the session's opening message, as sent or received
    rows: set[int] = field(default_factory=set)  # the rows of the queries in `asked`
    versions: frozenset[int] = frozenset({PROTOCOL_VERSION})  # the Hello/Welcome versions admitted
    # (the params, the noise its rewards carry), worked out at the first reward
    _noise_of: tuple[SessionParams, str] | None = field(default=None, init=False, repr=False,
                                                         compare=False)
    # the message types each side may send under the policy, kept: every frame is checked
    # against them (a Query or a Reward needs no other check of check_message's)
    _sends: frozenset[type] = field(init=False, repr=False, compare=False)
    _receives: frozenset[type] = field(init=False, repr=False, compare=False)
    _peer: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._peer = self.peer
        self._sends = frozenset(KINDS[k] for k in self.policy.may_send(self.role))
        self._receives = frozenset(KINDS[k] for k in self.policy.may_send(self._peer))

    @property
    def peer(self) -> str:
        """The other party's role."""
        return MODELER if self.role == CURATOR else CURATOR

    def outgoing(self, message: Message) -> None:
        """Check a message this side is about to send; raise rather than send it."""
        self._admit(self.role, self._sends, message)

    def incoming(self, message: Message) -> None:
        """Check a message the peer sent; raise rather than hand it to the party."""
        self._admit(self._peer, self._receives, message)

    def _admit(self, sender: str, may: frozenset[type], message: Message) -> None:
        """Check and record `message` from `sender`, who may send the types `may`. (A
        query's and a reward's checks are written out here, with no call that is not
        needed: they are nearly every frame, and a sweep runs them between GP steps,
        where every function first touched costs about a microsecond.)"""
        kind = type(message)
        if kind not in may or kind not in _PER_QUERY:  # (refused there, or checked further)
            check_message(self.policy, sender, message)
        # the per-round-trip messages first: most frames are queries and rewards
        if kind is Query:
            if message.seq in self.asked and self.asked[message.seq] == message.index:
                self.outstanding[message.seq] = message.index  # an idempotent retry
                return
            self._check_query(message)
            self.asked[message.seq] = message.index
            self.outstanding[message.seq] = message.index
            self.fresh.add(message.seq)
            self.rows.add(message.index)
        elif kind is Reward:
            noise = self._noise_of
            if noise is None or noise[0] is not self.params:  # once a session
                noise = self._reward_noise()
            if message.noise != noise[1]:
                raise PolicyViolation(
                    f"reward for query {message.seq} carries noise {message.noise!r}; this "
                    "session " + ("releases rewards only through the local-DP mechanism"
                                  if noise[1] else "announced no reward mechanism"))
            if message.seq not in self.outstanding and self.asked.get(message.seq) == message.index:
                raise ProtocolError(f"duplicate reward for query {message.seq} (a retry's "
                                    "answer arriving after the original)", ErrorCode.DUPLICATE)
            if self.outstanding.get(message.seq) != message.index:
                raise ProtocolError(f"reward for query {message.seq} (row {message.index}) "
                                    "answers no outstanding query", ErrorCode.SEQUENCE)
            del self.outstanding[message.seq]
            self.fresh.discard(message.seq)
        elif isinstance(message, Hello):
            if self.hello_seen:  # whatever its version: the session is already open
                raise ProtocolError("a second hello in one session", ErrorCode.SEQUENCE)
            self._check_version(message.version)
            self._check_hello(message)
            self.hello_seen = True
            self.hello = message
        elif isinstance(message, Welcome):
            self._check_version(message.version)
            if self.params is not None:
                raise ProtocolError("a second welcome in one session", ErrorCode.SEQUENCE)
            if not 1 <= message.params.batch <= MAX_BATCH:
                raise ProtocolError(f"a welcome granting a batch of {message.params.batch}")
            if not (message.params.row_budget_epsilon >= 0
                    and 0 <= message.params.row_budget_delta < 1
                    and message.params.budget_releases >= -1):
                raise ProtocolError("a welcome's row budget is an epsilon >= 0 and a delta in "
                                    "[0, 1), its releases -1 (no limit) or a count >= 0")
            if message.params.ledger_scope not in ("", "dataset", "process"):
                raise ProtocolError(f"a welcome's ledger_scope is 'dataset', 'process' or '', "
                                    f"not {message.params.ledger_scope[:40]!r}")
            why = None if self.hello is None else release_refusal(self.hello, message.params)
            if why is not None:  # the curator refuses such a Hello: it welcomes none
                raise PolicyViolation(f"a welcome to a hello it must refuse: {why}")
            self.params = message.params
        elif isinstance(message, Dataset):
            self._check_dataset(message)
            self.dataset_sent = True
        elif isinstance(message, ReleaseRequest):
            self._check_release_request(message)
            self.release_requested = True
        elif isinstance(message, Release):
            if not self.release_requested or self.released:
                raise ProtocolError("a release nobody asked for, or a second one",
                                    ErrorCode.SEQUENCE)
            self.released = True
        elif isinstance(message, Pending):
            if self.outstanding.get(message.seq) != message.index:
                code = (ErrorCode.DUPLICATE if self.asked.get(message.seq) == message.index
                        else ErrorCode.SEQUENCE)  # late, after its reward; or never asked
                raise ProtocolError(f"pending for query {message.seq} (row {message.index}), "
                                    "which is not outstanding", code)
            if not (math.isfinite(message.waited) and message.waited >= 0):
                raise ProtocolError("a pending message's waited time must be finite and >= 0")
            self.fresh.discard(message.seq)
        elif isinstance(message, Error) and sender == CURATOR:
            self._withdraw(message)

    @property
    def last_query(self) -> int:
        """The highest seq asked so far (0: none)."""
        return max(self.asked, default=0)

    def _withdraw(self, error: Error) -> None:
        """A refused query is not asked (PROTOCOL.md 7): the curator's Error naming a query it
        has not answered yet, with a refusal code, frees its seq and its batch slot (an
        Error naming a query already answered, e.g. a retry with another row, changes
        nothing about it)."""
        if error.seq in self.fresh and error.code in WITHDRAWING:
            row = self.asked.pop(error.seq)
            del self.outstanding[error.seq]
            if row not in self.asked.values():
                self.rows.discard(row)
        self.fresh.discard(error.seq)  # any other answer (busy, evaluation_failed) takes it

    def restore_queries(self, asked: dict[int, int]) -> None:
        """Continue a resumed session: the queries asked before the interruption (seq ->
        row) count as asked; each may be retried, and the next new one is max seq + 1."""
        self.asked = dict(asked)
        self.outstanding = {}
        self.fresh = set()
        self.rows = set(self.asked.values())

    def _session(self, what: str) -> SessionParams:
        if self.params is None:
            raise ProtocolError(f"{what} before the welcome", ErrorCode.SEQUENCE)
        return self.params

    def _check_version(self, version: int) -> None:
        if version not in self.versions:
            raise ProtocolError(f"protocol version {version} is not supported "
                                f"(this side speaks {PROTOCOL_VERSION})",
                                ErrorCode.VERSION_MISMATCH)

    def incoming_head(self, head: Dataset, shape: tuple[int, ...]) -> None:
        """Refuse now what `incoming` would refuse of the whole Dataset a head announces
        (its body still to come in chunks, not yet allocated): a peer that may not send
        one, a mechanism the policy refuses, no session yet, a second one, another shape."""
        check_message(self.policy, self.peer, head)
        self.check_dataset_shape(shape)

    def check_dataset_shape(self, shape: tuple[int, ...]) -> None:
        """Refuse a dataset of `shape` now (before a chunked body is received and
        allocated): no session yet, a second dataset, or not the Welcome's (n, r)."""
        params = self._session("dataset")
        if self.dataset_sent:
            raise ProtocolError("a second dataset in one session", ErrorCode.SEQUENCE)
        if tuple(shape) != (params.n, params.r):
            raise ProtocolError(f"dataset of shape {tuple(shape)}, session announced "
                                f"({params.n}, {params.r})")

    def _check_dataset(self, message: Dataset) -> None:
        params = self._session("dataset")
        self.check_dataset_shape(message.release.Z.shape)
        release = message.release
        announced = {m.name: m for m in params.mechanisms}
        if release.mechanism != IDENTITY:
            mech = announced.get(release.mechanism)
            if mech is None or (mech.epsilon, mech.delta) != (release.epsilon, release.delta):
                raise PolicyViolation(f"dataset mechanism {release.mechanism!r} with "
                                      f"(eps={release.epsilon}, delta={release.delta}) was "
                                      "not announced in the welcome")

    @staticmethod
    def _check_hello(message: Hello) -> None:
        if message.strategy not in DECLARED_STRATEGIES:
            raise ProtocolError(f"unknown declared strategy {message.strategy[:40]!r}")
        if not (math.isfinite(message.release_delta) and 0 <= message.release_delta < 1):
            raise ProtocolError("a declared release delta must lie in [0, 1)")
        if not 1 <= message.batch <= MAX_BATCH:
            raise ProtocolError(f"a batch of {message.batch} queries: it must lie in "
                                f"[1, {MAX_BATCH}]")
        if message.nonce and not (len(message.nonce) == 32
                                  and all(c in "0123456789abcdef" for c in message.nonce)):
            raise ProtocolError("a hello's nonce is 32 lowercase hex digits or ''")
        if message.cookie and not (len(message.cookie) == 64 and message.nonce
                                   and all(c in "0123456789abcdef" for c in message.cookie)):
            raise ProtocolError("a hello's cookie is 64 lowercase hex digits, and comes with "
                                "a nonce, or is ''")
        check_seen(message.ledger_log, message.ledger_seen)
        if message.release_delta > 0 and message.strategy != KUSNER_UCB:
            raise ProtocolError(f"a release delta declares Kusner et al.'s GP-UCB beta; "
                                f"the strategy is {message.strategy!r}")
        if message.release_delta > 0 and message.batch != 1:
            raise PolicyViolation(f"a hello declaring a noisy release asks a batch of "
                                  f"{message.batch}: Kusner et al.'s GP-UCB asks one query at "
                                  "a time, in seq order (batch 1), or no release is granted")

    def _check_release_request(self, message: ReleaseRequest) -> None:
        params = self._session("release request")
        if self.release_requested:
            raise PolicyViolation("a second release request in one session")
        if len(self.asked) < params.T or self.outstanding:
            raise PolicyViolation(f"a release request before the last query "
                                  f"({len(self.asked) - len(self.outstanding)} of {params.T} "
                                  "answered)")
        if message.algorithm not in RELEASE_ALGORITHMS:
            raise ProtocolError(f"unknown release algorithm {message.algorithm[:40]!r}")
        if not (message.epsilon > 0 and 0 <= message.delta < 1):
            raise ProtocolError("a release needs epsilon > 0 and 0 <= delta < 1")
        if message.kernel not in RELEASE_KERNELS:
            raise ProtocolError(f"unknown release kernel {message.kernel[:40]!r} "
                                f"(isotropic: {sorted(RELEASE_KERNELS - {''})})")
        hyper = (message.lengthscale, message.signal_var, message.noise_var)
        if not all(math.isfinite(v) and v >= 0 for v in hyper):
            raise ProtocolError("release kernel hyperparameters must be finite and >= 0")

    def _reward_noise(self) -> tuple[SessionParams, str]:
        """(the session's params, the noise its rewards must carry: LDP_REWARD when it
        announced the local-DP mechanism, else ''), kept for the session's rewards;
        a reward before the welcome is refused here."""
        params = self._session("reward")
        ldp = any(m.name == LDP_REWARD for m in params.mechanisms)
        self._noise_of = (params, LDP_REWARD if ldp else "")
        return self._noise_of

    def _check_query(self, message: Query) -> None:
        """Refuse a new query, checks in the order of PROTOCOL.md 7: a query before the
        dataset, a seq below 1 (`sequence`), past T (`budget_exhausted`), a seq asked
        already with another row (`sequence`), a row outside [0, n) (`index_out_of_range`),
        a row asked already under the `distinct` rule (`policy`), one outstanding query
        too many (`sequence`). Every refusal names the query."""
        seq = message.seq
        if self.params is None or not self.dataset_sent:
            raise ProtocolError(f"query {seq} before the dataset", ErrorCode.SEQUENCE, seq)
        params = self.params
        if seq < 1:
            raise ProtocolError(f"query sequence number {seq}: queries count from 1",
                                ErrorCode.SEQUENCE, seq)
        if seq > params.T:
            raise ProtocolError(f"query {seq} exceeds the budget of {params.T}",
                                ErrorCode.BUDGET_EXHAUSTED, seq)
        if seq in self.asked:
            raise ProtocolError(f"query {seq} was for row {self.asked[seq]}, not "
                                f"{message.index}", ErrorCode.SEQUENCE, seq)
        if not 0 <= message.index < params.n:
            raise ProtocolError(f"row index {message.index} out of range [0, {params.n})",
                                ErrorCode.INDEX_OUT_OF_RANGE, seq)
        if (params.distinct and message.index in self.rows and len(self.rows) < params.n
                and (self.hello is None or self.hello.strategy in DISTINCT_BOUND)):
            raise ProtocolError(f"row {message.index} was queried already: this session's "
                                "rule is distinct (a row at most once until every row has "
                                "been)", ErrorCode.POLICY, seq)
        if len(self.outstanding) >= params.batch:
            raise ProtocolError(f"query {seq} would be the {len(self.outstanding) + 1}th "
                                f"outstanding; the session allows {params.batch}",
                                ErrorCode.SEQUENCE, seq)
