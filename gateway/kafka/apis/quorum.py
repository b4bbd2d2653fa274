"""The metadata quorum's APIs: DescribeQuorum (KIP-595, KIP-853), the state of partition
__cluster_metadata-0, and UpdateFeatures (KIP-584), with no feature flags to change.

Single node: this node is the quorum, the only voter and its leader, as a single KRaft node
combining broker and controller describes itself. There is no Raft log behind our metadata (a
file, rewritten whole), so the offsets are -1, Kafka's "unknown"; the epoch is the single-node
convention of :mod:`metadata` (one leader since epoch 0); the leader is by definition caught up
with itself, so its fetch and caught-up times are now, as Kafka reports its own leader.

Cluster mode keeps metadata in ZooKeeper: the quorum is ZooKeeper's ensemble, which has no
voters, epochs or offsets in Kafka's sense, and the brokers (the elected controller included)
are not members of it. Naming the controller as a one-voter quorum would be a fiction, so, as a
Kafka broker in ZooKeeper mode did, a cluster node leaves DescribeQuorum out of its ApiVersions
(see ``session.api_versions``) and answers a request sent anyway with UNSUPPORTED_VERSION.
"""
from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.metadata import LEADER_EPOCH, broker_list
from gateway.kafka.apis.registry import handles
from wire.kafka import respond

METADATA_TOPIC = "__cluster_metadata"
LISTENER = "PLAINTEXT"  # the listener name advertised.listeners gives (see configs.broker_configs)


@handles(55)
def describe_quorum(ctx, conn, h, req):
    if ctx.cluster is not None:
        return respond(h, {"error_code": ErrorCode.unsupported_version, "topics": [], "nodes": [],
                           "error_message": "this cluster keeps its metadata in ZooKeeper: there is no KRaft "
                                            "metadata quorum to describe"})
    now = int(time.time() * 1000)
    me = ctx.node_id
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.topic_name == METADATA_TOPIC and p.partition_index == 0:
                voter = {"replica_id": me, "replica_directory_id": None, "log_end_offset": -1,
                         "last_fetch_timestamp": now, "last_caught_up_timestamp": now}
                parts.append({"partition_index": 0, "error_code": ErrorCode.none, "error_message": None,
                              "leader_id": me, "leader_epoch": LEADER_EPOCH, "high_watermark": -1,
                              "current_voters": [voter], "observers": []})
            else:  # Kafka's answer, zeros included
                parts.append({"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
                              "error_message": "This server does not host this topic-partition.", "leader_id": 0,
                              "leader_epoch": 0, "high_watermark": 0, "current_voters": [], "observers": []})
        topics.append({"topic_name": t.topic_name, "partitions": parts})
    served = any(p["error_code"] == ErrorCode.none for t in topics for p in t["partitions"])
    nodes = [{"node_id": b["node_id"], "listeners": [{"name": LISTENER, "host": b["host"], "port": b["port"]}]}
             for b in broker_list(ctx)] if served else []
    return respond(h, {"error_code": ErrorCode.none, "error_message": None, "topics": topics, "nodes": nodes})


@handles(57)
def update_features(ctx, conn, h, req):
    """UpdateFeatures (KIP-584): this broker finalizes no feature flags (its ApiVersions lists
    none), so there is nothing a client can upgrade or downgrade. Kafka answers an update of a
    feature it does not know with INVALID_UPDATE_VERSION for the whole request (all or nothing),
    and an empty request with no error; so does this."""
    if not req.feature_updates:
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": []})
    first = req.feature_updates[0]
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.invalid_update_version, "results": [],
                       "error_message": f"no feature was updated: version {first.max_version_level} of feature "
                                        f"{first.feature!r} cannot be set, this broker has no feature flags"})
