"""The codec's inline path for queries and rewards (protocol.codec._hot_map, _hot_message)
gives exactly what the generic schema walk gives: the same bytes out, the same message in,
and for anything irregular the same conversion or the same refusal, word for word."""
import math

import msgpack
import numpy as np
import pytest

from pobo.protocol import codec
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ProtocolError
from pobo.protocol.messages import Query, Reward

INT64 = (-(1 << 63), (1 << 63) - 1)


def generic_encode(message) -> bytes:
    """encode() without its inline path: the schema walk, then the kind, packed."""
    kind = "query" if type(message) is Query else "reward"
    body = codec._to_wire(message, type(message), kind)
    body["kind"] = kind
    return msgpack.packb(body, use_bin_type=True)


def generic_decode(frame: bytes):
    """decode() of a query's or reward's frame without its inline path."""
    body = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    kind = body.pop("kind")
    return codec._from_wire(body, codec.KINDS[kind], kind)


def outcome(fn, *args):
    """What `fn` returns, or its ProtocolError's message."""
    try:
        return fn(*args)
    except ProtocolError as exc:
        return ("refused", str(exc))


def test_random_queries_and_rewards_give_the_generic_bytes_and_messages():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        seq, index = (int(x) for x in rng.integers(INT64[0], INT64[1], 2, dtype=np.int64))
        value = float(rng.standard_normal() * 10.0 ** rng.integers(-300, 300))
        for message in (Query(seq, index), Reward(seq, index, value, ""),
                        Reward(seq, index, value, "ldp-reward"), Query(0, 0),
                        Reward(*INT64, -0.0, "é")):
            frame = encode(message)
            assert frame == generic_encode(message)
            assert decode(frame) == generic_decode(frame) == message
            assert type(decode(frame).seq) is int and type(decode(frame).index) is int


ODD = [True, np.int64(3), 2.0, INT64[1] + 1, INT64[0] - 1, "3", None, math.nan, math.inf,
       -math.inf, np.float64(0.5), 1, b"x"]


@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_an_odd_field_is_converted_or_refused_as_the_generic_walk_does(odd):
    for message in (Query(odd, 1), Query(1, odd), Reward(odd, 1, 0.5), Reward(1, odd, 0.5),
                    Reward(1, 2, odd), Reward(1, 2, 0.5, odd)):
        assert outcome(encode, message) == outcome(generic_encode, message)


@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_an_odd_field_on_the_wire_is_converted_or_refused_as_the_generic_walk_does(odd):
    bodies = [{"seq": odd, "index": 1, "kind": "query"}, {"seq": 1, "index": odd, "kind": "query"},
              {"seq": odd, "index": 1, "value": 0.5, "noise": "", "kind": "reward"},
              {"seq": 1, "index": 2, "value": odd, "noise": "", "kind": "reward"},
              {"seq": 1, "index": 2, "value": 0.5, "noise": odd, "kind": "reward"}]
    for body in bodies:
        try:
            frame = msgpack.packb(body, use_bin_type=True)
        except (TypeError, OverflowError):
            continue  # msgpack cannot carry it: no peer can send it
        assert outcome(decode, frame) == outcome(generic_decode, frame)


def test_missing_and_extra_fields_on_the_wire_are_handled_as_before():
    frames = [{"seq": 1, "index": 2, "value": 0.5, "kind": "reward"},  # an older peer: no noise
              {"seq": 1, "kind": "query"}, {"seq": 1, "index": 2, "extra": 3, "kind": "query"},
              {"seq": 1, "index": 2, "value": 0.5, "noise": "", "x": 1, "kind": "reward"}]
    for body in frames:
        frame = msgpack.packb(body, use_bin_type=True)
        assert outcome(decode, frame) == outcome(generic_decode, frame)
    assert decode(msgpack.packb(frames[0], use_bin_type=True)) == Reward(1, 2, 0.5, "")
