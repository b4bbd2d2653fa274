"""Authorized operations: the bit field of what a principal may do on a topic, a group or the
cluster, which the describing APIs return when a client asks (``include_*_authorized_operations``:
Metadata, DescribeTopicPartitions, DescribeCluster, DescribeGroups, ConsumerGroupDescribe,
ShareGroupDescribe). The ACL decisions are :mod:`gateway.kafka.authz`'s."""
from __future__ import annotations

from gateway.kafka.authz import checker

# Kafka's AclOperation codes, and the operations each resource type supports: what an
# ``authorized_operations`` bit field is made of (Kafka 4.1: topic 3576, group 3400, cluster 8096
# when everything is allowed).
_OP_BITS = {"read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8, "cluster_action": 9,
            "describe_configs": 10, "alter_configs": 11, "idempotent_write": 12}
_SUPPORTED_OPS = {
    "topic": ("read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs"),
    "group": ("read", "delete", "describe", "describe_configs", "alter_configs"),
    "cluster": ("create", "alter", "describe", "cluster_action", "describe_configs", "alter_configs",
                "idempotent_write"),
}


def authorized_operations(conn, resource_type: str, name: str) -> int:
    """The bit field of the operations the connection's principal may do on a resource, for the
    describing APIs that are asked for it (``include_*_authorized_operations``). With no
    authorizer everything is allowed, as on a Kafka broker without one."""
    authorizer = getattr(conn.ctx, "authorizer", None)
    check = None if authorizer is None else checker(authorizer, conn)
    bits = 0
    for operation in _SUPPORTED_OPS[resource_type]:
        if check is None or check(operation, resource_type, name, log_denial=False):
            bits |= 1 << _OP_BITS[operation]
    return bits
