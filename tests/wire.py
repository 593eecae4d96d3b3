"""For tests that speak to a networked curator frame by frame: a curator served on a free
loopback port, raw DEALERs, replies read whole, and the cookie round (PROTOCOL.md 3.7: a
first Hello gets a Retry, and the Hello that opens the session echoes its cookie)."""
from __future__ import annotations

import asyncio
from dataclasses import replace

import zmq

from pobo.protocol.codec import decode, encode
from pobo.protocol.messages import Hello, Retry, new_nonce
from pobo.protocol.signing import ZERO, Link, Signer, open_frame, seal


async def serve(tmp_path, service, **kw):
    """serve_curator(service) on a free loopback port, its folder tmp_path/curator: (its
    task, the endpoint it listens on)."""
    from pobo.remote import serve_curator

    bound = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(serve_curator(
        service, "tcp://127.0.0.1:0", tmp_path / "curator", accept_timeout=60.0,
        verbose=False, on_bound=bound.set_result, **kw))
    return task, await asyncio.wait_for(bound, 10)


def dealer(ctx, endpoint: str, rcvhwm: int = 1000):
    """A raw zmq.asyncio DEALER connected to `endpoint` (LINGER 0)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.connect(endpoint)
    return sock


async def reply(sock, timeout: float = 20.0):
    """The next message from the curator (a frame may come in parts: joined)."""
    parts = await asyncio.wait_for(sock.recv_multipart(), timeout)
    return decode(open_frame(b"".join(parts)).body)


def hello_frame(hello: Hello, signer: Signer | None = None, bare: bool = False) -> bytes:
    """`hello` as an opening frame: an envelope (signed by `signer` if given), or bare."""
    body = encode(hello)
    return body if bare else seal(body, Link(hello.resume, 0, ZERO, ZERO), signer)


async def with_cookie(sock, hello: Hello, signer: Signer | None = None, bare: bool = False,
                      timeout: float = 10.0) -> Hello:
    """Send `hello` (given a fresh nonce if it has none) on the zmq.asyncio DEALER `sock`,
    read the curator's Retry and return the Hello to send next: the same, with the cookie."""
    if not hello.nonce:
        hello = replace(hello, nonce=new_nonce())
    await sock.send(hello_frame(hello, signer, bare))
    reply = decode(open_frame(await asyncio.wait_for(sock.recv(), timeout)).body)
    assert isinstance(reply, Retry), reply
    return replace(hello, cookie=reply.cookie)
