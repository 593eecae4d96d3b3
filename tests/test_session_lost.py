"""A connection that lost its session (PROTOCOL.md 2, 3 and 8): the curator's `session_lost`
answer, signed on a link with no session, is accepted by the modeler that holds the
session (and only when the curator's key signed it), and pobo's modeler resumes on it."""
import asyncio

import numpy as np
import pytest

from pobo.parties.runners import receive_hello
from pobo.protocol.audit import audit_transcript
from pobo.protocol.channel import Channel
from pobo.protocol.errors import ErrorCode, PeerError, ProtocolError
from pobo.protocol.messages import (
    PROTOCOL_VERSION, Dataset, Error, Hello, KernelParams, Mechanism, ProjectedDataset, Query,
    SessionParams, Welcome,
)
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
from pobo.protocol.signing import Signer
from pobo.protocol.transcript import Transcript
from pobo.scenarios.remote import _reconnectable
from pobo.transport.inproc import pipe_pair

SID = "ab" * 16


def _params() -> SessionParams:
    return SessionParams("t", 4, 2, 3, "private", (Mechanism("po-gp-ucb-projection", 1.0, 1e-5),),
                         KernelParams("se", 1.0, 1.0, 0.1), "seeded")


async def _session(tmp_path):
    """A signed modeler channel (with its transcript) past the handshake, the curator's
    pipe end, and the keys."""
    modeler_pipe, curator_pipe = pipe_pair()
    ms, cs = Signer.generate(), Signer.generate()
    mod = Channel(modeler_pipe, Boundary(PRIVATE, MODELER),
                  Transcript(tmp_path / "modeler.transcript"), timeout=5.0, signer=ms,
                  peer_keys=frozenset({cs.public_hex}))
    cur = Channel(curator_pipe, Boundary(PRIVATE, CURATOR), timeout=5.0, signer=cs)
    await mod.send(Hello(PROTOCOL_VERSION, "t", sign_key=ms.public_hex))
    await receive_hello(cur)
    release = ProjectedDataset("po-gp-ucb-projection", 1.0, 1e-5, 1.0, np.zeros((4, 2)))
    await cur.send(Welcome(PROTOCOL_VERSION, SID, _params(), cs.public_hex))
    await cur.send(Dataset(release))
    assert isinstance(await mod.recv(), Welcome) and isinstance(await mod.recv(), Dataset)
    return mod, curator_pipe, cs, ms


async def test_session_lost_is_signed_named_and_accepted_by_the_modeler(tmp_path):
    mod, curator_pipe, cs, ms = await _session(tmp_path)
    reconnected = Channel(curator_pipe, Boundary(PRIVATE, CURATOR), timeout=5.0, signer=cs)
    await mod.send(Query(1, 2))  # arrives on a connection that has no session
    with pytest.raises(ProtocolError) as info:
        await receive_hello(reconnected)
    assert (info.value.code, info.value.seq) == (ErrorCode.SESSION_LOST, 1)
    lost = await mod.recv()  # linked to session '' and counting from 0: accepted
    assert isinstance(lost, Error) and (lost.code, lost.seq) == ("session_lost", 1)
    mod.transcript.close()
    # ... and an audit of the modeler's transcript holding it verifies every signature
    report = audit_transcript(tmp_path / "modeler.transcript",
                              keys={CURATOR: cs.public_hex, MODELER: ms.public_hex})
    assert report.ok and report.signatures == "verified", report.text()
    # pobo's modeler resumes on it, even with nothing pending; not on a plain refusal
    deadline = asyncio.get_running_loop().time() + 60
    state = _reconnectable(PeerError(lost.code, lost.message), tmp_path, deadline)
    assert state is not None and state.session == SID and not state.pending
    assert _reconnectable(PeerError("sequence", "x"), tmp_path, deadline) is None
    assert _reconnectable(PeerError("index_out_of_range", "x"), tmp_path, deadline) is None


@pytest.mark.parametrize("forger", ["unsigned", "other-key", "other-code"])
async def test_a_session_less_error_the_curator_did_not_sign_is_refused(tmp_path, forger):
    """Only the curator's own signature makes a session-less Error acceptable, and only for
    `session_lost`: anything else linked to no session is bad_signature."""
    mod, curator_pipe, cs, _ = await _session(tmp_path)
    signer = {"unsigned": None, "other-key": Signer.generate(), "other-code": cs}[forger]
    fake = Channel(curator_pipe, Boundary(PRIVATE, CURATOR), timeout=5.0, signer=signer)
    code = "internal" if forger == "other-code" else "session_lost"
    await fake.send(Error(code, "your session is gone", 1))
    with pytest.raises(ProtocolError) as info:
        await mod.recv()
    assert info.value.code is ErrorCode.BAD_SIGNATURE


@pytest.mark.parametrize("signed_by", ["curator", "nobody", "stranger"])
async def test_an_error_before_the_welcome_is_verified_under_the_expected_curator_key(
        tmp_path, signed_by):
    """PROTOCOL.md 3: a curator signs its Errors before the handshake too; a modeler that
    knows the curator's key beforehand (--curator-sign-key) accepts only those it signed."""
    modeler_pipe, curator_pipe = pipe_pair()
    cs = Signer.generate()
    mod = Channel(modeler_pipe, Boundary(PRIVATE, MODELER), timeout=5.0,
                  signer=Signer.generate(), peer_keys=frozenset({cs.public_hex}))
    signer = {"curator": cs, "nobody": None, "stranger": Signer.generate()}[signed_by]
    cur = Channel(curator_pipe, Boundary(PRIVATE, CURATOR), timeout=5.0, signer=signer)
    await mod.send(Hello(PROTOCOL_VERSION, "t", sign_key=mod.sign_key))
    await cur.send(Error("busy", "no more sessions now"))
    if signed_by == "curator":
        assert (await mod.recv()).code == "busy"
    else:
        with pytest.raises(ProtocolError) as info:
            await mod.recv()
        assert info.value.code is ErrorCode.BAD_SIGNATURE
