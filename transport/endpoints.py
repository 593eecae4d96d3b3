"""ZeroMQ endpoints: parsing and the checks made before a bind or a connect.

Knows no ZeroMQ (plain strings, `ipaddress`, and a plain socket for `check_bindable`), so
a command can check its --bind before importing it.
"""
from __future__ import annotations

import ipaddress

from pobo.protocol.errors import PoboError

_SCHEMES = ("tcp", "ipc", "inproc")
_LOOPBACK_NAMES = ("localhost", "lo", "lo0")


class BindError(PoboError):
    """An endpoint the curator cannot bind (the port is in use, the address is not this
    machine's, no permission)."""


def _split(endpoint: str) -> tuple[str, str]:
    """(scheme, address) of a ZeroMQ endpoint, or ValueError naming what is wrong."""
    scheme, sep, address = endpoint.partition("://")
    if not sep or scheme not in _SCHEMES or not address:
        raise ValueError(f"invalid endpoint {endpoint!r}: expected tcp://HOST:PORT, "
                         "ipc://PATH or inproc://NAME")
    return scheme, address


def _host_port(endpoint: str, address: str) -> tuple[str, str]:
    """(host, port) of a tcp address; a connect address may name a source first (SRC;HOST:PORT)."""
    host, sep, port = address.rsplit(";", 1)[-1].rpartition(":")
    if not sep or not host:
        raise ValueError(f"invalid endpoint {endpoint!r}: a tcp endpoint needs HOST:PORT")
    return host, port


def needs_ipv6(endpoint: str) -> bool:
    """Whether a tcp `endpoint` names an IPv6 address ([::1], [fe80::1%eth0]): ZeroMQ binds
    and connects to one only on a socket with its IPV6 option set (without it, 'No such
    device'). Names and IPv4 addresses keep IPv4, as before (a name such as an interface
    could otherwise resolve to its IPv6 address)."""
    try:
        scheme, address = _split(endpoint)
        return scheme == "tcp" and _host_port(endpoint, address)[0].startswith("[")
    except ValueError:
        return False


def check_endpoint(endpoint: str, bind: bool = True) -> str:
    """`endpoint` if it is a valid ZeroMQ endpoint (scheme, and a tcp port 0..65535 or * to
    bind, 1..65535 to connect), else ValueError in one line."""
    scheme, address = _split(endpoint)
    if scheme == "tcp":
        _, port = _host_port(endpoint, address)
        low = 0 if bind else 1
        if not ((bind and port == "*") or (port.isdigit() and low <= int(port) <= 65535)):
            expected = "0..65535 or *" if bind else "1..65535"
            raise ValueError(f"invalid port {port!r} in {endpoint!r}: expected {expected}")
    return endpoint


def check_bindable(endpoint: str) -> None:
    """BindError (the message RouterHub.bind gives) if a tcp `endpoint` on an IP address
    (or *) cannot be bound now: its port in use, the address not this machine's. Checked
    by binding a plain socket and closing it, as ZeroMQ binds (SO_REUSEADDR), before the
    curator prepares its dataset: a start that cannot serve then commits nothing to the
    journal (its budget, the projection's charge). Port 0, an interface name and ipc
    are left to the bind itself."""
    import socket

    scheme, address = _split(check_endpoint(endpoint))
    if scheme != "tcp":
        return
    host, port = _host_port(endpoint, address)
    if not port.isdigit() or int(port) == 0:
        return
    host = host.strip("[]")
    host = "0.0.0.0" if host == "*" else host
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return  # a name: ZeroMQ resolves it (an interface, say)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
            sock.listen(1)
        except OSError as exc:
            raise BindError(f"cannot bind {endpoint}: {exc.strerror}") from None


def is_loopback(endpoint: str) -> bool:
    """Whether `endpoint` stays on this machine: ipc://, inproc://, tcp on 127.0.0.0/8,
    [::1], localhost or the lo interface. tcp://0.0.0.0, tcp://* and any other address
    (or an invalid endpoint) are not."""
    try:
        scheme, address = _split(endpoint)
        if scheme != "tcp":
            return True
        host, _ = _host_port(endpoint, address)
    except ValueError:
        return False
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # a host or interface name other than localhost/lo: not known local
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback
