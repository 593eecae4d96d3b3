"""msgpack encoding of protocol messages, with numpy arrays as a msgpack ExtType.

An array travels as ExtType(ARRAY_EXT, header + raw little-endian bytes); the header
is one dtype code byte (from an allowlist: float64, float32, int64 -- never object
or void), one ndim byte and ndim uint64 dimensions. Decoding checks that the shape
times the item size equals the byte length. Every field is validated against the
message dataclass's annotations in both directions; anything malformed raises
`ProtocolError`. Nothing here can unpickle.
"""
from __future__ import annotations

import dataclasses
import math
import struct
import typing
from functools import lru_cache
from typing import Any

import msgpack
import numpy as np

from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.messages import KINDS, Message, Query, Reward, kind_of

ARRAY_EXT = 1
MAX_NDIM = 4
DEFAULT_MAX_FRAME = 1 << 30  # 1 GiB: room for a projected dataset of 1e6 x 64 float64
_DTYPES: dict[int, np.dtype] = {1: np.dtype("<f8"), 2: np.dtype("<f4"), 3: np.dtype("<i8")}
_CODES: dict[np.dtype, int] = {dt: code for code, dt in _DTYPES.items()}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def encode(message: Message) -> bytes:
    """The msgpack frame of a message, after validating every field."""
    tp = type(message)
    if tp is Query or tp is Reward:  # nearly every frame: checked inline (`_hot_map`)
        body = _hot_map(message, tp)
        if body is not None:
            return _packb(body, use_bin_type=True)
    try:
        kind = kind_of(message)
    except KeyError:
        raise ProtocolError(f"not a protocol message: {type(message).__name__}",
                            ErrorCode.UNKNOWN_KIND) from None
    body = _to_wire(message, type(message), kind)
    body["kind"] = kind
    return msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> Message:
    """The message in a frame; raises ProtocolError for anything malformed."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"frame must be bytes, got {type(frame).__name__}")
    if len(frame) > max_frame:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds the limit of {max_frame}",
                            ErrorCode.OVERSIZED)
    try:
        body = msgpack.unpackb(
            frame, raw=False, use_list=True, strict_map_key=True, ext_hook=_array_from_ext,
            max_str_len=1 << 16, max_bin_len=1 << 10, max_array_len=1 << 12,
            max_map_len=64, max_ext_len=max_frame)
    except ProtocolError:
        raise
    except Exception as exc:  # untrusted bytes: any unpacking failure is a malformed frame
        raise ProtocolError(f"undecodable frame: {type(exc).__name__}: {exc}") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"a message must be a map, got {type(body).__name__}")
    kind = body.pop("kind", None)
    if kind == "query" or kind == "reward":  # nearly every frame: checked inline
        message = _hot_message(body, kind)
        if message is not None:
            return message
    if not isinstance(kind, str):
        raise ProtocolError("message has no 'kind' string")
    cls = KINDS.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind[:40]!r}", ErrorCode.UNKNOWN_KIND)
    return _from_wire(body, cls, kind)


_SCALARS = frozenset({bool, int, float, str})
_packb = msgpack.packb
_QUERY_KEYS = frozenset({"seq", "index"})
_REWARD_KEYS = frozenset({"seq", "index", "value", "noise"})


def _hot_map(message: Query | Reward, tp: type) -> dict | None:
    """The wire map of a Query or Reward whose every field is exactly its declared type and
    in range (the same checks `_to_wire` makes, written out: a sweep sends two of these
    between GP steps, where every function first touched costs about a microsecond), in
    the same order, so the same bytes; None for anything else, which the generic walk then
    checks and names (tests/test_codec_hot.py)."""
    seq, index = message.seq, message.index
    if not (type(seq) is int and type(index) is int and _INT64[0] <= seq <= _INT64[1]
            and _INT64[0] <= index <= _INT64[1]):
        return None
    if tp is Query:
        return {"seq": seq, "index": index, "kind": "query"}
    value, noise = message.value, message.noise
    if type(value) is float and math.isfinite(value) and type(noise) is str:
        return {"seq": seq, "index": index, "value": value, "noise": noise, "kind": "reward"}
    return None


def _hot_message(body: dict, kind: str) -> Message | None:
    """The Query or Reward of a decoded map (its kind popped) carrying exactly its fields,
    each exactly its type and in range: what `_from_wire` makes of it; None for anything
    else (a field missing, extra or of another type), which `_from_wire` then refuses or
    converts as before."""
    if kind == "query":
        if body.keys() != _QUERY_KEYS:
            return None
        seq, index = body["seq"], body["index"]
        if type(seq) is int and type(index) is int and _INT64[0] <= seq <= _INT64[1] \
                and _INT64[0] <= index <= _INT64[1]:
            return Query(seq, index)
        return None
    if body.keys() != _REWARD_KEYS:
        return None
    seq, index, value, noise = body["seq"], body["index"], body["value"], body["noise"]
    if type(seq) is int and type(index) is int and type(value) is float \
            and type(noise) is str and _INT64[0] <= seq <= _INT64[1] \
            and _INT64[0] <= index <= _INT64[1] and math.isfinite(value):
        return Reward(seq, index, value, noise)
    return None


@lru_cache(maxsize=None)
def _schema(tp: Any) -> tuple[frozenset[str], frozenset[str], tuple] | None:
    """How a frame's map of message dataclass `tp` is walked: (its field names, the names
    a frame must carry -- those without a default, since a field added later with one
    may be absent from an older peer's frame --, and (name, type, whether a plain
    scalar) per field); None for any other type."""
    if not dataclasses.is_dataclass(tp):
        return None
    fields, hints = dataclasses.fields(tp), typing.get_type_hints(tp)
    required = frozenset(f.name for f in fields if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
    plan = tuple((f.name, hints[f.name], hints[f.name] in _SCALARS) for f in fields)
    return frozenset(f.name for f in fields), required, plan


def _to_wire(value: Any, tp: Any, path: str) -> Any:
    if tp in _SCALARS:  # most fields: checked without the schema's generic machinery
        return _check_scalar(value, tp, path)
    schema = _schema(tp)
    if schema is not None:
        if type(value) is not tp:
            raise ProtocolError(f"{path}: expected {tp.__name__}, got {type(value).__name__}")
        wire = {}
        for name, ftp, scalar in schema[2]:
            item = getattr(value, name)
            wire[name] = (_check_scalar(item, ftp, path, name) if scalar
                          else _to_wire(item, ftp, f"{path}.{name}"))
        return wire
    if tp is np.ndarray:
        return _array_to_ext(_check_array(value, path))
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, tuple):
            raise ProtocolError(f"{path}: expected a tuple, got {type(value).__name__}")
        (item_tp, _) = typing.get_args(tp)
        return [_to_wire(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
    return _check_scalar(value, tp, path)


def _from_wire(value: Any, tp: Any, path: str) -> Any:
    if tp in _SCALARS:
        return _check_scalar(value, tp, path)
    schema = _schema(tp)
    if schema is not None:
        if not isinstance(value, dict):
            raise ProtocolError(f"{path}: expected a map, got {type(value).__name__}")
        names, required, plan = schema
        if value.keys() != names:  # the common case, every field present, needs no sets
            missing, extra = required - value.keys(), value.keys() - names
            if missing or extra:
                raise ProtocolError(f"{path}: missing fields {sorted(missing)}, "
                                    f"unexpected fields {sorted(map(str, extra))[:8]}")
        fields = {}
        for name, ftp, scalar in plan:
            if name in value:
                item = value[name]
                fields[name] = (_check_scalar(item, ftp, path, name) if scalar
                                else _from_wire(item, ftp, f"{path}.{name}"))
        return tp(**fields)
    if tp is np.ndarray:
        return _check_array(value, path)
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, list):
            raise ProtocolError(f"{path}: expected an array, got {type(value).__name__}")
        (item_tp, _) = typing.get_args(tp)
        return tuple(_from_wire(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value))
    return _check_scalar(value, tp, path)


def _check_scalar(value: Any, tp: Any, path: str, name: str = "") -> Any:
    """`value` as the scalar type `tp` (an int within int64, a finite float); a
    ProtocolError naming the field (`path`.`name`: formatted only on failure) if not."""
    kind = type(value)
    if kind is tp and (tp is str or tp is bool or (tp is float and math.isfinite(value))
                       or (tp is int and _INT64[0] <= value <= _INT64[1])):
        return value  # the common case: already exactly the declared type
    if name:
        path = f"{path}.{name}"
    if tp is bool:
        if type(value) is not bool:
            raise ProtocolError(f"{path}: expected a bool, got {type(value).__name__}")
        return value
    if tp is int:
        if type(value) is not int and not isinstance(value, np.integer):
            raise ProtocolError(f"{path}: expected an integer, got {type(value).__name__}")
        value = int(value)
        if not _INT64[0] <= value <= _INT64[1]:
            raise ProtocolError(f"{path}: integer out of int64 range")
        return value
    if tp is float:
        if type(value) not in (int, float) and not isinstance(value, (np.floating, np.integer)):
            raise ProtocolError(f"{path}: expected a number, got {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value):
            raise ProtocolError(f"{path}: expected a finite number, got {value}")
        return value
    if tp is str:
        if type(value) is not str:
            raise ProtocolError(f"{path}: expected a string, got {type(value).__name__}")
        return value
    raise TypeError(f"{path}: unsupported schema type {tp!r}")  # a bug in messages.py


def _check_array(value: Any, path: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ProtocolError(f"{path}: expected an array, got {type(value).__name__}")
    if value.dtype.newbyteorder("<") not in _CODES:
        raise ProtocolError(f"{path}: dtype {value.dtype} is not allowed "
                            "(float64, float32, int64 only)")
    if value.ndim > MAX_NDIM:
        raise ProtocolError(f"{path}: {value.ndim} dimensions, at most {MAX_NDIM}")
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        raise ProtocolError(f"{path}: array holds NaN or infinity")
    return value


def _array_to_ext(array: np.ndarray) -> msgpack.ExtType:
    array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    header = struct.pack(f"<BB{array.ndim}Q", _CODES[array.dtype], array.ndim, *array.shape)
    data = memoryview(array.reshape(-1)).cast("B") if array.size else b""
    return msgpack.ExtType(ARRAY_EXT, header + data)  # one copy of the array, not three


def _array_from_ext(code: int, data: bytes) -> np.ndarray:
    if code != ARRAY_EXT:
        raise ProtocolError(f"unknown msgpack extension type {code}")
    if len(data) < 2:
        raise ProtocolError("array extension shorter than its header")
    dtype_code, ndim = data[0], data[1]
    dtype = _DTYPES.get(dtype_code)
    if dtype is None:
        raise ProtocolError(f"array dtype code {dtype_code} is not allowed")
    if ndim > MAX_NDIM or len(data) < 2 + 8 * ndim:
        raise ProtocolError(f"array header with {ndim} dimensions is malformed")
    shape = struct.unpack_from(f"<{ndim}Q", data, 2)
    offset = 2 + 8 * ndim
    count = math.prod(shape)
    if count * dtype.itemsize != len(data) - offset:
        raise ProtocolError(f"array of shape {shape} and dtype {dtype} needs "
                            f"{count * dtype.itemsize} bytes, frame has {len(data) - offset}")
    array = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
    if not array.flags.aligned:  # the data start wherever the frame puts them: numpy's
        array = array.copy()  # products fall back from BLAS (~2.4x slower) on such a view
        array.flags.writeable = False  # read-only, as a view of the frame's bytes is
    return array


