"""Sessions that belong to their peer, on a curator that no peer can take down.

Each test is an attack from the review, on a real curator over loopback tcp: a garbage
or deeply nested first frame, another key resuming (or probing, or releasing from) a
session, racing resumes, a stale connection outliving a resume, too many sessions.
"""
import asyncio
import json
import shutil

import numpy as np

import msgpack
import pytest
import zmq
import zmq.asyncio
import zmq.auth
from wire import with_cookie  # test helper: the cookie round of PROTOCOL.md 3.7
from waits import result_within, stop  # test helper: waits on tasks that are really bounded

from pobo.parties.curator import Oracle
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ErrorCode
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, Error, Hello, Query, Reward, Welcome,
)
from pobo.remote import connect_modeler, serve_curator
from pobo.session import RunConfig, prepare_service
from pobo.transport.security import CurveServer, make_keys
from pobo.transport.sockets import close_context, new_context

CFG = RunConfig(T=4, seed=5, options={"grid": 8}, timeout=10.0)


class Peer:
    """A raw DEALER speaking the protocol frame by frame (optionally with a CURVE key)."""

    def __init__(self, ctx, endpoint, secret=None, server=None):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if secret is not None:
            public, private = zmq.auth.load_certificate(secret)
            self.sock.curve_secretkey, self.sock.curve_publickey = private, public
            self.sock.curve_serverkey = zmq.auth.load_certificate(server)[0]
        self.sock.connect(endpoint)

    async def ask(self, *frames: bytes, timeout: float = 10.0):
        await self.sock.send_multipart(list(frames))
        return decode(await asyncio.wait_for(self.sock.recv(), timeout))

    async def hello(self, resume: str = "") -> Welcome:
        hello = await with_cookie(self.sock, Hello(PROTOCOL_VERSION, "t", resume), bare=True)
        welcome = await self.ask(encode(hello))
        if isinstance(welcome, Welcome):
            assert isinstance(decode(await asyncio.wait_for(self.sock.recv(), 10)), Dataset)
        return welcome

    def close(self):
        self.sock.close(0)


async def _serve(tmp_path, service, **kw):
    bound = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(serve_curator(
        service, "tcp://127.0.0.1:0", tmp_path / "curator", accept_timeout=20.0,
        verbose=False, on_bound=bound.set_result, **kw))
    return task, await asyncio.wait_for(bound, 10)


async def _stop(task):
    await stop(task, 15)  # bounded: wait_for would wait for ever on a task stuck in its cancel


def _nested(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]


@pytest.mark.parametrize("first", [b"\x00" * 8, _nested(60_000), encode(Query(1, 0))],
                         ids=["garbage", "deeply-nested", "query-before-hello"])
async def test_a_bad_first_frame_takes_no_slot_of_a_one_session_curator(tmp_path, first):
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=1)
    ctx = new_context()
    hostile = Peer(ctx, endpoint)
    try:
        reply = await hostile.ask(first)
        assert isinstance(reply, Error)
        await asyncio.sleep(0.2)
        assert not task.done(), "one frame stopped the curator"
        result = await asyncio.wait_for(
            connect_modeler(endpoint, tmp_path / "m", seed=5, timeout=10.0), 60)
        assert result["status"] == "ok" and len(result["queries"]) == CFG.T
        record = await result_within(task, 20)  # the one session served, the curator ends
        assert record["status"] == "ok"
        assert len(service.journal.sessions()) == 1
    finally:
        hostile.close()
        await _stop(task)
        close_context(ctx)


@pytest.fixture
def two_keys(tmp_path):
    """Keys of a curator and of two admitted modelers, A and B."""
    paths = make_keys(tmp_path / "keys")
    public, secret = zmq.auth.create_certificates(tmp_path / "keys", "other")
    shutil.copy(public, paths["allowed"] / "other.key")
    server = CurveServer(paths["curator_secret"], paths["allowed"])
    a = (paths["modeler_secret"], paths["curator_public"])
    b = (secret, paths["curator_public"])
    return server, a, b


async def test_another_key_cannot_resume_probe_or_release_from_a_session(tmp_path, two_keys):
    server, key_a, key_b = two_keys
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0, curve=server)
    ctx = new_context()
    a, b = Peer(ctx, endpoint, *key_a), Peer(ctx, endpoint, *key_b)
    try:
        welcome = await a.hello()
        sid = welcome.session
        first = await a.ask(encode(Query(1, 3)))
        assert isinstance(first, Reward)
        # B names A's live session: refused, typed, and A's session is untouched
        refused = await b.hello(resume=sid)
        assert isinstance(refused, Error) and refused.code == ErrorCode.NOT_OWNER.value
        try:  # B has no session: its probe is refused, or dropped with its connection
            probe = await b.ask(encode(Query(1, 3)), timeout=2.0)
        except asyncio.TimeoutError:
            probe = None
        assert probe is None or isinstance(probe, Error)
        assert isinstance(await a.ask(encode(Query(2, 4))), Reward)  # A goes on
        for seq in (3, 4):
            assert isinstance(await a.ask(encode(Query(seq, seq))), Reward)
        # A's finished session: neither B nor A itself may resume it (for a second
        # release with fresh noise, say)
        await a.sock.send(msgpack.packb({"kind": "end", "reason": "done"}))
        for _ in range(100):
            if dict(service.journal.sessions())[sid] == "ok":
                break
            await asyncio.sleep(0.05)
        other = Peer(ctx, endpoint, *key_b)
        again = Peer(ctx, endpoint, *key_a)
        try:
            assert (await other.hello(resume=sid)).code == ErrorCode.NOT_OWNER.value
            assert (await again.hello(resume=sid)).code == ErrorCode.SESSION_CLOSED.value
        finally:
            other.close()
            again.close()
        saved = service.journal.load(sid)
        assert saved.status == "ok" and len(saved.answers) == CFG.T and saved.generation == 1
    finally:
        a.close()
        b.close()
        await _stop(task)
        close_context(ctx)


async def test_racing_resumes_evaluate_f_exactly_t_times(tmp_path, monkeypatch):
    calls = []
    measure = Oracle.measure
    monkeypatch.setattr(Oracle, "measure",
                        lambda self, i, rng: calls.append(i) or measure(self, i, rng))
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0)
    ctx = new_context()
    first = Peer(ctx, endpoint)
    racers = [Peer(ctx, endpoint) for _ in range(5)]
    try:
        sid = (await first.hello()).session
        assert isinstance(await first.ask(encode(Query(1, 0))), Reward)

        async def race(peer: Peer) -> list:
            replies = []
            welcome = await peer.hello(resume=sid)
            if not isinstance(welcome, Welcome):
                return [welcome]
            for seq in range(2, CFG.T + 1):
                try:
                    replies.append(await peer.ask(encode(Query(seq, seq)), timeout=3.0))
                except asyncio.TimeoutError:  # superseded: its connection was dropped
                    break
            return replies

        outcomes = await asyncio.wait_for(asyncio.gather(*(race(p) for p in racers)), 60)
        assert len(calls) == CFG.T  # f evaluated exactly once per answered query
        saved = service.journal.load(sid)
        assert [a[0] for a in saved.answers] == list(range(1, CFG.T + 1))
        rewards = {(r.seq, r.value) for replies in outcomes for r in replies
                   if isinstance(r, Reward)}
        assert len({seq for seq, _ in rewards}) == len(rewards)  # one value per query
    finally:
        for p in (first, *racers):
            p.close()
        await _stop(task)
        close_context(ctx)


async def test_a_stale_connection_cannot_overwrite_the_resumed_record(tmp_path):
    """The stale connection writes nothing after the resume that takes its session over;
    it is told so at once with the fatal `superseded` Error (issue 49: it heard nothing
    and waited out its timeout before), which the curator records as that connection's
    last frame, before the resumed connection's Hello, and its transcript still audits."""
    from pobo.protocol.audit import audit_transcript
    from pobo.protocol.transcript import read_transcript

    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0)
    ctx = new_context()
    stale, fresh = Peer(ctx, endpoint), Peer(ctx, endpoint)
    try:
        sid = (await stale.hello()).session
        assert isinstance(await stale.ask(encode(Query(1, 1))), Reward)
        assert isinstance(await fresh.hello(resume=sid), Welcome)  # takes the session over
        told = decode(await asyncio.wait_for(stale.sock.recv(), 5.0))
        assert isinstance(told, Error) and told.code == ErrorCode.SUPERSEDED.value, told
        for seq in range(2, CFG.T + 1):
            assert isinstance(await fresh.ask(encode(Query(seq, seq))), Reward)
        await fresh.sock.send(msgpack.packb({"kind": "end", "reason": "done"}))
        for _ in range(100):
            if dict(service.journal.sessions())[sid] == "ok":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # give the stale connection every chance to write
        saved = service.journal.load(sid)
        assert saved.status == "ok" and len(saved.answers) == CFG.T and saved.generation == 2
        record = json.loads((tmp_path / "curator" / sid / "curator.json").read_text())
        assert record["status"] == "ok" and len(record["queries"]) == CFG.T
    finally:
        stale.close()
        fresh.close()
        await _stop(task)
        close_context(ctx)
    path = tmp_path / "curator" / sid / "curator.transcript"
    kinds = [(r.dir, r.kind) for r in read_transcript(path)]
    told_at = kinds.index(("sent", "error"))
    assert kinds[told_at + 1] == ("recv", "hello"), kinds  # the old connection's last frame
    report = audit_transcript(path)
    assert report.ok and report.complete, report.violations


@pytest.mark.parametrize("distinct, batch", [(True, 1), (False, 4)])
async def test_a_release_that_can_never_be_granted_is_refused_at_the_hello(tmp_path,
                                                                           distinct, batch):
    """Issue 49: a Hello declaring Kusner's noisy release with a batch of 4, or in a
    session under the `distinct` rule, was admitted, and the release refused only at the
    end, after T evaluations. Now the Hello is refused `policy`, and no session opens."""
    service = prepare_service(RunConfig(T=4, seed=5, options={"grid": 8}, timeout=10.0,
                                        distinct=distinct))
    task, endpoint = await _serve(tmp_path, service, sessions=0)
    ctx = new_context()
    peer = Peer(ctx, endpoint)
    try:
        hello = await with_cookie(peer.sock, Hello(PROTOCOL_VERSION, "t", strategy="gp-ucb",
                                                   release_delta=0.01, batch=batch), bare=True)
        refused = await peer.ask(encode(hello))
        assert isinstance(refused, Error) and refused.code == ErrorCode.POLICY.value, refused
        assert ("distinct" if distinct else "batch") in refused.message
        assert not service.journal.sessions()
    finally:
        peer.close()
        await _stop(task)
        close_context(ctx)


async def test_max_sessions_refuses_a_hello_with_busy(tmp_path):
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0, max_sessions=1)
    ctx = new_context()
    one, two = Peer(ctx, endpoint), Peer(ctx, endpoint)
    try:
        assert isinstance(await one.hello(), Welcome)
        busy = await two.hello()
        assert isinstance(busy, Error) and busy.code == ErrorCode.BUSY.value
        assert len(service.journal.sessions()) == 1
    finally:
        one.close()
        two.close()
        await _stop(task)
        close_context(ctx)


async def _held_until(peers_hello, want, tries=100):
    """The first answer of `peers_hello()` (a fresh peer's Hello each try) that is a
    `want`, within `tries` tries 0.05 s apart (a finished session frees its slot when
    its connection's task has ended, just after its End)."""
    for _ in range(tries):
        answer = await peers_hello()
        if isinstance(answer, want):
            return answer
        await asyncio.sleep(0.05)
    return answer


async def test_one_key_cannot_take_every_slot_from_another(tmp_path, two_keys):
    """The attack: an admitted modeler opens sessions until the curator is full, and no
    other modeler gets in. With --max-sessions 4 a key holds at most 2 (half, the
    default): A's third Hello is refused with busy and B still gets in; A resuming its
    own live session (a takeover) takes no new slot and is not refused; once one of A's
    sessions ends, A may open another."""
    server, key_a, key_b = two_keys
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0, max_sessions=4, curve=server)
    ctx = new_context()
    peers = []

    def peer(key):
        peers.append(Peer(ctx, endpoint, *key))
        return peers[-1]

    try:
        first, second = peer(key_a), peer(key_a)
        one, two = await first.hello(), await second.hello()
        assert isinstance(one, Welcome) and isinstance(two, Welcome)
        busy = await peer(key_a).hello()
        assert isinstance(busy, Error) and busy.code == ErrorCode.BUSY.value
        assert "most one key may hold" in busy.message
        assert isinstance(await peer(key_b).hello(), Welcome)  # B is not locked out
        taken_over = await peer(key_a).hello(resume=one.session)
        assert isinstance(taken_over, Welcome) and taken_over.session == one.session
        assert len(service.journal.sessions()) == 3  # the refused Hello opened none
        await second.sock.send(msgpack.packb({"kind": "end", "reason": "done"}))
        again = await _held_until(lambda: peer(key_a).hello(), Welcome)
        assert isinstance(again, Welcome)
        assert dict(service.journal.sessions())[two.session] != "open"
    finally:
        for each in peers:
            each.close()
        await _stop(task)
        close_context(ctx)


async def test_racing_hellos_of_one_key_never_pass_its_cap(tmp_path, two_keys):
    """A key one session below its cap sends two Hellos at once: exactly one gets in
    (the check and the slot it takes happen with no await between them)."""
    server, key_a, _ = two_keys
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0, max_sessions=4, curve=server)
    ctx = new_context()
    peers = [Peer(ctx, endpoint, *key_a) for _ in range(3)]
    try:
        assert isinstance(await peers[0].hello(), Welcome)
        answers = await asyncio.gather(peers[1].hello(), peers[2].hello())
        assert sorted(type(a).__name__ for a in answers) == ["Error", "Welcome"]
        assert [a.code for a in answers if isinstance(a, Error)] == [ErrorCode.BUSY.value]
        assert len(service.journal.sessions()) == 2
    finally:
        for each in peers:
            each.close()
        await _stop(task)
        close_context(ctx)


async def test_peers_with_no_key_are_capped_only_by_the_totals(tmp_path):
    """Plaintext peers with no allowlisted signing key have no key to count by: the
    default per-key cap (half of --max-sessions) must not silently halve what an
    unauthenticated curator serves; --max-sessions still caps them."""
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0, max_sessions=3)
    ctx = new_context()
    peers = [Peer(ctx, endpoint) for _ in range(4)]
    try:
        for each in peers[:3]:
            assert isinstance(await each.hello(), Welcome)
        busy = await peers[3].hello()
        assert isinstance(busy, Error) and busy.code == ErrorCode.BUSY.value
        assert "at most 3 sessions at once" in busy.message
    finally:
        for each in peers:
            each.close()
        await _stop(task)
        close_context(ctx)


def test_the_per_key_cap_and_whose_key_it_counts():
    from pobo.cli import build_parser
    from pobo.remote import per_key_cap, quota_key
    assert per_key_cap(1024, None) == 512 and per_key_cap(5, None) == 2
    assert per_key_cap(1, None) == 0 and per_key_cap(0, None) == 0  # nothing to share
    assert per_key_cap(20, 3) == 3 and per_key_cap(20, 0) == 0  # given: as given
    with pytest.raises(ValueError, match="max_sessions_per_key must be >= 0"):
        per_key_cap(20, -1)
    assert quota_key("curveKeyZ85", "ab" * 32, False) == "curveKeyZ85"  # CURVE: its key
    assert quota_key("curveKeyZ85", "ab" * 32, True) == "curveKeyZ85"
    assert quota_key("plaintext", "ab" * 32, True) == "sign:" + "ab" * 32
    assert quota_key("plaintext", "ab" * 32, False) == ""  # a key anyone can make
    assert quota_key("plaintext", "", True) == ""
    from pobo.remote import Admissions
    slots, connection = Admissions(0, 4, 2), object()
    slots.live["s"], slots.holders["s"] = connection, "K"
    assert slots.held("K") == 1 and slots.refusal("K") is None
    slots.live["t"], slots.holders["t"] = object(), "K"
    assert slots.refusal("K").code == ErrorCode.BUSY and slots.refusal("L") is None
    slots.finish("s", connection, None)
    assert "s" not in slots.holders and slots.held("K") == 1  # nothing kept for an ended one
    args = build_parser().parse_args(["curator", "synthetic", "--max-sessions-per-key", "3"])
    assert args.max_sessions_per_key == 3
    assert build_parser().parse_args(["curator", "synthetic"]).max_sessions_per_key is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["curator", "synthetic", "--max-sessions-per-key", "-1"])


def test_a_seeded_curator_restarts_on_its_own_journal(tmp_path):
    from pobo.parties.journal import Journal
    ids = []
    for _ in range(3):
        journal = Journal(tmp_path / "j.db")
        service = prepare_service(RunConfig(T=3, seed=0, options={"grid": 8}), journal=journal)
        session = service.new_session()
        session.curator().respond(1, 2)
        ids.append(session.session_id)
        journal.close()
    assert len(set(ids)) == 3  # ids are never derived from the seed
    journal = Journal(tmp_path / "j.db")
    assert len(journal.sessions()) == 3
    journal.close()


def test_two_processes_sharing_a_journal_never_evaluate_f_twice(tmp_path):
    """A resume that lands on a second curator while the first is evaluating f waits for
    the first's transaction (typed busy, no fault), so f is evaluated once."""
    from pobo.parties.journal import Journal
    config = RunConfig(T=3, seed=3, options={"grid": 8})
    a = prepare_service(config, journal=Journal(tmp_path / "j.db"))
    b = prepare_service(config, journal=Journal(tmp_path / "j.db", busy_timeout=0.2))
    session = a.new_session(owner="K")
    curator = session.curator()
    evaluations, takeover = [], []
    measure = curator.oracle.measure

    def racing(index, rng):
        evaluations.append(index)
        try:  # the modeler's reconnect reaches the other curator mid-evaluation
            takeover.append(b.resume(session.session_id, owner="K"))
        except Exception as exc:
            takeover.append(exc)
        return measure(index, rng)

    object.__setattr__(curator.oracle, "measure", racing)
    curator.respond(1, 7)
    busy = takeover[0]
    assert getattr(busy, "code", None) is ErrorCode.BUSY and b.journal.fault is None
    resumed = b.resume(session.session_id, owner="K").curator()  # after the commit: fine
    assert resumed.respond(1, 7) == curator.rewards[0]  # answered from the record
    assert evaluations == [7]


def test_a_deployed_curator_never_serves_a_seeded_projection_from_its_journal(tmp_path):
    """A seeded trial run and a deployment on the same journal: the deployment draws
    (and pays for) its own Z from the OS CSPRNG instead of serving the seeded one, whose
    seed would give M and G away."""
    from pobo.parties.journal import Journal
    seeded = RunConfig(T=3, seed=0, options={"grid": 8}, budget_epsilon=20.0)
    journal = Journal(tmp_path / "j.db")
    z_seeded = prepare_service(seeded, journal=journal).release.Z
    journal.close()
    journal = Journal(tmp_path / "j.db")
    deployed = prepare_service(seeded, journal=journal)  # (a budget for two projections)
    assert np.array_equal(deployed.release.Z, z_seeded)  # the same seed: the same record
    object.__setattr__(deployed.settings, "seed", None)  # now the deployment, same data
    again = type(deployed)(deployed.problem, deployed.settings, journal, deployed.config)
    assert again.params.randomness == "os-csprng"
    assert not np.array_equal(again.release.Z, z_seeded)
    assert [e["mechanism"] for e in journal.central_entries()] == ["gaussian-rows"] * 2
    journal.close()



async def test_without_curve_a_session_belongs_to_its_signing_key(tmp_path):
    """The issue's attack (22, item 4): signing keys, no CURVE, two allowed modeler keys.
    B names A's session in a signed Hello: refused with not_owner (before the fix B took
    it over, as every plaintext peer was the same owner)."""
    from pobo.protocol.signing import ZERO, Link, Signer, open_frame, seal
    from pobo.session import Signing
    curator, key_a, key_b = Signer.generate(), Signer.generate(), Signer.generate()
    signing = Signing(curator=curator, modeler_keys=frozenset([key_a.public_hex,
                                                                key_b.public_hex]))
    service = prepare_service(CFG)
    task, endpoint = await _serve(tmp_path, service, sessions=0, signing=signing)
    ctx = new_context()
    a, b = Peer(ctx, endpoint), Peer(ctx, endpoint)

    async def hello(peer, key, resume=""):
        opening = await with_cookie(peer.sock, Hello(PROTOCOL_VERSION, "t", resume,
                                                     sign_key=key.public_hex), key)
        await peer.sock.send(seal(encode(opening), Link(resume, 0, ZERO, ZERO), key))
        return decode(open_frame(await asyncio.wait_for(peer.sock.recv(), 10)).body)

    try:
        welcome = await hello(a, key_a)
        assert isinstance(welcome, Welcome)
        refused = await hello(b, key_b, resume=welcome.session)
        assert isinstance(refused, Error) and refused.code == ErrorCode.NOT_OWNER.value
        assert service.journal.load(welcome.session).generation == 1  # not taken over
    finally:
        a.close()
        b.close()
        await _stop(task)
        close_context(ctx)


def test_a_session_the_modeler_ends_is_closed_before_its_end_is_answered():
    """The status goes into the journal when the modeler's End comes, before the closing
    End is sent: a curator killed right after that End leaves the session 'ok', not 'open'
    for ever with nothing able to close it (a review's repro: the status was written only
    after the curator's record, ~0.5 s later)."""
    from pobo.protocol.channel import Channel
    from pobo.protocol.messages import End
    from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
    from pobo.session import curate, optimise
    from pobo.transport.inproc import pipe_pair

    async def main() -> list[str]:
        service = prepare_service(RunConfig(T=3, options={"grid": 10}))
        session = service.new_session()
        cpipe, mpipe = pipe_pair()
        cchan = Channel(cpipe, Boundary(PRIVATE, CURATOR), timeout=10)
        mchan = Channel(mpipe, Boundary(PRIVATE, MODELER), timeout=10)
        seen, send = [], cchan.send

        async def watched(message, *args, **kwargs):
            if isinstance(message, End):  # the status as the closing End leaves
                seen.append(dict(service.journal.sessions())[session.session_id])
            return await send(message, *args, **kwargs)
        cchan.send = watched
        try:
            await asyncio.wait_for(asyncio.gather(curate(cchan, session, None, verbose=False),
                                                  optimise(mchan, 0, "random", None)), 60)
        finally:
            cchan.close()
            mchan.close()
        return seen

    assert asyncio.run(main()) == ["ok"]
