"""CURVE encryption and ZAP authentication of the ZeroMQ sockets (zmq.auth).

The curator holds a secret key and a directory of the modeler public keys it admits;
an `AsyncioAuthenticator` answers ZAP requests from that directory, so a peer with an
unknown key, or a plaintext peer, never completes the handshake. The peer's identity
is the User-Id libzmq attaches to each frame after ZAP (the z85 public key), never
anything the peer sends. Plaintext remains for local simulation and says so.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

PLAINTEXT, CURVE = "plaintext", "curve"


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


def make_keys(directory: str | Path) -> dict[str, Path]:
    """Key pairs for a curator and a modeler in `directory`, and `allowed/` holding the
    modeler's public key (the curator's allowlist). Returns the paths by role."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in ("curator", "modeler"):
        public, secret = zmq.auth.create_certificates(directory, name)
        paths[f"{name}_public"], paths[f"{name}_secret"] = Path(public), Path(secret)
    allowed = directory / "allowed"
    allowed.mkdir(exist_ok=True)
    shutil.copy(paths["modeler_public"], allowed / "modeler.key")
    paths["allowed"] = allowed
    return paths


def start_authenticator(ctx: zmq.asyncio.Context, server: CurveServer) -> AsyncioAuthenticator:
    """A running ZAP authenticator admitting exactly the keys in `server.allowed_dir`."""
    if not server.allowed_dir.is_dir():
        raise FileNotFoundError(f"no directory of allowed modeler keys at {server.allowed_dir}")
    auth = AsyncioAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(server.allowed_dir))
    return auth


def secure_server(sock: zmq.Socket, server: CurveServer) -> None:
    """Make `sock` a CURVE server with the curator's key pair (before it binds)."""
    public, secret = zmq.auth.load_certificate(server.secret_file)
    if secret is None:
        raise ValueError(f"{server.secret_file} holds no secret key")
    sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True


def secure_client(sock: zmq.Socket, client: CurveClient) -> None:
    """Make `sock` a CURVE client of the curator's public key (before it connects)."""
    public, secret = zmq.auth.load_certificate(client.secret_file)
    if secret is None:
        raise ValueError(f"{client.secret_file} holds no secret key")
    server_public, _ = zmq.auth.load_certificate(client.server_public_file)
    sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = secret, public, server_public
