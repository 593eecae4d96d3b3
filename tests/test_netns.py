"""The two parties on two separate (virtual) hosts: Linux network namespaces joined by a
veth pair on a private /30 the test makes, with CURVE and signing keys that each side
makes for itself and exchanges as public key files only (docs/deployment.md, "Two
machines"). Only traffic between the test's own namespaces: nothing leaves the machine.
The namespaces, and the veth pair with them, are removed in the fixture's teardown
whatever happens. Skipped, saying why, only where the machine cannot do it: no `ip`
(iproute2: .ci/run installs it where it can), not root, or `ip netns add` refused (a
container without CAP_SYS_ADMIN).
"""
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pobo.remote import LISTENING

POBO = [sys.executable, "-m", "pobo"]
ROOT = Path(__file__).resolve().parents[1]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def _why_not() -> str | None:
    """Why this machine cannot make network namespaces (None: it can, as far as is known
    before trying)."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2; `apt-get install -y iproute2`)"
    if os.geteuid() != 0:
        return "`ip netns add` needs root"
    return None


@pytest.fixture
def hosts():
    """Two namespaces (curator host, modeler host) on a /30 over a veth pair: (the
    curator's namespace, the modeler's, the curator's address)."""
    why = _why_not()
    if why is not None:
        pytest.skip(f"two network namespaces cannot be made here: {why}")
    tag = uuid.uuid4().hex[:6]
    a, b, va, vb = f"pobo-c-{tag}", f"pobo-m-{tag}", f"va{tag}", f"vb{tag}"
    subnet = f"10.231.{int(tag[:2], 16)}"  # a private /30 of the test's own: two hosts
    low = 4 * (int(tag[2:4], 16) % 64)
    addr_a, addr_b = f"{subnet}.{low + 1}", f"{subnet}.{low + 2}"
    created: list[str] = []
    try:
        try:
            _ip("netns", "add", a)
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"two network namespaces cannot be made here: `ip netns add` failed: "
                        f"{exc.stderr.decode().strip()}")
        created.append(a)
        _ip("netns", "add", b)
        created.append(b)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", a)
        _ip("link", "set", vb, "netns", b)
        _ip("-n", a, "addr", "add", f"{addr_a}/30", "dev", va)
        _ip("-n", b, "addr", "add", f"{addr_b}/30", "dev", vb)
        for ns, dev in ((a, va), (b, vb)):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b, addr_a
    finally:
        # a veth pair still in this namespace (a failure before it moved) goes first;
        # deleting a namespace removes the end of the pair inside it
        subprocess.run(["ip", "link", "del", va], capture_output=True, timeout=20)
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                              timeout=20).stdout
        assert a not in left and b not in left, f"namespaces left behind: {left}"


def _keys(host: Path, name: str) -> Path:
    """`pobo keys` on one host (each side makes its own pairs); its folder."""
    folder = host / "keys"
    done = subprocess.run([*POBO, "keys", str(folder)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (folder / f"{name}.key_secret").stat().st_mode & 0o077 == 0
    return folder


def _give(src: Path, dst: Path) -> None:
    """Hand a public key file to the other host (only public keys travel)."""
    assert "secret" not in src.name
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst / src.name)


def _in(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def test_curator_and_modeler_on_two_hosts_over_curve_with_exchanged_key_files(tmp_path,
                                                                               hosts):
    ns_curator, ns_modeler, address = hosts
    chost, mhost, stranger = tmp_path / "curator-host", tmp_path / "modeler-host", tmp_path / "x"
    ckeys, mkeys = _keys(chost, "curator"), _keys(mhost, "modeler")
    xkeys = _keys(stranger, "modeler")  # a modeler whose key the curator never got
    for name in ("modeler.key", "modeler.sign_public"):
        _give(mkeys / name, chost / "admitted")
    for name in ("curator.key", "curator.sign_public"):
        _give(ckeys / name, mhost / "curator")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    curator = subprocess.Popen(
        _in(ns_curator, *POBO, "curator", "synthetic", "--grid", "10", "--T", "6", "--seed",
            "1", "--bind", f"tcp://{address}:0", "--sessions", "1",
            "--curve-secret", str(ckeys / "curator.key_secret"),
            "--curve-allow", str(chost / "admitted"),
            "--sign-secret", str(ckeys / "curator.sign_secret"),
            "--sign-allow", str(chost / "admitted"),
            "--out", str(chost / "run"), "--accept-timeout", "120", "--timeout", "60"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**env, "POBO_HOME": str(chost / "home")})
    try:
        line = curator.stdout.readline()
        assert line.startswith(LISTENING), (line, curator.poll(), curator.stderr.read()
                                            if curator.poll() is not None else "")
        endpoint = line[len(LISTENING):].strip()
        assert endpoint.startswith(f"tcp://{address}:")

        def modeler(keys: Path, out: Path) -> subprocess.CompletedProcess:
            return subprocess.run(
                _in(ns_modeler, *POBO, "modeler", "--connect", endpoint, "--seed", "1",
                    "--out", str(out), "--curve-secret", str(keys / "modeler.key_secret"),
                    "--curve-server", str(mhost / "curator" / "curator.key"),
                    "--sign-secret", str(keys / "modeler.sign_secret"),
                    "--curator-sign-key", str(mhost / "curator" / "curator.sign_public"),
                    "--timeout", "60"),
                capture_output=True, text=True, timeout=180, cwd=ROOT,
                env={**env, "POBO_HOME": str(mhost / "home")})

        refused = modeler(xkeys, stranger / "run")  # across hosts, one typed line
        assert refused.returncode != 0 and "allowlist" in refused.stderr, refused.stderr
        done = modeler(mkeys, mhost / "run")
        assert done.returncode == 0, done.stderr[-3000:]
        _, err = curator.communicate(timeout=120)
        assert curator.returncode == 0, err[-3000:]
    finally:
        if curator.poll() is None:
            curator.kill()
        curator.wait(10)
    record = json.loads((chost / "run" / "curator.json").read_text())
    assert record["status"] == "ok" and len(record["queries"]) == 6
    assert record["security"] == "curve"
    assert record["peer"] in (mkeys / "modeler.key").read_text()
    # an auditor holding the two public signing keys checks both transcripts together
    auditor = tmp_path / "auditor"
    _give(ckeys / "curator.sign_public", auditor)
    _give(mkeys / "modeler.sign_public", auditor)
    audit = subprocess.run(
        [*POBO, "audit", str(chost / "run" / "curator.transcript"),
         str(mhost / "run" / "modeler.transcript"),
         "--curator-key", str(auditor / "curator.sign_public"),
         "--modeler-key", str(auditor / "modeler.sign_public")],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    assert "verified" in audit.stdout
    # the modeler's host cannot reach the curator's loopback: they really are apart
    port = endpoint.rsplit(":", 1)[1]
    probe = subprocess.run(_in(ns_modeler, sys.executable, "-c",
                               "import socket; s = socket.socket(); s.settimeout(1); "
                               f"print(s.connect_ex(('127.0.0.1', {port})))"),
                           capture_output=True, text=True, timeout=30)
    assert probe.stdout.strip() not in ("", "0"), probe
