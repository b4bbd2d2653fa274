"""KIP-848 online migration: classic members inside a consumer group, and the conversions.

Kafka 4 lets a running group move between protocols without stopping (its default
``group.consumer.migration.policy`` is ``bidirectional``); so does this coordinator:

* **upgrade**: a ConsumerGroupHeartbeat joining a classic group that has members (protocol
  type ``consumer``) turns it into a consumer group. Its classic members stay, with the
  subscription from their JoinGroup metadata and the partitions of their last SyncGroup, at a
  member epoch equal to the classic generation; the new member's arrival bumps the group epoch
  and the server-side assignor computes the target as for any consumer group.
* **classic members in a consumer group** speak JoinGroup/SyncGroup/Heartbeat/LeaveGroup as
  before, answered by the consumer group's state (Kafka's classicGroupJoinToConsumerGroup and
  friends): a JoinGroup is answered at once, reconciled like a heartbeat with the owned
  partitions of its subscription (an eager member owns none when it rejoins) and the
  generation is the member epoch; there is no leader, SyncGroup hands out the member's
  assignment as a ConsumerProtocolAssignment; Heartbeat answers REBALANCE_IN_PROGRESS until
  the member is reconciled to the target, which makes it rejoin.
* **downgrade**: when the last member using the consumer protocol leaves and classic members
  remain, the group becomes a classic group again with those members and their partitions at
  generation = group epoch, and a rebalance starts so the classic protocol takes over.
"""
from __future__ import annotations

import logging
import struct
import uuid
from dataclasses import dataclass
from typing import Callable

from kio.schema.errors import ErrorCode

from core.groups.consumer_group import ConsumerGroup, ConsumerGroups, ConsumerMember, MemberState
from core.groups.group import Group, GroupState, Member
from core.groups.results import JoinResult, SyncResult
from core.groups.subscriptions import CONSUMER_PROTOCOL

log = logging.getLogger(__name__)

TopicPartitions = dict[str, set[int]]
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


# --- ConsumerProtocol (the classic consumer's embedded protocol) -----------------------------

class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = bytes(data), 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return v

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return v

    def string(self) -> str:
        n = self.i16()
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("string runs past the data")
        self.pos += n
        return self.data[self.pos - n:self.pos].decode()

    def skip_bytes(self) -> None:
        n = self.i32()
        if n > 0:
            self.pos += n

    def partitions(self) -> TopicPartitions:
        out: TopicPartitions = {}
        for _ in range(self.i32()):
            topic = self.string()
            out.setdefault(topic, set()).update(self.i32() for _ in range(self.i32()))
        return out

    @property
    def more(self) -> bool:
        return self.pos < len(self.data)


def decode_subscription(metadata: bytes) -> tuple[list[str], TopicPartitions]:
    """(topics, owned partitions) of a ConsumerProtocolSubscription (owned: v1+, else none)."""
    try:
        r = _Reader(metadata)
        version = r.i16()
        topics = [r.string() for _ in range(r.i32())]
        r.skip_bytes()  # user data
        owned = r.partitions() if version >= 1 and r.more else {}
        return topics, owned
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a consumer subscription: {exc}") from None


def decode_assignment(data: bytes) -> TopicPartitions:
    """The partitions of a ConsumerProtocolAssignment (empty bytes: none)."""
    if not data:
        return {}
    try:
        r = _Reader(data)
        r.i16()
        return {t: ps for t, ps in r.partitions().items() if ps}
    except (struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"not a consumer assignment: {exc}") from None


def encode_assignment(parts: TopicPartitions) -> bytes:
    """A ConsumerProtocolAssignment v0 with no user data."""
    out = [_I16.pack(0), _I32.pack(len([t for t in parts if parts[t]]))]
    for topic in sorted(parts):
        if not parts[topic]:
            continue
        name = topic.encode()
        out += [_I16.pack(len(name)), name, _I32.pack(len(parts[topic]))]
        out += [_I32.pack(p) for p in sorted(parts[topic])]
    out.append(_I32.pack(-1))
    return b"".join(out)


@dataclass
class ClassicMembership:
    """What a classic member brought along into a consumer group."""
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0] if self.protocols else ""


class Migration:
    """The classic protocol spoken to consumer groups, and the conversions both ways.

    ``consumer`` is the ConsumerGroups table, ``classic`` the classic coordinator's table;
    ``prepare_rebalance(group)`` starts a classic rebalance (after a downgrade)."""

    def __init__(self, consumer: ConsumerGroups, classic: dict[str, Group], clock: Callable[[], float],
                 prepare_rebalance: Callable[[Group], None]):
        self.consumer = consumer
        self.classic = classic
        self.clock = clock
        self.prepare_rebalance = prepare_rebalance

    # --- upgrade ---------------------------------------------------------------------------
    def can_upgrade(self, classic: Group) -> bool:
        return classic.protocol_type == CONSUMER_PROTOCOL and all(
            m.protocol_type == CONSUMER_PROTOCOL for m in classic.members.values())

    def upgrade(self, classic: Group) -> ConsumerGroup:
        """Turn a classic group with members into a consumer group hosting them."""
        group = ConsumerGroup(classic.group_id, group_epoch=classic.generation_id,
                              assignment_epoch=classic.generation_id)
        now = self.clock()
        for m in classic.members.values():
            # anyone waiting for a join or sync answer of the old generation rejoins
            for attr in ("join_callback", "sync_callback"):
                callback = getattr(m, attr)
                if callback is not None:
                    setattr(m, attr, None)
                    callback(JoinResult.failed(ErrorCode.rebalance_in_progress, m.member_id)
                             if attr == "join_callback" else SyncResult.failed(ErrorCode.rebalance_in_progress))
            topics = _topics_of(m, classic.protocol_name)
            assigned = _safe(decode_assignment, m.assignment) if classic.is_(GroupState.STABLE) else {}
            member = ConsumerMember(m.member_id, instance_id=m.group_instance_id, client_id=m.client_id,
                                    client_host=m.client_host, member_epoch=classic.generation_id,
                                    previous_member_epoch=classic.generation_id - 1, state=MemberState.STABLE,
                                    subscribed_topic_names=topics, rebalance_timeout_ms=m.rebalance_timeout_ms,
                                    assigned=assigned, last_heartbeat=now)
            member.classic = ClassicMembership(list(m.protocols), m.session_timeout_ms, m.rebalance_timeout_ms)
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.static_members[m.group_instance_id] = m.member_id
            group.target[m.member_id] = {t: set(ps) for t, ps in assigned.items()}
        existing = self.consumer.topics()
        group.topics = {t: existing[t] for m in group.members.values() for t in m.subscribed(existing)}
        del self.classic[classic.group_id]
        log.info("classic group %s with %d member(s) upgraded to a consumer group at epoch %d",
                 classic.group_id, len(group.members), group.group_epoch)
        return group

    # --- classic requests to a consumer group ---------------------------------------------------
    def join(self, group, member_id: str, instance_id: str | None, client_id: str, client_host: str,
             protocol_type: str, protocols: list[tuple[str, bytes]], session_ms: int, rebalance_ms: int,
             require_known: bool) -> JoinResult:
        if protocol_type != CONSUMER_PROTOCOL or not protocols:
            return JoinResult.failed(ErrorCode.inconsistent_group_protocol, member_id)
        if not member_id and instance_id:
            member_id = group.static_members.get(instance_id, "")
        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if require_known:
                return JoinResult.failed(ErrorCode.member_id_required, member_id)
        member = group.members.get(member_id)
        now = self.clock()
        try:
            topics, owned = decode_subscription(protocols[0][1])
        except ValueError:
            return JoinResult.failed(ErrorCode.inconsistent_group_protocol, member_id)
        bump = False
        if member is None:
            member = ConsumerMember(member_id, instance_id=instance_id, rebalance_timeout_ms=rebalance_ms)
            group.members[member_id] = member
            if instance_id:
                group.static_members[instance_id] = member_id
            bump = True
            log.info("group %s: classic member %s joins the consumer group", group.group_id, member_id)
        elif member.classic is None:
            return JoinResult.failed(ErrorCode.inconsistent_group_protocol, member_id)
        member.classic = ClassicMembership(list(protocols), session_ms, rebalance_ms)
        member.client_id, member.client_host = client_id, client_host
        member.rebalance_timeout_ms = rebalance_ms
        member.last_heartbeat = now
        if topics != member.subscribed_topic_names:
            member.subscribed_topic_names = topics
            bump = True
        self.consumer.refresh(group, bump)
        # an eager member owns nothing when it rejoins; a cooperative one lists what it kept
        owned = {t: ps for t, ps in owned.items() if ps} if owned else {}
        for _ in range(2):  # a revocation the join itself completes goes on to the next assignment
            self.consumer.reconcile(group, member, owned, now)
        return JoinResult(ErrorCode.none, member.member_epoch, CONSUMER_PROTOCOL, member.classic.protocol_name,
                          "", member_id, [], False)

    def _member(self, group, member_id: str, instance_id: str | None, generation: int | None):
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return None, ErrorCode.unknown_member_id
        if instance_id is not None and member.instance_id != instance_id:
            return None, ErrorCode.fenced_instance_id
        if generation is not None and generation != member.member_epoch:
            return None, ErrorCode.illegal_generation
        return member, None

    def sync(self, group, generation: int, member_id: str, instance_id: str | None, protocol_type: str | None,
             protocol_name: str | None) -> SyncResult:
        member, error = self._member(group, member_id, instance_id, generation)
        if error is not None:
            return SyncResult.failed(error)
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL) or \
                (protocol_name is not None and protocol_name != member.classic.protocol_name):
            return SyncResult.failed(ErrorCode.inconsistent_group_protocol)
        member.last_heartbeat = self.clock()
        return SyncResult(ErrorCode.none, CONSUMER_PROTOCOL, member.classic.protocol_name,
                          encode_assignment(member.assigned))

    def heartbeat(self, group, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        member, error = self._member(group, member_id, instance_id, generation)
        if error is not None:
            return error
        member.last_heartbeat = self.clock()
        reconciled = member.state == MemberState.STABLE and member.member_epoch == group.assignment_epoch
        return ErrorCode.none if reconciled else ErrorCode.rebalance_in_progress

    def leave(self, group, members: list[tuple[str | None, str | None]]):
        results = []
        for member_id, instance_id in members:
            if not member_id and instance_id:
                member_id = group.static_members.get(instance_id)
            member, error = self._member(group, member_id or "", instance_id, None)
            if error is not None:
                results.append((member_id, instance_id, error))
                continue
            log.info("group %s: classic member %s leaves the consumer group", group.group_id, member_id)
            self.consumer.remove_member(group, member)
            results.append((member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    # --- downgrade ------------------------------------------------------------------------------
    def maybe_downgrade(self, group) -> bool:
        """Only classic members left: the group is a classic one again, rebalancing."""
        if not group.members or any(m.classic is None for m in group.members.values()):
            return False
        classic = Group(group.group_id, generation_id=group.group_epoch, protocol_type=CONSUMER_PROTOCOL)
        now = self.clock()
        for m in group.members.values():
            member = Member(m.member_id, m.instance_id, m.client_id, m.client_host, CONSUMER_PROTOCOL,
                            m.classic.protocols, m.classic.session_timeout_ms, m.classic.rebalance_timeout_ms, now,
                            assignment=encode_assignment(m.assigned))
            classic.add(member)
        classic.protocol_name = classic.select_protocol()
        classic.state = GroupState.STABLE
        del self.consumer.groups[group.group_id]
        self.classic[group.group_id] = classic
        log.info("consumer group %s has only classic members left: downgraded to a classic group, rebalancing",
                 group.group_id)
        self.prepare_rebalance(classic)
        return True


def _topics_of(member: Member, protocol: str | None) -> list[str]:
    try:
        return decode_subscription(member.metadata(protocol))[0]
    except ValueError:
        return []


def _safe(decode, data: bytes) -> TopicPartitions:
    try:
        return decode(data)
    except ValueError:
        return {}
