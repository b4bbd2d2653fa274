"""KIP-848 online migration without sockets: a classic group upgraded by a consumer-protocol
member, classic members inside a consumer group, and the downgrade when the last modern member
leaves (core/groups/migration.py through the GroupCoordinator)."""
from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from core.groups import GroupCoordinator
from core.groups.consumer_group import HeartbeatRequest
from core.groups.migration import decode_assignment, decode_subscription, encode_assignment
from core.log_manager import LogManager
from core.metadata import LocalMetadataStore


def subscription(topics, owned=None) -> bytes:
    """ConsumerProtocolSubscription v1 (topics, no user data, owned partitions)."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    owned = owned or {}
    out += struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in sorted(ps))
    return out


class Coordinator:
    def __init__(self, tmp_path):
        self.now = 1000.0
        self.logs = LogManager(tmp_path, LocalMetadataStore(tmp_path))
        self.logs.startup()
        self.logs.create_topic("t", 4)
        self.c = GroupCoordinator(self.logs, lambda: self.now, initial_rebalance_delay_ms=0)
        self.c.load()

    def join(self, member_id, owned=None):
        out = []
        self.c.join("g", member_id, None, "client", "host", "consumer",
                    [("range", subscription(["t"], owned))], 30000, 30000, False, out.append)
        return out

    def sync(self, member_id, generation, assignments=None):
        out = []
        self.c.sync("g", generation, member_id, None, "consumer", "range", assignments or {}, out.append)
        return out[0]

    def heartbeat_848(self, member_id, epoch, owned=None):
        return self.c.consumer.heartbeat(HeartbeatRequest("g", member_id, epoch, subscribed_topic_names=["t"],
                                                          owned=owned if owned is not None else {},
                                                          rebalance_timeout_ms=30000))


def test_the_embedded_consumer_protocol_round_trips():
    assert decode_subscription(subscription(["a", "b"], {"a": {1, 2}})) == (["a", "b"], {"a": {1, 2}})
    assert decode_assignment(encode_assignment({"t": {3, 1}, "u": set()})) == {"t": {1, 3}}
    assert decode_assignment(b"") == {}


def test_a_classic_group_upgrades_online_and_downgrades_back(tmp_path):
    w = Coordinator(tmp_path)
    [a] = w.join("")  # JoinGroup v<4: the id is made here, and the group completes at once (delay 0)
    member_a = a.member_id
    assert a.error == ErrorCode.none and a.leader == member_a
    sync = w.sync(member_a, a.generation_id, {member_a: encode_assignment({"t": {0, 1, 2, 3}})})
    assert decode_assignment(sync.assignment) == {"t": {0, 1, 2, 3}}
    assert w.c.group_type("g") == "classic"

    # a consumer-protocol member joins the live classic group: upgrade
    b = w.heartbeat_848("B", 0)
    assert b.error == ErrorCode.none and b.assignment == {}  # a still holds all four
    assert w.c.group_type("g") == "consumer"
    # the classic member is told to rejoin, gets its reduced share at the new epoch
    assert w.c.heartbeat("g", a.generation_id, member_a, None) == ErrorCode.rebalance_in_progress
    [again] = w.join(member_a)  # eager: owns nothing when it rejoins
    assert again.error == ErrorCode.none and again.leader == "" and again.members == []
    assert again.generation_id == w.c.consumer.groups["g"].assignment_epoch
    kept = decode_assignment(w.sync(member_a, again.generation_id).assignment)
    assert len(kept["t"]) == 2
    assert w.c.heartbeat("g", again.generation_id, member_a, None) == ErrorCode.none
    b2 = w.heartbeat_848("B", b.member_epoch)
    assert b2.assignment["t"] == {0, 1, 2, 3} - kept["t"]  # released by a: b gets them
    assert w.c.heartbeat("g", again.generation_id - 1, member_a, None) == ErrorCode.illegal_generation

    # the last consumer-protocol member leaves: a classic group again, rebalancing
    assert w.heartbeat_848("B", -1).member_epoch == -1
    assert w.c.group_type("g") == "classic"
    # the generation is the group epoch (as Kafka's conversion): an older one is told to rejoin too
    assert w.c.heartbeat("g", again.generation_id, member_a, None) in (ErrorCode.rebalance_in_progress,
                                                                      ErrorCode.illegal_generation)
    [back] = w.join(member_a)
    assert back.error == ErrorCode.none and back.leader == member_a  # the classic protocol again


def test_a_classic_member_may_join_a_live_consumer_group(tmp_path):
    w = Coordinator(tmp_path)
    assert w.heartbeat_848("B", 0).assignment == {"t": {0, 1, 2, 3}}
    [req] = w.join("")
    c = w.c
    # JoinGroup v4+ would get MEMBER_ID_REQUIRED first; v<4 joins at once with the id made here
    assert req.error == ErrorCode.none and req.generation_id >= 0
    assert c.consumer.groups["g"].members[req.member_id].classic is not None
    assert c.group_type("g") == "consumer"
    described = c.describe_group("g")
    assert described.protocol_type == "consumer" and len(described.members) == 2
