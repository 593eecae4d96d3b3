"""Signed, cross-linked transcripts: what a dishonest party (or both) can no longer forge.

Each forgery below recomputes the edited file's hash chain and the head its party
anchored (what the audit checked before signatures), so only the signatures and the
links can catch it. The auditor is given the parties' public signing keys.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from pobo.protocol.audit import audit_session, audit_transcript
from pobo.protocol.channel import Channel
from pobo.protocol.codec import decode, encode
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.messages import PROTOCOL_VERSION, Error, Hello, Query, Reward, Welcome
from pobo.protocol.policy import CURATOR, MODELER, PRIVATE, Boundary
from pobo.protocol.signing import Link, Signer, open_frame, seal
from pobo.protocol.transcript import Transcript, raw_records, read_transcript
from pobo.cli import main as pobo_main
from pobo.session import RunConfig, Signing, run_inproc
from pobo.transport.inproc import pipe_pair

CONFIG = RunConfig(T=4, options={"grid": 8}, release="noisy")


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """One signed session (with a DP release) and the auditor's keys."""
    out = tmp_path_factory.mktemp("signed")
    signing = Signing.throwaway()
    result = asyncio.run(run_inproc(CONFIG, out, signing=signing))
    assert result["status"] == "ok" and result["signatures"] == "signed"
    keys = {CURATOR: signing.curator.public_hex, MODELER: signing.modeler.public_hex}
    return out, keys, signing


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("curator.transcript", "modeler.transcript", "curator.json", "modeler.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def _items(path: Path) -> list[dict]:
    return [msgpack.unpackb(raw, raw=False) for raw, _ in raw_records(path.read_bytes())]


def _rewrite(folder: Path, role: str, items: list[dict]) -> None:
    """Write `items` as role's transcript with a recomputed chain (seq and prev) and
    re-anchor the head in role.json: a forger's rehash."""
    prev, out = bytes(32), b""
    for i, item in enumerate(items):
        item = {**item, "seq": i, "prev": prev}
        raw = msgpack.packb(item, use_bin_type=True)
        out += raw
        prev = hashlib.sha256(raw).digest()
    (folder / f"{role}.transcript").write_bytes(out)
    record = json.loads((folder / f"{role}.json").read_text())
    record["transcript_head"] = {"records": len(items), "last": prev.hex()}
    (folder / f"{role}.json").write_text(json.dumps(record))


def _with_body(frame: bytes, body: bytes, signer: Signer | None = None, **link) -> bytes:
    """The envelope `frame` with another body (and link fields), its old signature kept
    unless a `signer` re-signs it."""
    env = open_frame(frame)
    new_link = env.link._replace(**link)
    if signer is not None:
        return seal(body, new_link, signer)
    packed = msgpack.unpackb(frame, raw=False)
    packed["body"] = body
    packed["link"] = {**packed["link"], **{k: v for k, v in link.items()}}
    return msgpack.packb(packed, use_bin_type=True)


def _edit_reward(items: list[dict], direction: str, signer: Signer | None = None) -> int:
    """Change the value of the second reward in `items`; returns its record number."""
    at = [i for i, it in enumerate(items) if it["kind"] == "reward" and it["dir"] == direction][1]
    reward = decode(open_frame(items[at]["frame"]).body)
    forged = Reward(reward.seq, reward.index, reward.value + 1.0, reward.noise)
    items[at] = {**items[at], "frame": _with_body(items[at]["frame"], encode(forged), signer)}
    return at


def _audit(paths: list[Path], keys_dir: Path | None = None, *extra: str) -> tuple[int, str]:
    text = io.StringIO()
    args = ["audit", *map(str, paths), *extra]
    if keys_dir is not None:
        args += ["--keys", str(keys_dir)]
    with contextlib.redirect_stdout(text):
        status = pobo_main(args)
    return status, text.getvalue()


def _keys_dir(folder: Path, keys: dict) -> Path:
    d = folder / "keys"
    d.mkdir(exist_ok=True)
    for role, key in keys.items():
        (d / f"{role}.sign_public").write_text(key + "\n")
    return d


def test_a_signed_session_audits_as_verified_and_every_frame_is_an_envelope(signed, tmp_path):
    out, keys, _ = signed
    status, text = _audit([out / "curator.transcript", out / "modeler.transcript"],
                          _keys_dir(tmp_path, keys), "--json")
    reports = json.loads(text)
    assert status == 0 and [r["signatures"] for r in reports] == ["verified", "verified"]
    for record in read_transcript(out / "modeler.transcript"):
        env = open_frame(record.frame)
        assert not env.bare and len(env.sig) == 64
        if record.dir == "sent":  # the modeler's signed link is its own record
            assert env.link.seq == record.seq and env.link.prev.hex() == record.prev
    # without keys (none given, none in the user's store) the audit says it could not
    # verify them, and exits 3 unless told to accept that
    status, text = _audit([out / "curator.transcript"])
    assert status == 3 and "signatures: unverified" in text and "not verified: " in text
    assert _audit([out / "curator.transcript"], None, "--allow-unsigned")[0] == 0


@pytest.mark.parametrize("role", [CURATOR, MODELER])
def test_one_edited_reward_fails_from_either_transcript_alone(signed, tmp_path, role):
    out, keys, _ = signed
    folder = _copy(out, tmp_path / "f")
    items = _items(folder / f"{role}.transcript")
    at = _edit_reward(items, "sent" if role == CURATOR else "recv")
    _rewrite(folder, role, items)
    # the rehash passes the chain and the anchor: without keys only the signature is off
    status, text = _audit([folder / f"{role}.transcript"], _keys_dir(tmp_path, keys))
    assert status == 2, text
    assert f"signatures: FAILED at record {at} " in text and "does not verify" in text


def test_a_curator_resigning_its_own_edit_is_exposed_by_the_modelers_receipts(signed,
                                                                                   tmp_path):
    """The curator has its own secret key: it re-signs the edited reward (with the same
    link). The modeler's next frame acknowledges the frame it really received."""
    out, keys, signing = signed
    folder = _copy(out, tmp_path / "f")
    items = _items(folder / "curator.transcript")
    at = _edit_reward(items, "sent", signer=signing.curator)
    _rewrite(folder, CURATOR, items)
    status, text = _audit([folder / "curator.transcript"], _keys_dir(tmp_path, keys))
    assert status == 2 and f"signatures: FAILED at record {at + 1} " in text, text
    assert "never recorded sending" in text


def test_both_transcripts_edited_consistently_without_the_keys_fail(signed, tmp_path):
    out, keys, _ = signed
    folder = _copy(out, tmp_path / "f")
    c, m = _items(folder / "curator.transcript"), _items(folder / "modeler.transcript")
    ca, ma = _edit_reward(c, "sent"), _edit_reward(m, "recv")
    assert c[ca]["frame"] == m[ma]["frame"]  # the same forged frame in both
    _rewrite(folder, CURATOR, c)
    _rewrite(folder, MODELER, m)
    # even without keys the curator's transcript gives it away: the modeler's next frame
    # acknowledges the reward it really received
    assert audit_session(folder / "curator.transcript", folder / "modeler.transcript")[0].violations
    status, text = _audit([folder / "curator.transcript", folder / "modeler.transcript"],
                          _keys_dir(tmp_path, keys))
    assert status == 2 and text.count("signatures: FAILED") == 2, text


def test_deleting_the_release_from_both_transcripts_fails(signed, tmp_path):
    out, keys, _ = signed
    folder = _copy(out, tmp_path / "f")
    for role in (CURATOR, MODELER):
        items = _items(folder / f"{role}.transcript")
        assert sum(it["kind"] == "release" for it in items) == 1
        _rewrite(folder, role, [it for it in items if it["kind"] != "release"])
    status, text = _audit([folder / "curator.transcript", folder / "modeler.transcript"],
                          _keys_dir(tmp_path, keys))
    assert status == 2 and text.count("signatures: FAILED") == 2, text
    # each transcript alone gives it away too
    for role in (CURATOR, MODELER):
        report = audit_transcript(folder / f"{role}.transcript", keys=keys)
        assert report.signatures.startswith("FAILED at record"), report.signatures


@pytest.mark.parametrize("role", [CURATOR, MODELER])
def test_a_party_cutting_its_transcript_after_the_release_fails_a_single_audit(signed,
                                                                               tmp_path, role):
    """Issue 45's attack: a party cuts its own transcript at the Release (the Release and
    everything after it gone: no frame left acknowledges them) and re-anchors its head. The
    chain, every signature and every link still verify; only the End the peer would have
    sent last, acknowledging the party's last frame, is missing. Audited alone, it must
    not pass: exit 4, saying it cannot vouch for the tail (0 with --allow-incomplete)."""
    out, keys, _ = signed
    folder = _copy(out, tmp_path / "f")
    keys_dir = _keys_dir(tmp_path, keys)
    whole, text = _audit([folder / f"{role}.transcript"], keys_dir)
    assert whole == 0, text  # the session's own transcript holds its peer's End
    items = _items(folder / f"{role}.transcript")
    release = next(i for i, it in enumerate(items) if it["kind"] == "release")
    _rewrite(folder, role, items[:release])
    record = json.loads((folder / f"{role}.json").read_text())
    record.pop("ledger", None)  # its own record, rewritten to match: it shows no release
    record.pop("release", None)
    (folder / f"{role}.json").write_text(json.dumps(record))
    status, text = _audit([folder / f"{role}.transcript"], keys_dir)
    assert status == 4, text
    assert "signatures: verified" in text and "INCOMPLETE" in text, text
    assert _audit([folder / f"{role}.transcript"], keys_dir, "--allow-incomplete")[0] == 0
    # with the peer's transcript the cut shows: frames or receipts it holds are missing
    paired, text = _audit([folder / "curator.transcript", folder / "modeler.transcript"],
                          keys_dir)
    assert paired == 2 and "transcripts disagree" in text, text


def test_a_replaced_modeler_key_fails(signed, tmp_path):
    """A forger re-signs everything the modeler sent with a key of its own and announces
    it in the Hello: the auditor checks against the modeler key it was given."""
    out, keys, _ = signed
    folder = _copy(out, tmp_path / "f")
    mine = Signer.generate()
    items = _items(folder / "modeler.transcript")
    prev = bytes(32)
    for i, item in enumerate(items):
        if item["dir"] == "sent":
            env = open_frame(item["frame"])
            body = env.body
            message = decode(body)
            if isinstance(message, Hello):
                body = encode(Hello(**{**message.__dict__, "sign_key": mine.public_hex}))
            item["frame"] = seal(body, Link(env.link.session, i, prev, env.link.peer), mine)
        prev = hashlib.sha256(msgpack.packb({**item, "seq": i, "prev": prev},
                                            use_bin_type=True)).digest()
    _rewrite(folder, MODELER, items)
    # even without keys: the curator's frames acknowledge the Hello it really received
    assert audit_transcript(folder / "modeler.transcript").violations
    report = audit_transcript(folder / "modeler.transcript", keys=keys)
    assert report.signatures.startswith("FAILED at record 0 (the hello announces the modeler "
                                        "signing key"), report.signatures
    status, text = _audit([folder / "modeler.transcript"], _keys_dir(tmp_path, keys))
    assert status == 2


async def _pair(tmp_path, curator_signer, modeler_signer, allowed):
    cpipe, mpipe = pipe_pair()
    transcript = Transcript(tmp_path / "curator.transcript")
    cchan = Channel(cpipe, Boundary(PRIVATE, CURATOR), transcript, timeout=5,
                    signer=curator_signer, peer_keys=allowed)
    mchan = Channel(mpipe, Boundary(PRIVATE, MODELER), None, timeout=5, signer=modeler_signer)
    return cchan, mchan, mpipe, transcript


async def test_a_frame_with_a_bad_signature_is_refused_on_receipt(tmp_path):
    c, m, other = Signer.generate(), Signer.generate(), Signer.generate()
    cchan, mchan, mpipe, transcript = await _pair(tmp_path, c, m, frozenset([m.public_hex]))
    await mchan.send(Hello(PROTOCOL_VERSION, "t", sign_key=m.public_hex))
    assert isinstance(await cchan.recv(), Hello)
    # a query signed by another key, linked like the modeler's next frame would be
    forged = seal(encode(Query(1, 0)), Link("", 1, bytes(32), bytes(32)), other)
    await mpipe.send(forged)
    with pytest.raises(ProtocolError) as info:
        await cchan.recv()
    assert info.value.code is ErrorCode.BAD_SIGNATURE and info.value.recoverable
    # one flipped bit of a signature made by the right key
    good = seal(encode(Query(1, 0)), Link("", 1, bytes(32), bytes(32)), m)
    await mpipe.send(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ProtocolError) as info:
        await cchan.recv()
    assert info.value.code is ErrorCode.BAD_SIGNATURE
    transcript.close()
    records = list(read_transcript(tmp_path / "curator.transcript"))
    assert [(r.kind, r.code) for r in records] == [("hello", ""), ("refused", "bad_signature"),
                                                   ("refused", "bad_signature")]
    assert records[1].sha256 == hashlib.sha256(forged).hexdigest()


async def test_a_modeler_key_outside_the_allowlist_is_refused(tmp_path):
    c, m = Signer.generate(), Signer.generate()
    cchan, mchan, _, _ = await _pair(tmp_path, c, m, frozenset([Signer.generate().public_hex]))
    await mchan.send(Hello(PROTOCOL_VERSION, "t", sign_key=m.public_hex))
    with pytest.raises(ProtocolError) as info:
        await cchan.recv()
    assert info.value.code is ErrorCode.WRONG_KEY
    # and an unsigned modeler where keys are expected
    cchan, mchan, _, _ = await _pair(tmp_path / "u", c, None, frozenset([m.public_hex]))
    await mchan.send(Hello(PROTOCOL_VERSION, "t"))
    with pytest.raises(ProtocolError) as info:
        await cchan.recv()
    assert info.value.code is ErrorCode.WRONG_KEY


async def test_a_version_1_hello_gets_version_mismatch_in_version_1_framing(tmp_path):
    c, m = Signer.generate(), Signer.generate()
    cchan, _, mpipe, _ = await _pair(tmp_path, c, None, frozenset([m.public_hex]))
    await mpipe.send(encode(Hello(1, "old")))  # a version-1 peer: a bare message frame
    with pytest.raises(ProtocolError) as info:
        await cchan.recv()
    assert info.value.code is ErrorCode.VERSION_MISMATCH
    await cchan.send(Error(info.value.code.value, str(info.value)))
    reply = decode(await mpipe.recv(5))  # it can read the answer
    assert isinstance(reply, Error) and reply.code == "version_mismatch"


def test_an_unsigned_session_runs_and_says_so(tmp_path, signed):
    _, keys, _ = signed
    result = asyncio.run(run_inproc(CONFIG, tmp_path))
    assert result["status"] == "ok" and result["signatures"] == "unsigned"
    assert result["modeler"]["signatures"] == "unsigned"
    hello = next(r for r in read_transcript(tmp_path / "modeler.transcript") if r.kind == "hello")
    assert decode(open_frame(hello.frame).body).sign_key == ""
    status, text = _audit([tmp_path / "curator.transcript", tmp_path / "modeler.transcript"])
    assert status == 3 and text.count("signatures: unsigned") == 2
    assert "not verified: the curator did not sign" in text
    status, text = _audit([tmp_path / "curator.transcript", tmp_path / "modeler.transcript"],
                          None, "--allow-unsigned")
    assert status == 0 and text.count("signatures: unsigned") == 2
    status, text = _audit([tmp_path / "curator.transcript"], _keys_dir(tmp_path, keys))
    assert status == 2 and "signatures: FAILED at record 0" in text


def test_audit_data_of_another_scenario_is_not_ok(tmp_path):
    out = tmp_path / "run"
    asyncio.run(run_inproc(RunConfig(T=3, options={"grid": 8}), out))
    exported = {}
    for name, argv in (("same", ["synthetic", "--grid", "8"]),
                       ("branin", ["branin", "--grid", "8"]),
                       ("reseeded", ["synthetic", "--grid", "8", "--seed", "3"])):
        exported[name] = tmp_path / f"{name}.npz"
        done = subprocess.run([sys.executable, "-m", "pobo", "export-data", *argv,
                               "--out", str(exported[name])], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
    status, text = _audit([out / "curator.transcript"], None, "--data", str(exported["same"]),
                          "--allow-unsigned")
    assert status == 0, text
    for name in ("branin", "reseeded"):
        status, text = _audit([out / "curator.transcript"], None, "--data",
                              str(exported[name]))
        assert status == 2 and "the data given are not this session's" in text, (name, text)


async def test_a_modeler_refuses_a_curator_signing_with_another_key(tmp_path, signed):
    out, _, _ = signed
    welcome = next(decode(open_frame(r.frame).body) for r in
                   read_transcript(out / "curator.transcript") if r.kind == "welcome")
    c, m, expected = Signer.generate(), Signer.generate(), Signer.generate()
    cpipe, mpipe = pipe_pair()
    cchan = Channel(cpipe, Boundary(PRIVATE, CURATOR), None, timeout=5, signer=c)
    mchan = Channel(mpipe, Boundary(PRIVATE, MODELER), None, timeout=5, signer=m,
                    peer_keys=frozenset([expected.public_hex]))
    await mchan.send(Hello(PROTOCOL_VERSION, "t", sign_key=m.public_hex))
    assert (await cchan.recv()).sign_key == m.public_hex
    await cchan.send(Welcome(PROTOCOL_VERSION, welcome.session, welcome.params, c.public_hex))
    with pytest.raises(ProtocolError) as info:
        await mchan.recv()
    assert info.value.code is ErrorCode.WRONG_KEY and not info.value.recoverable


def test_a_modeler_cutting_a_frame_it_acknowledged_is_caught_by_the_paired_audit(signed,
                                                                                    tmp_path):
    """The modeler drops the release it received and everything after from its own
    transcript (re-anchored): alone that looks like a session that stopped early, and the
    release would pass for a frame lost in flight, but the curator holds the modeler's
    signed End acknowledging it."""
    out, keys, _ = signed
    folder = _copy(out, tmp_path / "f")
    items = _items(folder / "modeler.transcript")
    cut = next(i for i, it in enumerate(items) if it["kind"] == "release")
    _rewrite(folder, MODELER, items[:cut])
    assert audit_transcript(folder / "modeler.transcript", keys=keys).signatures == "verified"
    reports = audit_session(folder / "curator.transcript", folder / "modeler.transcript",
                            keys=keys)
    assert any("acknowledged receiving curator record" in v for v in reports[1].violations), \
        reports[1].violations


@pytest.mark.parametrize("seq", [-1, 1 << 63, (1 << 64) - 1])  # msgpack carries <= 64 bits
def test_an_envelope_with_an_out_of_range_record_number_is_malformed(seq):
    """A hostile link.seq outside int64 is a typed refusal, not a struct.error that would
    escape the handlers (found while writing PROTOCOL.md)."""
    import msgpack

    from pobo.protocol.errors import ErrorCode, ProtocolError
    from pobo.protocol.signing import open_frame
    frame = msgpack.packb({"body": b"x", "link": {"session": "", "seq": seq, "prev": bytes(32),
                                                  "peer": bytes(32)}, "sig": b""},
                          use_bin_type=True)
    with pytest.raises(ProtocolError) as refused:
        open_frame(frame)
    assert refused.value.code is ErrorCode.MALFORMED


def test_sessions_of_two_modelers_audit_together_each_with_its_own_key(tmp_path):
    """One curator, two sessions, two modelers with keys of their own, both trusted: each
    session's transcript verifies with its own modeler's key also when they are audited
    together (a review's repro: all were checked against the first modeler key found, so
    the second failed and the cross-session ledger check could not be used)."""
    import shutil

    with socket.socket() as probe:  # a free loopback port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    homes = {who: tmp_path / f"home-{who}" for who in ("a", "b")}
    env = {who: {**os.environ, "POBO_HOME": str(home)} for who, home in homes.items()}
    curator = subprocess.Popen([sys.executable, "-m", "pobo", "curator", "synthetic", "--grid",
                                "6", "--T", "3", "--sessions", "2", "--seed", "1",
                                "--journal", str(tmp_path / "j.db"),
                                "--bind", f"tcp://127.0.0.1:{port}", "--out", str(tmp_path / "c")],
                               env=env["a"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for who, seed in (("a", "1"), ("b", "2")):
            done = subprocess.run([sys.executable, "-m", "pobo", "modeler", "--connect",
                                   f"tcp://127.0.0.1:{port}", "--seed", seed, "--out",
                                   str(tmp_path / f"m-{who}"), "-q"], env=env[who],
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
        assert curator.wait(60) == 0
    finally:
        if curator.poll() is None:
            curator.kill()
            curator.wait(10)
    (homes["a"] / "trusted").mkdir()
    shutil.copy(homes["b"] / "keys" / "modeler.sign_public",
                homes["a"] / "trusted" / "modeler-b.sign_public")
    transcripts = sorted(str(p) for p in (tmp_path / "c").glob("*/curator.transcript"))
    assert len(transcripts) == 2
    done = subprocess.run([sys.executable, "-m", "pobo", "audit", *transcripts], env=env["a"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("trusted modeler key") == 2 and "VIOLATIONS" not in done.stdout


def test_a_session_one_party_did_not_sign_is_said_to_be_unverified_for_that_reason(tmp_path):
    """A review's finding: with the modeler unsigned, the audit's first line said "the
    modeler did not sign" and each file "unverified (signed, but no public keys were
    given)", though the curator's key was trusted. Each file now says why."""
    from pobo.protocol.signing import load_signing_key
    from pobo.transport.keyfiles import store_signing_key

    curator = load_signing_key(store_signing_key("curator"))  # the store trusts its own
    asyncio.run(run_inproc(CONFIG, tmp_path, signing=Signing(curator=curator)))
    status, text = _audit([tmp_path / "curator.transcript", tmp_path / "modeler.transcript"])
    assert status == 3, text
    assert "no public keys were given" not in text
    assert text.count("signatures: unverified (the modeler did not sign") == 2, text
