"""The two parties on two separate (virtual) machines: Linux network namespaces joined
by a veth pair, the test's own hosts, with CURVE on. The namespaces are created and
removed by the test; it is skipped, with the reason, only where `ip netns` is not
available (not root, or no iproute2)."""
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from pobo.remote import LISTENING
from pobo.transport.security import make_keys

POBO = [sys.executable, "-m", "pobo"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@pytest.fixture
def hosts():
    """Two namespaces (curator host, modeler host) on a /30 over a veth pair."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("ip netns needs iproute2 and root, which this machine lacks")
    tag = uuid.uuid4().hex[:6]
    a, b = f"pobo-c-{tag}", f"pobo-m-{tag}"
    net = 10 + int(tag[:2], 16) % 200
    addr_a, addr_b = f"10.231.{net}.1", f"10.231.{net}.2"
    created = []
    try:
        try:
            _ip("netns", "add", a)
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"ip netns add failed here: {exc.stderr.decode().strip()}")
        created.append(a)
        _ip("netns", "add", b)
        created.append(b)
        _ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        _ip("link", "set", f"va{tag}", "netns", a)
        _ip("link", "set", f"vb{tag}", "netns", b)
        _ip("-n", a, "addr", "add", f"{addr_a}/30", "dev", f"va{tag}")
        _ip("-n", b, "addr", "add", f"{addr_b}/30", "dev", f"vb{tag}")
        for ns, dev in ((a, f"va{tag}"), (b, f"vb{tag}")):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield a, b, addr_a
    finally:
        for ns in created:  # deleting a namespace removes its end of the veth pair too
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def test_curator_and_modeler_in_two_namespaces_with_curve(tmp_path, hosts):
    ns_curator, ns_modeler, address = hosts
    keys = make_keys(tmp_path / "keys")
    curator = subprocess.Popen(
        ["ip", "netns", "exec", ns_curator, *POBO, "curator", "synthetic", "--grid", "10",
         "--T", "6", "--seed", "1", "--bind", f"tcp://{address}:5555",
         "--curve-secret", str(keys["curator_secret"]), "--curve-allow", str(keys["allowed"]),
         "--out", str(tmp_path / "c"), "--accept-timeout", "60", "--timeout", "20"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert curator.stdout.readline().startswith(LISTENING)
        modeler = subprocess.run(
            ["ip", "netns", "exec", ns_modeler, *POBO, "modeler", "--connect",
             f"tcp://{address}:5555", "--seed", "1", "--out", str(tmp_path / "m"),
             "--curve-secret", str(keys["modeler_secret"]),
             "--curve-server", str(keys["curator_public"]), "--timeout", "20"],
            capture_output=True, text=True, timeout=120)
        assert modeler.returncode == 0, modeler.stderr
        assert curator.wait(60) == 0
    finally:
        if curator.poll() is None:
            curator.kill()
        curator.wait(10)
    record = json.loads((tmp_path / "c" / "curator.json").read_text())
    assert record["status"] == "ok" and len(record["queries"]) == 6
    assert record["security"] == "curve" and record["peer"] in keys["modeler_public"].read_text()
    # the modeler's namespace cannot reach the curator's loopback: they really are apart
    probe = subprocess.run(["ip", "netns", "exec", ns_modeler, sys.executable, "-c",
                            "import socket; s = socket.socket(); s.settimeout(1); "
                            "print(s.connect_ex(('127.0.0.1', 5555)))"],
                           capture_output=True, text=True, timeout=30)
    assert probe.stdout.strip() != "0"
