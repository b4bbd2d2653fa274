"""One consumer group's membership state (Kafka's GroupMetadata / MemberMetadata), no policy.

States and the transitions the coordinator makes::

    Empty --join--> PreparingRebalance --all rejoined / timeout--> CompletingRebalance
    CompletingRebalance --leader's sync--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --no member left--> Empty      Empty --delete--> Dead

The coordinator (core.groups.coordinator) decides; this module only keeps the books:
members by id, static members by instance id, pending member ids (handed out with
MEMBER_ID_REQUIRED and not yet rejoined), members that still owe a SyncGroup, and the
deadlines that :meth:`GroupCoordinator.tick` checks. Times are seconds of the injected clock.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat: float
    assignment: bytes = b""
    join_callback: Callable | None = None
    sync_callback: Callable | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in self.protocols] == [(n, bytes(m)) for n, m in protocols]

    def session_expired(self, now: float) -> bool:
        """Members waiting for a join or sync answer are alive by definition (Kafka's shouldKeepAlive)."""
        if self.join_callback is not None or self.sync_callback is not None:
            return False
        return now >= self.last_heartbeat + self.session_timeout_ms / 1000


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group_instance_id -> member_id
    pending_members: dict[str, float] = field(default_factory=dict)  # member_id -> expiry time
    pending_sync: set[str] = field(default_factory=set)  # members that owe a SyncGroup this generation
    sync_deadline: float | None = None
    join_deadline: float | None = None  # end of the PreparingRebalance phase at the latest
    initial_delay: bool = False  # the join phase is group.initial.rebalance.delay.ms, not a rebalance timeout
    initial_remaining_ms: int = 0
    new_member_added: bool = False

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # --- membership -------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        iid = member.group_instance_id
        if iid is not None and self.static_members.get(iid) == member_id:
            del self.static_members[iid]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        if self.leader_id == old_id:
            self.leader_id = new_id
        return member

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    # --- rebalance bookkeeping ----------------------------------------------------------
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_callback is not None for m in self.members.values())

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.join_callback is not None:
            return True
        for member in self.members.values():
            if member.join_callback is not None:
                self.leader_id = member.member_id
                return True
        return False

    def candidate_protocols(self, excluding: str | None = None) -> list[str] | None:
        """Protocols every member (but ``excluding``) supports, in no particular order; None if no member."""
        common: set[str] | None = None
        for member in self.members.values():
            if member.member_id == excluding:
                continue
            names = set(member.protocol_names())
            common = names if common is None else common & names
        return None if common is None else sorted(common)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]], member_id: str | None = None) -> bool:
        """Kafka's supportsProtocols: may a member with these protocols be in this group?"""
        names = [name for name, _ in protocols]
        if not protocol_type or not names:
            return False
        others = self.candidate_protocols(excluding=member_id)
        if others is None:
            return True
        return self.protocol_type == protocol_type and any(n in others for n in names)

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that all support."""
        candidates = self.candidate_protocols() or []
        votes: dict[str, int] = {name: 0 for name in candidates}
        for member in self.members.values():
            for name in member.protocol_names():
                if name in votes:
                    votes[name] += 1
                    break
        # Ties go to the protocol the leader prefers most, which is deterministic.
        leader = self.members.get(self.leader_id) if self.leader_id else None
        order = leader.protocol_names() if leader else candidates
        rank = {name: i for i, name in enumerate(order)}
        return max(candidates, key=lambda n: (votes[n], -rank.get(n, len(rank))))

    def init_next_generation(self) -> None:
        self.generation_id += 1
        self.pending_sync.clear()
        self.sync_deadline = None
        self.join_deadline = None
        self.initial_delay = False
        if self.members:
            self.protocol_name = self.select_protocol()
            self.state = GroupState.COMPLETING_REBALANCE
        else:
            self.protocol_name = None
            self.state = GroupState.EMPTY
