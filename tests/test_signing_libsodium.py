"""Signing with libsodium (PyNaCl) is the same Ed25519 as `cryptography`: the same public
key from the same secret, the same signature bytes (RFC 8032 signatures are
deterministic), each library verifies the other's, and every key file format loads."""
from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey, Ed25519PublicKey,
)

from pobo.protocol.codec import encode
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.messages import Reward
from pobo.protocol.signing import (
    Link, Signer, load_signing_key, open_frame, seal, signed_bytes, verify, verify_key,
)

# 20 arbitrary secrets, drawn from a fixed seed: every run (and every xdist worker)
# collects the same tests
SEEDS = [bytes(range(32)), bytes(32), b"\xff" * 32] + [random.Random(k).randbytes(32)
                                                       for k in range(20)]


def _frame_bytes(i: int) -> bytes:
    return signed_bytes(encode(Reward(i, 3 * i, 0.25 * i)), Link("s" * 32, i, bytes(32),
                                                               bytes(range(32))))


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_both_libraries_make_the_same_key_and_the_same_signatures(seed):
    theirs = Ed25519PrivateKey.from_private_bytes(seed)
    ours = Signer(seed)
    raw_public = theirs.public_key().public_bytes(serialization.Encoding.Raw,
                                                  serialization.PublicFormat.Raw)
    assert ours.public_hex == raw_public.hex()
    assert Signer(theirs).public_hex == ours.public_hex  # built from their key object too
    assert ours.secret_bytes() == seed
    for i in range(5):
        data = _frame_bytes(i)
        assert ours.sign(data) == theirs.sign(data)


@pytest.mark.parametrize("seed", SEEDS[:6], ids=range(6))
def test_each_library_verifies_the_others_signatures_and_refuses_a_flipped_bit(seed):
    theirs = Ed25519PrivateKey.from_private_bytes(seed)
    ours = Signer(seed)
    their_public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(ours.public_hex))
    body = encode(Reward(7, 11, 0.5))
    link = Link("t" * 32, 4, bytes(32), bytes(32))
    frame = seal(body, link, ours)
    envelope = open_frame(frame)
    their_verify = lambda sig, data: their_public.verify(sig, data)  # noqa: E731
    their_verify(envelope.sig, signed_bytes(body, link))  # raises if not theirs
    assert verify(envelope, verify_key(ours.public_hex))
    their_sig = theirs.sign(signed_bytes(body, link))
    assert their_sig == envelope.sig
    for position in (0, 31, 63):
        bad = bytearray(envelope.sig)
        bad[position] ^= 1
        forged = type(envelope)(envelope.body, envelope.link, bytes(bad))
        assert not verify(forged, verify_key(ours.public_hex))
        with pytest.raises(InvalidSignature):
            their_verify(bytes(bad), signed_bytes(body, link))
    moved = type(envelope)(envelope.body, Link("t" * 32, 5, bytes(32), bytes(32)), envelope.sig)
    assert not verify(moved, verify_key(ours.public_hex))  # the link is signed too


def test_every_key_file_format_loads_to_the_same_key(tmp_path):
    seed = bytes(range(1, 33))
    key = Ed25519PrivateKey.from_private_bytes(seed)
    (tmp_path / "raw").write_bytes(seed)
    (tmp_path / "hex").write_text(seed.hex() + "\n")
    (tmp_path / "pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    for name in ("raw", "hex", "pem"):
        os.chmod(tmp_path / name, 0o600)  # a secret key others may read is refused
    publics = {load_signing_key(tmp_path / name).public_hex for name in ("raw", "hex", "pem")}
    assert publics == {Signer(seed).public_hex}


def test_a_pem_key_of_another_type_is_refused(tmp_path):
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1())
    (tmp_path / "ec.pem").write_bytes(other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    with pytest.raises(ValueError, match="not an Ed25519 secret key"):
        load_signing_key(tmp_path / "ec.pem")


@pytest.mark.parametrize("text", ["", "00" * 31, "zz" * 32, "00" * 33])
def test_a_malformed_public_key_is_a_typed_wrong_key(text):
    with pytest.raises(ProtocolError) as info:
        verify_key(text)
    assert info.value.code == ErrorCode.WRONG_KEY


def test_a_public_key_file_is_refused_as_a_signing_secret(tmp_path):
    """Its 64 hex digits would pass for a seed that everyone holding the public file knows
    (a review's repro: `--sign-secret keys/curator.sign_public` signed a whole session)."""
    from pobo.transport.security import make_keys

    make_keys(tmp_path / "k")
    secret = load_signing_key(tmp_path / "k" / "curator.sign_secret")  # the real one loads
    public = (tmp_path / "k" / "curator.sign_public").read_text().strip()
    assert secret.public_hex == public
    with pytest.raises(ValueError, match="public signing key, not a secret"):
        load_signing_key(tmp_path / "k" / "curator.sign_public")
    for name, content in (("copy.key", (public + "\n").encode()),  # renamed, beside it
                          ("upper.key", public.upper().encode()),  # in capitals
                          ("raw.key", bytes.fromhex(public))):  # as 32 raw bytes
        (tmp_path / "k" / name).write_bytes(content)
        with pytest.raises(ValueError, match="holds the public key of"):
            load_signing_key(tmp_path / "k" / name)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_secret_key_others_may_read_is_refused_as_ssh_does(tmp_path, mode):
    """A review's finding: a signing key's mode was never checked (CURVE keys' is). A key
    that group or others may read signs for them too: refused in one line, naming the
    fix; 0600 and 0400 load."""
    from pobo.transport.security import make_keys

    paths = make_keys(tmp_path / "k")
    secret = paths["curator_sign_secret"]
    for ok in (0o600, 0o400):
        os.chmod(secret, ok)
        assert load_signing_key(secret).public_hex
    os.chmod(secret, mode)
    with pytest.raises(ValueError, match="may be read by others") as refused:
        load_signing_key(secret)
    assert f"chmod 600 {secret}" in str(refused.value) and "\n" not in str(refused.value)
    done = subprocess.run([sys.executable, "-m", "pobo", "curator", "synthetic", "--grid",
                           "5", "--bind", "tcp://127.0.0.1:0", "--sign-secret", str(secret),
                           "--out", str(tmp_path / "c")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "may be read by others" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "c").exists()
