"""Metadata: brokers (just this one in single-node mode) and topics with their partitions."""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.errors import InvalidTopicError
from core.metadata import check_topic_name
from gateway.kafka.apis import handles
from wire.kafka import respond

UNKNOWN_OPERATIONS = -(2**31)  # "authorized operations not requested"
LEADER_EPOCH = 0  # single node: the one leader has been leader since epoch 0


def broker_list(ctx) -> list[dict]:
    host, port = ctx.advertised()
    return [{"node_id": ctx.node_id, "host": host, "port": port, "rack": None}]


def topic_entry(ctx, name: str, topic) -> dict:
    node = ctx.node_id
    partitions = [{"error_code": ErrorCode.none, "partition_index": i, "leader_id": node, "leader_epoch": LEADER_EPOCH,
                   "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
                  for i in range(topic.partitions)]
    return {"error_code": ErrorCode.none, "name": name, "topic_id": ctx.topic_id(name),
            "is_internal": name.startswith("__"), "partitions": partitions,
            "topic_authorized_operations": UNKNOWN_OPERATIONS}


def _error_entry(name: str, error: ErrorCode) -> dict:
    return {"error_code": error, "name": name, "topic_id": 0, "is_internal": False, "partitions": [],
            "topic_authorized_operations": UNKNOWN_OPERATIONS}


@handles(3)
def metadata(ctx, conn, h, req):
    requested = req.topics
    if requested is None or (h.api_version == 0 and not requested):
        topics = [topic_entry(ctx, name, t) for name, t in sorted(ctx.logs.store.topics().items())]
    else:
        allow_create = getattr(req, "allow_auto_topic_creation", True)
        topics = []
        for item in requested:
            name = item.name
            try:
                check_topic_name(name)
            except InvalidTopicError:
                topics.append(_error_entry(name, ErrorCode.invalid_topic_exception))
                continue
            topic = ctx.topic_or_create(name, allow_create)
            topics.append(topic_entry(ctx, name, topic) if topic else
                          _error_entry(name, ErrorCode.unknown_topic_or_partition))
    return respond(h, {"throttle_time": 0, "brokers": broker_list(ctx), "cluster_id": ctx.cluster_id,
                       "controller_id": ctx.node_id, "topics": topics,
                       "cluster_authorized_operations": UNKNOWN_OPERATIONS})
