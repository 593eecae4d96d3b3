"""The conformance vectors of PROTOCOL.md (tests/conformance/vectors.json) against the codec.

The JSON file is the contract: each vector is a frame (hex) and what a receiver must make
of it -- the message kind and fields, or the ErrorCode it must refuse it with. This test
decodes every committed frame with `protocol.codec.decode` (and, for envelope vectors,
`protocol.signing.open_frame` and `verify` first) and re-encodes each valid canonical one
byte for byte. `generate()` is how the file was made; regenerate it (only when the
protocol changes on purpose) with

    python tests/test_conformance.py --regenerate

The Ed25519 key in the file is a TEST KEY, derived from a fixed public seed: never use it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import struct
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pobo.protocol.chunks import ChunkedDataset, Reassembly, chunk_header  # noqa: E402
from pobo.protocol.codec import decode, encode  # noqa: E402
from pobo.protocol.errors import ErrorCode, ProtocolError  # noqa: E402
from pobo.protocol.messages import (  # noqa: E402
    KINDS, PROTOCOL_VERSION, Dataset, End, Error, Hello, KernelParams, LedgerHead, Mechanism,
    Pending, ProjectedDataset, Query, Release, ReleaseRequest, Retry, Reward, SessionParams,
    Welcome, kind_of,
)
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary  # noqa: E402
from pobo.protocol.signing import ZERO, Link, Signer, open_frame, seal, verify, verify_key  # noqa: E402
from pobo.protocol import transcript as transcripts  # noqa: E402

VECTORS = Path(__file__).parent / "conformance" / "vectors.json"
_COOKIE = "5b" * 32  # a Retry's cookie: opaque to the modeler (section 3.7)
V = PROTOCOL_VERSION  # every vector speaks the current version (regenerate after a bump)
TEST_SEED = bytes(range(32))  # the TEST KEY's secret: 00 01 02 ... 1f, public by design
_HEAD = "5d" * 32  # a ledger chain head: 64 lowercase hex digits


# --------------------------------------------------------------------------- JSON form

def to_json(value):
    """A decoded message as JSON data: dataclasses as maps (with 'kind' dropped -- it is
    the vector's), tuples as lists, arrays as {dtype, shape, data}."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.newbyteorder("<").str, "shape": list(value.shape),
                "data": value.ravel().tolist()}
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    return value


# --------------------------------------------------------------------------- generation

def _pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _ext(code: int, ndim: int, shape, raw: bytes, ext: int = 1) -> msgpack.ExtType:
    return msgpack.ExtType(ext, struct.pack(f"<BB{len(shape)}Q", code, ndim, *shape) + raw)


def _dataset_body(Z_ext) -> bytes:
    return _pack({"release": {"mechanism": "po-gp-ucb-projection", "epsilon": 1.0,
                              "delta": 1e-05, "omega": 3.5, "Z": Z_ext}, "kind": "dataset"})


def _params() -> SessionParams:
    return SessionParams(
        "synthetic", 3, 2, 5, "private",
        (Mechanism("po-gp-ucb-projection", 3.0, 1e-05), Mechanism("ctl-laplace", 1.0, 0.0)),
        KernelParams("se", 6.25, 1.0, 1e-05, "public"), "os-csprng", reward_bound=4.0,
        noise_bound=0.5, noise="gaussian", budget_epsilon=10.0, budget_delta=1e-3,
        security="curve")


def _valid_messages() -> list[tuple[str, object]]:
    Z = np.array([[0.5, -1.25], [2.0, 0.0], [1e-3, 7.5]], dtype="<f8")
    return [
        ("hello-new", Hello(V, "spec-client", "", "gp-ucb", 0.001, "")),
        ("hello-resume-signed-key", Hello(V, "c", "0123456789abcdef0123456789abcdef", "", 0.0,
                                          Signer(Ed25519PrivateKey.from_private_bytes(
                                              TEST_SEED)).public_hex)),
        ("welcome", Welcome(V, "0123456789abcdef0123456789abcdef", _params(), "")),
        ("welcome-non-private-initial-kernel", Welcome(V, "s", SessionParams(
            "tuning", 2, 2, 1, "non-private", (), KernelParams("matern52", 0.5, 0.01, 1e-06,
                                                               "initial"), "seeded"))),
        ("dataset-f8", Dataset(ProjectedDataset("po-gp-ucb-projection", 3.0, 1e-05, 976.0, Z))),
        ("dataset-f4", Dataset(ProjectedDataset("po-gp-ucb-projection", 1.0, 1e-05, 3.5,
                                                Z.astype("<f4")))),
        ("dataset-i8-identity", Dataset(ProjectedDataset("identity", 0.0, 0.0, 0.0,
                                                         np.arange(6, dtype="<i8").reshape(3, 2)))),
        # version 5: Z's 3 rows follow in chunk frames of 2 rows (section 5.1)
        ("dataset-chunked-head", Dataset(ProjectedDataset("po-gp-ucb-projection", 3.0, 1e-05,
                                                          976.0, Z[:0]), 3, 2,
                                         hashlib.sha256(Z.tobytes()).hexdigest())),
        ("query", Query(1, 2)),
        ("query-large-index", Query(70000, 4_000_000_000)),
        ("reward", Reward(1, 2, -0.4421021965429601, "")),
        ("reward-ldp", Reward(3, 0, 12.5, "ctl-laplace")),
        ("release-request", ReleaseRequest("noisy", 1.0, 0.001, "se", 6.25, 1.0, 1e-05)),
        ("release-request-defaults", ReleaseRequest("lipschitz", 0.5, 0.0)),
        ("release", Release("noisy", 1.0, 0.001, 17, 1.375, 0.25)),
        ("release-no-row", Release("noise-free", 1.0, 0.0, -1, 0.0, 2.0)),
        ("hello-batch", Hello(V, "spec-client", "", "gp-ucb", 0.0, "", 4)),
        ("pending", Pending(2, 17, 3600.5)),
        ("end", End("done")),
        ("welcome-ledger-head", Welcome(3, "0123456789abcdef0123456789abcdef", _params(), "",
                                        LedgerHead(4, _HEAD, 3.0, 1e-05, 3.0, 3e-06))),
        ("end-curator-ledger-head", End("closed", LedgerHead(7, _HEAD, 3.5, 2e-05, 3.0,
                                                             3e-06))),
        ("error", Error("index_out_of_range", "row index 64 out of range [0, 64)")),
        ("error-evaluation-failed", Error("evaluation_failed", "objective command "
                                          "'./lab 17' exited with 1: sample lost", 2)),
        # version 4
        ("hello-nonce", Hello(V, "spec-client", batch=2, nonce="00112233445566778899aabbccddeeff")),
        ("error-names-refused-query", Error("index_out_of_range",
                                            "row index 64 out of range [0, 64)", seq=3)),
        ("error-session-lost", Error("session_lost", "a query on a connection with no session "
                                    "(resume the session with a Hello)", seq=2)),
        ("error-replay", Error("replay", "a hello with nonce 0011... was received before")),
        # version 6: the cookie round (section 3.7)
        ("retry", Retry(_COOKIE)),
        ("hello-cookie", Hello(V, "spec-client", nonce="00112233445566778899aabbccddeeff",
                               cookie=_COOKIE)),
        # version 6: the ledger as a Merkle log (section 4.2); the heads and the proof are
        # the merkle_log vector's (sizes 2 and 4 of its entries)
        ("hello-ledger-seen", Hello(V, "spec-client", nonce="00112233445566778899aabbccddeeff",
                                    ledger_log=_LOG, ledger_seen=2)),
        ("welcome-merkle-head", Welcome(V, "0123456789abcdef0123456789abcdef", _params(), "",
                                        LedgerHead(4, _HEAD, 3.0, 1e-05, 3.0, 3e-06,
                                                   _merkle_log()["roots"][4], _LOG),
                                        tuple(_merkle_log()["consistency"]["2-4"]))),
        ("end-merkle-head", End("closed", LedgerHead(4, _HEAD, 3.5, 2e-05, 3.0, 3e-06,
                                                     _merkle_log()["roots"][4], _LOG),
                                tuple(_merkle_log()["consistency"]["3-4"]))),
        ("error-ledger-inconsistent", Error("ledger_inconsistent", "the curator's ledger head "
                                            "commits to 3 entries, fewer than the 4 of the "
                                            "head it signed before")),
    ]


def _malformed() -> list[tuple[str, bytes, str]]:
    """(name, frame, error code) of body frames a receiver must refuse."""
    hello = encode(Hello(V, "x"))
    f8 = np.array([1.0, 2.0], "<f8").tobytes()
    # {"reason": [[[...2000 levels...[0]...]]], "kind": "end"}, packed by hand (msgpack's
    # own packer refuses such depth)
    deep = (b"\x82" + _pack("reason") + b"\x91" * 2000 + b"\x00" + _pack("kind")
            + _pack("end"))
    return [
        ("empty-frame", b"", "malformed"),
        ("truncated-hello", hello[:-3], "malformed"),
        ("trailing-bytes", hello + b"\x00", "malformed"),
        ("not-a-map", _pack([1, 2, 3]), "malformed"),
        ("no-kind", _pack({"seq": 1, "index": 2}), "malformed"),
        ("kind-not-a-string", _pack({"seq": 1, "index": 2, "kind": 3}), "malformed"),
        ("unknown-kind", _pack({"seq": 1, "kind": "hack"}), "unknown_kind"),
        ("query-seq-string", _pack({"seq": "1", "index": 2, "kind": "query"}), "malformed"),
        ("query-index-float", _pack({"seq": 1, "index": 2.0, "kind": "query"}), "malformed"),
        ("query-seq-bool", _pack({"seq": True, "index": 2, "kind": "query"}), "malformed"),
        ("query-index-nil", _pack({"seq": 1, "index": None, "kind": "query"}), "malformed"),
        ("query-index-uint64", _pack({"seq": 1, "index": 1 << 63, "kind": "query"}),
         "malformed"),
        ("reward-value-string", _pack({"seq": 1, "index": 2, "value": "0.5", "noise": "",
                                       "kind": "reward"}), "malformed"),
        ("reward-value-bool", _pack({"seq": 1, "index": 2, "value": False, "noise": "",
                                     "kind": "reward"}), "malformed"),
        ("reward-value-nan", _pack({"seq": 1, "index": 2, "value": float("nan"), "noise": "",
                                    "kind": "reward"}), "malformed"),
        ("reward-value-inf", _pack({"seq": 1, "index": 2, "value": float("-inf"),
                                    "noise": "", "kind": "reward"}), "malformed"),
        ("end-reason-bytes", _pack({"reason": b"done", "kind": "end"}), "malformed"),
        ("pending-waited-string", _pack({"seq": 1, "index": 2, "waited": "1h",
                                         "kind": "pending"}), "malformed"),
        ("hello-batch-float", _pack({"version": V, "client": "x", "batch": 4.0,
                                     "kind": "hello"}), "malformed"),
        ("hello-version-bool", _pack({"version": True, "client": "x", "kind": "hello"}),
         "malformed"),
        ("query-extra-field", _pack({"seq": 1, "index": 2, "urgent": True, "kind": "query"}),
         "malformed"),
        ("query-missing-field", _pack({"seq": 1, "kind": "query"}), "malformed"),
        ("welcome-params-missing-n", _pack({
            "version": V, "session": "s", "kind": "welcome", "params": {
                "scenario": "x", "r": 1, "T": 1, "policy": "private", "mechanisms": [],
                "kernel": {"kernel": "se", "lengthscale": 1.0, "signal_var": 1.0,
                           "noise_var": 0.1}, "randomness": "seeded"}}), "malformed"),
        ("welcome-mechanisms-not-array", _pack({
            "version": V, "session": "s", "kind": "welcome", "params": {
                "scenario": "x", "n": 1, "r": 1, "T": 1, "policy": "private",
                "mechanisms": {"name": "identity"},
                "kernel": {"kernel": "se", "lengthscale": 1.0, "signal_var": 1.0,
                           "noise_var": 0.1}, "randomness": "seeded"}}), "malformed"),
        ("dataset-z-not-ext", _dataset_body([[1.0, 2.0]]), "malformed"),
        ("array-nan", _dataset_body(_ext(1, 1, [2], struct.pack("<2d", 1.0, math.nan))),
         "malformed"),
        ("array-object-dtype", _dataset_body(_ext(17, 1, [2], f8)), "malformed"),
        ("array-dtype-code-0", _dataset_body(_ext(0, 1, [2], f8)), "malformed"),
        ("array-unknown-ext-type", _dataset_body(_ext(1, 1, [2], f8, ext=2)), "malformed"),
        ("array-ndim-5", _dataset_body(_ext(1, 5, [1, 1, 1, 1, 2], f8)), "malformed"),
        ("array-header-truncated", _dataset_body(msgpack.ExtType(1, b"\x01\x02" + bytes(8))),
         "malformed"),
        ("array-header-1-byte", _dataset_body(msgpack.ExtType(1, b"\x01")), "malformed"),
        ("array-oversized-shape", _dataset_body(_ext(1, 2, [1 << 40, 1 << 40], f8)),
         "malformed"),
        ("array-shape-bytes-mismatch", _dataset_body(_ext(1, 2, [2, 2], f8)), "malformed"),
        ("ext-at-top-level", _pack(msgpack.ExtType(1, b"\x01\x00" + f8[:8])), "malformed"),
        ("deeply-nested", deep, "malformed"),
        ("map-over-64-entries", _pack({**{f"k{i}": i for i in range(70)}, "kind": "end"}),
         "malformed"),
        ("string-over-64KiB", _pack({"reason": "x" * 65537, "kind": "end"}), "malformed"),
        ("integer-map-key", _pack({1: "done", "kind": "end"}), "malformed"),
        ("end-ledger-head-missing-chain", _pack({"reason": "closed", "ledger": {
            "entries": 1, "central_epsilon": 0.0, "central_delta": 0.0,
            "max_row_epsilon": 0.0, "max_row_delta": 0.0}, "kind": "end"}), "malformed"),
        ("end-ledger-head-not-a-map", _pack({"reason": "closed", "ledger": _HEAD,
                                             "kind": "end"}), "malformed"),
        ("welcome-ledger-entries-float", _pack({
            "version": V, "session": "s", "kind": "welcome", "ledger": {
                "entries": 1.0, "chain": _HEAD, "central_epsilon": 0.0, "central_delta": 0.0,
                "max_row_epsilon": 0.0, "max_row_delta": 0.0}, "params": {
                "scenario": "x", "n": 1, "r": 1, "T": 1, "policy": "private", "mechanisms": [],
                "kernel": {"kernel": "se", "lengthscale": 1.0, "signal_var": 1.0,
                           "noise_var": 0.1}, "randomness": "seeded"}}), "malformed"),
        ("hello-nonce-bytes", _pack({"version": V, "client": "x", "nonce": bytes(16),
                                     "kind": "hello"}), "malformed"),
        ("dataset-rows-float", _pack({"release": msgpack.unpackb(_dataset_body(
            _ext(1, 2, [0, 2], b"")), raw=False)["release"], "rows": 3.0, "chunk_rows": 2,
            "digest": "00" * 32, "kind": "dataset"}), "malformed"),
    ]


def _handshakes() -> list[tuple[str, bytes, str]]:
    """(name, body, code) of opening Hellos that decode but that a curator must refuse at
    the handshake (PROTOCOL.md 3.5, 4; the Boundary's checks, not the codec's)."""
    return [
        ("hello-version-3", _pack({"version": 3, "client": "old", "resume": "",
                                   "strategy": "", "release_delta": 0.0, "sign_key": "",
                                   "batch": 1, "kind": "hello"}), "version_mismatch"),
        ("hello-nonce-31-digits", encode(Hello(V, "x", nonce="0" * 31)), "malformed"),
        ("hello-nonce-uppercase", encode(Hello(V, "x", nonce="AB" * 16)), "malformed"),
        ("hello-batch-0", encode(Hello(V, "x", batch=0)), "malformed"),
        ("hello-batch-1025", encode(Hello(V, "x", batch=1025)), "malformed"),
        # a noisy release is granted only to queries asked one at a time (section 10.1)
        ("hello-release-with-batch", encode(Hello(V, "x", strategy="gp-ucb",
                                                  release_delta=0.001, batch=4)), "policy"),
        ("hello-cookie-without-nonce", encode(Hello(V, "x", cookie=_COOKIE)), "malformed"),
        ("hello-cookie-63-digits", encode(Hello(V, "x", nonce="0" * 32, cookie=_COOKIE[1:])),
         "malformed"),
    ]


def _in_session() -> list[dict]:
    """Frames a party must refuse in the state that the frames before them set up (section
    11, receiver `session`): `before`, each {dir, hex} as this party sent or received it,
    then the frame received. Under the `distinct` rule a row asked before is refused
    (section 7.2); a Welcome granting `distinct` to a Hello declaring a noisy release is
    refused by the modeler (the curator refuses such a Hello, section 10.1)."""
    params = dataclasses.replace(_params(), distinct=True)
    Z = np.array([[0.5, -1.25], [2.0, 0.0], [1e-3, 7.5]], dtype="<f8")
    opening = [("recv", Hello(V, "spec", strategy="random")), ("sent", Welcome(V, "s", params)),
               ("sent", Dataset(ProjectedDataset("po-gp-ucb-projection", 3.0, 1e-05, 2.5, Z))),
               ("recv", Query(1, 2)), ("sent", Reward(1, 2, 0.5, "ctl-laplace"))]
    release_hello = Hello(V, "spec", strategy="gp-ucb", release_delta=0.001)
    cases = [("query-repeats-a-row-under-distinct", CURATOR, opening, Query(2, 2), "policy"),
             ("welcome-distinct-to-a-release-hello", MODELER, [("sent", release_hello)],
              Welcome(V, "s", params), "policy")]
    return [{"name": name, "layer": "body", "frame_hex": encode(frame).hex(),
             "receiver": "session", "role": role,
             "before": [{"dir": d, "hex": encode(m).hex()} for d, m in before],
             "expect": {"error": code}} for name, role, before, frame, code in cases]


def _signer() -> Signer:
    return Signer(Ed25519PrivateKey.from_private_bytes(TEST_SEED))


def _envelopes() -> list[dict]:
    """Envelope vectors: open_frame, then (with verify_key) the signature, then the body."""
    signer = _signer()
    sid = "0123456789abcdef0123456789abcdef"
    q = encode(Query(1, 2))
    link = Link(sid, 4, bytes([0xAA]) * 32, bytes([0xBB]) * 32)
    signed = seal(q, link, signer)
    hello_link = Link("", 0, ZERO, ZERO)
    out = [
        {"name": "envelope-signed-query", "frame": signed, "verify_key": signer.public_hex},
        {"name": "envelope-signed-hello", "verify_key": signer.public_hex,
         "frame": seal(encode(Hello(V, "spec", "", "", 0.0, signer.public_hex)), hello_link,
                       signer)},
        {"name": "envelope-unsigned-hello", "frame": seal(encode(Hello(V, "spec")), hello_link,
                                                          None)},
        {"name": "envelope-unsigned-end", "frame": seal(encode(End("done")),
                                                        Link(sid, 9, ZERO, bytes([1]) * 32),
                                                        None)},
        # PROTOCOL.md 3.4: a curator's session_lost, signed, from a connection with no
        # session (link session '', its own seq, no receipt)
        {"name": "envelope-signed-session-lost", "verify_key": signer.public_hex,
         "frame": seal(encode(Error("session_lost", "a query on a connection with no session",
                                    2)), Link("", 0, ZERO, ZERO), signer)},
    ]
    tampered_body = bytearray(signed)
    tampered_body[tampered_body.index(q) + len(q) - 1] ^= 0x01  # one body byte flipped
    tampered_link = msgpack.packb({"body": q, "link": {"session": sid, "seq": 5,
                                                       "prev": link.prev, "peer": link.peer},
                                   "sig": signer.sign(b"not the signed bytes")},
                                  use_bin_type=True)
    env = {"body": q, "link": {"session": sid, "seq": 1, "prev": ZERO, "peer": ZERO}, "sig": b""}
    out += [
        {"name": "envelope-tampered-body", "frame": bytes(tampered_body),
         "verify_key": signer.public_hex, "error": "bad_signature"},
        {"name": "envelope-wrong-signature", "frame": tampered_link,
         "verify_key": signer.public_hex, "error": "bad_signature"},
        {"name": "envelope-unsigned-where-key-known", "frame": _pack(env),
         "verify_key": signer.public_hex, "error": "bad_signature"},
        {"name": "envelope-extra-key", "frame": _pack({**env, "x": 1}), "error": "malformed"},
        {"name": "envelope-link-missing-peer", "frame": _pack({**env, "link": {
            k: v for k, v in env["link"].items() if k != "peer"}}), "error": "malformed"},
        {"name": "envelope-prev-31-bytes", "frame": _pack({**env, "link": {
            **env["link"], "prev": bytes(31)}}), "error": "malformed"},
        {"name": "envelope-seq-not-int", "frame": _pack({**env, "link": {
            **env["link"], "seq": 1.0}}), "error": "malformed"},
        {"name": "envelope-sig-10-bytes", "frame": _pack({**env, "sig": bytes(10)}),
         "error": "malformed"},
        {"name": "envelope-body-not-bytes", "frame": _pack({**env, "body": "query"}),
         "error": "malformed"},
        {"name": "envelope-no-sig-key", "frame": _pack({"body": q, "link": env["link"]}),
         "error": "malformed"},
        {"name": "envelope-body-unknown-kind", "frame": _pack({**env, "body": _pack(
            {"kind": "hack"})}), "error": "unknown_kind"},
    ]
    return out


# --------------------------------------------------------------------------- ledger chain

LEDGER_ENTRIES = [  # (session, mechanism, epsilon, delta, scope, row, time): section 4
    ("0123456789abcdef0123456789abcdef", "gaussian-rows", 3.004166, 1e-05, "central", 0,
     1764180000.25),
    ("0123456789abcdef0123456789abcdef", "ldp-reward", 0.5, 0.0, "local", 9999,
     1764180001.5),
    ("", "lift-test", 0.1, 5e-324, "central", 0, 0.0),
    ("sessi\u00f6n \"quoted\" \\ \t", "m\u00e9canisme-\U0001f600", -0.0, 1e-300, "local",
     2 ** 62, 1.7976931348623157e308),
]


def _ledger_record(entry: tuple) -> bytes:
    """A ledger entry's record as PROTOCOL.md section 4 (LedgerHead) defines it, written
    from the text (json.dumps), not by pobo's `entry_record`."""
    session, mechanism, epsilon, delta, scope, row, time = entry
    return json.dumps([session, mechanism, float(epsilon).hex(), float(delta).hex(), scope,
                       int(row), float(time).hex()], separators=(",", ":"),
                      ensure_ascii=True).encode()


def _ledger_chain() -> dict:
    """Section 4's ledger chain (Welcome, LedgerHead): each entry, its record and the head
    after it."""
    head = hashlib.sha256(b"pobo ledger chain v1").digest()
    out = {"genesis": head.hex(), "entries": []}
    for entry in LEDGER_ENTRIES:
        record = _ledger_record(entry)
        head = hashlib.sha256(head + record).digest()
        out["entries"].append({"entry": list(entry), "record_hex": record.hex(),
                               "head": head.hex()})
    return out


_LOG = "a5" * 16  # a ledger log id: 32 lowercase hex digits


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1's MTH, written from the text (not protocol.merkle)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while 2 * k < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """RFC 9162 section 2.1.4.1's SUBPROOF, from the text."""
    n = len(leaves)
    if m == n:
        return [] if whole else [_mth(leaves)]
    k = 1
    while 2 * k < n:
        k *= 2
    if m <= k:
        return _subproof(m, leaves[:k], whole) + [_mth(leaves[k:])]
    return _subproof(m - k, leaves[k:], False) + [_mth(leaves[:k])]


def _merkle_log() -> dict:
    """Section 4.2's Merkle log over section 4's entries: each record's leaf hash
    (SHA-256 of 0x00 and the record), the root of every prefix, and the consistency
    proof between every two sizes 0 < m < n."""
    leaves = [hashlib.sha256(b"\x00" + _ledger_record(e)).digest() for e in LEDGER_ENTRIES]
    n = len(leaves)
    return {"leaf_hashes": [h.hex() for h in leaves],
            "roots": [_mth(leaves[:k]).hex() for k in range(n + 1)],
            "consistency": {f"{m}-{k}": [h.hex() for h in _subproof(m, leaves[:k], True)]
                            for k in range(2, n + 1) for m in range(1, k)}}


# --------------------------------------------------------------------------- chunks

def _chunked() -> dict:
    """Section 5.1: a Dataset head and the chunk frames of its Z (5 x 2 float64, 2 rows a
    chunk), as pobo sends them, then hostile variants, each with the error code a
    receiver must refuse it with (heads: at the head; chunks: when that frame or the end
    comes)."""
    Z = np.round(np.linspace(-1.0, 1.0, 10), 3).reshape(5, 2)
    chunked = ChunkedDataset.of(Dataset(ProjectedDataset("gaussian-rows", 1.0, 1e-05, 0.5,
                                                         Z)), chunk_bytes=32)
    head = chunked.message
    frames = [b"".join(parts) for parts in chunked.frames()]
    data = [msgpack.unpackb(f, raw=False)["data"] for f in frames]
    nan = Z.copy()
    nan[4, 1] = math.nan
    nan_digest = hashlib.sha256(nan.tobytes()).hexdigest()

    def chunk(i, payload):
        return chunk_header(i, len(payload)) + payload

    def headed(**changes):
        return encode(dataclasses.replace(head, **changes))

    flipped = bytearray(data[1])
    flipped[3] ^= 0x01
    hostile = [
        ("wrong-digest", encode(head), [frames[0], chunk(1, bytes(flipped)), frames[2]],
         "malformed"),
        ("too-many-bytes", encode(head), [frames[0], frames[1], chunk(2, data[2] + bytes(8))],
         "oversized"),
        ("short-chunk", encode(head), [chunk(0, data[0][:-8]), frames[1], frames[2]],
         "malformed"),
        ("out-of-order", encode(head), [frames[1], frames[0], frames[2]], "sequence"),
        ("missing-chunk", encode(head), [frames[0], frames[2]], "sequence"),
        ("chunks-stop", encode(head), [frames[0], frames[1]], "timeout"),
        ("chunk-after-the-end", encode(head), frames + [frames[2]], "sequence"),
        ("oversized-chunk-frame", encode(head), [chunk(0, data[0] * 8)], "oversized"),
        ("message-where-a-chunk-is-due", encode(head), [frames[0], encode(End("done"))],
         "sequence"),
        ("chunk-index-not-int", encode(head), [_pack({"chunk": "0", "data": data[0]})],
         "malformed"),
        ("nan-in-body", headed(digest=nan_digest), [
            chunk(i, nan.tobytes()[32 * i:32 * (i + 1)]) for i in range(3)], "malformed"),
        ("head-chunks-over-64-MiB", headed(chunk_rows=1 << 23), [], "oversized"),
        ("head-body-over-the-limit", headed(rows=1 << 40), [], "oversized"),
        ("head-digest-not-hex", headed(digest="Z" * 64), [], "malformed"),
        ("head-z-not-empty", encode(dataclasses.replace(head, release=dataclasses.replace(
            head.release, Z=Z[:1]))), [], "malformed"),
    ]
    return {"about": "PROTOCOL.md 5.1: a Dataset body (head_hex) and its chunk frames",
            "head_hex": encode(head).hex(), "chunks_hex": [f.hex() for f in frames],
            "Z": to_json(Z),
            "hostile": [{"name": name, "head_hex": h.hex(), "chunks_hex": [c.hex() for c in cs],
                         "expect": {"error": code}} for name, h, cs, code in hostile]}


def _reassemble(head_hex: str, chunks_hex: list[str]) -> np.ndarray:
    """Receive a chunked Dataset as section 5.1 says: the head, then the chunk frames."""
    reassembly = Reassembly(decode(bytes.fromhex(head_hex)))
    for frame in chunks_hex:
        reassembly.feed(bytes.fromhex(frame))
    return reassembly.result()


# --------------------------------------------------------------------------- transcripts

TRANSCRIPT_TIME = 1767225600.25  # every vector record's `time` (a fixed clock)


def _transcript_frames() -> dict[str, bytes]:
    """The frames of the transcript vector: a modeler's signed session opening, a query,
    two garbage frames it refused, and the Error answering the second (test key)."""
    signer = _signer()
    sid = "0123456789abcdef0123456789abcdef"
    Z = np.round(np.linspace(-2.0, 2.0, 80), 3).reshape(40, 2)
    hello = seal(encode(Hello(V, "spec", sign_key=signer.public_hex,
                              nonce="00112233445566778899aabbccddeeff")),
                 Link("", 0, ZERO, ZERO), signer)
    welcome = seal(encode(Welcome(V, sid, _params(), signer.public_hex)),
                   Link(sid, 0, ZERO, hashlib.sha256(hello).digest()), signer)
    dataset = seal(encode(Dataset(ProjectedDataset("po-gp-ucb-projection", 3.0, 1e-05, 2.5, Z))),
                   Link(sid, 1, bytes([7]) * 32, hashlib.sha256(hello).digest()), signer)
    return {"hello": hello, "welcome": welcome, "dataset": dataset,
            "garbage": b"\xc1 not msgpack", "garbage2": b"\xc1 again",
            "reply": seal(encode(Error("malformed", "undecodable frame")),
                          Link(sid, 5, ZERO, hashlib.sha256(dataset).digest()), signer)}


def _transcript() -> dict:
    """A transcript written by hand from PROTOCOL.md 12 (records, chaining, a split
    envelope in a blob, a refused record and a refused-summary), as {records: [{hex,
    sha256, fields}], blobs: {sha256: hex}}; test_transcript_vector checks pobo's reader
    and writer against it."""
    f = _transcript_frames()
    signer = _signer()
    sid = "0123456789abcdef0123456789abcdef"
    digest = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    body = open_frame(f["dataset"]).body
    env = msgpack.unpackb(f["dataset"], raw=False)
    items = [
        {"seq": 0, "time": TRANSCRIPT_TIME, "dir": "sent", "kind": "hello", "frame": f["hello"]},
        {"seq": 1, "time": TRANSCRIPT_TIME, "dir": "recv", "kind": "welcome",
         "frame": f["welcome"]},
        {"seq": 2, "time": TRANSCRIPT_TIME, "dir": "recv", "kind": "dataset",
         "ref": digest(body), "size": len(body), "fsha": digest(f["dataset"]),
         "link": env["link"], "sig": env["sig"]},
        {"seq": 3, "time": TRANSCRIPT_TIME, "kind": "refused", "sha256": digest(f["garbage"]),
         "size": len(f["garbage"]), "code": "malformed", "error": "undecodable frame"},
        None,  # the query: its link names this record and the one before
        {"seq": 5, "time": TRANSCRIPT_TIME, "kind": "refused-summary", "count": 1,
         "sha256": digest(digest(f["garbage2"])), "replies": 1,
         "replies_sha256": digest(digest(f["reply"]))},
    ]
    records, prev = [], ZERO
    for i, item in enumerate(items):
        if item is None:
            query = seal(encode(Query(1, 7)), Link(sid, 4, prev, digest(f["welcome"])), signer)
            item = {"seq": 4, "time": TRANSCRIPT_TIME, "dir": "sent", "kind": "query",
                    "frame": query}
        raw = _pack({**item, "prev": prev})
        records.append({"hex": raw.hex(), "sha256": digest(raw).hex(),
                        "fields": _hexed({**item, "prev": prev})})
        prev = digest(raw)
    return {"about": "PROTOCOL.md 12: records in order; `fields` with bin values as hex",
            "records": records, "blobs": {digest(body).hex(): body.hex()}}


SESSION_ID = "00112233445566778899aabbccddeeff"


def _session_messages() -> list[tuple[str, object]]:
    """A whole session, (sender, message) in order: Hello, Welcome (with the ledger's head:
    the projection charged), Dataset, two queries answered, a Lipschitz release, the
    modeler's End and the curator's closing End (the release charged)."""
    entries = [("", "gaussian-rows", 3.0, 1e-05, "central", 0, TRANSCRIPT_TIME),
               (SESSION_ID, "release:lipschitz", 0.5, 0.0, "central", 0, TRANSCRIPT_TIME)]
    heads, head = [], hashlib.sha256(b"pobo ledger chain v1").digest()
    for entry in entries:
        head = hashlib.sha256(head + _ledger_record(entry)).digest()
        heads.append(head.hex())
    params = SessionParams("synthetic", 4, 2, 2, "private", (Mechanism("gaussian-rows", 3.0,
                                                                       1e-05),),
                           KernelParams("se", 1.0, 1.0, 1e-04, "public"), "os-csprng",
                           budget_epsilon=10.0, budget_delta=1e-03, security="curve")
    Z = np.array([[0.5, -1.25], [2.0, 0.0], [1e-3, 7.5], [-3.0, 0.25]], dtype="<f8")
    key = _signer().public_hex
    return [
        (MODELER, Hello(V, "spec", "", "random", 0.0, key, 1, "0f" * 16)),
        (CURATOR, Welcome(V, SESSION_ID, params, key,
                          LedgerHead(1, heads[0], 3.0, 1e-05, 0.0, 0.0))),
        (CURATOR, Dataset(ProjectedDataset("gaussian-rows", 3.0, 1e-05, 1.5, Z))),
        (MODELER, Query(1, 2)), (CURATOR, Reward(1, 2, 0.8125)),
        (MODELER, Query(2, 0)), (CURATOR, Reward(2, 0, -0.25)),
        (MODELER, ReleaseRequest("lipschitz", 0.5, 0.0)),
        (CURATOR, Release("lipschitz", 0.5, 0.0, -1, 1.0625, 2.0)),
        (MODELER, End("done")),
        (CURATOR, End("closed", LedgerHead(2, heads[1], 3.5, 1e-05, 0.0, 0.0))),
    ]


def _session_transcripts() -> dict:
    """Both parties' transcripts of `_session_messages`, written from sections 3 and 12:
    every frame an envelope signed with the test key (both parties: it is a vector), its
    link naming the sender's own record and the last frame it received; records in the
    key order pobo writes. `pobo audit` accepts each alone, as a complete session, and the
    two together."""
    signer = _signer()
    sides = {role: {"records": [], "prev": ZERO, "last_recv": ZERO}
             for role in (CURATOR, MODELER)}

    def record(side: dict, item: dict, clock: float) -> None:
        raw = _pack({"seq": len(side["records"]), "time": clock, **item, "prev": side["prev"]})
        side["records"].append(raw)
        side["prev"] = hashlib.sha256(raw).digest()

    for i, (sender, message) in enumerate(_session_messages()):
        me, peer = sides[sender], sides[CURATOR if sender == MODELER else MODELER]
        session = "" if isinstance(message, Hello) else SESSION_ID
        frame = seal(encode(message), Link(session, len(me["records"]), me["prev"],
                                           me["last_recv"]), signer)
        clock = TRANSCRIPT_TIME + 0.5 * i  # a frame sent and received in the same instant
        record(me, {"dir": "sent", "kind": kind_of(message), "frame": frame}, clock)
        record(peer, {"dir": "recv", "kind": kind_of(message), "frame": frame}, clock)
        peer["last_recv"] = hashlib.sha256(frame).digest()
    return {"about": "PROTOCOL.md 11: a complete session, both transcripts (records' hex "
                     "in file order), signed by the test key as curator and modeler",
            "keys": {CURATOR: signer.public_hex, MODELER: signer.public_hex},
            **{role: [raw.hex() for raw in side["records"]] for role, side in sides.items()}}


def _hexed(value):
    """JSON form of a record map: bin values as hex strings, maps recursively."""
    if isinstance(value, dict):
        return {k: _hexed(v) for k, v in value.items()}
    return value.hex() if isinstance(value, bytes) else value


def generate() -> dict:
    """The vector file's content (see the module docstring)."""
    signer = _signer()
    vectors = []
    for name, message in _valid_messages():
        vectors.append({"name": name, "layer": "body", "frame_hex": encode(message).hex(),
                        "canonical": True,
                        "expect": {"kind": kind_of(message), "fields": to_json(message)}})
    # valid but not canonical: a decoder must accept them, an encoder never makes them
    for name, frame, message in [
        ("hello-defaults-absent", _pack({"version": V, "client": "old", "kind": "hello"}),
         Hello(V, "old")),
        ("query-kind-first", _pack({"kind": "query", "seq": 1, "index": 2}), Query(1, 2)),
        ("end-ledger-absent", _pack({"reason": "done", "kind": "end"}), End("done")),
        ("reward-value-int", _pack({"seq": 1, "index": 0, "value": 3, "kind": "reward"}),
         Reward(1, 0, 3.0)),
        ("reward-value-float32", msgpack.packb({"seq": 1, "index": 0, "value": 0.5,
                                                "kind": "reward"}, use_single_float=True),
         Reward(1, 0, 0.5)),
    ]:
        vectors.append({"name": name, "layer": "body", "frame_hex": frame.hex(),
                        "canonical": False,
                        "expect": {"kind": kind_of(message), "fields": to_json(message)}})
    for name, frame, code in _malformed():
        vectors.append({"name": name, "layer": "body", "frame_hex": frame.hex(),
                        "expect": {"error": code}})
    for name, frame, code in _handshakes():
        vectors.append({"name": name, "layer": "body", "frame_hex": frame.hex(),
                        "receiver": "curator-handshake", "expect": {"error": code}})
    vectors += _in_session()
    big = encode(End("done"))
    vectors.append({"name": "frame-over-max-frame", "layer": "body", "frame_hex": big.hex(),
                    "max_frame": len(big) - 1, "expect": {"error": "oversized"}})
    for v in _envelopes():
        entry = {"name": v["name"], "layer": "envelope", "frame_hex": v["frame"].hex()}
        if "verify_key" in v:
            entry["verify_key"] = v["verify_key"]
        if "error" in v:
            entry["expect"] = {"error": v["error"]}
        else:
            env = open_frame(v["frame"])
            message = decode(env.body)
            entry["canonical"] = True
            entry["expect"] = {"kind": kind_of(message), "fields": to_json(message),
                               "link": {"session": env.link.session, "seq": env.link.seq,
                                        "prev": env.link.prev.hex(),
                                        "peer": env.link.peer.hex()},
                               "body_hex": env.body.hex(), "sig_hex": env.sig.hex()}
        vectors.append(entry)
    return {
        "about": f"pobo protocol version {V} conformance vectors; see PROTOCOL.md section 11",
        "test_key": {
            "WARNING": "TEST KEY ONLY -- public by design, never use it to sign anything real",
            "ed25519_secret_hex": TEST_SEED.hex(),
            "ed25519_public_hex": signer.public_hex,
        },
        "vectors": vectors,
        "transcript": _transcript(),
        "session": _session_transcripts(),
        "chunked": _chunked(),
        "ledger_chain": _ledger_chain(),
        "merkle_log": _merkle_log(),
    }


# --------------------------------------------------------------------------- checking

def _load() -> dict:
    return json.loads(VECTORS.read_text())


def _check(v: dict) -> None:
    """Receive v's frame as PROTOCOL.md says a receiver must; assert the stated outcome."""
    frame = bytes.fromhex(v["frame_hex"])
    expect = v["expect"]
    try:
        if v["layer"] == "envelope":
            env = open_frame(frame)
            assert not env.bare, "an envelope vector must open as an envelope"
            if "verify_key" in v and not verify(env, verify_key(v["verify_key"])):
                raise ProtocolError("bad signature", ErrorCode.BAD_SIGNATURE)
            message = decode(env.body)
        else:
            env = None
            message = decode(frame, v.get("max_frame", 1 << 30))
        if v.get("receiver") == "curator-handshake":  # the opening message's checks too
            Boundary(PRIVATE, CURATOR).incoming(message)
        elif v.get("receiver") == "session":  # after the frames that set up its state
            boundary = Boundary(PRIVATE, v["role"])
            for item in v["before"]:
                before = decode(bytes.fromhex(item["hex"]))
                (boundary.outgoing if item["dir"] == "sent" else boundary.incoming)(before)
            boundary.incoming(message)
    except ProtocolError as exc:
        assert "error" in expect, f"{v['name']}: refused with {exc.code.value}: {exc}"
        assert exc.code.value == expect["error"], f"{v['name']}: {exc.code.value}: {exc}"
        return
    assert "error" not in expect, f"{v['name']}: decoded, expected {expect['error']}"
    assert kind_of(message) == expect["kind"]
    assert to_json(message) == expect["fields"], v["name"]
    if env is not None:
        link = expect["link"]
        assert env.link == Link(link["session"], link["seq"], bytes.fromhex(link["prev"]),
                                bytes.fromhex(link["peer"]))
        assert env.body.hex() == expect["body_hex"] and env.sig.hex() == expect["sig_hex"]
    assert v.get("receiver") in (None, "curator-handshake"), v["name"]
    if v.get("canonical"):
        body = encode(message)
        if env is None:
            assert body == frame, f"{v['name']}: re-encoding differs"
        else:
            assert body == env.body
            signer = _signer() if env.sig else None
            assert seal(body, env.link, signer) == frame, f"{v['name']}: reseal differs"


_DATA = _load() if VECTORS.exists() else {"vectors": []}


@pytest.mark.parametrize("vector", _DATA["vectors"], ids=lambda v: v["name"])
def test_vector(vector):
    _check(vector)


def test_vectors_cover_every_kind_and_error():
    vectors = _DATA["vectors"]
    assert vectors, f"no vectors in {VECTORS}"
    kinds = {v["expect"]["kind"] for v in vectors if "kind" in v["expect"]}
    assert kinds == set(KINDS)
    bare_kinds = {v["expect"]["kind"] for v in vectors
                  if v["layer"] == "body" and v.get("canonical")}
    assert bare_kinds == set(KINDS)
    errors = {v["expect"]["error"] for v in vectors if "error" in v["expect"]}
    assert {"malformed", "unknown_kind", "oversized", "bad_signature",
            "version_mismatch", "policy"} <= errors
    assert any(v["layer"] == "envelope" and "verify_key" in v and "kind" in v["expect"]
               for v in vectors)
    assert len({v["name"] for v in vectors}) == len(vectors)


def test_chunked_vector_reassembles_to_its_z():
    """Section 5.1's example: the head and chunk frames give Z back, and pobo's sender
    makes exactly these frames."""
    vector = _DATA["chunked"]
    Z = _reassemble(vector["head_hex"], vector["chunks_hex"])
    assert to_json(Z) == vector["Z"] and not Z.flags.writeable
    sent = ChunkedDataset.of(Dataset(dataclasses.replace(
        decode(bytes.fromhex(vector["head_hex"])).release, Z=Z.copy())), chunk_bytes=32)
    assert encode(sent.message).hex() == vector["head_hex"]
    assert [b"".join(p).hex() for p in sent.frames()] == vector["chunks_hex"]


@pytest.mark.parametrize("vector", _DATA.get("chunked", {}).get("hostile", []),
                         ids=lambda v: v["name"])
def test_hostile_chunks_are_refused_with_their_code(vector):
    with pytest.raises(ProtocolError) as caught:
        _reassemble(vector["head_hex"], vector["chunks_hex"])
    assert caught.value.code.value == vector["expect"]["error"], str(caught.value)


def test_test_key_is_the_declared_one():
    key = _DATA["test_key"]
    assert "TEST KEY" in key["WARNING"]
    signer = Signer(Ed25519PrivateKey.from_private_bytes(bytes.fromhex(
        key["ed25519_secret_hex"])))
    assert signer.public_hex == key["ed25519_public_hex"]


def test_committed_vectors_match_the_generator():
    """The generator still makes the committed file (a change to either is deliberate)."""
    assert generate() == _DATA


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate"]:
        VECTORS.parent.mkdir(parents=True, exist_ok=True)
        VECTORS.write_text(json.dumps(generate(), indent=1) + "\n")
        print(f"wrote {VECTORS}")
    else:
        print(__doc__)


def test_transcript_vector_reads_back_and_chains(tmp_path):
    """pobo's reader takes the hand-written records of PROTOCOL.md 12: the chain, every
    field, and the split envelope rebuilt from its blob to the frame it stands for."""
    vector = _DATA["transcript"]
    data = b"".join(bytes.fromhex(r["hex"]) for r in vector["records"])
    (tmp_path / "blobs").mkdir()
    for name, blob in vector["blobs"].items():
        (tmp_path / "blobs" / name).write_bytes(bytes.fromhex(blob))
    path = tmp_path / "modeler.transcript"
    path.write_bytes(data)
    prev = "0" * 64
    for (raw, record), expected in zip(transcripts.raw_records(data), vector["records"],
                                       strict=True):
        assert hashlib.sha256(raw).hexdigest() == expected["sha256"]
        assert record.prev == prev and record.seq == expected["fields"]["seq"]
        assert _hexed(msgpack.unpackb(raw, raw=False)) == expected["fields"]
        prev = expected["sha256"]
    frames = _transcript_frames()
    read = list(transcripts.read_transcript(path))
    assert read[2].frame == frames["dataset"] and read[2].digest == hashlib.sha256(
        frames["dataset"]).hexdigest()
    assert read[3].kind == "refused" and read[3].digest == hashlib.sha256(
        frames["garbage"]).hexdigest()
    (tmp_path / "blobs" / next(iter(vector["blobs"]))).write_bytes(b"tampered")
    with pytest.raises(transcripts.TranscriptError):
        list(transcripts.read_transcript(path))


def test_pobo_transcript_writer_writes_the_vector(tmp_path, monkeypatch):
    """pobo's writer, given the same frames at the same clock, writes the vector's bytes
    exactly (a frame over the threshold split into the blob store)."""
    vector = _DATA["transcript"]
    frames = _transcript_frames()
    monkeypatch.setattr(transcripts.time, "time", lambda: TRANSCRIPT_TIME)
    threshold = max(len(frames[k]) for k in ("hello", "welcome"))
    assert len(frames["dataset"]) > threshold
    writer = transcripts.Transcript(tmp_path / "t", blobs=tmp_path / "blobs",
                                    blob_threshold=threshold, max_refused=1)
    writer.append("sent", "hello", frames["hello"])
    writer.append("recv", "welcome", frames["welcome"])
    writer.append("recv", "dataset", frames["dataset"])
    assert writer.refuse(frames["garbage"], "malformed", "undecodable frame")
    writer.append("sent", "query", bytes.fromhex(vector["records"][4]["fields"]["frame"]))
    assert not writer.refuse(frames["garbage2"], "malformed", "undecodable frame")
    writer.count_reply(frames["reply"])
    writer.close()
    expected = b"".join(bytes.fromhex(r["hex"]) for r in vector["records"])
    assert (tmp_path / "t").read_bytes() == expected
    for name, blob in vector["blobs"].items():
        assert (tmp_path / "blobs" / name).read_bytes() == bytes.fromhex(blob)


def test_pobo_ledger_chain_gives_the_vector_s_records_and_heads():
    """pobo's entry records and chain (protocol.checkpoint, parties.checkpoints.LedgerChain
    uses the same) give the vector's bytes and heads, non-ASCII and odd floats included."""
    from pobo.protocol.checkpoint import GENESIS_HEAD, chain_head, entry_record

    vector = _DATA["ledger_chain"]
    assert vector["genesis"] == GENESIS_HEAD
    head = GENESIS_HEAD
    for item in vector["entries"]:
        record = entry_record(*item["entry"])
        assert record.hex() == item["record_hex"]
        head = chain_head([record], head)
        assert head == item["head"]


def _write_session(folder: Path) -> tuple[list[Path], Path]:
    """The session vector's two transcripts, and a keys folder of the test key as both
    parties' public signing key."""
    vector = _DATA["session"]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for role in (CURATOR, MODELER):
        path = folder / f"{role}.transcript"
        path.write_bytes(b"".join(bytes.fromhex(r) for r in vector[role]))
        paths.append(path)
    keys = folder / "keys"
    keys.mkdir(exist_ok=True)
    for role, key in vector["keys"].items():
        (keys / f"{role}.sign_public").write_text(key + "\n")
    return paths, keys


def test_the_session_vector_audits_as_a_complete_session(tmp_path, capsys):
    """Section 11's complete session: `pobo audit` accepts each transcript alone (exit 0:
    signed, verified, complete) and both together; the hand-built format sample
    (`transcript`) is not a session and fails, as section 11 says."""
    from pobo.cli import main as pobo_main
    from pobo.protocol.audit import audit_transcript

    paths, keys = _write_session(tmp_path / "session")
    for path in paths:
        report = audit_transcript(path, keys=_DATA["session"]["keys"])
        assert report.ok and report.complete and report.signatures == "verified", (
            report.violations, report.notes)
        assert report.ledger["central"]["epsilon_basic"] == pytest.approx(3.5)  # + release
        assert pobo_main(["audit", str(path), "--keys", str(keys)]) == 0, capsys.readouterr()
    assert pobo_main(["audit", *map(str, paths), "--keys", str(keys)]) == 0
    sample = tmp_path / "sample" / "modeler.transcript"
    sample.parent.mkdir()
    sample.write_bytes(b"".join(bytes.fromhex(r["hex"]) for r in _DATA["transcript"]["records"]))
    (sample.parent / "blobs").mkdir()
    for name, blob in _DATA["transcript"]["blobs"].items():
        (sample.parent / "blobs" / name).write_bytes(bytes.fromhex(blob))
    assert pobo_main(["audit", str(sample), "--keys", str(keys)]) != 0


def test_pobo_transcript_writer_writes_the_session_vector(tmp_path, monkeypatch):
    """pobo's writer, given the session's frames at the vector's clocks, writes both
    transcripts byte for byte (the record key order of section 12.1)."""
    for role in (CURATOR, MODELER):
        writer = transcripts.Transcript(tmp_path / role)
        for raw in _DATA["session"][role]:
            item = msgpack.unpackb(bytes.fromhex(raw), raw=False)
            monkeypatch.setattr(transcripts.time, "time", lambda: item["time"])
            writer.append(item["dir"], item["kind"], item["frame"])
        writer.close()
        assert (tmp_path / role).read_bytes() == b"".join(
            bytes.fromhex(r) for r in _DATA["session"][role])


def test_a_session_vector_cut_before_its_ends_is_incomplete(tmp_path, capsys):
    """The vector's modeler transcript cut after the Release: each record still chains
    and verifies, but no End from the curator vouches for the tail (exit 4)."""
    from pobo.cli import main as pobo_main

    paths, keys = _write_session(tmp_path / "session")
    records = _DATA["session"][MODELER]
    cut = next(i for i, r in enumerate(records)
               if msgpack.unpackb(bytes.fromhex(r), raw=False)["kind"] == "release") + 1
    paths[1].write_bytes(b"".join(bytes.fromhex(r) for r in records[:cut]))
    assert pobo_main(["audit", str(paths[1]), "--keys", str(keys)]) == 4
    assert pobo_main(["audit", str(paths[1]), "--keys", str(keys), "--allow-incomplete"]) == 0
def test_pobo_merkle_log_gives_the_vector_s_roots_and_proofs():
    """pobo's Merkle log (protocol.merkle, and parties.ledger_log over a journal) gives the
    vector's leaf hashes, roots and consistency proofs, and verifies each proof; a proof
    against another size's root fails."""
    from pobo.protocol.checkpoint import entry_record
    from pobo.protocol.merkle import MerkleTree, leaf_hash, verify_consistency

    vector = _DATA["merkle_log"]
    tree = MerkleTree()
    for entry, expected in zip(LEDGER_ENTRIES, vector["leaf_hashes"], strict=True):
        leaf = leaf_hash(entry_record(*entry))
        assert leaf.hex() == expected
        tree.append(leaf)
    assert [tree.root(k).hex() for k in range(tree.size + 1)] == vector["roots"]
    roots = [bytes.fromhex(r) for r in vector["roots"]]
    for name, proof in vector["consistency"].items():
        m, n = map(int, name.split("-"))
        assert [p.hex() for p in tree.consistency(m, n)] == proof
        nodes = [bytes.fromhex(p) for p in proof]
        assert verify_consistency(m, n, nodes, roots[m], roots[n])
        assert not verify_consistency(m, n, nodes, roots[m - 1], roots[n])
