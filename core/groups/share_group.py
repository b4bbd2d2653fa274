"""KIP-932 share groups: ShareGroupHeartbeat's membership, as Kafka 4's share-group coordinator.

A share group only says *who* consumes *which partitions*; what each member may read is
decided per record by the share partitions (``routing.share``), so partitions are not
divided among members the way a consumer group divides them. Here every member is assigned
every partition of the topics it subscribes to: records still go to one member at a time
(the share partition acquires each for one member), and a partition never sits idle while
another member has nothing to do. Kafka's SimpleAssignor may give a member fewer partitions
than that when there are more partitions than members; a client cannot tell the difference
except by which broker connections it opens.

Epochs: the **group epoch** goes up whenever a member joins or leaves, a subscription
changes, or a subscribed topic appears, vanishes or gains partitions; a member's epoch is set
to the group epoch each time its assignment is sent (share groups have no revocation step: a
partition can be shared, so nothing waits for another member to let go). A member joins with
epoch 0 and a member id it made itself (ShareGroupHeartbeat v1), leaves with -1, and is
removed when silent for ``share.session.timeout.ms``. ``on_member_gone`` lets the share
partitions release what that member had acquired. Outcomes are ErrorCode values.
Thread-safety: none; the reactor thread only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from kio.schema.errors import ErrorCode

from core.groups.epochs import delete_empty
from core.groups.results import GroupDescription, MemberDescription

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
ASSIGNOR = "simple"
TopicPartitions = dict[str, set[int]]


@dataclass(eq=False)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    subscribed_topic_names: list[str] = field(default_factory=list)
    assigned: TopicPartitions = field(default_factory=dict)
    last_heartbeat: float = 0.0


@dataclass(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    topics: dict[str, int] = field(default_factory=dict)  # subscribed topic -> partitions, at group_epoch
    topic_ids: dict[str, str] = field(default_factory=dict)  # and their ids: a recreated topic is a change

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState: Empty or Stable (assignment is immediate here)."""
        return "Stable" if self.members else "Empty"

    @property
    def assignment_epoch(self) -> int:
        return self.group_epoch


@dataclass(frozen=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged, not sent


class ShareGroups:
    """Every share group of one coordinator. ``other_type(group_id)`` names a classic or consumer
    group of that id ("classic"/"consumer"), which a share group may not take over."""

    def __init__(self, topics: Callable[[], Mapping[str, int]], other_type: Callable[[str], str | None],
                 clock: Callable[[], float] = time.time, *, session_timeout_ms: Callable[[str], int] = lambda g: 45_000,
                 heartbeat_interval_ms: Callable[[str], int] = lambda g: 5_000):
        self.topics = topics
        self.other_type = other_type
        self.clock = clock
        self.session_timeout_ms = session_timeout_ms  # per group (group config share.session.timeout.ms)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, ShareGroup] = {}
        self.on_member_gone: Callable[[str, str], None] = lambda group_id, member_id: None
        self.topic_ids: Callable[[], Mapping[str, str]] = lambda: {}  # topic name -> its current id

    # --- ShareGroupHeartbeat ------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None = None,
                  subscribed_topic_names: list[str] | None = None, client_id: str = "",
                  client_host: str = "") -> ShareHeartbeatResult:
        fail = self._check(group_id, member_id, member_epoch, subscribed_topic_names)
        if fail is not None:
            return ShareHeartbeatResult(fail[0], fail[1], member_id or None)
        group = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            if group is not None and member_id in group.members:
                self._remove(group, member_id, "left")
            return ShareHeartbeatResult(ErrorCode.none, None, member_id, LEAVE_EPOCH)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        interval = self.heartbeat_interval_ms(group_id)
        changed = False
        if member is None:
            if member_epoch != 0:
                return ShareHeartbeatResult(ErrorCode.unknown_member_id,
                                            f"member {member_id} is not in share group {group_id}", member_id)
            member = group.members[member_id] = ShareMember(member_id, rack_id, client_id, client_host)
            member.subscribed_topic_names = list(subscribed_topic_names or [])
            changed = True
            log.info("share group %s: member %s joined", group_id, member_id)
        elif member_epoch not in (0, member.member_epoch):
            return ShareHeartbeatResult(ErrorCode.fenced_member_epoch,
                                        f"member {member_id} of share group {group_id} is at epoch "
                                        f"{member.member_epoch}, not {member_epoch}", member_id)
        elif subscribed_topic_names is not None and list(subscribed_topic_names) != member.subscribed_topic_names:
            member.subscribed_topic_names = list(subscribed_topic_names)
            changed = True
        member.last_heartbeat = self.clock()
        member.rack_id = rack_id if rack_id is not None else member.rack_id
        if self._refresh_topics(group) or changed:
            group.group_epoch += 1
        target = self._assignment(group, member)
        if member.member_epoch != group.group_epoch or target != member.assigned or member_epoch == 0:
            member.assigned = target
            member.member_epoch = group.group_epoch
            return ShareHeartbeatResult(ErrorCode.none, None, member_id, member.member_epoch, interval,
                                        {t: set(ps) for t, ps in target.items()})
        return ShareHeartbeatResult(ErrorCode.none, None, member_id, member.member_epoch, interval)

    def _check(self, group_id: str, member_id: str, epoch: int, names) -> tuple[ErrorCode, str] | None:
        if not group_id:
            return ErrorCode.invalid_request, "GroupId can't be empty."
        if not member_id:
            return ErrorCode.invalid_request, "MemberId can't be empty."
        if epoch < LEAVE_EPOCH:
            return ErrorCode.invalid_request, f"MemberEpoch {epoch} is invalid."
        if epoch == 0 and not names:
            return ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request."
        kind = self.other_type(group_id)
        if kind is not None:
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group (it is a {kind} group)."
        return None

    def _refresh_topics(self, group: ShareGroup) -> bool:
        """True when a subscribed topic appeared, vanished or grew (a new group epoch is due)."""
        existing = self.topics()
        wanted = {t for m in group.members.values() for t in m.subscribed_topic_names}
        now = {t: existing[t] for t in wanted if t in existing}
        ids = self.topic_ids()
        now_ids = {t: ids.get(t, "") for t in now}
        if now == group.topics and now_ids == group.topic_ids:
            return False
        group.topics, group.topic_ids = now, now_ids
        return True

    def _assignment(self, group: ShareGroup, member: ShareMember) -> TopicPartitions:
        return {t: set(range(group.topics[t])) for t in member.subscribed_topic_names if t in group.topics}

    def _remove(self, group: ShareGroup, member_id: str, why: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        log.info("share group %s: member %s %s", group.group_id, member_id, why)
        self.on_member_gone(group.group_id, member_id)

    # --- timers and admin --------------------------------------------------------------------
    def tick(self) -> None:
        now = self.clock()
        for group in list(self.groups.values()):
            timeout = self.session_timeout_ms(group.group_id) / 1000
            for member in list(group.members.values()):
                if now - member.last_heartbeat >= timeout:
                    self._remove(group, member.member_id, "timed out (share.session.timeout.ms)")

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def describe_classic(self, group_id: str) -> GroupDescription:
        """DescribeGroups of a share group: state, protocol type ``share``, members (no metadata)."""
        group = self.groups[group_id]
        members = [MemberDescription(m.member_id, None, m.client_id, m.client_host, b"", b"")
                   for m in group.members.values()]
        return GroupDescription(ErrorCode.none, group.state, "share", ASSIGNOR, members, group_id)

    def delete(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members; None: not a share group."""
        return delete_empty(self.groups, group_id)
