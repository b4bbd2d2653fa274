"""The management API's connections, channels, consumers and nodes: the whole cluster's, from any broker.

A client is connected to one broker, and only that broker knows its connection. RabbitMQ's
management API shows every node's connections, channels and consumers whichever node is asked,
each with its ``node``, closes a connection on any node, and shows every node's own figures
(memory, disk, alarms: ``/api/nodes``); so does this one. In a cluster the
broker asked collects the other live brokers' lists over the brokers' own connections
(ManagementView, wire.kafka_private) and merges them with its own; a broker that does not answer
within :data:`TIMEOUT_S` is left out and named in the log. On one broker everything is local and
synchronous, as before.
"""
from __future__ import annotations

import json
import logging

from twisted.internet import defer

from gateway.logs import fields
from gateway.management import views
from gateway.management.errors import ApiError, not_found
from gateway.management.node_view import node_doc
from wire.kafka_private import CHANNELS, CLOSE_CONNECTION, CONNECTIONS, CONSUMERS, MANAGEMENT_VIEW, NODE

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
LOCAL = {CONNECTIONS: views.connections, CHANNELS: views.channels, CONSUMERS: views.consumers,
         NODE: lambda broker: [node_doc(broker)]}
WHAT = {CONNECTIONS: "connections", CHANNELS: "channels", CONSUMERS: "consumers", NODE: "node figures"}


def connections(broker):
    return listing(broker, CONNECTIONS)


def channels(broker):
    return listing(broker, CHANNELS)


def consumers(broker):
    return listing(broker, CONSUMERS)


def nodes(broker):
    """Every broker's node object, as it reports itself (gateway.management.node_view)."""
    return listing(broker, NODE)


def listing(broker, op: int):
    """Every broker's connections, channels or consumers (a Deferred in a cluster)."""
    local = LOCAL[op](broker)
    nodes = others(broker)
    if not nodes:
        return local

    def asked(node: int):
        d = broker.kafka.peers.call(node, MANAGEMENT_VIEW, {"op": op}, version=0, timeout=TIMEOUT_S)
        return d.addCallback(_body).addErrback(left_out, node, WHAT[op])

    def merged(answers) -> list[dict]:
        rows = [row for answer in answers for row in answer]
        if op == CONSUMERS:
            return sorted(rows, key=lambda r: (r["channel_details"]["name"], r["consumer_tag"]))
        if op == NODE:
            return rows  # (the caller adds the brokers that did not answer, then sorts)
        return sorted(rows, key=lambda r: r["name"])
    return defer.gatherResults([defer.succeed(local)] + [asked(node) for node in nodes]).addCallback(merged)


def local_connection(broker, name: str):
    """(connection, its view) of the connection ``name`` to this broker; 404 when it has none."""
    for found, view in ((broker.amqp.connections, views.amqp_connection),
                        (broker.amqp.amqp10_connections, views.amqp10_connection),
                        (getattr(broker.kafka, "connections", ()), views.kafka_connection)):
        for c in found:
            doc = view(c)
            if doc["name"] == name:
                return c, doc
    raise not_found(f"connection '{name}'")


def close_local(broker, name: str, reason: str, may_close=lambda row: None) -> None:
    connection, doc = local_connection(broker, name)
    may_close(doc)
    if doc["protocol"] == "Kafka":
        connection.transport.loseConnection()
    else:
        connection.close_connection(320, f"CONNECTION_FORCED - {reason}")


def close(broker, name: str, reason: str, may_close):
    """Close the connection ``name`` wherever it is: here, or on the broker the cluster's listing
    says holds it (a Deferred then); ``may_close(its view)`` raises if the asker may not."""
    if not others(broker) or any(c["name"] == name for c in views.connections(broker)):
        return close_local(broker, name, reason, may_close)

    def found(rows: list[dict]):
        row = next((r for r in rows if r["name"] == name), None)
        if row is None:
            raise not_found(f"connection '{name}'")
        may_close(row)
        node = _node_id(row["node"])
        request = {"op": CLOSE_CONNECTION, "name": name, "reason": reason}
        d = broker.kafka.peers.call(node, MANAGEMENT_VIEW, request, version=0, timeout=TIMEOUT_S)

        def answered(answer) -> None:
            if answer.error_code:
                raise not_found(f"connection '{name}'")  # it went meanwhile
        return d.addCallbacks(answered, lambda f: _unavailable(f, node))
    return listing(broker, CONNECTIONS).addCallback(found)


def answer(broker, op: int, name: str | None, reason: str | None) -> bytes:
    """What this broker answers another's ManagementView: its own list as JSON; or it closes one
    of its connections (LookupError when it has none of that name)."""
    if op == CLOSE_CONNECTION:
        try:
            close_local(broker, name or "", reason or "Closed via management plugin")
        except ApiError:
            raise LookupError(f"no connection '{name}' on this broker") from None
        return b"[]"
    if op not in LOCAL:
        raise ValueError(f"unknown ManagementView op {op}")
    return json.dumps(LOCAL[op](broker), default=str).encode()


def others(broker) -> list[int]:
    """The other brokers of the cluster this one can ask (none on a lone broker)."""
    cluster = broker.cluster
    if cluster is None or getattr(broker.kafka, "peers", None) is None:
        return []
    return [b.node_id for b in cluster.brokers() if b.node_id != broker.settings.node_id]


def then(result, fn):
    """``fn`` of what is a Deferred in a cluster (asked of other brokers) and a value on one broker."""
    return result.addCallback(fn) if isinstance(result, defer.Deferred) else fn(result)


def _node_id(node: str) -> int:
    return int(node.rpartition("@")[2])  # views.node_name


def _body(answer) -> list[dict]:
    if answer.error_code:
        raise RuntimeError(answer.error_message or f"error {answer.error_code}")
    return json.loads(answer.body)


def left_out(failure, node: int, what: str) -> list:
    """A broker that did not answer a listing: named in the log, its part left out."""
    log.warning("management API: the %s of broker %d are left out: %s", what, node, failure.getErrorMessage(),
                extra=fields(node=node))
    return []


def _unavailable(failure, node: int):
    raise ApiError(503, "unavailable", f"broker {node}, which holds the connection, did not answer: "
                                       f"{failure.getErrorMessage()}")
