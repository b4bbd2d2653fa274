"""What the management API shows, as plain JSON-ready dicts, read from the live broker.

Shapes follow RabbitMQ's management API where the two overlap (field names of
``/api/queues``, ``/api/exchanges``, ``/api/bindings``, ``/api/connections``...), so scripts
written for RabbitMQ read them unchanged; Kafka-side resources (topics with per-partition
offsets, groups with lag) use Kafka's own words. Everything here runs on the reactor thread
and only reads.
"""
from __future__ import annotations

import base64
import hashlib
from typing import Any, Iterable

from core.names import topic_queue
from gateway.amqp.service import broker_version
from core.offsets import OFFSETS_TOPIC
from core.transactions import TXN_TOPIC


def leader_of(broker, q) -> int:
    """The broker leading a queue led elsewhere: its stub's, or (until this broker's next tick
    updates the stub) the cluster view's live leader of its topic; -1 when there is none."""
    if q.leader >= 0 or broker.cluster is None:
        return q.leader
    state = broker.cluster.view.state(q.topic, q.partition)
    return state.leader if state is not None and state.leader in broker.cluster.view.brokers else -1


def node_name(node_id: int) -> str:
    """A broker's name as the management API and the metrics show it (RabbitMQ's ``node``)."""
    return f"gateway@{node_id}"


def _node(broker) -> str:
    return node_name(broker.settings.node_id)


# --- AMQP ---------------------------------------------------------------------------------

def queue(broker, q, figures=None) -> dict:
    """``figures`` (gateway.cluster.amqp_queue_ops.Figures): the leader's, for a queue led elsewhere."""
    unacked = q.unacked_count() if not q.is_stream else 0
    ready = q.message_count()
    consumers = q.consumer_count()
    if figures is not None:
        ready, unacked, consumers = figures.ready, figures.unacked, figures.consumers
    publish = getattr(q, "stats", None)
    vhost = broker.amqp.router.vhosts.get(q.vhost)
    policy, operator = vhost.policy_names(q.name) if vhost is not None and not q.is_stream else (None, None)
    return {
        "name": q.name, "vhost": q.vhost, "durable": q.durable, "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner is not None, "arguments": jsonable(q.arguments),
        "type": q.args.queue_type, "state": "running",
        # RabbitMQ's node of a queue is its leader's (cluster mode 'spread': often another broker)
        "node": node_name(leader_of(broker, q)) if q.remote else _node(broker),
        "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
        "consumers": consumers, "topic": q.topic,
        "policy": policy, "operator_policy": operator,
        "effective_policy_definition": vhost.policies[policy]["definition"] if policy is not None else {},
        "message_stats": publish.as_json() if publish is not None else {},
    }


def queues(broker, vhost: str | None = None) -> list[dict]:
    return [queue(broker, q) for v in _vhosts(broker, vhost) for q in sorted(v.queues.values(), key=_by_name)]


def exchange(vhost, x) -> dict:
    return {"name": x.name, "vhost": vhost.name, "type": x.type_name, "durable": x.durable,
            "auto_delete": x.auto_delete, "internal": x.internal, "arguments": jsonable(x.arguments)}


def exchanges(broker, vhost: str | None = None) -> list[dict]:
    return [exchange(v, x) for v in _vhosts(broker, vhost) for x in sorted(v.exchanges.values(), key=_by_name)]


def properties_key(routing_key: str, arguments: dict) -> str:
    """RabbitMQ's id of a binding within its source and destination: the key, and a hash of the arguments."""
    if not arguments:
        return routing_key or "~"
    digest = hashlib.sha256(repr(sorted((str(k), repr(v)) for k, v in arguments.items())).encode()).digest()
    return f"{routing_key}~{base64.urlsafe_b64encode(digest[:5]).decode().rstrip('=')}"


def binding(vhost: str, source: str, kind: str, destination: str, routing_key: str, arguments) -> dict:
    args = jsonable(dict(arguments))
    return {"source": source, "vhost": vhost, "destination": destination, "destination_type": kind,
            "routing_key": routing_key, "arguments": args, "properties_key": properties_key(routing_key, args)}


def bindings(v, source: str | None = None, destination: tuple[str, str] | None = None) -> list[dict]:
    """Every binding of vhost ``v`` (RabbitMQ lists each queue's default binding too), filtered."""
    out = []
    if source in (None, "") and (destination is None or destination[0] == "queue"):
        for q in sorted(v.queues.values(), key=_by_name):
            if destination is None or destination[1] == q.name:
                out.append(binding(v.name, "", "queue", q.name, q.name, {}))
    for x in sorted(v.exchanges.values(), key=_by_name):
        if not x.name or (source is not None and x.name != source):
            continue
        for b in x.bindings():
            if destination is None or tuple(b.destination) == destination:
                kind, name = b.destination
                out.append(binding(v.name, x.name, kind, name, b.routing_key, b.arguments))
    return out


def amqp_connection(connection) -> dict:
    host, _, port = connection.peer.rpartition(":")
    return {"name": f"{connection.peer} -> amqp", "id": connection.conn_id, "protocol": "AMQP 0-9-1",
            "user": connection.username,
            "vhost": connection.vhost.name if connection.vhost else None, "peer_host": host,
            "peer_port": int(port) if port.isdigit() else None, "channels": len(connection.channels),
            "state": "blocked" if connection.blocked_reason else "running",
            "client_properties": jsonable(connection.client_properties)}


def kafka_connection(connection) -> dict:
    host, _, port = connection.peer.rpartition(":")
    return {"name": f"{connection.peer} -> kafka", "id": connection.conn_id, "protocol": "Kafka",
            "user": connection.principal_name,
            "vhost": None, "peer_host": host, "peer_port": int(port) if port.isdigit() else None, "channels": 0,
            "state": "running", "client_properties": {}}


def amqp10_connection(connection) -> dict:
    """An AMQP 1.0 connection as RabbitMQ 4 lists one: protocol ``AMQP 1-0``, its sessions as
    ``channels`` (their detail is ``/api/connections/{name}/sessions``)."""
    host, _, port = connection.peer.rpartition(":")
    return {"name": f"{connection.peer} -> amqp", "id": connection.conn_id, "protocol": "AMQP 1-0",
            "user": connection.username,
            "vhost": connection.vhost.name if connection.vhost else None, "peer_host": host,
            "peer_port": int(port) if port.isdigit() else None, "channels": len(connection.sessions),
            "channel_max": connection.channel_max, "frame_max": connection.max_frame_size,
            "connected_at": int(connection.opened_at * 1000) if connection.opened_at else None,
            "state": "running" if connection.state == "opened" else connection.state,
            "client_properties": jsonable(connection.client_properties)}


def amqp10_sessions(connection) -> list[dict]:
    """``/api/connections/{name}/sessions``: RabbitMQ 4's fields of each session and its links."""
    out = []
    for channel, s in sorted(connection.sessions.items()):
        incoming, outgoing = [], []
        for handle, link in sorted(s.links.items()):
            doc = {"handle": handle, "link_name": str(link.attach.name), "credit": link.credit,
                   "delivery_count": link.delivery_count, "unsettled_deliveries": link.unsettled,
                   "snd_settle_mode": "settled" if link.attach.snd_settle_mode == 1 else "unsettled"}
            if link.attach.role:  # the client receives: an outgoing link of ours
                queue = getattr(link, "queue", None)
                doc.update(source_address=_address(link.attach.source),
                           queue_name=queue.name if queue is not None else None)
                outgoing.append(doc)
            else:
                node = getattr(link, "node", None)
                doc.update(target_address=_address(link.attach.target),
                           exchange_name=node.name if node is not None and node.kind == "exchange" else None)
                incoming.append(doc)
        out.append({"channel_number": channel, "handle_max": s.handle_max, "next_incoming_id": s.next_incoming_id,
                    "incoming_window": s.incoming_window, "next_outgoing_id": s.next_outgoing_id,
                    "remote_incoming_window": s.remote_incoming_window,
                    "remote_outgoing_window": s.remote_outgoing_window,
                    "outgoing_unsettled_deliveries": len(s.unsettled),
                    "incoming_links": incoming, "outgoing_links": outgoing})
    return out


def _address(terminus) -> str | None:
    address = getattr(terminus, "address", None)
    return None if address is None else str(address)


def connections(broker) -> list[dict]:
    """The connections to this broker (gateway.management.cluster_clients adds the others')."""
    amqp = [amqp_connection(c) for c in broker.amqp.connections]
    amqp10 = [amqp10_connection(c) for c in broker.amqp.amqp10_connections]
    kafka = [kafka_connection(c) for c in getattr(broker.kafka, "connections", ())]
    node = _node(broker)
    return sorted(({**c, "node": node} for c in amqp + amqp10 + kafka), key=lambda c: c["name"])


def channels(broker) -> list[dict]:
    out, node = [], _node(broker)
    for c in broker.amqp.connections:
        for number, ch in sorted(c.channels.items()):
            out.append({"name": f"{c.peer} ({number})", "number": number, "user": c.username, "node": node,
                        "vhost": c.vhost.name if c.vhost else None,
                        "connection_details": {"name": f"{c.peer} -> amqp", "peer_host": c.peer_host},
                        "consumer_count": len(ch.consumers), "messages_unacknowledged": len(ch.unacked),
                        "prefetch_count": ch.prefetch, "global_prefetch_count": ch.global_prefetch,
                        "confirm": ch.confirm, "transactional": ch.tx is not None,
                        "state": "running" if ch.flow else "flow"})
    return out


def consumers(broker) -> list[dict]:
    """AMQP 0-9-1 consumers and AMQP 1.0 receiver links of queues, on connections to this broker."""
    out, node = [], _node(broker)

    def consumer(c, number: int, tag: str, exclusive: bool, ack: bool, prefetch: int, priority: int, queue) -> dict:
        return {"consumer_tag": tag, "exclusive": exclusive, "ack_required": ack, "prefetch_count": prefetch,
                "priority": priority, "arguments": {}, "active": True, "activity_status": "up",
                "queue": {"name": queue.name, "vhost": c.vhost.name},
                "channel_details": {"name": f"{c.peer} ({number})", "number": number, "node": node,
                                    "connection_name": f"{c.peer} -> amqp", "peer_host": c.peer_host,
                                    "user": c.username}}
    for c in broker.amqp.connections:
        if c.vhost is not None:
            for number, ch in sorted(c.channels.items()):
                for tag, m in sorted(ch.consumers.items()):
                    out.append(consumer(c, number, tag, m.exclusive, not m.no_ack, m.prefetch, m.priority, m.queue))
    for c in broker.amqp.amqp10_connections:  # AMQP 1.0: a receiver link of a queue, by its name
        if c.vhost is not None:
            for number, session in sorted(c.sessions.items()):
                for _handle, link in sorted(session.links.items()):
                    if getattr(link, "queue", None) is not None:
                        out.append(consumer(c, number, str(link.tag), False, not link.no_ack, link.credit, 0,
                                            link.queue))
    return out


def vhost(broker, v, qs: list[dict] | None = None) -> dict:
    """``qs``: its queues as shown (in a cluster with their leaders' figures: remote_figures)."""
    qs = [queue(broker, q) for q in v.queues.values()] if qs is None else qs
    meta = {"description": v.metadata.get("description", ""), "tags": list(v.metadata.get("tags", []))}
    nodes = sorted(broker.cluster.view.brokers) if broker.cluster is not None else [broker.settings.node_id]
    return {"name": v.name, **meta, "default_queue_type": v.metadata.get("default_queue_type", "undefined"),
            "metadata": meta, "tracing": False, "cluster_state": {node_name(n): "running" for n in nodes},
            "messages": sum(q["messages"] for q in qs), "messages_ready": sum(q["messages_ready"] for q in qs),
            "messages_unacknowledged": sum(q["messages_unacknowledged"] for q in qs)}


def policies(broker, vhost: str | None = None) -> list[dict]:
    return [{"vhost": v.name, "name": name, **policy}
            for v in _vhosts(broker, vhost) for name, policy in sorted(v.policies.items())]


def _vhosts(broker, name: str | None) -> Iterable:
    all_vhosts = broker.amqp.router.vhosts
    if name is None:
        return list(all_vhosts.values())
    return [all_vhosts[name]] if name in all_vhosts else []


# --- Kafka ----------------------------------------------------------------------------------

INTERNAL_TOPICS = (OFFSETS_TOPIC, TXN_TOPIC)


def topic(broker, md, with_partitions: bool = True, remote: dict | None = None) -> dict:
    """``remote``: the offsets of partitions held by no log here, asked of their leaders
    (gateway.management.cluster_offsets.figures)."""
    remote = remote or {}
    doc: dict[str, Any] = {
        "name": md.name, "partitions": md.partitions, "topic_id": md.topic_id,
        "internal": md.name in INTERNAL_TOPICS, "amqp_queue": _queue_of(broker, md.name),
        "configs": dict(md.configs),
    }
    if with_partitions:
        doc["partition_details"] = [partition(broker, md.name, p, remote.get((md.name, p)))
                                    for p in range(md.partitions)]
    messages = 0
    for p in range(md.partitions):
        plog = broker.kafka.partition(md.name, p)
        if plog is not None:
            messages += plog.high_watermark - plog.log_start_offset
        elif (md.name, p) in remote:
            messages += remote[(md.name, p)]["high_watermark"] - remote[(md.name, p)]["log_start_offset"]
    doc["messages"] = messages
    return doc


def _queue_of(broker, name: str) -> dict | None:
    """The AMQP queue this topic stores, if any."""
    vhost_name, queue_name = topic_queue(name)
    vhost = broker.amqp.router.vhosts.get(vhost_name)
    q = vhost.queues.get(queue_name) if vhost is not None else None
    return {"vhost": vhost_name, "name": queue_name} if q is not None and q.topic == name else None


def partition(broker, name: str, index: int, remote: dict | None = None) -> dict:
    plog = broker.kafka.partition(name, index)
    node = broker.settings.node_id
    leader, replicas, isr = node, [node], [node]
    if broker.cluster is not None:
        state = broker.cluster.view.state(name, index)
        replicas = list(broker.cluster.view.replicas(name, index))
        leader, isr = (state.leader, list(state.isr)) if state is not None else (-1, [])
    if plog is None and remote is not None:  # cluster mode: held by other brokers only, its leader said
        return {"partition": index, "leader": leader, "replicas": replicas, "isr": isr, **remote}
    if plog is None:  # (and its leader did not answer)
        return {"partition": index, "leader": leader, "replicas": replicas, "isr": isr, "error": "not on this broker"}
    return {"partition": index, "leader": leader, "replicas": replicas, "isr": isr,
            "log_start_offset": plog.log_start_offset, "high_watermark": plog.high_watermark,
            "log_end_offset": plog.next_offset,
            "last_stable_offset": broker.kafka.last_stable_offset(name, index, plog),
            "size_bytes": sum(s.size for s in plog.segments), "segments": len(plog.segments)}


def topics(broker, remote: dict | None = None) -> list[dict]:
    return [topic(broker, md, with_partitions=False, remote=remote)
            for md in sorted(broker.kafka.logs.store.topics().values(), key=_by_name)]


def group_offsets(broker, group_id: str) -> dict[tuple[str, int], tuple[int, int, str]]:
    """(topic, partition) -> (offset, leader epoch, metadata): a group's committed offsets, or for a
    share group each share partition's start (its position)."""
    groups = broker.kafka.groups
    if groups.group_type(group_id) == "share":
        return {(t, i): (start, -1, "") for t, i, start in broker.amqp.router.shares.describe(group_id)}
    return groups.fetch_offsets(group_id, None)


def group(broker, group_id: str, ends: dict[tuple[str, int], int] | None = None) -> dict:
    """A group coordinated here; ``ends``: the partitions' high watermarks where the lag is measured
    (gateway.management.cluster_groups asks their leaders), else those of the logs held here."""
    groups = broker.kafka.groups
    described = groups.describe_group(group_id)
    offsets = group_offsets(broker, group_id)
    lag_rows, total = [], 0
    for (name, index), (offset, _epoch, metadata) in sorted(offsets.items()):
        if ends is not None:
            end = ends.get((name, index))
        else:
            plog = broker.kafka.partition(name, index)
            end = plog.high_watermark if plog is not None else None
        lag = max(end - offset, 0) if end is not None and offset >= 0 else None
        total += lag or 0
        lag_rows.append({"topic": name, "partition": index, "committed_offset": offset, "log_end_offset": end,
                         "lag": lag, "metadata": metadata})
    return {"group_id": group_id, "state": described.state, "protocol_type": described.protocol_type,
            "protocol": described.protocol, "type": groups.group_type(group_id) or "classic", "members": [
                {"member_id": m[0], "group_instance_id": m[1], "client_id": m[2], "client_host": m[3]}
                for m in described.members],
            "offsets": lag_rows, "lag": total}


def groups(broker) -> list[dict]:
    return [group(broker, listing[0]) for listing in sorted(broker.kafka.groups.list_groups())]


# --- the whole node -------------------------------------------------------------------------

def overview(broker, all_queues: list[dict] | None = None, connection_count: int | None = None,
             channel_count: int | None = None, group_count: int | None = None) -> dict:
    """The node's overview; in a cluster the API passes the whole cluster's queues (with their
    leaders' figures) and counts (gateway.management.cluster_clients, cluster_groups)."""
    all_queues = queues(broker) if all_queues is None else all_queues
    return {
        "management_version": "gateway-1", "product_name": "gateway", "node": _node(broker),
        "rabbitmq_version": broker_version(), "product_version": broker_version(),
        "cluster_name": broker.amqp.cluster_name,
        "object_totals": {
            "connections": len(connections(broker)) if connection_count is None else connection_count,
            "channels": len(channels(broker)) if channel_count is None else channel_count,
            "exchanges": sum(len(v.exchanges) for v in broker.amqp.router.vhosts.values()),
            "queues": len(all_queues), "consumers": sum(q["consumers"] for q in all_queues),
            "topics": len(broker.kafka.logs.store.topics()),
            "groups": len(broker.kafka.groups.list_groups()) if group_count is None else group_count,
        },
        "queue_totals": {
            "messages": sum(q["messages"] for q in all_queues),
            "messages_ready": sum(q["messages_ready"] for q in all_queues),
            "messages_unacknowledged": sum(q["messages_unacknowledged"] for q in all_queues),
        },
        "listeners": [{"protocol": name, "ip_address": address.rpartition(":")[0], "port":
                       int(address.rpartition(":")[2])} for name, address in sorted(broker.addresses().items())],
    }


def _by_name(obj) -> str:
    return obj.name


def jsonable(value):
    """AMQP field values (bytes, Decimal, datetime...) as JSON can carry them."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
