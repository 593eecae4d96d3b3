"""The cookie round (PROTOCOL.md 3.7) for tests that speak to a networked curator frame by
frame: a first Hello gets a Retry, and the Hello that opens the session echoes its cookie."""
from __future__ import annotations

import asyncio
from dataclasses import replace

from pobo.protocol.codec import decode, encode
from pobo.protocol.messages import Hello, Retry, new_nonce
from pobo.protocol.signing import ZERO, Link, Signer, open_frame, seal


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
