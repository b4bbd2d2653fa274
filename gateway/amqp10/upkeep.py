"""AMQP 1.0 connections under the broker's rules for every connection: the connection limits
and the consumer timeout.

The consumer timeout (``--consumer-timeout-ms``, a queue's ``x-consumer-timeout``) applies to
receiver links as it does to 0-9-1 channels: a delivery the client has left unsettled for longer
detaches its link with ``amqp:precondition-failed`` and the link's unsettled messages go back to
the queue. RabbitMQ 4 lists detaching the link as its choice for AMQP 1.0; the session and the
connection go on. A delivery's age is counted from the first check that saw it unsettled (checks
run every second), so a link is never detached early.
"""
from __future__ import annotations

import logging

from gateway.logs import fields

log = logging.getLogger(__name__)


def connection_limit_refusal(service, username: str | None, vhost) -> str | None:
    """Why a connection of ``username`` to ``vhost`` is refused by the per-user limit
    (``--max-connections-per-user``) or the vhost's ``max-connections``, else None. Open
    connections of both AMQP versions count; the new one is not among them yet."""
    opened = [c for c in (*service.connections, *service.amqp10_connections) if c.vhost is not None]
    limit = service.max_connections_per_user
    if limit and sum(1 for c in opened if c.username == username) >= limit:
        return f"user connection limit ({limit}) is reached"
    vhost_limit = vhost.limits.get("max-connections", -1)
    if vhost_limit >= 0 and sum(1 for c in opened if c.vhost is vhost) >= vhost_limit:
        return f"connection limit ({vhost_limit}) is reached"
    return None


def check_consumer_timeouts(connection, now: float, default_ms: int) -> bool:
    """Detach each receiver link holding a delivery unsettled past its queue's timeout; True
    when one was detached (there is output to flush)."""
    # (session, delivery id) -> when a check first saw it unsettled; by session, not channel: a
    # channel's next session numbers its deliveries from 0 again
    seen = connection.unsettled_seen
    still: dict[tuple, float] = {}
    expired: dict[tuple, int] = {}
    for session in list(connection.sessions.values()):
        for delivery_id, (link, queue, _offset) in session.unsettled.items():
            key = (session, delivery_id)
            first = still[key] = seen.get(key, now)
            timeout = queue.args.consumer_timeout or default_ms
            if timeout and (now - first) * 1000 > timeout:
                expired.setdefault((session, link.handle), timeout)
    connection.unsettled_seen = still
    for (session, handle), timeout in expired.items():
        if session.links.get(handle) is None:
            continue
        log.warning("AMQP 1.0 consumer timeout: detaching the link", extra=fields(
            peer=connection.peer, conn=connection.conn_id, channel=session.channel, handle=handle,
            user=connection.username, timeout_ms=timeout))
        session.detach(handle, "amqp:precondition-failed",
                       f"delivery acknowledgement on link {handle} timed out. Timeout value used: {timeout} ms. "
                       "This timeout value can be configured, see consumers doc guide to learn more")
    return bool(expired)
