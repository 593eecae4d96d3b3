"""CURVE encryption and ZAP authentication of the ZeroMQ sockets (zmq.auth).

The curator holds a secret key and a directory of the modeler public keys it admits;
a `LoggingAuthenticator` (an `AsyncioAuthenticator`) answers ZAP requests from that
directory, so a peer with an unknown key, or a plaintext peer, never completes the
handshake, and every refused key is logged (logger "pobo.transport") and counted.
The peer's identity is the User-Id libzmq attaches to each frame after ZAP (the z85
public key), never anything the peer sends. Plaintext remains for local simulation
and says so.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils import z85

PLAINTEXT, CURVE = "plaintext", "curve"
LOG = logging.getLogger("pobo.transport")

from pobo.transport.keyfiles import (  # noqa: E402  (key files: no zmq there)
    _PUBLIC_MODE, _ROLES, _SECRET_MODE, _key_folder, _place, _refuse_existing, _umask,
    make_signing_keys,
)


@dataclass(frozen=True)
class CurveServer:
    """The curator's secret key file and the directory of admitted client public keys."""

    secret_file: Path
    allowed_dir: Path


@dataclass(frozen=True)
class CurveClient:
    """The modeler's secret key file and the curator's public key file."""

    secret_file: Path
    server_public_file: Path


def _key_paths(directory: Path) -> dict[str, Path]:
    """Where make_keys puts each file, by role."""
    paths = {}
    for name in _ROLES:
        paths[f"{name}_public"] = directory / f"{name}.key"
        paths[f"{name}_secret"] = directory / f"{name}.key_secret"
    paths["allowed_key"] = directory / "allowed" / "modeler.key"
    return paths


def make_keys(directory: str | Path, force: bool = False) -> dict[str, Path]:
    """Key pairs for a curator and a modeler in `directory`, and `allowed/` holding the
    modeler's public key (the curator's allowlist). Returns the paths by role.

    Secret keys are 0600, public keys 0644, a directory this creates 0700. Existing key
    files are never overwritten unless `force` (FileExistsError naming the file). Keys are
    generated under umask 077 in a private temporary folder and moved into place, so a
    secret key is never readable by anyone else, not even for an instant. (The umask is
    per process: files other threads create meanwhile are private too.)
    """
    directory = Path(directory)
    paths = _key_paths(directory)
    if not force:
        _refuse_existing([*paths.values(), *(directory / f"{name}.sign_{half}"
                                             for name in _ROLES for half in ("secret", "public"))])
    with _umask(0o077):
        allowed = _key_folder(directory)
        staging = Path(tempfile.mkdtemp(prefix=".pobo-keys-", dir=directory))
        try:
            for name in _ROLES:
                public, secret = map(Path, zmq.auth.create_certificates(staging, name))
                if name == "modeler":
                    shutil.copyfile(public, staging / "allowed.key")
                    _place(staging / "allowed.key", paths["allowed_key"], _PUBLIC_MODE, force)
                _place(secret, paths[f"{name}_secret"], _SECRET_MODE, force)
                _place(public, paths[f"{name}_public"], _PUBLIC_MODE, force)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    result = {key: path for key, path in paths.items() if key != "allowed_key"}
    result["allowed"] = allowed
    result.update(make_signing_keys(directory, force))
    return result


def _load_secret(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a secret key file; warn when others may read it (a public
    key given instead is said to be one, before any mode is looked at)."""
    public, secret = zmq.auth.load_certificate(path)
    if secret is None:
        raise ValueError(f"{path} is a public key, not a secret one: give the .key_secret "
                         "file (the public .key is for the peer)")
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            LOG.warning("secret key %s is readable by others (mode %04o): chmod 600 %s",
                        path, mode, path)
    return public, secret


class LoggingAuthenticator(AsyncioAuthenticator):
    """A ZAP authenticator that logs each refused key with its reason and counts refusals.

    Logging is rate-limited (at most `log_burst` lines per `log_window` seconds; the next
    line says how many were left out) so that a stream of hostile handshakes cannot fill
    the disk. Per-key counts are kept for at most `max_keys` keys (least recent dropped).
    A failure inside the handler is logged and answered with ZAP status 500 instead of
    stopping the authenticator.
    """

    def __init__(self, context: zmq.asyncio.Context, *, log_burst: int = 20,
                 log_window: float = 60.0, max_keys: int = 1024) -> None:
        super().__init__(context)
        self.refusals = 0
        self.refused_keys: OrderedDict[str, int] = OrderedDict()
        self._max_keys, self._burst, self._window = max_keys, log_burst, log_window
        self._window_start, self._logged, self._suppressed = time.monotonic(), 0, 0
        self._request: list[bytes] = []

    def stats(self) -> dict[str, int]:
        """Counters for an operator: refusals so far and distinct keys remembered."""
        return {"refusals": self.refusals, "refused_keys": len(self.refused_keys)}

    async def aclose(self, timeout: float = 1.0) -> None:
        """Stop answering: cancel the ZAP task and let it finish (at most `timeout` s)
        before the ZAP socket closes -- pyzmq's `stop` closes the socket while the task
        still polls it, leaving the task pending and its reader on a closed descriptor
        that a new socket may reuse -- then close the socket (`stop`), also when the
        caller is cancelled meanwhile."""
        task = getattr(self, "_AsyncioAuthenticator__task", None)
        try:
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=timeout)
        finally:
            self.stop()

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        """Answer one ZAP request; remember it so a refusal can name the key."""
        self._request = msg
        try:
            await super().handle_zap_message(msg)
        except Exception:  # never let one request stop the authenticator
            LOG.exception("ZAP handler failed; refusing the request")
            if len(msg) >= 2:
                with contextlib.suppress(zmq.ZMQError):
                    super()._send_zap_reply(msg[1], b"500", b"Internal error")
        finally:
            self._request = []

    def _send_zap_reply(self, request_id: bytes, status_code: bytes, status_text: bytes,
                        user_id: str = "anonymous") -> None:
        """Send the ZAP reply; a refusal is counted and logged first."""
        if status_code != b"200":
            self._refused(status_code, status_text)
        super()._send_zap_reply(request_id, status_code, status_text, user_id)

    def _refused(self, status_code: bytes, status_text: bytes) -> None:
        """Count a refusal of the current request and log it (rate-limited)."""
        msg = self._request
        mechanism = msg[5].decode("ascii", "replace") if len(msg) > 5 else "?"
        address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else "?"
        if mechanism == "CURVE" and len(msg) > 6 and len(msg[6]) == 32:
            key = z85.encode(msg[6]).decode("ascii")
        else:
            key = f"<{mechanism}>"
        self.refusals += 1
        count = self.refused_keys.pop(key, 0) + 1
        self.refused_keys[key] = count
        while len(self.refused_keys) > self._max_keys:
            self.refused_keys.popitem(last=False)
        now = time.monotonic()
        if now - self._window_start >= self._window:
            self._window_start, self._logged = now, 0
        if self._logged >= self._burst:
            self._suppressed += 1
            return
        self._logged += 1
        skipped = f" ({self._suppressed} earlier refusals not logged)" if self._suppressed else ""
        self._suppressed = 0
        LOG.warning("refused %s key %s from %s: %s (ZAP status %s, refusal %d of this key)%s",
                    mechanism, key, address, status_text.decode("utf-8", "replace"),
                    status_code.decode("ascii", "replace"), count, skipped)


def start_authenticator(ctx: zmq.asyncio.Context, server: CurveServer) -> LoggingAuthenticator:
    """A running ZAP authenticator admitting exactly the keys in `server.allowed_dir`."""
    if not server.allowed_dir.is_dir():
        raise FileNotFoundError(f"no directory of allowed modeler keys at {server.allowed_dir}")
    auth = LoggingAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(server.allowed_dir))
    allowed = sum(len(keys) for keys in auth.certs.values())
    if not allowed:
        LOG.warning("no modeler public keys in %s: every modeler will be refused",
                    server.allowed_dir)
    return auth


def secure_server(sock: zmq.Socket, server: CurveServer) -> None:
    """Make `sock` a CURVE server with the curator's key pair (before it binds)."""
    public, secret = _load_secret(server.secret_file)
    sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True


def secure_client(sock: zmq.Socket, client: CurveClient) -> None:
    """Make `sock` a CURVE client of the curator's public key (before it connects)."""
    public, secret = _load_secret(client.secret_file)
    server_public, _ = zmq.auth.load_certificate(client.server_public_file)
    sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = secret, public, server_public
