"""Each party on its own over ZeroMQ: the curator binds, the modeler connects.

These are the functions behind `pobo curator` and `pobo modeler`; `pobo run` starts
one of each as separate OS processes (scenarios.launch). The same functions run a
party on a separate machine.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path


from pobo.parties.curator import ReplayMismatch
from pobo.parties.journal import JournalError
from pobo.parties.modeler import HyperFit
from pobo.parties.runners import receive_hello, resume_state
from pobo.parties.service import CuratorService
from pobo.protocol.channel import LateSignature
from pobo.protocol.codec import DEFAULT_MAX_FRAME
from pobo.protocol.cookie import COOKIE_LIFETIME, CookieJar, screen
from pobo.protocol.errors import (
    ErrorCode, PeerError, PeerGone, PeerTimeout, PolicyViolation, ProtocolError,
)
from pobo.protocol.ledger import PROCESS_ONLY
from pobo.protocol.messages import Error, ReleaseRequest
from pobo.protocol.policy import (
    CURATOR, MODELER, NON_PRIVATE, PRIVATE, Boundary, release_refusal,
)
from pobo.protocol.transcript import Transcript, TranscriptError, chain_end
from pobo.parties.statement import privacy_lines
from pobo.runspec import LISTENING  # noqa: F401  (re-exported)
from pobo.session import Signing, curate, keep_previous_record, open_channel, optimise
from pobo.transport.security import PLAINTEXT, CurveClient, CurveServer, start_authenticator
from pobo.transport.sockets import DealerPipe, RouterHub, close_context, new_context

log = logging.getLogger("pobo.curator")
modeler_log = logging.getLogger("pobo.modeler")
# an admitted Hello's nonce is remembered this long (s): longer than any cookie is valid,
# so a captured Hello is refused `replay` while its cookie would pass (PROTOCOL.md 3.5)
REPLAY_WINDOW = 2 * COOKIE_LIFETIME
REPLAY_CAP = 1 << 16  # nonces remembered at most: past it, new Hellos get `busy` (fail closed)
KEPT_RESULTS = 1000  # sessions' results a service (--sessions 0) keeps in memory, the last


class SessionResults(list):
    """A service's session results: the last KEPT_RESULTS, and `earlier`, how many
    before them ended in each status (their records stay in OUT/<session>/curator.json):
    a curator serving for months, or one peer opening sessions in a loop, never holds
    every result in memory (a review: ~12 KB a session, without bound)."""

    def __init__(self) -> None:
        super().__init__()
        self.earlier: Counter = Counter()


@dataclass
class Admissions:
    """Which sessions a curator serves: slots are taken only by a valid Hello (one that
    echoes a valid cookie: PROTOCOL.md 3.7), and no one key holds more than
    `max_per_key` of them at once (so that one admitted modeler
    cannot take every slot from the others)."""

    limit: int  # sessions to serve in all (0: until stopped)
    max_live: int  # sessions served at once (0: no cap)
    max_per_key: int = 0  # sessions one key holds at once (0: no cap)
    admitted: int = 0
    live: dict[str, asyncio.Task] = field(default_factory=dict)  # session id -> its task
    holders: dict[str, str] = field(default_factory=dict)  # live session id -> its key
    results: SessionResults = field(default_factory=SessionResults)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    # the nonce of every Hello admitted in the last REPLAY_WINDOW s -> when (monotonic)
    nonces: OrderedDict = field(default_factory=OrderedDict)
    cookies: CookieJar = field(default_factory=CookieJar.fresh)  # this process's secret
    channels: dict = field(default_factory=dict)  # live session id -> its connection's Channel

    def replayed(self, nonce: str, now: float) -> bool:
        """Whether a Hello with `nonce` was admitted in the last REPLAY_WINDOW seconds
        (refused Hellos are never remembered, so no flood of them flushes the window)."""
        while self.nonces:
            oldest, when = next(iter(self.nonces.items()))
            if now - when < REPLAY_WINDOW:
                break
            del self.nonces[oldest]
        return bool(nonce) and nonce in self.nonces

    def remember(self, nonce: str, now: float) -> None:
        """Keep an admitted Hello's nonce for REPLAY_WINDOW seconds."""
        if nonce:
            self.nonces[nonce] = now

    def refusal(self, key: str = "") -> ProtocolError | None:
        """Why a new session of `key` (a `quota_key`; '' for a peer with no key, which
        only the totals cap) may not start now (None: it may)."""
        if len(self.nonces) >= REPLAY_CAP:  # a window that would have to forget: fail closed
            return ProtocolError(f"this curator admitted {REPLAY_CAP} Hellos in the last "
                                 f"{REPLAY_WINDOW:g} s: try again later", ErrorCode.BUSY)
        if self.limit and self.admitted >= self.limit:
            return ProtocolError(f"this curator serves {self.limit} session(s) and has "
                                 "admitted them", ErrorCode.BUSY)
        if self.max_live and len(self.live) >= self.max_live:
            return ProtocolError(f"this curator serves at most {self.max_live} sessions at "
                                 "once: try again later", ErrorCode.BUSY)
        if self.max_per_key and key and self.held(key) >= self.max_per_key:
            return ProtocolError(f"this key holds {self.max_per_key} open session(s) here, the "
                                 "most one key may hold at once (the curator's "
                                 "--max-sessions-per-key): finish one first", ErrorCode.BUSY)
        return None

    def held(self, key: str) -> int:
        """How many live sessions `key` holds."""
        return sum(1 for sid in self.live if self.holders.get(sid) == key)

    def finish(self, sid: str, task: asyncio.Task, result: dict | None) -> None:
        """A session's connection ended (with its result, unless it was superseded)."""
        if self.live.get(sid) is task:
            del self.live[sid]
            self.holders.pop(sid, None)
        if result is not None and result.get("status") != "superseded":
            self.results.append(result)
            if not self.limit and len(self.results) > KEPT_RESULTS:  # a service: the last
                self.results.earlier[self.results.pop(0)["status"]] += 1
        if self.limit and self.admitted >= self.limit and not self.live:
            self.done.set()


async def serve_curator(service: CuratorService, bind: str, out: Path | None, *,
                        sessions: int = 1, max_sessions: int = 0,
                        max_sessions_per_key: int | None = None,
                        accept_timeout: float = 120.0, curve: CurveServer | None = None,
                        verbose: bool = True, insecure: bool = False,
                        on_bound: Callable[[str], None] | None = None,
                        signing: Signing | None = None) -> dict | list[dict]:
    """Bind a ROUTER at `bind` and serve modeler sessions of `service`; return the result(s).

    A peer takes a session slot only with a valid Hello that echoes the cookie of the
    curator's Retry (PROTOCOL.md 3.7: a first Hello is answered from the hub's reading
    loop, nothing kept); a garbage frame, a deeply nested one or anything else first is
    answered with a typed Error and dropped, and the curator goes on. One session (the default) is written to `out` and its result
    returned. With `sessions` > 1 (0: until stopped) sessions run concurrently in
    out/<session id>/ and the list of results is returned; `max_sessions` caps how many
    run at once (a Hello past it gets a typed `busy`), and `max_sessions_per_key` how
    many of them one key may hold (None: half of `max_sessions`; 0: no cap; the key is
    `quota_key`'s). Every session shares the
    service's prepared projection and the dataset's ledger and budget. A Hello naming a
    journaled session resumes it only for the key that opened it and only while it is
    resumable; the resumed connection supersedes any older one (which then writes
    nothing). With `curve` only modelers whose keys are in the allowlist get in, and
    each result names its peer's key. With `signing` (its `curator` key, and the
    `modeler_keys` it admits if given) every frame is signed and every modeler frame
    verified (protocol.signing). Prints `[curator] listening on ENDPOINT`
    (`pobo run` reads it). SIGINT and SIGTERM stop the curator after every open session
    has written its record.
    """
    ctx = new_context()
    auth = hub = stop = None
    slots = Admissions(sessions, max_sessions, per_key_cap(max_sessions, max_sessions_per_key))
    handshakes: set[asyncio.Task] = set()
    try:  # a failing bind (the port in use) stops the authenticator and the context too
        auth = start_authenticator(ctx, curve) if curve is not None else None
        hub = RouterHub.bind(ctx, bind, curve=curve, insecure=insecure)
        # a Hello without a valid cookie gets a Retry from the hub's pump itself: no task,
        # no waiting slot, nothing kept (PROTOCOL.md 3.7)
        hub.screen = partial(_screen, cookies=slots.cookies,
                             signer=(signing or Signing()).curator)
        stop = _stop_on_signals()
        if on_bound is not None:
            on_bound(hub.endpoint)
        if verbose:
            print(LISTENING + hub.endpoint, flush=True)
            for line in privacy_lines(service.privacy_unit()):  # what the release protects
                print("[curator] " + line, flush=True)
            print("[curator] " + ledger_line(service.journal.path), flush=True)
        while not slots.done.is_set():
            accepting = asyncio.ensure_future(hub.accept(accept_timeout))
            finished = asyncio.ensure_future(slots.done.wait())
            try:
                done, _ = await asyncio.wait({accepting, stop, finished},
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:  # also when this task is cancelled: no accept is left behind
                finished.cancel()
                if not accepting.done():
                    accepting.cancel()
            if stop in done or slots.done.is_set():
                if accepting.done() and not accepting.cancelled():
                    accepting.exception()  # retrieved: a pipe accepted in the last instant
                break
            try:
                pipe = accepting.result()
            except PeerTimeout:
                if slots.admitted or handshakes:
                    continue  # sessions are running: keep serving them
                raise
            for pipe in (pipe, *hub.accept_ready()):  # every peer waiting, this turn
                task = asyncio.ensure_future(_connection(pipe, service, out, sessions != 1,
                                                         hub.security, verbose, slots,
                                                         signing or Signing()))
                handshakes.add(task)
                task.add_done_callback(handshakes.discard)
        running = [t for t in (*slots.live.values(), *handshakes) if not t.done()]
        if stop.done():
            for task in running:
                task.cancel()  # on a signal: each session still writes its record
        await asyncio.gather(*running, return_exceptions=True)
        if sessions == 1:
            if not slots.results:
                if stop.done():  # SIGINT/SIGTERM before any session: stopped, not failed
                    raise KeyboardInterrupt("stopped before any session")
                raise PeerGone("the session ended without a record")
            return slots.results[0]
        return slots.results
    finally:
        try:
            if stop is not None:
                stop.cancel()
            if hub is not None:
                await hub.aclose()
        finally:
            if auth is not None:
                await auth.aclose()
            close_context(ctx)


def _screen(frame: bytes, user: str, *, cookies: CookieJar, signer) -> bytes | None:
    """The hub's screen of a new peer's first frame: the Retry for a Hello without a
    valid cookie (the peer's identity: its CURVE key, else `plaintext`), else None."""
    return screen(frame, cookies, (user or PLAINTEXT).encode(), signer, DEFAULT_MAX_FRAME)


async def _connection(pipe, service: CuratorService, out: Path | None,
                      per_session_folder: bool, security: str, verbose: bool,
                      slots: Admissions, signing: Signing) -> None:
    """One peer connection: its Hello, then a new or resumed session. A peer that never
    gets past the handshake (refused, or it sent something other than a Hello) takes no
    slot and stops nothing; a session that fails leaves its record and is logged."""
    timeout = float(service.config.get("timeout", 60.0))  # --timeout, for the Hello too
    identity = pipe.peer.encode()  # a cookie is bound to the peer's CURVE key
    channel = open_channel(pipe, CURATOR, False, None, timeout, signer=signing.curator,
                           peer_key=signing.modeler_keys)
    try:
        try:
            hello = await receive_hello(channel)  # answers a bad first frame with an Error
            if not slots.cookies.valid(hello.cookie, identity, hello.nonce):
                raise ProtocolError("a Hello needs a nonce, and then the cookie of this "
                                    "curator's Retry (PROTOCOL.md 3.7)", ErrorCode.MALFORMED)
            folder = ((out / hello.resume if per_session_folder else out)
                      if hello.resume and out is not None else None)
            session = _admit(hello, service, pipe.peer, security, slots, folder,
                             signing.modeler_keys is not None)
        except JournalError as exc:  # e.g. a damaged answer log: refused typed, changes nothing
            log.error("refused a Hello (%s): its journal cannot serve it: %s", pipe.peer, exc)
            await channel.send(Error(ErrorCode.INTERNAL.value, (
                f"the curator cannot continue this session: {exc} (the session stays as it "
                "was; try again once the operator has repaired it)")[:1000]))
            return
        except ProtocolError as exc:
            log.info("refused a peer (%s) before any session: %s: %s", pipe.peer,
                     exc.code.value, exc)
            if not channel.answered:
                await channel.send(Error(exc.code.value, str(exc)[:1000]))
            return
        except (PeerTimeout, PeerGone):
            return
        me = asyncio.current_task()
        stale = slots.live.get(session.session_id)
        told = slots.channels.get(session.session_id)
        slots.live[session.session_id] = me
        slots.channels[session.session_id] = channel  # (settled below; only a full queue
        # to the connection taken over makes the wait before it more than a turn)
        kept: list[dict] = []
        try:
            if stale is not None and stale is not me:
                stale.cancel()  # superseded: its writes are fenced, it sends nothing more
                if told is not None:  # but this, its last frame, before this one's first
                    await _tell_superseded(told, session.session_id)
            where = (out / session.session_id if per_session_folder and out is not None
                     else out)
            boundary = Boundary(NON_PRIVATE if service.settings.non_private else PRIVATE,
                                CURATOR)
            boundary.incoming(hello)
            if where is not None and not hello.resume:
                keep_previous_record(where, CURATOR)  # a second session in one folder
            try:
                transcript = (Transcript(where / "curator.transcript", resume=bool(hello.resume),
                                         blobs=out / "blobs" if per_session_folder else None)
                              if where is not None else None)  # one Z for every session
            except (TranscriptError, OSError) as exc:  # damaged, or no room: refused, typed
                log.error("session %s: cannot %s its transcript: %s", session.session_id[:12],
                          "continue" if hello.resume else "start", exc)
                await channel.send(Error(ErrorCode.INTERNAL.value, UNKEPT_TRANSCRIPT))
                return
            channel.settle(boundary, transcript)
            try:
                await curate(channel, session, where, verbose=verbose, peer=pipe.peer,
                             hello=hello, raise_errors=False, keep=kept)
            except ReplayMismatch as exc:  # before anything of the session changed
                log.error("session %s: this curator cannot resume it: %s",
                          session.session_id[:12], exc)
                await channel.send(Error(exc.code.value, ReplayMismatch.PUBLIC))
        finally:
            if slots.channels.get(session.session_id) is channel:
                del slots.channels[session.session_id]
            slots.finish(session.session_id, me, kept[0] if kept else None)
    finally:
        channel.close()


async def _tell_superseded(channel, session_id: str) -> None:
    """Send the peer of a connection a resume took over (its task cancelled already) the
    fatal `superseded` Error (PROTOCOL.md 8), recorded in that connection's transcript,
    so that it stops at once instead of waiting out its timeout: sent at once (no other
    task runs first unless its queue is full, then for at most a second), never raising
    (the peer may be gone, its transcript closed)."""
    try:
        async with asyncio.timeout(1.0):
            await channel.send(Error(ErrorCode.SUPERSEDED.value, "a resume on another "
                                     "connection took this session over: this connection "
                                     "is closed"))
    except Exception as exc:  # (TimeoutError included; a cancellation of the curator not)
        log.info("session %s: the superseded connection was not told: %s: %s",
                 session_id[:12], type(exc).__name__, exc)


UNKEPT_TRANSCRIPT = ("the curator cannot keep this session's transcript (see its log): the "
                     "session stays as it was; try again once the operator has repaired it")


def _check_continuable(where: Path) -> None:
    """A typed `internal` refusal unless the curator transcript in `where` (if any) can be
    continued: checked before the resume takes a slot, the session or its stale
    connection, so that a refused resume changes nothing (it is refused again until the
    operator restores the file)."""
    path = where / "curator.transcript"
    try:
        if path.exists():
            chain_end(path)
    except (TranscriptError, OSError) as exc:
        log.error("a resume of session %s refused: cannot continue its transcript: %s",
                  where.name[:12], exc)
        raise ProtocolError(UNKEPT_TRANSCRIPT, ErrorCode.INTERNAL) from None


def session_owner(peer: str, sign_key: str) -> str:
    """Who a session belongs to: the peer's CURVE key ('plaintext' without CURVE) and the
    signing key its Hello announced (and signed with: the channel verified it), so that
    with signing keys and no CURVE another allowed key cannot resume it either."""
    return f"{peer} sign:{sign_key}" if sign_key else peer


def per_key_cap(max_sessions: int, max_sessions_per_key: int | None) -> int:
    """The sessions one key may hold at once: `max_sessions_per_key` if given, else half
    of `max_sessions` (0, no cap, when that is 0 or 1: nothing to share)."""
    if max_sessions_per_key is not None:
        if max_sessions_per_key < 0:
            raise ValueError(f"max_sessions_per_key must be >= 0, not {max_sessions_per_key}")
        return max_sessions_per_key
    return max_sessions // 2 if max_sessions >= 2 else 0


def quota_key(peer: str, sign_key: str, sign_allowlist: bool) -> str:
    """Whose sessions a per-key cap counts together: the peer's CURVE key; without CURVE
    its signing key when an allowlist names the keys admitted; else '' (no key: any
    other signing key is free to make, so counting by it would bind nobody, and only
    the totals cap such peers)."""
    if peer != PLAINTEXT:
        return peer
    return f"sign:{sign_key}" if sign_allowlist and sign_key else ""


def ledger_line(journal: str) -> str:
    """Where the dataset's ledger lives, for the curator's start-up lines."""
    if journal == ":memory:":
        return (f"the dataset's ledger: in memory ({PROCESS_ONLY}; a restart starts it "
                "again)")
    return (f"the dataset's ledger: {journal} (every restart on this data spends from it; "
            "pobo ledger --journal shows it)")


def _admit(hello, service: CuratorService, peer: str, security: str, slots: Admissions,
           folder: Path | None = None, sign_allowlist: bool = False):
    """The session a valid Hello opens or resumes for `peer`, or a typed refusal. A resume
    whose session (its transcript in `folder`) cannot be continued is refused before it
    takes a slot, the session or its stale connection: the refusal changes nothing."""
    now = asyncio.get_running_loop().time()
    if slots.replayed(hello.nonce, now):
        raise ProtocolError(f"a hello with nonce {hello.nonce} was received before: a replay",
                            ErrorCode.REPLAY)
    why = release_refusal(hello, service.params)  # never granted: refused before any work
    if why is not None:
        raise PolicyViolation(why)
    key = quota_key(peer, hello.sign_key, sign_allowlist)
    if not (hello.resume and hello.resume in slots.live):  # a takeover needs no new slot
        refusal = slots.refusal(key)
        if refusal is not None:
            raise refusal
    owner = session_owner(peer, hello.sign_key)
    if hello.resume:
        service.journal.claimable(hello.resume, owner)  # typed refusals first: the id is ours
        if folder is not None:
            _check_continuable(folder)
    session = (service.resume(hello.resume, owner=owner) if hello.resume
               else service.new_session(security, owner=owner, batch=hello.batch))
    if session.session_id not in slots.live:
        slots.admitted += 1
    slots.remember(hello.nonce, now)  # admitted: only now is its nonce spent
    slots.holders[session.session_id] = key  # live from here on (no await before it is)
    return session


def _stop_on_signals() -> asyncio.Future:
    """A future that completes on SIGINT or SIGTERM (where the loop can watch signals)."""
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(True))
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here: nothing to watch
    stop.add_done_callback(lambda _: [_remove(loop, s) for s in (signal.SIGINT, signal.SIGTERM)])
    return stop


def _remove(loop: asyncio.AbstractEventLoop, sig: int) -> None:
    try:
        loop.remove_signal_handler(sig)
    except (NotImplementedError, RuntimeError, ValueError):
        pass


async def connect_modeler(connect: str, out: Path | None, *, seed: int | None = 0,
                          strategy: str = "gp-ucb", hyper: HyperFit = HyperFit(),
                          beta_scale: float | None = None, release: ReleaseRequest | None = None,
                          non_private: bool = False, curve: CurveClient | None = None,
                          timeout: float = 60.0, resume: bool = False,
                          verbose: bool = False, signing: Signing | None = None,
                          batch: int = 1, patience: float = 86400.0,
                          ledger_heads: Path | None = None) -> dict:
    """Connect a DEALER to the curator at `connect` (CURVE-encrypted to its key when
    `curve` is given) and run one session as the modeler, keeping up to `batch` queries
    outstanding; with `resume`, continue the session recorded in out/modeler.transcript
    (same seed and options as before). With `signing` (its `modeler` key, and the
    `curator_key` it expects if given) every frame is signed and every curator frame
    verified. A curator lost while one of our queries was pending (an evaluation on
    demand: a restart, a network cut) is reconnected to, resuming the session from the
    transcript, for up to `patience` seconds. Every ledger head the curator signs is
    checked against the last one seen of its key's ledger, kept in `ledger_heads`
    (default: ledger_heads.json in the user's pobo home; parties.ledger_log.SeenHeads):
    a head that does not extend it refuses the session (LedgerInconsistent)."""
    from pobo.parties.ledger_log import SeenHeads
    from pobo.transport.keyfiles import pobo_home

    heads = SeenHeads(ledger_heads if ledger_heads is not None
                      else pobo_home() / SeenHeads.NAME)
    state = None
    if resume:
        if out is None:
            raise ValueError("resuming needs the output folder holding the modeler's transcript")
        state = resume_state(out / "modeler.transcript")
        if state.ended:  # said at once; no connection, no record touched
            raise ValueError(f"nothing to resume: session {state.session} has ended (its "
                             f"transcript {out / 'modeler.transcript'} records an End)")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    pause = 1.0
    ticker = None
    current: list = []  # the channels of the connections tried, the last one live
    try:
        while True:
            try:
                return await _modeler_session(connect, out, seed, strategy, hyper, beta_scale,
                                              release, non_private, curve, timeout, state,
                                              verbose, signing or Signing(), batch,
                                              current.append, heads,
                                              max(0.0, deadline - loop.time()))
            except (PeerTimeout, PeerGone, ProtocolError, PeerError) as exc:
                state = _reconnectable(exc, out, deadline)
                if state is None:
                    raise
                modeler_log.warning("lost the curator (%s) with %d evaluation(s) pending: "
                                    "resuming session %s in %.0f s", exc, len(state.pending),
                                    state.session[:12], pause)
                if ticker is None or ticker.done():  # said every UNREACHABLE_EVERY s
                    ticker = asyncio.ensure_future(_say_unreachable(loop.time(), current))
                await asyncio.sleep(pause)
                pause = min(2 * pause, UNREACHABLE_EVERY)
    finally:
        if ticker is not None:
            ticker.cancel()


UNREACHABLE_EVERY = 10.0  # seconds between "curator unreachable" lines while reconnecting


async def _say_unreachable(since: float, channels: list) -> None:
    """Log 'curator unreachable, retrying (N s)' every UNREACHABLE_EVERY s until the
    latest connection hears from the curator (a modeler reconnecting for its --patience
    is never silent)."""
    loop = asyncio.get_running_loop()
    first = len(channels)  # the connections before the loss do not count
    while True:
        await asyncio.sleep(UNREACHABLE_EVERY)
        if len(channels) > first and channels[-1].last_frame is not None:
            return  # the curator answered the reconnection
        modeler_log.warning("curator unreachable, retrying (%.0f s)", loop.time() - since)


# what a restarted curator answers the old connection's frames with (it knows no session
# for them): worth a reconnect that resumes, unlike a definite refusal
RECONNECT_CODES = (ErrorCode.SEQUENCE.value, ErrorCode.BAD_SIGNATURE.value,
                   ErrorCode.SESSION_LOST.value)


def _reconnectable(exc: Exception, out: Path | None, deadline: float):
    """The session to resume after losing the curator, or None when giving up is right:
    no transcript, nothing pending, patience spent, or a definite refusal."""
    if isinstance(exc, LateSignature):
        return None  # the curator's own signature failed: resuming would not change it
    code = getattr(exc, "code", None)
    code = code.value if isinstance(code, ErrorCode) else code
    if isinstance(exc, (ProtocolError, PeerError)) and code not in RECONNECT_CODES:
        return None  # e.g. a policy refusal: reconnecting would not change it
    if out is None or asyncio.get_running_loop().time() >= deadline:
        return None
    try:
        state = resume_state(out / "modeler.transcript")
    except (OSError, ValueError):
        return None
    # session_lost: the curator dropped this connection (it still holds the session)
    return state if state.pending or code == ErrorCode.SESSION_LOST.value else None


async def _modeler_session(connect, out, seed, strategy, hyper, beta_scale, release,
                           non_private, curve, timeout, state, verbose, signing: Signing,
                           batch: int, on_channel=None, heads=None,
                           listen_wait: float = 0.0) -> dict:
    """One connection of the modeler: a fresh DEALER, its channel and the session. Until
    a curator answers at `connect` (one still preparing binds only when ready), no peer
    timeout runs: the DEALER waits up to `listen_wait` s for it, saying so."""
    ctx = new_context()
    pipe = channel = None
    try:  # a transcript that cannot be opened still closes the socket and the context
        pipe = DealerPipe.connect(ctx, connect, curve=curve)
        pipe.listen_wait = listen_wait
        channel = open_channel(pipe, MODELER, non_private, out, timeout,
                               resume=state is not None, signer=signing.modeler,
                               peer_key=signing.curator_key)
        if on_channel is not None:
            on_channel(channel)
        return await optimise(channel, seed, strategy, out, hyper=hyper, beta_scale=beta_scale,
                              release=release, resume=state, verbose=verbose, batch=batch,
                              heads=heads)
    finally:
        if channel is not None:
            channel.close()
        elif pipe is not None:
            pipe.close()
        close_context(ctx)
