"""KIP-1071 streams groups: StreamsGroupHeartbeat's state machine, the sibling of KIP-848's
consumer groups (core.groups.consumer_group), for Kafka Streams with ``group.protocol=streams``.

The broker holds the application's topology (core.groups.streams_topology: sent by the first
member, replaced by a member joining with a higher topology epoch), creates its internal topics
and assigns *tasks* (subtopology, partition) instead of partitions, with the same three epochs
as a consumer group:

* the **group epoch** goes up on a member joining or leaving, a new topology (a member joining
  with a higher topology epoch, or the first member of an empty group), or a change of the
  topics the topology involves (their existence or partition counts);
* the **assignment epoch** is the group epoch the target assignment
  (core.groups.streams_assignor: active and standby tasks) was computed at, at once;
* each **member epoch** reaches it by reconciliation: active tasks the target moves away are
  revoked first (the member stays at its epoch in ``UNREVOKED_TASKS`` until a heartbeat's owned
  active tasks show them gone, or its rebalance timeout fences it), an active task another member
  still holds is handed over only once released (``UNRELEASED_TASKS``); standby tasks follow the
  target directly.

Until the topology can be configured (source topics missing, internal topics being created,
partition counts that disagree) the group is ``NotReady``, members hold no tasks, and every
heartbeat answer carries the status saying why. Members join with epoch 0, leave with -1 (-2:
a static member that will come back), and are removed after the session timeout
(``group.streams.session.timeout.ms``). A member asking for ``ShutdownApplication`` makes every
member's answers carry ``SHUTDOWN_APPLICATION`` until the group is empty.
Thread-safety: none; the reactor thread only.
"""
from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from kio.schema.errors import ErrorCode

from core.groups.streams_assignor import assign as assign_tasks
from core.groups.epochs import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, EpochGroups, check_epoch, forget, leaving
from core.groups.epochs import Fail as _Fail, copy_sets as _copy, flat as _flat, nest as _nest
from core.groups.group import GroupState
from core.groups.streams_topology import SHUTDOWN_APPLICATION, STALE_TOPOLOGY, Configured, Topology, configure

log = logging.getLogger(__name__)

Tasks = dict[str, set[int]]  # subtopology id -> partitions


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_TASKS = "unrevoked_tasks"
    UNRELEASED_TASKS = "unreleased_tasks"


@dataclass(eq=False)
class StreamsMember:
    member_id: str
    process_id: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    endpoint: tuple[str, int] | None = None  # application.server, for interactive queries
    client_tags: dict[str, str] = field(default_factory=dict)
    topology_epoch: int = 0
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rebalance_timeout_ms: int = 300_000
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    revoking: Tasks = field(default_factory=dict)  # active tasks given away, not yet released
    last_heartbeat: float = 0.0
    revocation_deadline: float | None = None


@dataclass(eq=False)
class StreamsGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: Topology | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, tuple[Tasks, Tasks]] = field(default_factory=dict)  # member -> (active, standby)
    partitions: dict[str, int] = field(default_factory=dict)  # the involved topics at group_epoch
    configured: Configured | None = None  # not kept: recomputed from the topics on each heartbeat
    shutdown: bool = False

    @property
    def state(self) -> str:
        """Kafka's StreamsGroupState: Empty, NotReady, Assigning, Reconciling or Stable."""
        if not self.members:
            return "Empty"
        if self.configured is not None and not self.configured.ready:
            return "NotReady"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch not in (self.assignment_epoch, STATIC_LEAVE_EPOCH) or m.state != MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owners(self) -> dict[tuple[str, int], str]:
        """Active task -> the member running it now (assigned or not yet revoked)."""
        return {(s, p): m.member_id for m in self.members.values() for ts in (m.active, m.revoking)
                for s, ps in ts.items() for p in ps}


@dataclass
class StreamsHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: Topology | None = None
    active: Tasks | None = None  # None: unchanged since the last heartbeat
    standby: Tasks | None = None
    warmup: Tasks | None = None
    process_id: str | None = None
    endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] | None = None
    shutdown_application: bool = False
    endpoint_epoch: int = 0
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class StreamsResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    status: list[tuple[int, str]] | None = None
    active: Tasks | None = None  # None: unchanged, not sent (the three go together)
    standby: Tasks | None = None
    endpoint_epoch: int = 0
    endpoints: list[tuple[tuple[str, int], Tasks, Tasks]] | None = None  # (endpoint, active, standby)


class StreamsGroups(EpochGroups):
    """Every streams group of one coordinator. ``classic`` is the classic coordinator's group
    table; ``taken(group_id)`` says whether a consumer or share group has the id."""

    def __init__(self, topics: Callable[[], Mapping[str, int]], classic: dict, clock: Callable[[], float] = time.time,
                 *, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000, num_standby: int = 0):
        self.topics = topics
        self.classic = classic
        self.clock = clock
        self.session_timeout_for: Callable[[str], int] = lambda group_id: session_timeout_ms
        self.heartbeat_interval_for: Callable[[str], int] = lambda group_id: heartbeat_interval_ms
        self.num_standby_for: Callable[[str], int] = lambda group_id: num_standby
        self.groups: dict[str, StreamsGroup] = {}
        self.taken: Callable[[str], str | None] = lambda group_id: None  # "consumer" / "share" / None
        # internal topics: (name, partitions, replication factor or -1, configs) -> None; raises LogError
        self.create_topic: Callable[[str, int, int, dict], None] | None = None
        self.on_changed: Callable[[str], None] = lambda group_id: None
        # cluster mode: whether this broker coordinates the group now; a copy loaded from a replica
        # of its __consumer_offsets partition is not timed out here (nor creates topics)
        self.leads: Callable[[str], bool] = lambda group_id: True

    # --- StreamsGroupHeartbeat ------------------------------------------------------------
    def heartbeat(self, hb: StreamsHeartbeat) -> StreamsResult:
        try:
            return self._heartbeat(hb)
        except _Fail as fail:
            return StreamsResult(fail.error, fail.message, hb.member_id, -1, 0)
        finally:
            if hb.group_id:
                self.on_changed(hb.group_id)

    def _validate(self, hb: StreamsHeartbeat) -> None:
        bad = ErrorCode.invalid_request
        if not hb.group_id:
            raise _Fail(bad, "GroupId can't be empty.")
        if not hb.member_id:
            raise _Fail(bad, "MemberId can't be empty.")
        if hb.member_epoch < STATIC_LEAVE_EPOCH:
            raise _Fail(bad, f"MemberEpoch is {hb.member_epoch}, but must be greater than or equal to -2.")
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms is None or hb.rebalance_timeout_ms <= 0:
                raise _Fail(bad, "RebalanceTimeoutMs must be provided in first request.")
            if hb.topology is None:
                raise _Fail(bad, "Topology must be non-null when joining.")
            if not hb.process_id:
                raise _Fail(bad, "ProcessId can't be empty.")
            if _flat(hb.active) or _flat(hb.standby) or _flat(hb.warmup):
                raise _Fail(bad, "ActiveTasks, StandbyTasks and WarmupTasks must be empty when (re-)joining.")
        elif hb.topology is not None:
            raise _Fail(bad, "Topology can only be provided when (re-)joining.")
        if hb.member_epoch == STATIC_LEAVE_EPOCH and not hb.instance_id:
            raise _Fail(bad, "InstanceId can't be null.")

    def _group_for(self, hb: StreamsHeartbeat) -> StreamsGroup:
        group = self.groups.get(hb.group_id)
        if group is not None:
            return group
        other = self.taken(hb.group_id)
        classic = self.classic.get(hb.group_id)
        if other is None and classic is not None and not classic.is_(GroupState.EMPTY, GroupState.DEAD):
            other = "classic"
        if other is not None:
            raise _Fail(ErrorCode.group_id_not_found, f"Group {hb.group_id} is not a streams group.")
        if hb.member_epoch != 0:
            raise _Fail(ErrorCode.unknown_member_id, f"Streams group {hb.group_id} has no member {hb.member_id}.")
        if classic is not None:  # an empty classic group (offsets only) becomes a streams group; offsets stay
            del self.classic[hb.group_id]
        group = self.groups[hb.group_id] = StreamsGroup(hb.group_id)
        return group

    def _heartbeat(self, hb: StreamsHeartbeat) -> StreamsResult:
        self._validate(hb)
        group = self._group_for(hb)
        now = self.clock()
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, hb)
        bump = False
        if hb.member_epoch == 0:
            empty = not group.members  # an empty group takes the joining member's topology as it is
            member, bump = self._join(group, hb)
            if group.topology is None or empty or hb.topology.epoch > group.topology.epoch:
                if group.topology is not None and hb.topology.epoch != group.topology.epoch:
                    log.info("streams group %s: topology epoch %d replaces %d", group.group_id, hb.topology.epoch,
                             group.topology.epoch)
                group.topology = hb.topology
                bump = True
            member.topology_epoch = hb.topology.epoch
        else:
            member = group.members.get(hb.member_id)
            if member is None:
                raise _Fail(ErrorCode.unknown_member_id, f"Member {hb.member_id} is not a member of group "
                                                         f"{group.group_id}.")
            if hb.instance_id is not None and member.instance_id not in (None, hb.instance_id):
                raise _Fail(ErrorCode.fenced_instance_id, f"Member {hb.member_id} is not instance {hb.instance_id}.")
            self._check_epoch(member, hb)
        before = (_copy(member.active), _copy(member.standby))
        member.last_heartbeat = now
        if hb.rebalance_timeout_ms and hb.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms
        member.client_id, member.client_host = hb.client_id, hb.client_host
        if hb.rack_id is not None:
            member.rack_id = hb.rack_id
        if hb.process_id:
            bump |= bool(member.process_id) and member.process_id != hb.process_id
            member.process_id = hb.process_id
        if hb.endpoint is not None:
            member.endpoint = hb.endpoint
        if hb.client_tags is not None:
            member.client_tags = dict(hb.client_tags)
        if hb.shutdown_application and not group.shutdown:
            log.info("group %s: member %s asks the whole application to shut down", group.group_id, member.member_id)
            group.shutdown = True
        self.refresh(group, bump)
        self.reconcile(group, member, hb.active, now)
        send = (hb.member_epoch == 0 or (member.active, member.standby) != before
                or (hb.active is not None and _flat(hb.active) != _flat(member.active))
                or (hb.standby is not None and _flat(hb.standby) != _flat(member.standby)))
        status = list(group.configured.status) if group.configured is not None else []
        if member.topology_epoch < group.topology.epoch:
            status.append((STALE_TOPOLOGY, f"The member's topology epoch {member.topology_epoch} is behind the "
                                           f"group's topology epoch {group.topology.epoch}."))
        if group.shutdown:
            status.append((SHUTDOWN_APPLICATION, "A member requested the shutdown of the whole application."))
        endpoints = None
        if hb.endpoint_epoch != group.assignment_epoch:
            endpoints = [(m.endpoint, _copy(m.active), _copy(m.standby)) for m in group.members.values()
                         if m.endpoint is not None]
        return StreamsResult(ErrorCode.none, None, member.member_id, member.member_epoch,
                             self.heartbeat_interval_for(group.group_id), status,
                             _copy(member.active) if send else None, _copy(member.standby) if send else None,
                             group.assignment_epoch, endpoints)

    def _join(self, group: StreamsGroup, hb: StreamsHeartbeat) -> tuple[StreamsMember, bool]:
        old_id = group.static_members.get(hb.instance_id) if hb.instance_id else None
        if old_id is not None and old_id != hb.member_id:
            old = group.members[old_id]
            if old.member_epoch != STATIC_LEAVE_EPOCH:
                raise _Fail(ErrorCode.unreleased_instance_id,
                            f"Static member {old_id} with instance id {hb.instance_id} is present in group "
                            f"{group.group_id}.")
            del group.members[old_id]  # the restarted static member takes its place, epoch and tasks
            old.member_id, old.member_epoch = hb.member_id, old.previous_member_epoch
            group.members[hb.member_id] = old
            group.static_members[hb.instance_id] = hb.member_id
            if old_id in group.target:
                group.target[hb.member_id] = group.target.pop(old_id)
            return old, False
        member = group.members.get(hb.member_id)
        if member is not None:  # the same id joins again: it starts over with nothing
            member.active, member.standby, member.revoking = {}, {}, {}
            member.member_epoch, member.state, member.revocation_deadline = 0, MemberState.STABLE, None
            return member, False
        member = StreamsMember(hb.member_id, process_id=hb.process_id or "", instance_id=hb.instance_id,
                               rebalance_timeout_ms=hb.rebalance_timeout_ms)
        group.members[hb.member_id] = member
        if hb.instance_id:
            group.static_members[hb.instance_id] = hb.member_id
        log.info("streams group %s: member %s (process %s) joins", group.group_id, hb.member_id, hb.process_id)
        return member, True

    @staticmethod
    def _check_epoch(member: StreamsMember, hb: StreamsHeartbeat) -> None:
        check_epoch("streams", member, hb.member_epoch, hb.active, member.active)

    def _leave(self, group: StreamsGroup, hb: StreamsHeartbeat) -> StreamsResult:
        member, gone = leaving(group, hb.member_id, hb.member_epoch, hb.instance_id, self.clock())
        if not gone:
            return StreamsResult(ErrorCode.none, None, hb.member_id, STATIC_LEAVE_EPOCH, 0)
        log.info("streams group %s: member %s leaves", group.group_id, hb.member_id)
        self.remove_member(group, member)
        return StreamsResult(ErrorCode.none, None, hb.member_id, LEAVE_EPOCH, 0)

    def remove_member(self, group: StreamsGroup, member: StreamsMember) -> None:
        forget(group, member)
        if not group.members:
            group.shutdown = False
        self.refresh(group, True)

    # --- topology, target assignment and reconciliation ---------------------------------------
    def refresh(self, group: StreamsGroup, bump: bool) -> None:
        """Configure the topology against the topics (creating missing internal topics), bump the
        group epoch when membership, topology or the involved topics changed, and compute the
        target assignment when the epoch moved."""
        if group.topology is None:
            return
        existing = dict(self.topics())
        configured = configure(group.topology, existing)
        if configured.to_create and self.create_topic is not None:
            for info in configured.to_create:
                try:
                    self.create_topic(info.name, info.partitions, info.replication_factor or -1, info.configs)
                    log.info("streams group %s: created internal topic %s with %d partition(s)", group.group_id,
                             info.name, info.partitions)
                except Exception as exc:  # noqa: BLE001 (LogError and its kin: said in the status, tried again)
                    log.warning("streams group %s: internal topic %s not created: %s", group.group_id, info.name, exc)
            existing = dict(self.topics())
            configured = configure(group.topology, existing)
        group.configured = configured
        if configured.partitions != group.partitions:
            group.partitions = configured.partitions
            bump = True
        if bump:
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            members = {m.member_id: m.process_id for m in group.members.values()}
            previous_active = {m: t[0] for m, t in group.target.items()}
            previous_standby = {m: t[1] for m, t in group.target.items()}
            group.target = assign_tasks(members, configured.tasks, previous_active, previous_standby,
                                        self.num_standby_for(group.group_id))
            group.assignment_epoch = group.group_epoch
            log.info("streams group %s: epoch %d, target assignment: %s", group.group_id, group.group_epoch,
                     {m: {s: sorted(ps) for s, ps in a.items()} for m, (a, _) in group.target.items()})

    def reconcile(self, group: StreamsGroup, member: StreamsMember, owned: Tasks | None, now: float) -> None:
        if member.state == MemberState.UNREVOKED_TASKS:
            if owned is None or _flat(owned) & _flat(member.revoking):
                return  # still revoking
            member.revoking, member.revocation_deadline = {}, None
        elif member.state == MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        active, standby = group.target.get(member.member_id, ({}, {}))
        target, assigned = _flat(active), _flat(member.active)
        keep, revoke, wanted = assigned & target, assigned - target, target - assigned
        owners = group.owners()
        free = {t for t in wanted if owners.get(t, member.member_id) == member.member_id}
        if revoke:
            member.state = MemberState.UNREVOKED_TASKS
            member.active, member.revoking = _nest(keep), _nest(revoke)
            member.standby = _nest(_flat(member.standby) & _flat(standby))
            member.revocation_deadline = now + member.rebalance_timeout_ms / 1000
            return
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch
        member.active = _nest(keep | free)
        member.standby = _nest(_flat(standby) - keep - free)
        member.state = MemberState.UNRELEASED_TASKS if wanted - free else MemberState.STABLE

    # --- timers -------------------------------------------------------------------------------
    def tick(self) -> None:
        now = self.clock()
        for group in list(self.groups.values()):
            if not self.leads(group.group_id):
                continue
            removed = False
            for member in list(group.members.values()):
                if now >= member.last_heartbeat + self.session_timeout_for(group.group_id) / 1000:
                    log.info("streams group %s: member %s's session timed out", group.group_id, member.member_id)
                    self.remove_member(group, member)
                    removed = True
                elif member.revocation_deadline is not None and now >= member.revocation_deadline:
                    log.info("streams group %s: member %s did not revoke its tasks in time and is fenced",
                             group.group_id, member.member_id)
                    self.remove_member(group, member)
                    removed = True
            if removed:
                self.on_changed(group.group_id)
