"""Thin asyncio runners that drive a curator or a modeler over a handed-in channel."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pobo.parties.curator import Curator
from pobo.parties.journal import JournalFault
from pobo.parties.ledger_log import (
    SeenHeads, check_closing_head, check_welcome_head, named_head,
)
from pobo.parties.modeler import HyperFit, Modeler
from pobo.parties.objective import EvaluationFailed
from pobo.parties.strategies import (
    KusnerUCB, Robust, Strategy, declaration, for_release, under_rules,
)
from pobo.protocol.channel import Channel, LateSignature, before_handshake
from pobo.protocol.cookie import cookie_round
from pobo.protocol.chunks import ChunkedDataset, with_body
from pobo.protocol.policy import CURATOR, release_refusal
from pobo.protocol.codec import decode
from pobo.protocol.signing import SharedBody, body_of
from pobo.protocol.transcript import REFUSED, blob_dirs, read_transcript
from pobo.protocol.errors import (
    ErrorCode, PeerError, PeerGone, PeerTimeout, PolicyViolation, ProtocolError,
)
from pobo.protocol.messages import (
    NO_LEDGER_HEAD, PROTOCOL_VERSION, Dataset, End, Error, Hello, LedgerHead, Pending,
    ProjectedDataset, Query, Release, ReleaseRequest, Reward, SessionParams, Welcome, new_nonce,
)

log = logging.getLogger("pobo.session")
StepCallback = Callable[[int, int, float], None]
PendingCallback = Callable[[int, int, float], None]  # (seq, row, seconds waited)
ReleaseHandler = Callable[[ReleaseRequest], Release]
Measure = Callable[[int, int], Awaitable[float]]  # (seq, row) -> the measured value
# (log, entries of an earlier head, the head now) -> the consistency proof between them
Prove = Callable[[str, int, LedgerHead], tuple[str, ...]]


async def serve_session(channel: Channel, curator: Curator, params: SessionParams,
                        release: ProjectedDataset, session_id: str, *,
                        on_answer: StepCallback | None = None,
                        on_release: ReleaseHandler | None = None,
                        hello: Hello | None = None, asked: dict[int, int] | None = None,
                        max_refusals: int = 10_000, measure: Measure | None = None,
                        on_evaluate: StepCallback | None = None,
                        on_measured: Callable[[int], None] | None = None,
                        checkpoint: Callable[[], LedgerHead] | None = None,
                        prove: Prove | None = None,
                        dataset: SharedBody | ChunkedDataset | None = None,
                        on_end: Callable[[str], None] | None = None) -> str:
    """Run one session as the curator until the modeler ends it; returns its reason.

    Every answer is committed to the dataset's journal by `curator` before its reward is
    sent. With a tabulated f a query is answered at once; with an objective evaluated on
    demand (`measure(seq, row)`) the query is reserved, answered with a Pending message
    (and again on every retry meanwhile), measured in its own task -- several at once up
    to the session's batch -- and its reward sent when the value comes; a failed
    evaluation is answered with a typed `evaluation_failed` Error naming the query,
    which the modeler may retry. A malformed or refused message is answered with an
    Error message and the session goes on (up to `max_refusals` of them); a version
    mismatch ends it. A release request goes to `on_release`, which computes it from
    the curator's own record (a refusal, e.g. past the privacy budget, is a typed Error).
    `on_evaluate(seq, row, seconds waited)` is called when an evaluation starts and
    `on_measured(seq)` when its answer is committed, `on_end(reason)` when the modeler's
    End comes, before it is answered (a curator killed after its answer then leaves the
    session closed, not open for ever). With `checkpoint` (the dataset
    ledger's head now) the Welcome carries the head, and the modeler's End is answered
    with an End carrying it again (protocol.checkpoint); with `prove` too, the Welcome
    carries the consistency proof from the head the Hello names, the End from the
    Welcome's (protocol.merkle, RFC 9162). `dataset`: the Dataset message
    of `release` prepared once for every session (protocol.chunks.shared_dataset: its
    bytes are then never copied per session, and a large Z goes in chunk frames).
    """
    if hello is None:  # a caller that needs the hello first (to resume) passes it in
        hello = await receive_hello(channel)
    why = release_refusal(hello, params)
    if why is not None:  # a release never to be granted: refused now, not after T answers
        await _send_error(channel, ErrorCode.POLICY, why)
        raise PolicyViolation(why)
    try:
        head = checkpoint() if checkpoint is not None else NO_LEDGER_HEAD
    except OSError as exc:  # no session without a head kept: refused, typed, nothing spent
        await _send_error(channel, ErrorCode.INTERNAL, "the curator cannot keep its ledger "
                          f"head ({type(exc).__name__}): no session now")
        raise
    proof = (prove(hello.ledger_log, hello.ledger_seen, head)
             if prove is not None and head.root else ())
    await channel.send(Welcome(PROTOCOL_VERSION, session_id, params, channel.sign_key, head,
                               proof))
    await channel.send(Dataset(release), shared=dataset)
    if asked:
        channel.boundary.restore_queries(asked)
    evaluations: dict[int, asyncio.Task] = {}

    def unlist(seq: int) -> None:
        """Unlist this task's evaluation of `seq` (not a retry's, started since)."""
        if evaluations.get(seq) is asyncio.current_task():
            del evaluations[seq]

    async def evaluate(seq: int, index: int) -> None:
        try:
            value = curator.complete(seq, await measure(seq, index))
            await curator.committed()  # the answer's group commit, before its reward
        except Exception as exc:  # a failure is answered, never left pending forever
            if not isinstance(exc, ProtocolError):
                log.error("session %s: query %d (row %d): %s: %s", session_id[:12], seq,
                          index, type(exc).__name__, exc)
                exc = EvaluationFailed(f"{type(exc).__name__}: {exc}")
            log.warning("session %s: query %d (row %d) not evaluated: %s", session_id[:12],
                        seq, index, exc)  # the cause stays here: it may be about the row
            unlist(seq)  # a retry coming while this error goes out is evaluated anew
            await _send_error(channel, exc.code, getattr(exc, "public", str(exc)), seq)
            return
        finally:
            unlist(seq)
        if on_measured is not None:
            on_measured(seq)
        await channel.send(Reward(seq, index, value, curator.noise_tag))
        curator.refill()  # the next noise is drawn after this answer left
        if on_answer is not None:
            on_answer(seq, index, value)

    async def on_query(message: Query) -> None:
        seq, index = message.seq, message.index
        if seq not in evaluations:
            fresh = seq not in curator.answered
            try:
                value = curator.start(seq, index)
                await curator.committed()  # answered or reserved: durable before any reply
            except ProtocolError as exc:
                await _send_error(channel, exc.code, str(exc), seq)
                return
            if value is not None:
                await channel.send(Reward(seq, index, value, curator.noise_tag))
                curator.refill()  # the next noise is drawn after this answer left
                if fresh and on_answer is not None:
                    on_answer(seq, index, value)
                return
        waited = max(0.0, time.time() - curator.requested.get(seq, time.time()))
        await channel.send(Pending(seq, index, waited))
        if seq not in evaluations:
            evaluations[seq] = asyncio.ensure_future(_logged(evaluate(seq, index)))
            if on_evaluate is not None:
                on_evaluate(seq, index, waited)

    refusals = 0
    try:
        while True:
            try:
                message = await channel.recv()
            except ProtocolError as exc:
                refusals += 1
                await _send_error(channel, exc.code, str(exc), exc.seq)
                if not exc.recoverable or refusals > max_refusals:
                    raise
                continue
            if isinstance(message, Query):
                await on_query(message)
            elif isinstance(message, ReleaseRequest):
                try:
                    if on_release is None:
                        raise ProtocolError("this curator offers no release", ErrorCode.POLICY)
                    reply = on_release(message)
                except ProtocolError as exc:
                    await _send_error(channel, exc.code, str(exc))
                    continue
                except Exception as exc:  # a fault of the curator's own: answered, logged
                    log.error("session %s: the %s release failed: %s: %s", session_id[:12],
                              message.algorithm, type(exc).__name__, exc)
                    await _send_error(channel, ErrorCode.INTERNAL, "the release failed on "
                                      "the curator's side (its log says why)")
                    continue
                await channel.send(reply)
            elif isinstance(message, End):
                if on_end is not None:
                    on_end(message.reason)
                if checkpoint is not None:
                    await _send_closing_end(channel, checkpoint, session_id, head, prove)
                return message.reason
            elif isinstance(message, Error):
                raise PeerError(message.code, message.message)
            else:  # a second hello: the policy lets it through only to be refused here
                await _send_error(channel, ErrorCode.SEQUENCE,
                                  f"unexpected {type(message).__name__}")
    finally:  # the reservations stay in the journal: a resumed session measures again
        for task in evaluations.values():
            task.cancel()
        await asyncio.gather(*evaluations.values(), return_exceptions=True)


async def _send_closing_end(channel: Channel, checkpoint: Callable[[], LedgerHead],
                            session_id: str, welcomed: LedgerHead = NO_LEDGER_HEAD,
                            prove: Prove | None = None) -> None:
    """Answer the modeler's End with the ledger's head (and, with `prove`, the consistency
    proof from the head the connection's Welcome carried, `welcomed`). The modeler may be
    gone already, and a head that cannot be kept (its file unwritable: a full disk) is not
    sent, the End goes without it: either way the session is over and nothing of it is
    lost."""
    try:
        head = checkpoint()
    except (OSError, JournalFault) as exc:
        log.error("session %s: the ledger head could not be kept (%s): the closing End "
                  "carries none", session_id[:12], exc)
        head = NO_LEDGER_HEAD
    proof = (prove(welcomed.log, welcomed.entries, head)
             if prove is not None and head.root else ())
    with contextlib.suppress(PeerGone, PeerTimeout):
        await channel.send(End("closed", head, proof))


async def _logged(work) -> None:
    """Run a background evaluation; a peer gone meanwhile ends it quietly (the answer is
    journaled: a resumed session gets it), anything else is logged, never lost silently."""
    try:
        await work
    except (PeerGone, PeerTimeout):
        pass
    except Exception:
        log.exception("an evaluation task failed")


async def receive_hello(channel: Channel) -> Hello:
    """The modeler's opening Hello; anything else is refused with an Error and raises."""
    try:
        message = await channel.recv()
    except ProtocolError as exc:
        await _send_error(channel, exc.code, str(exc), exc.seq)
        raise
    if not isinstance(message, Hello):
        exc = before_handshake(message, CURATOR)
        await _send_error(channel, exc.code, str(exc), exc.seq)
        raise exc
    return message


async def _send_error(channel: Channel, code: ErrorCode, text: str, seq: int = 0) -> None:
    await channel.send(Error(ErrorCode(code).value, text[:1000], seq))


async def run_modeler(channel: Channel, strategy: Strategy, rng: np.random.Generator, *,
                      hyper: HyperFit = HyperFit(), client: str = "pobo",
                      on_step: StepCallback | None = None,
                      release: ReleaseRequest | None = None, retries: int = 2,
                      resume: ResumeState | None = None, batch: int = 1,
                      on_pending: PendingCallback | None = None,
                      retry_delay: float = 1.0, heads: SeenHeads | None = None) -> Modeler:
    """Run one whole session as the modeler: handshake, T queries, optionally one DP
    release of the result (kept in `modeler.release`, or the refusal in
    `modeler.release_error`), end.

    Up to `batch` queries are kept outstanding (the curator's Welcome may grant fewer):
    GP-UCB chooses each while the others are pending by hallucinating their outcomes
    (GP-BUCB, Desautels et al. 2014). A query the curator reports pending is kept alive
    by polling; a failed evaluation is retried up to `retries` times.

    Asking for a 'noisy' release (Kusner et al. Algorithm 1) turns GP-UCB into theirs:
    beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) at the release's delta, unscaled, with fixed
    hyperparameters; the Hello declares it and the request carries the kernel used.

    With `heads` (parties.ledger_log.SeenHeads) the Hello names the last ledger head seen
    from the curator key the channel expects, and the session is refused (a typed
    `ledger_inconsistent` Error, then LedgerInconsistent) unless the Welcome's head
    extends it; the curator's closing End is checked likewise, and each head kept."""
    if release is not None:
        strategy = for_release(strategy, release.algorithm, release.delta)
    if batch > 1 and isinstance(strategy, (Robust, KusnerUCB)):
        raise ValueError(f"--batch {batch}: {strategy.name}"
                         + (" for Kusner et al.'s noisy release" if isinstance(strategy, KusnerUCB)
                            else "") + " chooses one query at a time (its proof is sequential)")
    declared, release_delta = declaration(strategy)
    started = time.perf_counter()
    named = named_head(heads, channel.peer_keys)
    hello = Hello(PROTOCOL_VERSION, client, resume.session if resume else "", declared,
                  release_delta, channel.sign_key, batch, new_nonce(),
                  ledger_log=named.log if named else "",
                  ledger_seen=named.entries if named else 0)
    if getattr(channel.pipe, "cookie_round", False):  # a networked curator: PROTOCOL.md 3.7
        hello = await cookie_round(channel, hello)
    await channel.send(hello)
    welcome = expect(await channel.recv(), Welcome)
    await check_welcome_head(channel, heads, welcome, named)
    dataset = expect(await channel.recv(), Dataset)
    modeler = Modeler(welcome.params, dataset.release, under_rules(strategy, welcome.params),
                      rng, hyper)
    window = QueryWindow(channel, retries, retry_delay, on_pending,
                         give_back=(ErrorCode.PRIVACY_BUDGET.value,))
    q = max(1, min(batch, welcome.params.batch))
    next_seq = 1
    if resume is not None:
        resume.check(welcome, dataset)
        answered = {seq: (index, value) for seq, index, value in resume.answered}
        in_flight = []
        for seq in sorted(set(resume.asked) | set(answered)):  # replay in query order
            if seq in answered:  # the same choices, the same state
                index, value = answered[seq]
                modeler.next_index()
                modeler.observe(index, value)
                if on_step is not None:
                    on_step(seq, index, value)
            else:  # asked before we stopped: asked again as it was, still pending
                in_flight.append(Query(seq, modeler.ask(resume.asked[seq])))
        channel.boundary.restore_queries(resume.asked)
        next_seq = max(resume.asked, default=len(answered)) + 1
        for query in in_flight:
            await window.send(query)
    prepared, told = time.perf_counter(), modeler.t
    steps, last = [], prepared  # wall seconds from one reward told to the next
    try:
        T = welcome.params.T
        while modeler.t < T:
            while len(window.outstanding) < q and next_seq <= T:
                await window.send(Query(next_seq, modeler.ask()))
                next_seq += 1
            reward = await window.next_reward()
            if isinstance(reward, Error):  # its row's budget is spent: another row
                ask_again(modeler, reward)
                next_seq = reward.seq
                continue
            modeler.tell(reward.seq - 1, reward.value)
            now = time.perf_counter()
            steps.append(now - last)
            last = now
            if on_step is not None:
                on_step(reward.seq, reward.index, reward.value)
        channel.verify_accepted()  # an authenticated pipe's last rewards: before any End
    except (PeerError, ProtocolError) as exc:  # giving up: say so, so the curator need not
        with contextlib.suppress(Exception):  # wait out its timeout (the session stays resumable)
            await channel.send(End(f"the modeler gives up: {exc}"[:200]))
        raise
    modeler.timing = {"prepare_seconds": prepared - started,
                      "step_seconds": (time.perf_counter() - prepared) / max(1, modeler.t - told),
                      "steps": modeler.t - told,
                      "step_times": [round(step, 6) for step in steps]}
    if release is not None:
        await channel.send(modeler.with_kernel(release))
        reply = await channel.recv()
        if isinstance(reply, Error):
            modeler.release_error = f"{reply.code}: {reply.message}"
        else:
            modeler.release = expect(reply, Release)
    await channel.send(End("done"))
    if welcome.ledger != NO_LEDGER_HEAD:
        end = await closing_end(channel)
        check_closing_head(channel, heads, welcome, end)
        modeler.ledger_head = (None if end is None or end.ledger == NO_LEDGER_HEAD
                               else end.ledger)
    return modeler


def ask_again(modeler: Modeler, refusal: Error) -> None:
    """Take back the query the curator refused for its row's privacy budget, so that its
    seq is asked again with another row (PROTOCOL.md 7.1: a refused query is not asked);
    the refusal as a PeerError when the modeler cannot (a robust learner, or a batch
    whose later queries were chosen around it)."""
    try:
        row = modeler.withdraw(refusal.seq - 1)
        log.info("query %d: row %d's privacy budget is spent (%s): asking again with "
                 "another row", refusal.seq, row, refusal.message)
    except ValueError:  # as before: the curator's refusal ends the session
        raise PeerError(refusal.code, refusal.message) from None


async def closing_head(channel: Channel) -> LedgerHead | None:
    """The ledger head of the curator's End answering ours (`closing_end`'s)."""
    end = await closing_end(channel)
    return None if end is None or end.ledger == NO_LEDGER_HEAD else end.ledger


async def closing_end(channel: Channel) -> End | None:
    """The curator's End answering ours (recorded in the transcript), skipping late
    duplicates; None when it does not come within the timeout (the session is over
    either way: the Welcome's head is the last commitment then)."""
    while True:
        try:
            message = await channel.recv()
        except LateSignature:
            raise  # a reward acted on was forged: the session failed, not just its close
        except ProtocolError as exc:
            if exc.code is ErrorCode.DUPLICATE:
                continue
            log.warning("the curator's closing End was refused: %s", exc)
            return None
        except (PeerTimeout, PeerGone):
            log.warning("the curator's closing End did not come: its ledger head is not recorded")
            return None
        if isinstance(message, End):
            return message
        if not isinstance(message, (Pending, Reward)):  # a late answer to a retry: skipped
            log.warning("expected the curator's End, got %s", type(message).__name__)
            return None


# what a curator answers one query with when it may be retried: its evaluation failed,
# or its journal was briefly locked by another writer
RETRYABLE = (ErrorCode.EVALUATION_FAILED.value, ErrorCode.BUSY.value)


class QueryWindow:
    """The modeler's outstanding queries on one channel: sends them and waits for their
    rewards, in whatever order they come. A curator that reports a query pending is
    polled (the query re-sent) every half timeout and is given up on only after a whole
    timeout of silence and `retries` more polls; a silent curator gets each outstanding
    query again after each timeout, `retries` times; an evaluation that failed
    (`evaluation_failed` naming an outstanding query) is asked again after
    `retry_delay` seconds, `retries` times. A late duplicate is skipped."""

    def __init__(self, channel: Channel, retries: int = 2, retry_delay: float = 1.0,
                 on_pending: PendingCallback | None = None,
                 give_back: tuple[str, ...] = ()) -> None:
        self.channel, self.retries, self.retry_delay = channel, int(retries), float(retry_delay)
        self.on_pending = on_pending
        self.give_back = give_back  # refusal codes returned as the Error (not raised)
        self.outstanding: dict[int, int] = {}  # seq -> row
        self.pending: dict[int, float] = {}  # seq -> seconds waited, as the curator last said
        self.failures: dict[int, int] = {}
        self._misses = 0
        self._heard = time.monotonic()

    async def send(self, query: Query) -> None:
        """Send a new query (or one to resume) and count it outstanding."""
        self.outstanding[query.seq] = query.index
        await self.channel.send(query)

    async def _resend(self, seqs: list[int]) -> None:
        for seq in seqs:
            await self.channel.send(Query(seq, self.outstanding[seq]))

    async def next_reward(self) -> Reward | Error:
        """The next reward for any outstanding query (or the curator's refusal of one, for
        a code in `give_back`)."""
        while True:
            timeout = self.channel.timeout / 2 if self.pending else self.channel.timeout
            try:
                message = await self.channel.recv(timeout)
            except PeerTimeout:
                silent = time.monotonic() - self._heard
                if not self.pending or silent >= self.channel.timeout:
                    self._misses += 1
                    if self._misses > self.retries:
                        raise
                await self._resend(sorted(self.outstanding))
                continue
            except ProtocolError as exc:
                if exc.code is not ErrorCode.DUPLICATE:
                    raise
                continue
            self._heard, self._misses = time.monotonic(), 0
            if isinstance(message, Pending):
                self.pending[message.seq] = message.waited
                if self.on_pending is not None:
                    self.on_pending(message.seq, message.index, message.waited)
            elif (isinstance(message, Error) and message.seq in self.outstanding
                  and message.code in RETRYABLE):
                tries = self.failures[message.seq] = self.failures.get(message.seq, 0) + 1
                if tries > self.retries:
                    raise PeerError(message.code, message.message)
                self.pending.pop(message.seq, None)
                await asyncio.sleep(self.retry_delay)
                await self._resend([message.seq])
            elif (isinstance(message, Error) and message.seq in self.outstanding
                  and message.seq not in self.pending and message.code in self.give_back):
                del self.outstanding[message.seq]  # refused: not asked (PROTOCOL.md 7.1)
                self.failures.pop(message.seq, None)
                return message
            else:
                reward = expect(message, Reward)
                del self.outstanding[reward.seq]
                self.pending.pop(reward.seq, None)
                self.failures.pop(reward.seq, None)
                return reward


@dataclass(frozen=True)
class ResumeState:
    """What a modeler recovers from its own transcript to resume a session."""

    session: str
    params: SessionParams
    Z: np.ndarray
    answered: list[tuple[int, int, float]]  # (seq, row, reward) in query order
    asked: dict[int, int]  # every query sent: seq -> row
    pending: frozenset[int] = frozenset()  # unanswered queries the curator reported pending
    ended: bool = False  # the session finished: the curator's closing End was received

    def check(self, welcome: Welcome, dataset: Dataset) -> None:
        """Refuse to resume against a different session or a different dataset."""
        if welcome.session != self.session or welcome.params != self.params:
            raise ProtocolError(f"the curator welcomed session {welcome.session}, not the "
                                f"session {self.session} being resumed", ErrorCode.SEQUENCE)
        if not np.array_equal(dataset.release.Z, self.Z):
            raise ProtocolError("the curator sent a different dataset on resume",
                                ErrorCode.SEQUENCE)


def resume_state(transcript: str | Path, blobs: str | Path | None = None) -> ResumeState:
    """The session a modeler's transcript records, to continue it after a crash (a frame
    kept in a blob store is read back from `blobs`, or beside the transcript; refused
    frames, recorded by digest only, are skipped)."""
    welcome = dataset = None
    asked: dict[int, int] = {}
    answered: dict[int, tuple[int, float]] = {}
    pending: set[int] = set()
    ended = False
    dirs = blob_dirs(transcript, blobs)
    records = list(read_transcript(transcript, blobs))
    # a frame accepted on an authenticated pipe and then found forged (protocol.channel:
    # LateSignature) is followed by its refusal: it never counts
    forged = {r.sha256 for r in records if r.kind == REFUSED
              and r.code == ErrorCode.BAD_SIGNATURE.value}
    for record in records:
        if record.kind not in ("welcome", "dataset", "query", "reward", "pending", "end"):
            continue
        if forged and record.dir == "recv" and record.digest in forged:
            continue
        message = decode(body_of(record.frame))
        if isinstance(message, Dataset) and dataset is None:  # its chunked body, read back
            message = with_body(message, record, dirs)
        if isinstance(message, End):  # only the curator's End closes it: a modeler that
            ended = ended or record.dir == "recv"  # gave up, or said done before a kill of
            continue  # the curator, resumes to let the curator finish its record
        if isinstance(message, Welcome):
            if welcome is not None and message.session != welcome.session:
                raise ValueError(f"{transcript} holds more than one session")
            welcome = message
        elif isinstance(message, Dataset) and dataset is None:
            dataset = message
        elif isinstance(message, Query) and record.dir == "sent":
            asked[message.seq] = message.index
        elif isinstance(message, Reward) and record.dir == "recv":
            answered[message.seq] = (message.index, message.value)
        elif isinstance(message, Pending) and record.dir == "recv":
            pending.add(message.seq)
    if welcome is None or dataset is None:
        raise ValueError(f"{transcript} records no session to resume")
    done = [(seq, *answered[seq]) for seq in sorted(answered)]
    if any(asked.get(seq) != row for seq, row, _ in done):
        raise ValueError(f"{transcript}: a reward answers a query never sent")
    return ResumeState(welcome.session, welcome.params, dataset.release.Z, done, asked,
                       frozenset(pending - set(answered)), ended)


async def ask(channel: Channel, query: Query, retries: int,
              retry_delay: float = 1.0) -> Reward:
    """Send one query and wait for its reward (a QueryWindow of one): resent, with the
    same sequence number, on a timeout or (after `retry_delay` s) a failed evaluation,
    up to `retries` times."""
    window = QueryWindow(channel, retries, retry_delay)
    await window.send(query)
    return await window.next_reward()


def expect(message: object, kind: type):
    """`message` if it is a `kind`; the peer's Error as PeerError, anything else a typed
    sequence error."""
    if isinstance(message, Error):
        raise PeerError(message.code, message.message)
    if not isinstance(message, kind):
        raise ProtocolError(f"expected {kind.__name__}, got {type(message).__name__}",
                            ErrorCode.SEQUENCE)
    return message
