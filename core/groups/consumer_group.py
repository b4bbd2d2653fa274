"""KIP-848 consumer groups: ConsumerGroupHeartbeat's state machine, as Kafka 4's GroupMetadataManager.

Three epochs drive a group:

* the **group epoch** goes up by one whenever membership, a member's subscription or the
  metadata of a subscribed topic (its partition count, its existence) changes;
* the **assignment epoch** is the group epoch the current *target assignment* was computed
  at, by the server-side assignor (``core.groups.assignors``) the members ask for, ``uniform``
  by default; it is recomputed at once here, so it never lags behind for long;
* each member's **member epoch** reaches the assignment epoch by *incremental reconciliation*
  (Kafka's CurrentAssignmentBuilder), one heartbeat at a time:

  - partitions the member holds but the target gives away are revoked first: the member is
    answered with its assignment minus them and stays in ``UNREVOKED_PARTITIONS`` at its old
    epoch until a heartbeat's owned partitions show them gone (or its rebalance timeout ends,
    which fences it);
  - partitions the target gives it are handed over only once no other member holds them
    (assigned or pending revocation); until then it is ``UNRELEASED_PARTITIONS`` at the new
    epoch and picks them up on a later heartbeat;
  - with nothing to revoke and nothing unreleased it is ``STABLE`` at the assignment epoch.

A member joins with epoch 0 (its member id made by the client from ConsumerGroupHeartbeat v1,
by the coordinator for v0 when left empty), leaves with -1, and a static member
(``group.instance.id``) leaves with -2: it keeps its place and partitions, without a new group
epoch, until it rejoins under a new member id or its session expires. Members silent for the
session timeout (``group.consumer.session.timeout.ms``) are removed.

Subscriptions are topic names or one regular expression (RE2/J in Kafka; Python's ``re``,
whole-name match, here), resolved against the topics that exist on every heartbeat, so topics
created later and partitions added later reach the assignment. Outcomes are ErrorCode values.
Thread-safety: none; the reactor thread only.
"""
from __future__ import annotations

import enum
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

from kio.schema.errors import ErrorCode

from core.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR
from core.groups.epochs import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, EpochGroups, check_epoch, forget, leaving
from core.groups.epochs import Fail as _Fail, copy_sets as _copy, flat as _flat, nest as _nest
from core.groups.group import GroupState
from core.groups.results import GroupDescription, MemberDescription

log = logging.getLogger(__name__)

TopicPartitions = dict[str, set[int]]
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    assigned: TopicPartitions = field(default_factory=dict)
    pending_revocation: TopicPartitions = field(default_factory=dict)
    last_heartbeat: float = 0.0
    revocation_deadline: float | None = None
    classic: object = None  # a classic member hosted by this group (core.groups.migration.ClassicMembership)

    @property
    def session_timeout_ms(self) -> int | None:
        """A classic member's own session timeout; None: the group's."""
        return None if self.classic is None else self.classic.session_timeout_ms

    def subscribed(self, topics: Mapping[str, int]) -> set[str]:
        """The existing topics this member subscribes to (names, or the regex's whole-name matches)."""
        out = {t for t in self.subscribed_topic_names if t in topics}
        if self.subscribed_topic_regex:
            pattern = _compile(self.subscribed_topic_regex)
            out.update(t for t in topics if t not in INTERNAL_TOPICS and pattern.fullmatch(t))
        return out


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, TopicPartitions] = field(default_factory=dict)  # member id -> target partitions
    topics: dict[str, int] = field(default_factory=dict)  # subscribed topic -> partitions, at group_epoch
    topic_ids: dict[str, str] = field(default_factory=dict)  # and their ids: a recreated topic is a change
    assignor: str = DEFAULT_ASSIGNOR

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroupState: Empty, Assigning, Reconciling or Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch not in (self.assignment_epoch, STATIC_LEAVE_EPOCH) or m.state != MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owners(self) -> dict[tuple[str, int], str]:
        """(topic, partition) -> the member holding it now (assigned or not yet revoked)."""
        out = {}
        for m in self.members.values():
            for parts in (m.assigned, m.pending_revocation):
                for topic, ps in parts.items():
                    for p in ps:
                        out[(topic, p)] = m.member_id
        return out


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: TopicPartitions | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""
    api_version: int = 1


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: TopicPartitions | None = None  # None: unchanged, not sent


_PATTERNS: dict[str, re.Pattern] = {}


def _compile(regex: str) -> re.Pattern:
    pattern = _PATTERNS.get(regex)
    if pattern is None:
        pattern = _PATTERNS[regex] = re.compile(regex)
    return pattern


class ConsumerGroups(EpochGroups):
    """Every KIP-848 group of one coordinator. ``classic`` is the classic coordinator's group
    table: a group id is one or the other, and an empty classic group is taken over on join."""

    def __init__(self, topics: Callable[[], Mapping[str, int]], classic: dict, clock: Callable[[], float] = time.time,
                 *, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000):
        self.topics = topics
        self.classic = classic
        self.clock = clock
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # per group: the group configs consumer.session.timeout.ms / consumer.heartbeat.interval.ms
        self.session_timeout_for: Callable[[str], int] = lambda group_id: self.session_timeout_ms
        self.heartbeat_interval_for: Callable[[str], int] = lambda group_id: self.heartbeat_interval_ms
        self.groups: dict[str, ConsumerGroup] = {}
        self.is_share_group: Callable[[str], bool] = lambda group_id: False  # share group ids are taken
        self.topic_ids: Callable[[], Mapping[str, str]] = lambda: {}  # topic name -> its current id
        self.migration = None  # core.groups.migration.Migration: classic members and conversions
        # a group may have changed (or gone): the coordinator keeps it in __consumer_offsets
        self.on_changed: Callable[[str], None] = lambda group_id: None

    # --- ConsumerGroupHeartbeat ------------------------------------------------------------
    def heartbeat(self, hb: HeartbeatRequest) -> HeartbeatResult:
        try:
            return self._heartbeat(hb)
        except _Fail as fail:
            return HeartbeatResult(fail.error, fail.message, hb.member_id or None, -1, 0)
        finally:
            if hb.group_id:
                self.on_changed(hb.group_id)

    def _validate(self, hb: HeartbeatRequest) -> None:
        bad = ErrorCode.invalid_request
        if not hb.group_id:
            raise _Fail(bad, "GroupId can't be empty.")
        if hb.member_epoch < STATIC_LEAVE_EPOCH:
            raise _Fail(bad, f"MemberEpoch {hb.member_epoch} is invalid.")
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms is None or hb.rebalance_timeout_ms <= 0:
                raise _Fail(bad, "RebalanceTimeoutMs must be provided in first request.")
            if hb.owned is None or _flat(hb.owned):
                raise _Fail(bad, "TopicPartitions must be empty when (re-)joining.")
            if hb.subscribed_topic_names is None and hb.subscribed_topic_regex is None:
                raise _Fail(bad, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
            if not hb.member_id and hb.api_version >= 1:
                raise _Fail(bad, "MemberId can't be empty.")
        elif not hb.member_id:
            raise _Fail(bad, "MemberId can't be empty.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH and not hb.instance_id:
            raise _Fail(bad, "InstanceId can't be null.")
        if hb.server_assignor is not None and hb.server_assignor not in ASSIGNORS:
            raise _Fail(ErrorCode.unsupported_assignor, f"ServerAssignor {hb.server_assignor} is not supported. "
                                                        f"Supported assignors: {', '.join(sorted(ASSIGNORS))}.")
        if hb.subscribed_topic_regex:
            try:
                _compile(hb.subscribed_topic_regex)
            except re.error as exc:
                raise _Fail(ErrorCode.invalid_regular_expression,
                            f"SubscribedTopicRegex {hb.subscribed_topic_regex} is not a valid regular expression: "
                            f"{exc}") from None

    def _group_for(self, hb: HeartbeatRequest) -> ConsumerGroup:
        group = self.groups.get(hb.group_id)
        if group is not None:
            return group
        if self.is_share_group(hb.group_id):
            raise _Fail(ErrorCode.group_id_not_found, f"Group {hb.group_id} is a share group, not a consumer group.")
        classic = self.classic.get(hb.group_id)
        if classic is not None and not classic.is_(GroupState.EMPTY, GroupState.DEAD) and hb.member_epoch == 0 \
                and self.migration is not None and self.migration.can_upgrade(classic):
            group = self.groups[hb.group_id] = self.migration.upgrade(classic)  # online upgrade (KIP-848)
            return group
        if classic is not None and not classic.is_(GroupState.EMPTY, GroupState.DEAD):
            raise _Fail(ErrorCode.group_id_not_found,
                        f"Group {hb.group_id} is a classic group with members; it cannot become a consumer group "
                        f"until they leave.")
        if hb.member_epoch != 0:
            raise _Fail(ErrorCode.unknown_member_id, f"Consumer group {hb.group_id} has no member {hb.member_id}.")
        if classic is not None:  # an empty classic group becomes a consumer group; its offsets stay
            del self.classic[hb.group_id]
            log.info("empty classic group %s becomes a consumer group", hb.group_id)
        group = self.groups[hb.group_id] = ConsumerGroup(hb.group_id)
        return group

    def _heartbeat(self, hb: HeartbeatRequest) -> HeartbeatResult:
        self._validate(hb)
        group = self._group_for(hb)
        now = self.clock()
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, hb)
        bump = False
        if hb.member_epoch == 0:
            member, bump = self._join(group, hb)
        else:
            member = group.members.get(hb.member_id)
            if member is None:
                raise _Fail(ErrorCode.unknown_member_id, f"Member {hb.member_id} is not a member of group "
                                                         f"{group.group_id}.")
            if hb.instance_id is not None and member.instance_id not in (None, hb.instance_id):
                raise _Fail(ErrorCode.fenced_instance_id, f"Member {hb.member_id} is not instance {hb.instance_id}.")
            self._check_epoch(member, hb)
        before = _copy(member.assigned)
        member.last_heartbeat = now
        if hb.rebalance_timeout_ms and hb.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        member.client_id, member.client_host = hb.client_id, hb.client_host
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        if hb.server_assignor is not None:
            member.server_assignor = hb.server_assignor
        if hb.subscribed_topic_names is not None and list(hb.subscribed_topic_names) != member.subscribed_topic_names:
            member.subscribed_topic_names = list(hb.subscribed_topic_names)
            bump = True
        if hb.subscribed_topic_regex is not None and (hb.subscribed_topic_regex or None) != member.subscribed_topic_regex:
            member.subscribed_topic_regex = hb.subscribed_topic_regex or None
            bump = True
        self.refresh(group, bump)
        self.reconcile(group, member, hb.owned, now)
        send = (hb.member_epoch == 0 or member.assigned != before
                or (hb.owned is not None and _flat(hb.owned) != _flat(member.assigned)))
        return HeartbeatResult(ErrorCode.none, None, member.member_id, member.member_epoch,
                               self.heartbeat_interval_for(group.group_id),
                               _copy(member.assigned) if send else None)

    def _join(self, group: ConsumerGroup, hb: HeartbeatRequest) -> tuple[ConsumerMember, bool]:
        member_id = hb.member_id or uuid.uuid4().hex  # v0 only: v1 clients make their own id
        old_id = group.static_members.get(hb.instance_id) if hb.instance_id else None
        if old_id is not None and old_id != member_id:
            old = group.members[old_id]
            if old.member_epoch != STATIC_LEAVE_EPOCH:
                raise _Fail(ErrorCode.unreleased_instance_id,
                            f"Static member {old_id} with instance id {hb.instance_id} is present in group "
                            f"{group.group_id}.")
            # the restarted static member takes the place, epoch and partitions of the one that left
            del group.members[old_id]
            old.member_id = member_id
            old.member_epoch = old.previous_member_epoch
            group.members[member_id] = old
            group.static_members[hb.instance_id] = member_id
            if old_id in group.target:
                group.target[member_id] = group.target.pop(old_id)
            return old, False
        member = group.members.get(member_id)
        if member is not None:  # the same id joins again: it starts over with nothing
            member.assigned, member.pending_revocation = {}, {}
            member.member_epoch, member.state, member.revocation_deadline = 0, MemberState.STABLE, None
            return member, False
        member = ConsumerMember(member_id, instance_id=hb.instance_id, rebalance_timeout_ms=hb.rebalance_timeout_ms)
        group.members[member_id] = member
        if hb.instance_id:
            group.static_members[hb.instance_id] = member_id
        log.info("group %s: member %s joins", group.group_id, member_id)
        return member, True

    @staticmethod
    def _check_epoch(member: ConsumerMember, hb: HeartbeatRequest) -> None:
        check_epoch("consumer", member, hb.member_epoch, hb.owned, member.assigned)

    def _leave(self, group: ConsumerGroup, hb: HeartbeatRequest) -> HeartbeatResult:
        member, gone = leaving(group, hb.member_id, hb.member_epoch, hb.instance_id, self.clock())
        if not gone:
            log.info("group %s: static member %s (%s) leaves for now", group.group_id, hb.member_id, hb.instance_id)
            return HeartbeatResult(ErrorCode.none, None, hb.member_id, STATIC_LEAVE_EPOCH, 0)
        log.info("group %s: member %s leaves", group.group_id, hb.member_id)
        self.remove_member(group, member)
        return HeartbeatResult(ErrorCode.none, None, hb.member_id, LEAVE_EPOCH, 0)

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        forget(group, member)
        self.refresh(group, True)
        if self.migration is not None:
            self.migration.maybe_downgrade(group)  # only classic members left: a classic group again

    # --- target assignment and reconciliation -------------------------------------------------
    def refresh(self, group: ConsumerGroup, bump: bool) -> None:
        """Bump the group epoch on a membership/subscription change or when a subscribed topic's
        metadata changed; then compute a new target assignment if the epoch moved."""
        existing = self.topics()
        wanted: set[str] = set()
        subs = {}
        for m in group.members.values():
            subs[m.member_id] = m.subscribed(existing)
            wanted |= subs[m.member_id]
        metadata = {t: existing[t] for t in wanted}
        ids = self.topic_ids()
        metadata_ids = {t: ids.get(t, "") for t in metadata}
        if metadata != group.topics or metadata_ids != group.topic_ids:
            group.topics, group.topic_ids = metadata, metadata_ids
            bump = True
        if bump:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            votes: dict[str, int] = {}
            for m in group.members.values():
                if m.server_assignor:
                    votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
            group.assignor = max(sorted(votes), key=lambda a: votes[a]) if votes else DEFAULT_ASSIGNOR
            group.target = ASSIGNORS[group.assignor](subs, metadata, group.target)
            group.assignment_epoch = group.group_epoch
            log.info("group %s: epoch %d, target assignment by %s: %s", group.group_id, group.group_epoch,
                     group.assignor, {m: {t: sorted(ps) for t, ps in a.items()} for m, a in group.target.items()})

    def reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: TopicPartitions | None,
                   now: float) -> None:
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _flat(owned) & _flat(member.pending_revocation):
                return  # still revoking
            member.pending_revocation = {}
            member.revocation_deadline = None
        elif member.state == MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        self._next_assignment(group, member, now)

    def _next_assignment(self, group: ConsumerGroup, member: ConsumerMember, now: float) -> None:
        target = _flat(group.target.get(member.member_id))
        assigned = _flat(member.assigned)
        owners = group.owners()
        keep = assigned & target
        revoke = assigned - target
        wanted = target - assigned
        free = {tp for tp in wanted if owners.get(tp, member.member_id) == member.member_id}
        if revoke:
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.assigned, member.pending_revocation = _nest(keep), _nest(revoke)
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
            return
        epoch = group.assignment_epoch
        if member.member_epoch != epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, epoch
        member.assigned = _nest(keep | free)
        member.state = MemberState.UNRELEASED_PARTITIONS if wanted - free else MemberState.STABLE

    # --- timers -------------------------------------------------------------------------------
    def tick(self) -> None:
        now = self.clock()
        for group in list(self.groups.values()):
            removed = False
            for member in list(group.members.values()):
                if group.group_id not in self.groups:
                    break  # downgraded to a classic group by a removal
                timeout_ms = member.session_timeout_ms or self.session_timeout_for(group.group_id)
                if now >= member.last_heartbeat + timeout_ms / 1000:
                    log.info("group %s: member %s's session timed out", group.group_id, member.member_id)
                    self.remove_member(group, member)
                    removed = True
                elif member.revocation_deadline is not None and now >= member.revocation_deadline:
                    log.info("group %s: member %s did not revoke its partitions in time and is fenced",
                             group.group_id, member.member_id)
                    self.remove_member(group, member)
                    removed = True
            if removed:
                self.on_changed(group.group_id)

    # --- admin --------------------------------------------------------------------------------
    def describe_classic(self, group_id: str) -> GroupDescription:
        """DescribeGroups of a consumer group: its state, type ``consumer``, assignor, members
        (without classic metadata or assignment bytes; ConsumerGroupDescribe has those)."""
        group = self.groups[group_id]
        members = [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host, b"", b"")
                   for m in group.members.values()]
        return GroupDescription(ErrorCode.none, group.state, "consumer", group.assignor, members, group_id)

    def take_over_for_classic(self, group_id: str) -> bool:
        """A classic JoinGroup: False when this is a live consumer group (INCONSISTENT_GROUP_PROTOCOL);
        an empty consumer group is dropped (its offsets stay) and the classic group may start."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        del self.groups[group_id]
        self.on_changed(group_id)
        return True
