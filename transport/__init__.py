"""Frame pipes that carry pobo's encoded messages: ZeroMQ (tcp, ipc) or in-process.

Knows ZeroMQ and asyncio, nothing of Bayesian optimisation; a pipe is wrapped in a
`protocol.channel.Channel` before any party sees it.
"""
from pobo.transport.inproc import QueuePipe, pipe_pair
from pobo.transport.sockets import DealerPipe, RouterHub, RouterPipe, SocketOptions

__all__ = ["DealerPipe", "QueuePipe", "RouterHub", "RouterPipe", "SocketOptions", "pipe_pair"]
