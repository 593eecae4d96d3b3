"""Thin asyncio runners that drive a curator or a modeler over a handed-in channel."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parties.curator import Curator
from parties.modeler import HyperFit, Modeler
from parties.strategies import Strategy, declaration, for_release
from protocol.channel import Channel
from protocol.codec import decode
from protocol.signing import body_of
from protocol.transcript import read_transcript
from protocol.errors import ErrorCode, PeerError, PeerTimeout, ProtocolError
from protocol.messages import (
    PROTOCOL_VERSION, Dataset, End, Error, Hello, ProjectedDataset, Query, Release,
    ReleaseRequest, Reward, SessionParams, Welcome,
)

StepCallback = Callable[[int, int, float], None]
ReleaseHandler = Callable[[ReleaseRequest], Release]


async def serve_session(channel: Channel, curator: Curator, params: SessionParams,
                        release: ProjectedDataset, session_id: str, *,
                        on_answer: StepCallback | None = None,
                        on_release: ReleaseHandler | None = None,
                        hello: Hello | None = None, asked: dict[int, int] | None = None,
                        max_refusals: int = 10_000) -> str:
    """Run one session as the curator until the modeler ends it; returns its reason.

    Every answer is committed to the dataset's journal by `curator.respond` before its
    reward is sent. A malformed or refused message is answered with an Error message and
    the session goes on (up to `max_refusals` of them); a version mismatch ends it. A release
    request goes to `on_release`, which computes it from the curator's own record (a
    refusal, e.g. past the privacy budget, is answered with a typed Error).
    """
    if hello is None:  # a caller that needs the hello first (to resume) passes it in
        await receive_hello(channel)
    await channel.send(Welcome(PROTOCOL_VERSION, session_id, params, channel.sign_key))
    await channel.send(Dataset(release))
    if asked:
        channel.boundary.restore_queries(asked)
    refusals = 0
    while True:
        try:
            message = await channel.recv()
        except ProtocolError as exc:
            refusals += 1
            if not exc.recoverable or refusals > max_refusals:
                await _send_error(channel, exc.code, str(exc))
                raise
            await _send_error(channel, exc.code, str(exc))
            continue
        if isinstance(message, Query):
            fresh = message.seq not in curator.answered
            try:
                value = curator.respond(message.seq, message.index)
            except ProtocolError as exc:
                await _send_error(channel, exc.code, str(exc))
                continue
            await channel.send(Reward(message.seq, message.index, value, curator.noise_tag))
            if fresh and on_answer is not None:
                on_answer(message.seq, message.index, value)
        elif isinstance(message, ReleaseRequest):
            try:
                if on_release is None:
                    raise ProtocolError("this curator offers no release", ErrorCode.POLICY)
                reply = on_release(message)
            except ProtocolError as exc:
                await _send_error(channel, exc.code, str(exc))
                continue
            await channel.send(reply)
        elif isinstance(message, End):
            return message.reason
        elif isinstance(message, Error):
            raise PeerError(message.code, message.message)
        else:  # a second hello: the policy lets it through only to be refused here
            await _send_error(channel, ErrorCode.SEQUENCE, f"unexpected {type(message).__name__}")


async def receive_hello(channel: Channel) -> Hello:
    """The modeler's opening Hello; anything else is refused with an Error and raises."""
    try:
        message = await channel.recv()
    except ProtocolError as exc:
        await _send_error(channel, exc.code, str(exc))
        raise
    if not isinstance(message, Hello):
        exc = ProtocolError(f"expected hello, got {type(message).__name__}", ErrorCode.SEQUENCE)
        await _send_error(channel, exc.code, str(exc))
        raise exc
    return message


async def _send_error(channel: Channel, code: ErrorCode, text: str) -> None:
    await channel.send(Error(ErrorCode(code).value, text[:1000]))


async def run_modeler(channel: Channel, strategy: Strategy, rng: np.random.Generator, *,
                      hyper: HyperFit = HyperFit(), client: str = "pobo",
                      on_step: StepCallback | None = None,
                      release: ReleaseRequest | None = None, retries: int = 2,
                      resume: ResumeState | None = None) -> Modeler:
    """Run one whole session as the modeler: handshake, T queries, optionally one DP
    release of the result (kept in `modeler.release`, or the refusal in
    `modeler.release_error`), end.

    Asking for a 'noisy' release (Kusner et al. Algorithm 1) turns GP-UCB into theirs:
    beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) at the release's delta, unscaled, with fixed
    hyperparameters; the Hello declares it and the request carries the kernel used."""
    if release is not None:
        strategy = for_release(strategy, release.algorithm, release.delta)
    declared, release_delta = declaration(strategy)
    await channel.send(Hello(PROTOCOL_VERSION, client, resume.session if resume else "",
                             declared, release_delta, channel.sign_key))
    welcome = expect(await channel.recv(), Welcome)
    dataset = expect(await channel.recv(), Dataset)
    modeler = Modeler(welcome.params, dataset.release, strategy, rng, hyper)
    first = 1
    if resume is not None:
        resume.check(welcome, dataset)
        for seq, index, value in resume.answered:  # replay: the same choices, the same state
            modeler.next_index()
            modeler.observe(index, value)
            if on_step is not None:
                on_step(seq, index, value)
        channel.boundary.restore_queries(resume.asked)
        first = len(resume.answered) + 1
    for seq in range(first, welcome.params.T + 1):
        index = modeler.next_index()
        if resume is not None and seq in resume.asked:
            index = resume.asked[seq]  # the query in flight when we stopped, retried as it was
        reward = await ask(channel, Query(seq, index), retries)
        modeler.observe(reward.index, reward.value)
        if on_step is not None:
            on_step(seq, reward.index, reward.value)
    if release is not None:
        await channel.send(modeler.with_kernel(release))
        reply = await channel.recv()
        if isinstance(reply, Error):
            modeler.release_error = f"{reply.code}: {reply.message}"
        else:
            modeler.release = expect(reply, Release)
    await channel.send(End("done"))
    return modeler


@dataclass(frozen=True)
class ResumeState:
    """What a modeler recovers from its own transcript to resume a session."""

    session: str
    params: SessionParams
    Z: np.ndarray
    answered: list[tuple[int, int, float]]  # (seq, row, reward) in order
    asked: dict[int, int]  # every query sent: seq -> row

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
    for record in read_transcript(transcript, blobs):
        if record.kind not in ("welcome", "dataset", "query", "reward"):
            continue
        message = decode(body_of(record.frame))
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
    if welcome is None or dataset is None:
        raise ValueError(f"{transcript} records no session to resume")
    done = [(seq, *answered[seq]) for seq in sorted(answered)]
    if [seq for seq, _, _ in done] != list(range(1, len(done) + 1)):
        raise ValueError(f"{transcript}: the answered queries are not 1..k")
    return ResumeState(welcome.session, welcome.params, dataset.release.Z, done, asked)


async def ask(channel: Channel, query: Query, retries: int) -> Reward:
    """Send a query and wait for its reward; on a timeout resend the same query (same
    sequence number: the curator answers it from its record) up to `retries` times.
    A late duplicate of an earlier reward is skipped."""
    for attempt in range(retries + 1):
        await channel.send(query)
        while True:
            try:
                return expect(await channel.recv(), Reward)
            except PeerTimeout:
                if attempt == retries:
                    raise
                break
            except ProtocolError as exc:
                if exc.code is not ErrorCode.DUPLICATE:
                    raise
    raise AssertionError("unreachable")


def expect(message: object, kind: type):
    """`message` if it is a `kind`; the peer's Error as PeerError, anything else a typed
    sequence error."""
    if isinstance(message, Error):
        raise PeerError(message.code, message.message)
    if not isinstance(message, kind):
        raise ProtocolError(f"expected {kind.__name__}, got {type(message).__name__}",
                            ErrorCode.SEQUENCE)
    return message
