"""A modeler written only from PROTOCOL.md: raw pyzmq and msgpack, no pobo imports.

It runs one whole session (Hello -> Welcome -> Dataset -> T x Query/Reward -> End) as an
unsigned modeler against `pobo curator synthetic` started as a subprocess, choosing rows
at random, and checks that it got T rewards and that the curator's record says ok.
Every frame it sends is a version-2 envelope (PROTOCOL.md section 3) with an empty sig.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import struct
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import zmq

from curator_process import CuratorProcess  # test helper: runs the CLI, no pobo import

ROOT = Path(__file__).resolve().parents[1]
ZERO = bytes(32)
VERSION = 6
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
    def __init__(self, code: str, message: str, seq: int = 0) -> None:
        super().__init__(f"{code} (query {seq}): {message}")
        self.code, self.seq = code, seq


class SpecTranscript:
    """A transcript writer from PROTOCOL.md 12 alone: one msgpack map per record, appended
    and flushed, each chained to the SHA-256 of the exact bytes of the record before."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "ab")
        self.count, self.prev = 0, ZERO  # the next record's seq; SHA-256 of the last one

    def append(self, direction: str, kind: str, frame: bytes) -> None:
        record = msgpack.packb({"seq": self.count, "time": time.time(), "dir": direction,
                                "kind": kind, "frame": frame, "prev": self.prev},
                               use_bin_type=True)
        self.file.write(record)
        self.file.flush()
        self.count, self.prev = self.count + 1, hashlib.sha256(record).digest()

    def close(self) -> None:
        self.file.close()


class SpecModeler:
    """The envelope bookkeeping of PROTOCOL.md 3: unsigned, or signed with `secret` (an
    Ed25519 private key), verifying the curator's frames once it announced its key. With
    a `transcript` every frame is recorded (PROTOCOL.md 12) and each frame sent is linked
    to its own record (`seq` its record number, `prev` the hash of the record before)."""

    def __init__(self, sock: zmq.Socket, timeout_ms: int, secret=None,
                 transcript: SpecTranscript | None = None) -> None:
        self.sock, self.timeout_ms, self.secret = sock, timeout_ms, secret
        self.transcript = transcript
        self.session = ""
        self.sent = 0  # frames sent: the link's seq without a transcript
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

    def frame(self, kind: str, **fields) -> bytes:
        """The envelope this modeler would send next (not sent, not recorded)."""
        b = body(kind, **fields)
        seq, prev = ((self.transcript.count, self.transcript.prev) if self.transcript
                     else (self.sent, ZERO))
        sig = (b"" if self.secret is None else
               self.secret.sign(signed_bytes(b, self.session, seq, prev, self.last_recv)))
        return msgpack.packb({"body": b,
                              "link": {"session": self.session, "seq": seq,
                                       "prev": prev, "peer": self.last_recv},
                              "sig": sig}, use_bin_type=True)

    def send(self, kind: str, **fields) -> bytes:
        frame = self.frame(kind, **fields)
        self.send_frame(kind, frame)
        return frame

    def hello(self, **fields) -> bytes:
        """The cookie round (PROTOCOL.md 3.7): the Hello sent once as a probe (neither
        recorded nor counted), then again, recorded, echoing the cookie of the curator's
        Retry; returns that second frame."""
        self.sock.send(self.frame("hello", **fields, cookie=""))
        if not self.sock.poll(self.timeout_ms, zmq.POLLIN):
            raise TimeoutError(f"no Retry from the curator in {self.timeout_ms} ms")
        env = msgpack.unpackb(b"".join(self.sock.recv_multipart()), raw=False)
        reply = msgpack.unpackb(env["body"], raw=False)
        if reply["kind"] == "error":
            raise CuratorError(reply["code"], reply["message"], reply.get("seq", 0))
        assert reply["kind"] == "retry" and len(reply["cookie"]) == 64, reply
        return self.send("hello", **fields, cookie=reply["cookie"])

    def send_frame(self, kind: str, frame: bytes) -> None:
        if self.transcript is not None:
            self.transcript.append("sent", kind, frame)
        self.sent += 1
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
        if self.session and not (message["kind"] == "error" and link["session"] == ""):
            assert link["session"] == self.session  # '': an Error from a session-less link
        if self.transcript is not None:
            self.transcript.append("recv", message["kind"], frame)
        self.last_recv = hashlib.sha256(frame).digest()
        if message["kind"] == "error":
            raise CuratorError(message["code"], message["message"], message.get("seq", 0))
        return message


def run_session(endpoint: str, seed: int, timeout_ms: int = 20_000, secret=None,
                probe_refusals: bool = False, transcript: Path | None = None,
                batch: int = 1) -> dict:
    """One whole session; with `batch` > 1 queries are pipelined, `batch` at a time."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    rng = random.Random(seed)
    refusals = []
    record = SpecTranscript(transcript) if transcript is not None else None
    try:
        sock.connect(endpoint)
        m = SpecModeler(sock, timeout_ms, secret, record)
        m.hello(version=VERSION, client="spec-modeler", resume="", strategy="random",
                release_delta=0.0, sign_key=m.sign_key, batch=batch,
                nonce=secrets.token_hex(16))
        welcome = m.recv()
        assert welcome["kind"] == "welcome" and welcome["version"] == VERSION
        m.session = welcome["session"]
        params = welcome["params"]
        n, r, T = params["n"], params["r"], params["T"]
        assert params["batch"] == batch
        dataset = m.recv()
        assert dataset["kind"] == "dataset"
        Z = dataset["release"]["Z"]
        assert tuple(Z["shape"]) == (n, r)
        expected_noise = ("ctl-laplace" if any(mech["name"] == "ctl-laplace"
                                               for mech in params["mechanisms"]) else "")
        if probe_refusals:  # PROTOCOL.md 9: recoverable refusals; the session goes on
            for kind, fields in [("query", {"seq": 1, "index": n}),
                                 ("query", {"seq": 0, "index": 0}),
                                 ("query", {"seq": "1", "index": 0}),
                                 ("reward", {"seq": 1, "index": 0, "value": 1.0,
                                             "noise": ""}),
                                 ("gossip", {"text": "hi"})]:
                m.send(kind, **fields)
                try:
                    m.recv()
                except CuratorError as exc:
                    refusals.append((exc.code, exc.seq))
        rewards, asked = {}, {}
        for first in range(1, T + 1, batch):  # a window of `batch` queries in flight
            window = range(first, min(first + batch, T + 1))
            for seq in window:
                asked[seq] = rng.randrange(n)
                m.send("query", seq=seq, index=asked[seq])
            for _ in window:
                reward = m.recv()
                assert reward["kind"] == "reward"
                assert reward["index"] == asked[reward["seq"]]
                assert math.isfinite(reward["value"])
                assert reward.get("noise", "") == expected_noise
                rewards[reward["seq"]] = reward["value"]
        # an idempotent retry of the last query: the same recorded value (PROTOCOL.md 7)
        m.send("query", seq=T, index=asked[T])
        again = m.recv()
        assert (again["kind"], again["seq"], again["value"]) == ("reward", T, rewards[T])
        if probe_refusals:
            for fields in [{"seq": T, "index": (asked[T] + 1) % n}, {"seq": T + 2, "index": n}]:
                m.send("query", **fields)
                try:
                    m.recv()
                except CuratorError as exc:
                    refusals.append((exc.code, exc.seq))
        m.send("end", reason="done")
        return {"params": params, "rewards": [rewards[seq] for seq in sorted(rewards)],
                "session": m.session, "refusals": refusals, "verified": m.verified}
    finally:
        if record is not None:
            record.close()
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
    os.chmod(keys / "curator.sign_secret", 0o600)  # a secret key others may read is refused
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
        # every refusal of a query names it (PROTOCOL.md 4, Error.seq); a frame that is not
        # a valid query names none; seq T + 2 with a bad row: budget_exhausted comes first
        assert result["refusals"] == [("index_out_of_range", 1), ("sequence", 0),
                                      ("malformed", 0), ("policy", 0), ("unknown_kind", 0),
                                      ("sequence", 3), ("budget_exhausted", 5)]
        assert len(result["rewards"]) == T
        assert result["verified"] >= 2 + 5 + T + 1 + 2  # every curator frame verified
        assert record["status"] == "ok", record
        assert record["signatures"] == "signed"
        assert record["sign_keys"]["modeler"] == spec.sign_key
    finally:
        curator.kill()


def _public_hex(secret: bytes) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.from_private_bytes(secret).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def _audit(*args) -> subprocess.CompletedProcess:
    """`pobo audit ARGS --json` (the CLI: this module imports no pobo)."""
    return subprocess.run([sys.executable, "-m", "pobo", "audit", *map(str, args), "--json"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)


def test_spec_transcript_passes_pobo_audit(tmp_path):
    """A transcript written from PROTOCOL.md 12 alone (SpecTranscript, no pobo code), of a
    signed session with pipelined queries, passes `pobo audit` next to the curator's: the
    chain, the policy replay, every signature under the auditor's keys, and agreement."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    curator_secret, modeler_secret = os.urandom(32), os.urandom(32)
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "curator.sign_secret").write_text(curator_secret.hex())
    os.chmod(keys / "curator.sign_secret", 0o600)  # a secret key others may read is refused
    (keys / "curator.sign_public").write_text(_public_hex(curator_secret) + "\n")
    (keys / "modeler.sign_public").write_text(_public_hex(modeler_secret) + "\n")
    T = 4
    curator = CuratorProcess(tmp_path / "curator", T, [
        "--sign-secret", str(keys / "curator.sign_secret"), "--sign-allow", str(keys),
        "--max-batch", "2"])
    modeler_transcript = tmp_path / "modeler.transcript"
    try:
        curator.wait_listening()
        result = run_session(curator.endpoint, seed=3,
                             secret=Ed25519PrivateKey.from_private_bytes(modeler_secret),
                             transcript=modeler_transcript, batch=2)
        record = curator.finish()
        assert record["status"] == "ok" and len(result["rewards"]) == T
    finally:
        curator.kill()
    curator_transcript = tmp_path / "curator" / "curator.transcript"
    key_args = ["--curator-key", str(keys / "curator.sign_public"),
                "--modeler-key", str(keys / "modeler.sign_public")]
    audit = _audit(curator_transcript, modeler_transcript, *key_args)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    reports = json.loads(audit.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert [r["role"] for r in reports] == ["curator", "modeler"]
    for report in reports:
        assert report["ok"] and report["signatures"] == "verified", report
        assert report["session"] == result["session"]
    # the audit can fail: one byte of the spec transcript changed is caught
    data = bytearray(modeler_transcript.read_bytes())
    data[len(data) // 2] ^= 0x01
    modeler_transcript.write_bytes(bytes(data))
    audit = _audit(curator_transcript, modeler_transcript, *key_args)
    assert audit.returncode != 0, audit.stdout[-2000:]


def _connect(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _handshake(m: SpecModeler, batch: int = 1, resume: str = "", nonce: str | None = None):
    """Hello -> (Welcome params, Dataset); the session id kept in `m`."""
    m.hello(version=VERSION, client="spec-modeler", resume=resume, strategy="",
            release_delta=0.0, sign_key=m.sign_key, batch=batch,
            nonce=secrets.token_hex(16) if nonce is None else nonce)
    welcome = m.recv()
    m.session = welcome["session"]
    assert m.recv()["kind"] == "dataset"
    return welcome["params"]


def _expect_error(m: SpecModeler) -> CuratorError:
    try:
        message = m.recv()
    except CuratorError as exc:
        return exc
    raise AssertionError(f"expected an Error, got {message}")


def test_pipelined_queries_go_on_after_a_refused_one(tmp_path):
    """PROTOCOL.md 7: a refused query is not asked. Queries 1 (a bad row), 2 and 3 sent at
    once: 1 is refused naming seq 1, 2 and 3 are answered, and seq 1 asked again with a
    good row completes the session (T = 3, batch 3). `pobo audit` accepts the flow from
    both transcripts, the modeler's (written from the text) included: the bad row it sent
    is a query the curator refuses, not a violation."""
    curator = CuratorProcess(tmp_path / "curator", 3, ["--max-batch", "3"])
    ctx = zmq.Context()
    written = SpecTranscript(tmp_path / "modeler.transcript")
    try:
        curator.wait_listening()
        m = SpecModeler(_connect(ctx, curator.endpoint), 20_000, transcript=written)
        params = _handshake(m, batch=3)
        n = params["n"]
        for seq, index in ((1, n), (2, 5), (3, 6)):
            m.send("query", seq=seq, index=index)
        refusal = _expect_error(m)
        assert (refusal.code, refusal.seq) == ("index_out_of_range", 1)
        answers = {m.recv()["seq"] for _ in range(2)}
        assert answers == {2, 3}
        m.send("query", seq=1, index=7)
        reward = m.recv()
        assert (reward["kind"], reward["seq"], reward["index"]) == ("reward", 1, 7)
        m.send("query", seq=4, index=0)  # past T = 3
        refusal = _expect_error(m)
        assert (refusal.code, refusal.seq) == ("budget_exhausted", 4)
        m.send("end", reason="done")
        m.sock.close(linger=0)
        record = curator.finish()
        assert record["status"] == "ok" and sorted(record["queries"]) == [5, 6, 7]
        audit = _audit(tmp_path / "curator" / "curator.transcript",  # the refusal included
                       "--allow-unsigned")  # this spec modeler signs nothing
        assert audit.returncode == 0, audit.stdout[-3000:]
        [report] = json.loads(audit.stdout) if audit.stdout.startswith("[") else [
            json.loads(audit.stdout)]
        assert report["ok"] and report["refused"]["codes"] == {"index_out_of_range": 1,
                                                              "budget_exhausted": 1}
        written.close()
        audit = _audit(tmp_path / "curator" / "curator.transcript",
                       tmp_path / "modeler.transcript", "--allow-unsigned")
        assert audit.returncode == 0, audit.stdout[-3000:]
        reports = json.loads(audit.stdout)
        assert [r["role"] for r in reports] == ["curator", "modeler"]
        assert all(r["ok"] for r in reports), [r["violations"] for r in reports]
        assert any("refuses (index_out_of_range" in n for n in reports[1]["notes"])
    finally:
        written.close()
        curator.kill()
        _term(ctx)


def test_a_lost_connection_gets_session_lost_then_the_session_resumes(tmp_path):
    """PROTOCOL.md 2 and 8: a frame over the curator's 64 KiB limit makes libzmq drop the
    connection; the DEALER reconnects by itself, and its next Query is answered
    `session_lost` naming the query (not `sequence`). A new connection resuming the
    session then finishes it."""
    T = 3
    curator = CuratorProcess(tmp_path / "curator", T)
    ctx = zmq.Context()
    try:
        curator.wait_listening()
        m = SpecModeler(_connect(ctx, curator.endpoint), 2_000)
        _handshake(m)
        m.send("query", seq=1, index=3)
        assert m.recv()["kind"] == "reward"
        m.sock.send(b"\x00" * 70_000)  # over MAXMSGSIZE: the connection is dropped
        lost = None
        for _ in range(20):  # until the DEALER has reconnected and the query got through
            m.send("query", seq=2, index=4)
            try:
                m.recv()
            except CuratorError as exc:
                lost = exc
                break
            except TimeoutError:
                continue
        assert lost is not None, "no answer on the reconnected DEALER"
        assert (lost.code, lost.seq) == ("session_lost", 2), lost
        m.sock.close(linger=0)
        again = SpecModeler(_connect(ctx, curator.endpoint), 20_000)
        again.session = m.session
        params = _handshake(again, resume=m.session)
        assert again.session == m.session and params["T"] == T
        for seq, index in ((2, 4), (3, 5)):
            again.send("query", seq=seq, index=index)
            assert again.recv()["seq"] == seq
        again.send("end", reason="done")
        again.sock.close(linger=0)
        record = curator.finish()
        assert record["status"] == "ok" and record["queries"] == [3, 4, 5]
    finally:
        curator.kill()
        _term(ctx)


def test_a_connection_taken_over_by_a_resume_is_told_superseded(tmp_path):
    """PROTOCOL.md 8: a resume on a new connection takes a live session over, and the old
    connection gets the fatal `superseded` Error at once (not silence until its timeout);
    the new connection finishes the session."""
    T = 2
    curator = CuratorProcess(tmp_path / "curator", T)
    ctx = zmq.Context()
    try:
        curator.wait_listening()
        old = SpecModeler(_connect(ctx, curator.endpoint), 10_000)
        _handshake(old)
        old.send("query", seq=1, index=3)
        assert old.recv()["kind"] == "reward"
        new = SpecModeler(_connect(ctx, curator.endpoint), 20_000)
        new.session = old.session
        _handshake(new, resume=old.session)
        started = time.monotonic()
        told = _expect_error(old)
        assert told.code == "superseded" and time.monotonic() - started < 5, told
        new.send("query", seq=2, index=4)
        assert new.recv()["kind"] == "reward"
        new.send("end", reason="done")
        for sock in (old.sock, new.sock):
            sock.close(linger=0)
        assert curator.finish()["status"] == "ok"
    finally:
        curator.kill()
        _term(ctx)


def test_a_replayed_hello_is_refused_and_a_version_3_hello_mismatched(tmp_path):
    """PROTOCOL.md 3.5 and 3.7: a first Hello gets a Retry, not a session; the admitted
    Hello (its cookie echoed) sent again byte for byte on another connection is refused
    `replay`; a version-3 Hello gets `version_mismatch`, enveloped or bare; the first
    session is unaffected."""
    curator = CuratorProcess(tmp_path / "curator", 1)
    ctx = zmq.Context()
    try:
        curator.wait_listening()
        m = SpecModeler(_connect(ctx, curator.endpoint), 20_000)
        hello = m.hello(version=VERSION, client="spec", resume="", strategy="",
                        release_delta=0.0, sign_key="", batch=1, nonce=secrets.token_hex(16))
        m.session = m.recv()["session"]
        assert m.recv()["kind"] == "dataset"
        thief = SpecModeler(_connect(ctx, curator.endpoint), 20_000)
        thief.send_frame("hello", hello)
        assert _expect_error(thief).code == "replay"
        old = SpecModeler(_connect(ctx, curator.endpoint), 20_000)
        old.send("hello", version=3, client="v3", resume="", strategy="", release_delta=0.0,
                 sign_key="", batch=1)
        assert _expect_error(old).code == "version_mismatch"
        bare = _connect(ctx, curator.endpoint)
        bare.send(body("hello", version=3, client="v3-bare"))
        assert bare.poll(20_000, zmq.POLLIN)
        reply = msgpack.unpackb(bare.recv(), raw=False)  # a bare frame gets a bare answer
        assert (reply["kind"], reply["code"]) == ("error", "version_mismatch")
        for sock in (thief.sock, old.sock, bare):
            sock.close(linger=0)
        m.send("query", seq=1, index=2)
        assert m.recv()["kind"] == "reward"
        m.send("end", reason="done")
        m.sock.close(linger=0)
        assert curator.finish()["status"] == "ok"
    finally:
        curator.kill()
        _term(ctx)
