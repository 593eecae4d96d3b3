"""A modeler written only from PROTOCOL.md: raw pyzmq and msgpack, no pobo imports.

It runs one whole session (Hello -> Welcome -> Dataset -> T x Query/Reward -> End) as an
unsigned modeler against `pobo curator synthetic` started as a subprocess, choosing rows
at random, and checks that it got T rewards and that the curator's record says ok.
Every frame it sends is a version-2 envelope (PROTOCOL.md section 3) with an empty sig.
"""
from __future__ import annotations

import hashlib
import math
import os
import random
import struct
import threading
from pathlib import Path

import msgpack
import zmq

from curator_process import CuratorProcess  # test helper: runs the CLI, no pobo import

ROOT = Path(__file__).resolve().parents[1]
ZERO = bytes(32)
VERSION = 3
ARRAY_EXT = 1
DTYPES = {1: ("d", 8), 2: ("f", 4), 3: ("q", 8)}  # PROTOCOL.md 5: code -> (struct, size)


# --------------------------------------------------------------------------- the wire

def decode_array(data: bytes) -> list:
    """ExtType 1 -> nested lists (PROTOCOL.md 5)."""
    code, ndim = data[0], data[1]
    fmt, size = DTYPES[code]
    assert ndim <= 4
    shape = struct.unpack_from(f"<{ndim}Q", data, 2)
    offset = 2 + 8 * ndim
    count = math.prod(shape)
    assert count * size == len(data) - offset
    flat = list(struct.unpack_from(f"<{count}{fmt}", data, offset))
    for dim in reversed(shape[1:]):
        flat = [flat[i:i + dim] for i in range(0, len(flat), dim)]
    return flat


def ext_hook(code: int, data: bytes):
    if code != ARRAY_EXT:
        raise ValueError(f"unknown ext {code}")
    return {"__array__": decode_array(data), "shape": struct.unpack_from(
        f"<{data[1]}Q", data, 2)}


def body(kind: str, **fields) -> bytes:
    """A message body: the fields, then 'kind' (PROTOCOL.md 4)."""
    return msgpack.packb({**fields, "kind": kind}, use_bin_type=True)


DOMAIN = b"pobo-v2 signed frame\x00"  # PROTOCOL.md 3


def signed_bytes(body_bytes: bytes, session: str, seq: int, prev: bytes, peer: bytes) -> bytes:
    """What an envelope's Ed25519 signature covers (PROTOCOL.md 3)."""
    sid = session.encode()
    return (DOMAIN + struct.pack(">I", len(sid)) + sid + struct.pack(">q", seq) + prev + peer
            + hashlib.sha256(body_bytes).digest())


class CuratorError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class SpecModeler:
    """The envelope bookkeeping of PROTOCOL.md 3: unsigned, or signed with `secret` (an
    Ed25519 private key), verifying the curator's frames once it announced its key."""

    def __init__(self, sock: zmq.Socket, timeout_ms: int, secret=None) -> None:
        self.sock, self.timeout_ms, self.secret = sock, timeout_ms, secret
        self.session = ""
        self.seq = 0  # our own record counter: non-decreasing, one per frame sent
        self.last_recv = ZERO  # SHA-256 of the last frame received from the curator
        self.curator_key = None  # the Ed25519 public key the Welcome announced
        self.verified = 0

    @property
    def sign_key(self) -> str:
        if self.secret is None:
            return ""
        from cryptography.hazmat.primitives import serialization
        return self.secret.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()

    def send(self, kind: str, **fields) -> None:
        b = body(kind, **fields)
        sig = (b"" if self.secret is None else
               self.secret.sign(signed_bytes(b, self.session, self.seq, ZERO, self.last_recv)))
        frame = msgpack.packb({"body": b,
                               "link": {"session": self.session, "seq": self.seq,
                                        "prev": ZERO, "peer": self.last_recv},
                               "sig": sig}, use_bin_type=True)
        self.seq += 1
        self.sock.send(frame)

    def recv(self) -> dict:
        if not self.sock.poll(self.timeout_ms, zmq.POLLIN):
            raise TimeoutError(f"no frame from the curator in {self.timeout_ms} ms")
        parts = self.sock.recv_multipart()  # the curator may send a frame in parts
        frame = b"".join(parts)  # (PROTOCOL.md, Framing): joined, in order
        env = msgpack.unpackb(frame, raw=False)
        assert set(env) == {"body", "link", "sig"}
        link = env["link"]
        assert len(link["prev"]) == 32 and len(link["peer"]) == 32
        message = msgpack.unpackb(env["body"], raw=False, ext_hook=ext_hook)
        if message["kind"] == "welcome" and message["sign_key"]:
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
            self.curator_key = Ed25519PublicKey.from_public_bytes(
                bytes.fromhex(message["sign_key"]))
            self.session = message["session"]
        if self.curator_key is not None:  # raises InvalidSignature on a bad one
            self.curator_key.verify(env["sig"], signed_bytes(
                env["body"], link["session"], link["seq"], link["prev"], link["peer"]))
            self.verified += 1
        if self.session:
            assert link["session"] == self.session
        self.last_recv = hashlib.sha256(frame).digest()
        if message["kind"] == "error":
            raise CuratorError(message["code"], message["message"])
        return message


def run_session(endpoint: str, seed: int, timeout_ms: int = 20_000, secret=None,
                probe_refusals: bool = False) -> dict:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    rng = random.Random(seed)
    refusals = []
    try:
        sock.connect(endpoint)
        m = SpecModeler(sock, timeout_ms, secret)
        m.send("hello", version=VERSION, client="spec-modeler", resume="", strategy="random",
               release_delta=0.0, sign_key=m.sign_key)
        welcome = m.recv()
        assert welcome["kind"] == "welcome" and welcome["version"] == VERSION
        m.session = welcome["session"]
        params = welcome["params"]
        n, r, T = params["n"], params["r"], params["T"]
        dataset = m.recv()
        assert dataset["kind"] == "dataset"
        Z = dataset["release"]["Z"]
        assert tuple(Z["shape"]) == (n, r)
        expected_noise = ("ctl-laplace" if any(mech["name"] == "ctl-laplace"
                                               for mech in params["mechanisms"]) else "")
        if probe_refusals:  # PROTOCOL.md 9: recoverable refusals; the session goes on
            for kind, fields in [("query", {"seq": 1, "index": n}),
                                 ("query", {"seq": 2, "index": 0}),
                                 ("query", {"seq": "1", "index": 0}),
                                 ("reward", {"seq": 1, "index": 0, "value": 1.0,
                                             "noise": ""}),
                                 ("gossip", {"text": "hi"})]:
                m.send(kind, **fields)
                try:
                    m.recv()
                except CuratorError as exc:
                    refusals.append(exc.code)
        rewards = []
        for seq in range(1, T + 1):
            index = rng.randrange(n)
            m.send("query", seq=seq, index=index)
            reward = m.recv()
            assert reward["kind"] == "reward"
            assert (reward["seq"], reward["index"]) == (seq, index)
            assert math.isfinite(reward["value"])
            assert reward.get("noise", "") == expected_noise
            rewards.append(reward["value"])
        # an idempotent retry of the last query: the same recorded value (PROTOCOL.md 7)
        m.send("query", seq=T, index=index)
        again = m.recv()
        assert (again["kind"], again["seq"], again["value"]) == ("reward", T, rewards[-1])
        if probe_refusals:
            for fields in [{"seq": T, "index": (index + 1) % n}, {"seq": T + 1, "index": 0}]:
                m.send("query", **fields)
                try:
                    m.recv()
                except CuratorError as exc:
                    refusals.append(exc.code)
        m.send("end", reason="done")
        return {"params": params, "rewards": rewards, "session": m.session,
                "refusals": refusals, "verified": m.verified}
    finally:
        sock.close(linger=0)
        _term(ctx)


def _term(ctx: zmq.Context, timeout: float = 5.0) -> None:
    """ctx.term() in a daemon thread, waited for at most `timeout` s (libzmq's term can
    block; this module imports no pobo, so not pobo's close_context)."""
    done = threading.Thread(target=ctx.term, daemon=True)
    done.start()
    done.join(timeout)
    assert not done.is_alive(), f"the ZeroMQ context did not terminate within {timeout} s"


# --------------------------------------------------------------------------- the test

def test_module_imports_no_pobo():
    source = Path(__file__).read_text()
    for forbidden in ("from protocol", "from parties", "from scenarios", "from transport",
                      "import protocol", "import parties", "import scenarios",
                      "import transport"):
        hits = [line for line in source.splitlines()
                if line.lstrip().startswith(forbidden)]
        assert not hits, hits


def test_spec_modeler_completes_a_session(tmp_path):
    T = 5
    curator = CuratorProcess(tmp_path / "curator", T)
    try:
        curator.wait_listening()
        result = run_session(curator.endpoint, seed=1)
        record = curator.finish()
        assert len(result["rewards"]) == T
        assert result["params"]["T"] == T and result["params"]["n"] == 64
        assert record["status"] == "ok", record
        assert record["session"] == result["session"]
        assert len(record["queries"]) == T
        assert record["rewards"] == result["rewards"]
        assert record["signatures"] == "unsigned"
    finally:
        curator.kill()


def test_spec_modeler_signed_session_with_refusals(tmp_path):
    """Both sides sign (PROTOCOL.md 3); refused messages are answered with the codes of
    PROTOCOL.md 9 and the session goes on to an ok record."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    curator_secret, modeler_secret = os.urandom(32), os.urandom(32)
    modeler_key = Ed25519PrivateKey.from_private_bytes(modeler_secret)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "curator.sign_secret").write_text(curator_secret.hex())
    spec = SpecModeler(None, 0, modeler_key)
    (keys / "modeler.sign_public").write_text(spec.sign_key)
    T = 3
    curator = CuratorProcess(tmp_path / "curator", T, ["--sign-secret", str(keys / "curator.sign_secret"),
                                                "--sign-allow", str(keys)])
    try:
        curator.wait_listening()
        result = run_session(curator.endpoint, seed=2, secret=modeler_key,
                             probe_refusals=True)
        record = curator.finish()
        assert result["refusals"] == ["index_out_of_range", "sequence", "malformed", "policy",
                                      "unknown_kind", "sequence", "budget_exhausted"]
        assert len(result["rewards"]) == T
        assert result["verified"] >= 2 + 5 + T + 1 + 2  # every curator frame verified
        assert record["status"] == "ok", record
        assert record["signatures"] == "signed"
        assert record["sign_keys"]["modeler"] == spec.sign_key
    finally:
        curator.kill()
