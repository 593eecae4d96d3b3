"""PROTOCOL.md 1 and 3.6: one framing rule. The modeler's first frame fixes a connection's
framing (bare only where nobody signs); a switch is refused `bad_signature` and the
connection keeps the framing it had."""
import pytest

from pobo.parties.runners import receive_hello
from pobo.protocol.channel import Channel
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.messages import PROTOCOL_VERSION, End, Error, Hello
from pobo.protocol.policy import CURATOR, PRIVATE, Boundary
from pobo.protocol.signing import ZERO, Link, open_frame, seal
from pobo.transport.inproc import pipe_pair


def _curator(pipe) -> Channel:
    return Channel(pipe, Boundary(PRIVATE, CURATOR), timeout=5.0)


@pytest.mark.parametrize("opening", ["bare", "envelope"])
async def test_a_switch_of_framing_is_refused_and_the_connection_keeps_its_own(opening):
    modeler, curator_pipe = pipe_pair()
    cur = _curator(curator_pipe)
    hello = encode(Hello(PROTOCOL_VERSION, "t"))
    wrap = lambda body, seq: seal(body, Link("", seq, ZERO, ZERO), None)  # noqa: E731
    await modeler.send(hello if opening == "bare" else wrap(hello, 0))
    await receive_hello(cur)
    end = encode(End("bye"))
    switched = wrap(end, 1) if opening == "bare" else end
    await modeler.send(switched)
    with pytest.raises(ProtocolError) as info:
        await cur.recv()
    assert info.value.code is ErrorCode.BAD_SIGNATURE
    await cur.send(Error(info.value.code.value, str(info.value)))
    reply = await modeler.recv(5.0)  # answered in the connection's own framing
    assert open_frame(reply).bare is (opening == "bare")
    assert decode(open_frame(reply).body).code == "bad_signature"
    await modeler.send(end if opening == "bare" else wrap(end, 2))  # its framing: accepted
    assert isinstance(await cur.recv(), End)


async def test_a_bare_hello_is_refused_where_signatures_are_required():
    modeler, curator_pipe = pipe_pair()
    cur = Channel(curator_pipe, Boundary(PRIVATE, CURATOR), timeout=5.0,
                  peer_keys=frozenset({"ab" * 32}))
    await modeler.send(encode(Hello(PROTOCOL_VERSION, "t")))
    with pytest.raises(ProtocolError) as info:
        await receive_hello(cur)
    assert info.value.code is ErrorCode.BAD_SIGNATURE
