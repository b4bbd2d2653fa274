"""DescribeTopicPartitions (KIP-966): topics and their partitions, paged, as Kafka 3.9/4.x answers.

Topics are described in name order, from the request's cursor (that topic from its partition
index, later ones from 0), until ``min(response_partition_limit, 2000)`` partitions are in the
answer (2000 is Kafka's ``max.request.partition.size.limit``); ``next_cursor`` then names the
first partition left out: inside a topic cut short, or partition 0 of the next topic when the
limit ran out exactly at a topic's end. No topics listed means every topic (and no entries for
missing ones); a listed topic that does not exist gets UNKNOWN_TOPIC_OR_PARTITION (or
INVALID_TOPIC_EXCEPTION for an illegal name) and uses none of the limit. A cursor naming a topic
the request does not list is INVALID_REQUEST. The partitions are those Metadata describes;
eligible leader replicas (KIP-966's ELR) are always empty: this broker never elects from them.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.errors import InvalidTopicError
from core.metadata import check_topic_name
from core.names import is_internal_topic
from gateway.kafka.apis.metadata import UNKNOWN_OPERATIONS, partition_entry
from gateway.kafka.apis.registry import handles
from gateway.kafka.operations import authorized_operations
from wire.kafka import respond

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit


def _topic(name: str, error: ErrorCode, topic_id=0, partitions=(), internal: bool = False) -> dict:
    return {"error_code": error, "name": name, "topic_id": topic_id, "is_internal": internal,
            "partitions": list(partitions), "topic_authorized_operations": UNKNOWN_OPERATIONS}


def _missing(name: str) -> dict:
    try:
        check_topic_name(name)
        error = ErrorCode.unknown_topic_or_partition
    except InvalidTopicError:
        error = ErrorCode.invalid_topic_exception
    return _topic(name, error)


@handles(75)
def describe_topic_partitions(ctx, conn, h, req):
    cursor = req.cursor
    after = cursor.topic_name if cursor is not None else ""
    everything = not req.topics
    names = sorted(ctx.logs.store.topics()) if everything else sorted({t.name for t in req.topics})
    names = [n for n in names if n >= after]
    if cursor is not None and not everything and cursor.topic_name not in names:
        message_topics = [_topic(t.name, ErrorCode.invalid_request) for t in req.topics]
        return respond(h, {"throttle_time": 0, "topics": message_topics, "next_cursor": None})
    remaining = min(MAX_PARTITIONS, req.response_partition_limit)
    out, next_cursor = [], None
    for name in names:
        if remaining <= 0:
            if remaining == 0:  # the limit ran out at a topic's end: the next page starts here
                next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = ctx.logs.store.get_topic(name)
        if topic is None:
            if not everything:
                out.append(_missing(name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        upper = min(topic.partitions, start + remaining)
        partitions = [{**partition_entry(ctx, name, i, topic), "eligible_leader_replicas": [], "last_known_elr": []}
                      for i in range(max(start, 0), upper)]
        out.append(_topic(name, ErrorCode.none, ctx.topic_id(name), partitions, is_internal_topic(name)))
        if upper < topic.partitions:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= len(partitions)
    for t in out:  # always given here (the request has no flag), unknown topics included, as Kafka
        t["topic_authorized_operations"] = authorized_operations(conn, "topic", t["name"])
    return respond(h, {"throttle_time": 0, "topics": out, "next_cursor": next_cursor})
