"""The topics a consumer group's members subscribe to, read from their JoinGroup metadata.

Members of a ``consumer`` group send Kafka's ConsumerProtocolSubscription (any version 0-3;
later versions only append fields) as the metadata of each assignor they offer::

    int16  version
    int32  topic count, then per topic: int16 length + UTF-8 name
    ...    user data, owned partitions, generation, rack (not needed here)

OffsetDelete needs only the topic names (GROUP_SUBSCRIBED_TO_TOPIC).
"""
from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from core.groups.group import Group, GroupState

CONSUMER_PROTOCOL = "consumer"
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def decode_topics(metadata: bytes) -> list[str]:
    """The topics of one ConsumerProtocolSubscription; ValueError when it is not one."""
    try:
        (count,) = _I32.unpack_from(metadata, 2)
        if count < 0 or count > len(metadata):
            raise ValueError(f"topic count {count}")
        pos, topics = 6, []
        for _ in range(count):
            (size,) = _I16.unpack_from(metadata, pos)
            if size < 0 or pos + 2 + size > len(metadata):
                raise ValueError("topic name runs past the metadata")
            topics.append(metadata[pos + 2:pos + 2 + size].decode())
            pos += 2 + size
        return topics
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a consumer subscription: {exc}") from None


def subscribed_topics(group: Group) -> set[str] | None:
    """Every topic a member subscribes to (under the group's protocol, or any it offers while
    none is chosen); None when that cannot be told, which callers must read as "maybe all"."""
    if group.protocol_type != CONSUMER_PROTOCOL:
        return None
    topics: set[str] = set()
    try:
        for member in group.members.values():
            for name, metadata in member.protocols:
                if group.protocol_name is None or name == group.protocol_name:
                    topics.update(decode_topics(bytes(metadata)))
    except ValueError:
        return None
    return topics


def offset_delete_errors(group_id: str, group: Group | None, partitions: list[tuple[str, int]]
                         ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """Kafka's OffsetDelete rules: (group error, per-partition errors; NONE = may be deleted).

    An Empty group loses any offsets; an active consumer group keeps those of topics its members
    subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); any other active group refuses (NON_EMPTY_GROUP)."""
    if not group_id:
        return ErrorCode.invalid_group_id, {}
    if group is None or group.is_(GroupState.DEAD):
        return ErrorCode.group_id_not_found, {}
    if group.is_(GroupState.EMPTY):
        return ErrorCode.none, {tp: ErrorCode.none for tp in partitions}
    if group.protocol_type != CONSUMER_PROTOCOL:
        return ErrorCode.non_empty_group, {}
    topics = subscribed_topics(group)
    return ErrorCode.none, {tp: ErrorCode.group_subscribed_to_topic if topics is None or tp[0] in topics
                            else ErrorCode.none for tp in partitions}
