"""An ask/tell modeler client: drive the modeler side of a session from any optimizer.

```python
from pobo.client import ModelerClient

with ModelerClient.connect("tcp://127.0.0.1:5555", out="runs/m") as client:
    Z = client.Z                                   # the released n x r matrix (read-only)
    for t in range(client.params.T):
        i = my_optimizer_choose(Z, client.history)  # your code: any row in [0, n)
        y = client.query(i)                        # the curator's reward for row i
# leaving the block sends End and writes runs/m/modeler.json and runs/m/modeler.transcript
```

The client goes through exactly what `pobo modeler` goes through
(`scenarios.remote.connect_modeler`): a `transport.dealer.DealerPipe` (CURVE-encrypted
to the curator's key when `curve` is given) wrapped by `scenarios.session.open_channel`,
so every message passes the same codec and boundary policy, every frame is signed with
`signing.modeler` (and every curator frame verified against `signing.curator_key`) and
recorded in the same chained transcript that `pobo audit` checks.

It runs its own asyncio event loop on a background thread, and each call blocks on that
loop with the channel's deadline, so it works from plain scripts and from inside a
running event loop alike (a Jupyter cell, a coroutine): it never touches the caller's
loop. A query that times out is resent with the same sequence number (the curator
answers a retry from its record: no new evaluation) up to `retries` times.

Releases. `release(algorithm, epsilon, delta)` asks, once and after the T-th query, for
a DP release of the result. The curator grants 'noisy' (Kusner et al. Algorithm 1) only
to a modeler whose Hello declared GP-UCB at Kusner's beta_t and whose every query it can
replay as a UCB maximiser (scenarios.releases.check_noisy). This client drives an
arbitrary optimizer, so its Hello declares no strategy: `release("noisy")` is refused
with a typed `policy` error (raised as `protocol.errors.PeerError` with code 'policy').
Use `pobo modeler --release noisy` for that release. 'lipschitz' (Algorithm 3) holds for
any acquisition and is granted where the scenario declares its constants.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pobo.parties.ledger_log import (
    SeenHeads, check_closing_head, check_welcome_head, named_head,
)
from pobo.parties.runners import PendingCallback, QueryWindow, closing_end, expect
from pobo.protocol.cookie import cookie_round
from pobo.protocol.errors import PeerError, PeerTimeout
from pobo.protocol.messages import (
    NO_LEDGER_HEAD,
    PROTOCOL_VERSION,
    Dataset,
    End,
    Hello,
    Query,
    Release,
    ReleaseRequest,
    SessionParams,
    Welcome,
    new_nonce,
)
from pobo.protocol.policy import CURATOR, MODELER, RELEASE_ALGORITHMS
from pobo.session import MODELER_LOG, Signing, open_channel, write_json
from pobo.transport.dealer import DealerPipe
from pobo.transport.keyfiles import pobo_home
from pobo.transport.security import CurveClient
from pobo.transport.zmqbase import close_context, new_context

if TYPE_CHECKING:
    import zmq.asyncio

CLIENT_NAME = "pobo-client"


class ClientError(ValueError):
    """A call the client refuses before anything is sent (a one-line message)."""


class ModelerClient:
    """A synchronous modeler session: `params`, `Z`, `query(i)`, `release(...)`, `close()`.

    Build one with `ModelerClient.connect(...)`; use it as a context manager (or call
    `close()`) so that the session ends and the record is written.
    """

    def __init__(self) -> None:  # use connect()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ctx: zmq.asyncio.Context | None = None
        self._channel = None
        self._out: Path | None = None
        self._retries = 2
        self._started = time.perf_counter()
        self.params: SessionParams | None = None
        self.session: str = ""
        self.Z: np.ndarray | None = None
        self.dataset = None  # the ProjectedDataset (Z with its mechanism and privacy)
        self.queries: list[int] = []
        self.rewards: list[float] = []
        self.released: Release | None = None
        self.release_error: str | None = None
        self.ledger_head = None  # the curator's closing checkpoint (protocol.checkpoint)
        self._checkpoints = False  # whether the Welcome carried a ledger head
        self._heads: SeenHeads | None = None  # the last ledger heads seen (parties.ledger_log)
        self._welcome: Welcome | None = None
        self._inflight: list[tuple[int, int]] = []  # (seq, row) of a call left unanswered
        self._received: dict[int, float] = {}  # rewards of that call that did arrive
        self._window: QueryWindow | None = None
        self.waiting: dict[int, float] = {}  # seq -> seconds the curator reports it pending
        self._on_pending: PendingCallback | None = None
        self._release_asked = False
        self._closed = False
        self._failed: str | None = None

    # ------------------------------------------------------------------ opening

    @classmethod
    def connect(cls, endpoint: str, out: str | Path | None = None, *,
                curve: CurveClient | None = None, signing: Signing | None = None,
                timeout: float = 30.0, non_private: bool = False, retries: int = 2,
                client: str = CLIENT_NAME, batch: int = 1,
                on_pending: PendingCallback | None = None,
                ledger_heads: str | Path | None = None) -> ModelerClient:
        """Connect to the curator at `endpoint` and complete the handshake (Hello,
        Welcome, Dataset); the session's parameters and Z are then available.

        `out` is the folder for modeler.transcript and modeler.json (None: no record);
        `curve` encrypts to the curator's CURVE key; `signing` carries the modeler's
        signing key (`signing.modeler`) and the curator key it expects
        (`signing.curator_key`): by default the modeler signs with its key in the user's
        key store, as `pobo modeler` does (`Signing.modeler_from_store`; `Signing()` signs
        nothing, with a warning in the log); `timeout` is the channel's deadline in seconds for each
        reply; `non_private` accepts the curator's non-private identity release of X;
        `batch` is how many queries `query_many` may keep outstanding at once (the
        curator grants at most its --max-batch: see `params.batch`); `on_pending(seq,
        row, seconds)` is called whenever the curator reports a query's evaluation
        pending (an objective evaluated on demand); `ledger_heads` is the file the last
        ledger head seen of each curator key's ledger is kept in (default
        ledger_heads.json in the user's pobo home): a head that does not extend it
        refuses the session (protocol.errors.LedgerInconsistent, parties.ledger_log).
        """
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ClientError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if not (isinstance(retries, int) and retries >= 0):
            raise ClientError(f"retries must be an integer >= 0, not {retries!r}")
        if not (isinstance(batch, int) and batch >= 1):
            raise ClientError(f"batch must be an integer >= 1, not {batch!r}")
        self = cls()
        self._heads = SeenHeads(Path(ledger_heads) if ledger_heads is not None
                                else pobo_home() / SeenHeads.NAME)
        self._on_pending = on_pending
        self._out = Path(out) if out is not None else None
        self._retries = retries
        self._timeout = float(timeout)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="pobo-modeler-client", daemon=True)
        self._thread.start()
        try:
            if signing is None:
                signing = Signing.modeler_from_store()
            elif signing.modeler is None:
                MODELER_LOG.warning("ModelerClient: unsigned: no frame is signed; an audit "
                                    "cannot tell an edited transcript from this session's")
            self._run(self._open(endpoint, curve, signing, non_private, client,
                                 batch), 2)  # the handshake: Welcome and Dataset
        except BaseException:
            self._failed = "handshake failed"
            self._shutdown(send_end=False)
            raise
        return self

    async def _open(self, endpoint: str, curve: CurveClient | None, signing: Signing,
                    non_private: bool, client: str, batch: int) -> None:
        # the context and socket are made on the client's own loop, like connect_modeler
        self._ctx = new_context()
        pipe = DealerPipe.connect(self._ctx, endpoint, curve=curve)
        try:
            self._channel = open_channel(pipe, MODELER, non_private, self._out, self._timeout,
                                         signer=signing.modeler, peer_key=signing.curator_key)
        except BaseException:  # no channel to close it later: a transcript that cannot open
            pipe.close()
            raise
        channel = self._channel
        # an external optimizer declares no acquisition: no claim to Kusner's beta_t
        named = named_head(self._heads, channel.peer_keys)
        hello = Hello(PROTOCOL_VERSION, client, "", "", 0.0, channel.sign_key, batch,
                      new_nonce(), ledger_log=named.log if named else "",
                      ledger_seen=named.entries if named else 0)
        await channel.send(await cookie_round(channel, hello))  # PROTOCOL.md 3.7
        welcome = expect(await channel.recv(), Welcome)
        await check_welcome_head(channel, self._heads, welcome, named)
        self._welcome = welcome
        dataset = expect(await channel.recv(), Dataset)
        self.params, self.session = welcome.params, welcome.session
        self._checkpoints = welcome.ledger != NO_LEDGER_HEAD
        self.Z = dataset.release.Z  # read-only (ProjectedDataset freezes it)
        self.dataset = dataset.release
        self._window = QueryWindow(channel, self._retries, on_pending=self._pending_seen)

    def _pending_seen(self, seq: int, index: int, waited: float) -> None:
        self.waiting[seq] = waited
        if self._on_pending is not None:
            self._on_pending(seq, index, waited)

    # ------------------------------------------------------------------ the session

    @property
    def history(self) -> list[tuple[int, float]]:
        """(row, reward) of every answered query, in order."""
        return list(zip(self.queries, self.rewards))

    @property
    def remaining(self) -> int:
        """Queries left in the session's budget T."""
        return self.params.T - len(self.queries)

    def query(self, index: int) -> float:
        """Ask for the reward of row `index` of Z; blocks until the curator answers.

        ClientError (one line) for a row outside [0, n), past T queries, or after close;
        PeerError when the curator refuses the query, PeerTimeout when no answer came
        after `retries` resends. A query that timed out is retried by calling query()
        again with the same row (same sequence number). A query whose evaluation the
        curator reports pending is waited for as long as it stays pending."""
        return self.query_many([index])[0]

    def query_many(self, indices: list[int]) -> list[float]:
        """Ask for the rewards of several rows at once -- a batch of at most
        `params.batch` queries outstanding together -- and block until all are answered
        (the curator may evaluate them concurrently and answer in any order); returns
        the rewards in the order of `indices`. The same rules as `query` apply to each;
        a call that failed part-way is retried by calling it again with the same rows."""
        self._check_open("query")
        rows = [self._row(i) for i in indices]
        if not rows:
            return []
        T, q = self.params.T, self.params.batch
        if len(rows) > q:
            raise ClientError(f"{len(rows)} rows at once: this session keeps at most {q} "
                              "queries outstanding (connect(batch=...), capped by the "
                              "curator's --max-batch)")
        if self._inflight:
            if [row for _, row in self._inflight] != rows:
                raise ClientError(f"queries {[s for s, _ in self._inflight]} (rows "
                                  f"{[r for _, r in self._inflight]}) are still unanswered: "
                                  "retry that call first")
        else:
            if len(self.queries) + len(rows) > T:
                raise ClientError(f"the session's budget of T={T} queries is spent"
                                  if len(self.queries) >= T else
                                  f"{len(rows)} more queries would pass T={T} "
                                  f"({len(self.queries)} asked)")
            first = len(self.queries) + 1
            self._inflight = [(first + k, row) for k, row in enumerate(rows)]
            self._received = {}
        self._call(self._collect(), None)  # every wait inside is bounded by the channel
        got = self._received
        for seq, row in self._inflight:  # in query order: the curator's record's order
            self.queries.append(row)
            self.rewards.append(got[seq])
            self.waiting.pop(seq, None)
        values = [got[seq] for seq, _ in self._inflight]
        self._inflight, self._received = [], {}
        return values

    def _row(self, index: object) -> int:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise ClientError(f"the row index must be an integer, not {type(index).__name__}")
        if not 0 <= int(index) < self.params.n:
            raise ClientError(f"row index {index} out of range [0, {self.params.n})")
        return int(index)

    async def _collect(self) -> None:
        """Send the call's queries not yet outstanding (or resend the outstanding ones of
        a retried call) and wait until every one of them has its reward."""
        window = self._window
        missing = [(seq, row) for seq, row in self._inflight if seq not in self._received]
        for seq, row in missing:
            await window.send(Query(seq, row))  # a retry goes out with its old seq
        while any(seq not in self._received for seq, _ in self._inflight):
            reward = await window.next_reward()
            self._received[reward.seq] = reward.value

    def release(self, algorithm: str, epsilon: float = 1.0, delta: float = 1e-3, *,
                kernel: str = "", lengthscale: float = 0.0, signal_var: float = 0.0,
                noise_var: float = 0.0) -> Release:
        """Ask once, after the T-th query, for a DP release of the result ('noisy',
        'noise-free' or 'lipschitz'; the kernel fields: the one your GP used, '' and 0 for
        the curator's declared one). Returns the Release; a refusal raises PeerError with
        the curator's code ('policy' for a release whose proof does not hold here:
        'noisy' always, for this client -- see the module docstring; 'privacy_budget'
        past the dataset's budget)."""
        self._check_open("release")
        if algorithm not in RELEASE_ALGORITHMS:
            raise ClientError(f"unknown release algorithm {algorithm!r} (one of "
                              f"{', '.join(sorted(RELEASE_ALGORITHMS))})")
        if self._release_asked:
            raise ClientError("a session has at most one release, and it was asked for")
        if len(self.queries) < self.params.T:
            raise ClientError(f"a release comes after the last query ({len(self.queries)} of "
                              f"T={self.params.T} asked)")
        self._release_asked = True
        request = ReleaseRequest(algorithm, float(epsilon), float(delta), kernel,
                                 float(lengthscale), float(signal_var), float(noise_var))
        try:
            reply = self._run(self._release(request), 1)
        except PeerError as exc:
            self.release_error = f"{exc.code}: {exc.peer_message}"
            raise
        self.released = reply
        return reply

    async def _release(self, request: ReleaseRequest) -> Release:
        await self._channel.send(request)
        return expect(await self._channel.recv(), Release)

    # ------------------------------------------------------------------ closing

    def close(self, reason: str = "done") -> dict | None:
        """End the session (End), write modeler.json, close the transcript and the
        socket, stop the client's loop. Idempotent; returns the record (None if already
        closed)."""
        if self._closed:
            return None
        return self._shutdown(send_end=self._channel is not None, reason=reason)

    def __enter__(self) -> ModelerClient:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None and not self._closed:
            self._failed = f"{kind.__name__}: {exc}"
        self.close()

    def __del__(self) -> None:  # a forgotten client must not keep its thread alive
        try:
            if not self._closed and self._loop is not None:
                self._shutdown(send_end=False)
        except Exception:
            pass

    def _shutdown(self, send_end: bool, reason: str = "done") -> dict | None:
        self._closed = True
        record = None
        try:
            if send_end:
                if self._failed is None and len(self.queries) < (self.params.T if self.params
                                                                 else 0):
                    reason = reason if reason != "done" else "closed early"
                try:
                    self._run(self._channel.send(End(reason[:200])), 0)
                    if self._checkpoints:  # the curator's End: its ledger head, recorded
                        end = self._run(closing_end(self._channel), 1)
                        self.ledger_head = None if end is None or end.ledger == NO_LEDGER_HEAD \
                            else end.ledger
                        check_closing_head(self._channel, self._heads, self._welcome, end)
                except Exception as exc:  # the record is still written
                    self._failed = self._failed or f"{type(exc).__name__}: {exc}"
            record = self._record()
            if self._out is not None and self._channel is not None:
                write_json(self._out / "modeler.json", record)
        finally:
            if self._loop is not None and self._loop.is_running():
                try:
                    self._call(self._close_transport(), 10.0)
                except Exception:
                    pass
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._thread is not None and self._thread is not threading.current_thread():
                    self._thread.join(10.0)
            if self._loop is not None and not self._loop.is_running():
                self._loop.close()
        return record

    async def _close_transport(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._ctx is not None:
            close_context(self._ctx)

    def _record(self) -> dict:
        """modeler.json: the same fields as `pobo modeler`'s record."""
        channel = self._channel
        done = self.params is not None and len(self.queries) == self.params.T
        status = "ok" if self._failed is None and done else (
            "incomplete" if self._failed is None else "error")
        best = int(np.argmax(self.rewards)) if self.rewards else None
        return {"seed": None, "strategy": "external", "client": CLIENT_NAME,
                "session": self.session, "status": status, "error": self._failed,
                "queries": list(self.queries), "rewards": list(self.rewards),
                "best_index": None if best is None else self.queries[best],
                "best_reward": None if best is None else self.rewards[best],
                "release": None if self.released is None else asdict(self.released),
                "release_error": self.release_error,
                "ledger_head": None if self.ledger_head is None else asdict(self.ledger_head),
                "seconds": time.perf_counter() - self._started,
                "transcript_head": channel.transcript.anchor() if channel and channel.transcript
                else None,
                "signatures": channel.signatures if channel else "unsigned",
                "sign_keys": {CURATOR: (channel.peer_key or "") if channel else "",
                              MODELER: channel.sign_key if channel else ""}}

    # ------------------------------------------------------------------ the loop

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ClientError(f"{what} after close(): the session has ended")

    def _run(self, coro: Coroutine, replies: int) -> Any:
        """Run `coro` on the client's loop and wait for it: the channel raises PeerTimeout
        after its own deadline per reply; this wait only guards against a stuck loop."""
        return self._call(coro, self._timeout * max(replies, 1) + 10.0)

    def _call(self, coro: Coroutine, wait: float | None) -> Any:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("ModelerClient called from its own loop's thread")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(wait)
        except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError (3.11+)
            future.cancel()
            raise PeerTimeout(f"no answer from the client's loop within {wait} s") from None
        except BaseException:  # Ctrl-C while waiting: the call must not go on behind us
            future.cancel()
            raise


__all__ = ["ClientError", "ModelerClient"]
