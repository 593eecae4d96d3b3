"""ZeroMQ frame pipes: the curator binds a ROUTER, each modeler connects a DEALER.

No pending recv is ever cancelled: a wait is a reader on the socket's descriptor with a
deadline; a send is non-blocking, retried until a deadline. Sockets get
MAXMSGSIZE (a peer sending a larger frame is disconnected by libzmq), LINGER=0,
bounded high-water marks, ZeroMQ heartbeats, and ROUTER_MANDATORY so a reply to a
vanished peer raises instead of vanishing.

The hub holds bounded memory whatever peers send (`HubLimits`): a peer that was never
accepted may queue a few frames for a limited time, a bounded number of them may wait,
an accepted peer queues at most `hwm` frames; frames past a bound are dropped and
counted (`RouterHub.stats()`), never queued. Plaintext is refused on a non-loopback
endpoint unless asked for, and a modeler whose key the curator refuses is told so
(`AuthenticationFailed`) instead of timing out.

The code lives in four modules, re-exported here under the names it always had:
`endpoints` (parsing and checks, no ZeroMQ), `zmqbase` (the context, socket options,
frame I/O), `dealer` (DealerPipe) and `router` (RouterHub, RouterPipe, HubLimits). A
test or benchmark that patches a module global patches it where the code reads it (for
instance `dealer.UNREACHED_EVERY`, `router._send_parts`): setting it here changes
nothing.
"""
from __future__ import annotations

from pobo.transport.dealer import (  # noqa: F401
    _HANDSHAKE_EVENTS, _MAX_EVENTS, UNREACHED_EVERY, DealerPipe, _auth_message,
    _close_monitored, _handshake_cause, _monitor, _readable_now, _single, _unwatch,
)
from pobo.transport.endpoints import (  # noqa: F401
    _LOOPBACK_NAMES, _SCHEMES, BindError, _host_port, _split, check_bindable, check_endpoint,
    is_loopback, needs_ipv6,
)
from pobo.transport.router import (  # noqa: F401
    _BATCH, _ERROR_COST, _LOG_EVERY_S, _SWEEP_S, HubLimits, RouterHub, RouterPipe, _Peer,
    _user_id, _wait,
)
from pobo.transport.zmqbase import (  # noqa: F401
    _COPY_BELOW, _EVENTS, _NOBLOCK, _POLL_MS, _POLLIN, _SNDMORE, LOG, SocketOptions,
    _close_left_open, _recv_parts, _send_parts, close_context, new_context,
)
