"""The msgpack codec: round trips, and a typed ProtocolError for every malformed frame."""
import pickle
import struct

import msgpack
import numpy as np
import pytest

from pobo.protocol.codec import ARRAY_EXT, decode, encode
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.messages import Dataset, End, Hello, ProjectedDataset, Query, Reward


def test_every_message_round_trips(every_message):
    for message in every_message:
        back = decode(encode(message))
        assert type(back) is type(message) and back == message


@pytest.mark.parametrize("dtype", ["<f8", "<f4", "<i8", ">f8"])
def test_arrays_round_trip_with_dtype_and_shape(release, dtype):
    Z = np.arange(10).reshape(5, 2).astype(dtype)
    msg = Dataset(ProjectedDataset(release.mechanism, 1.0, 1e-5, 1.0, Z))
    back = decode(encode(msg)).release.Z
    assert back.shape == (5, 2) and back.dtype == np.dtype(dtype).newbyteorder("<")
    assert np.array_equal(back, Z)


def _frame(body: dict) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


def _ext(dtype_code: int, shape: tuple, payload: bytes) -> msgpack.ExtType:
    header = struct.pack(f"<BB{len(shape)}Q", dtype_code, len(shape), *shape)
    return msgpack.ExtType(ARRAY_EXT, header + payload)


def _dataset_body(Z) -> dict:
    return {"kind": "dataset", "release": {"mechanism": "po-gp-ucb-projection",
                                           "epsilon": 1.0, "delta": 1e-5, "omega": 1.0, "Z": Z}}


MALFORMED = {
    "not msgpack": b"\xc1\xff\x00garbage",
    "truncated": _frame({"kind": "query", "seq": 1, "index": 2})[:-3],
    "not a map": _frame([1, 2, 3]),
    "no kind": _frame({"seq": 1, "index": 2}),
    "unknown kind": _frame({"kind": "teleport", "seq": 1}),
    "missing field": _frame({"kind": "query", "seq": 1}),
    "extra field": _frame({"kind": "query", "seq": 1, "index": 2, "x": [1.0]}),
    "renamed field": _frame({"kind": "query", "seq": 1, "row": 2}),  # as many keys, not these
    "wrong type": _frame({"kind": "query", "seq": "1", "index": 2}),
    "bool as int": _frame({"kind": "query", "seq": True, "index": 2}),
    "float as int": _frame({"kind": "query", "seq": 1.5, "index": 2}),
    "nan reward": _frame({"kind": "reward", "seq": 1, "index": 2, "value": float("nan")}),
    "inf reward": _frame({"kind": "reward", "seq": 1, "index": 2, "value": float("inf")}),
    "huge int": b"\x83\xa4kind\xa5query\xa3seq\xcf\xff\xff\xff\xff\xff\xff\xff\xff\xa5index\x02",
    "int32 array": _frame(_dataset_body(_ext(9, (2, 1), b"\0" * 8))),
    "shape mismatch": _frame(_dataset_body(_ext(1, (5, 2), b"\0" * 72))),
    "short header": _frame(_dataset_body(msgpack.ExtType(ARRAY_EXT, b"\x01"))),
    "too many dims": _frame(_dataset_body(_ext(1, (1,) * 9, b"\0" * 8))),
    "nan in array": _frame(_dataset_body(_ext(1, (1, 1), struct.pack("<d", float("nan"))))),
    "unknown ext": _frame(_dataset_body(msgpack.ExtType(42, b"\0" * 16))),
    "bare array as release": _frame({"kind": "dataset",
                                     "release": _ext(1, (1, 1), b"\0" * 8)}),
    "pickle payload": pickle.dumps(Query(1, 2)),
    "pickle inside": _frame({"kind": "end", "reason": pickle.dumps("x")}),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_frames_raise_the_typed_error(name):
    with pytest.raises(ProtocolError) as info:
        decode(MALFORMED[name])
    assert str(info.value)  # a readable message
    if name == "unknown kind":
        assert info.value.code is ErrorCode.UNKNOWN_KIND


def test_a_field_with_a_default_may_be_absent_and_one_without_may_not():
    """An older peer's frame lacks a field added later with a default: it decodes with the
    default; a frame lacking a field without one is refused (the fast path, every field
    present, and the slow one agree)."""
    assert decode(_frame({"kind": "reward", "seq": 1, "index": 2, "value": 0.5})) \
        == Reward(1, 2, 0.5, "")
    with pytest.raises(ProtocolError, match="missing fields"):
        decode(_frame({"kind": "reward", "seq": 1, "value": 0.5, "noise": ""}))


def test_oversized_frame_is_refused_before_unpacking():
    frame = encode(End("x" * 1000))
    with pytest.raises(ProtocolError) as info:
        decode(frame, max_frame=100)
    assert info.value.code is ErrorCode.OVERSIZED


def test_encoder_refuses_what_it_cannot_send_faithfully(release):
    with pytest.raises(ProtocolError):
        encode(Reward(1, 2, float("nan")))
    with pytest.raises(ProtocolError):
        encode(Dataset(release.Z))  # a bare array is not a release
    with pytest.raises(ProtocolError):
        encode(Dataset(ProjectedDataset("x", 1.0, 1e-5, 1.0, np.zeros((2, 2), dtype=np.int32))))
    with pytest.raises(ProtocolError):
        encode(Dataset(ProjectedDataset("x", 1.0, 1e-5, 1.0, np.array([[None]], dtype=object))))
    with pytest.raises(ProtocolError):
        encode(Hello(1.5, "x"))
    with pytest.raises(ProtocolError):
        encode("hello")


def test_decoded_array_is_read_only(release):
    Z = decode(encode(Dataset(release))).release.Z
    with pytest.raises(ValueError):
        Z[0, 0] = 1.0


def test_a_decoded_array_is_aligned_and_read_only_wherever_the_frame_puts_its_bytes():
    """An ext array's bytes start wherever the frame puts them (a 2-d header is 18
    bytes): decoding hands back an aligned array (numpy's products fall back from BLAS,
    ~2.4x slower, on a misaligned view), equal to what was sent and read-only."""
    Z = np.random.default_rng(6).uniform(-2, 2, size=(300, 3))
    for extra in range(8):  # each placement of the array's first byte
        frame = encode(Dataset(ProjectedDataset("x", 1.0, 1e-5, 0.0, Z),
                               digest="0" * extra))  # shifts the bytes after it
        got = decode(frame).release.Z
        assert got.flags.aligned and got.flags.c_contiguous and not got.flags.writeable
        assert np.array_equal(got, Z)
    header = struct.pack("<BBQQ", 1, 2, 300, 3)
    for offset in range(8):  # the ext payload itself misaligned in its buffer
        raw = bytearray(offset + len(header) + Z.nbytes)
        raw[offset:] = header + Z.tobytes()
        from pobo.protocol.codec import _array_from_ext

        got = _array_from_ext(ARRAY_EXT, memoryview(raw)[offset:])
        assert got.flags.aligned and np.array_equal(got, Z)
