"""Leader and follower bookkeeping of the partitions this broker holds, in cluster mode.

Kafka's design: a leader learns each follower's log end offset from the offset the follower
fetches at; the high watermark is the smallest log end offset over the in-sync replicas (the
leader's own counts once its flush policy made the data durable); a follower that has not
caught up with the leader's log end for ``replica.lag.time.max.ms`` leaves the ISR, and comes
back once it fetches at or past the high watermark. ISR changes are written to ZooKeeper by
the leader (``write_isr``), conditional on the state version it last saw.

Everything here runs on the broker's thread; the ZooKeeper writes it asks for are blocking
round trips to a local ensemble.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from core.cluster.view import ClusterView, PartitionState
from core.log import PartitionLog

log = logging.getLogger(__name__)

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"


@dataclass
class Replica:
    topic: str
    partition: int
    plog: PartitionLog
    state: PartitionState
    replicas: tuple[int, ...]
    role: str = OFFLINE
    # leader only: follower id -> last fetch offset, the time it was last caught up, and
    # (time, leader LEO) of its previous fetch: fetching at that LEO later means it had caught up then
    follower_end: dict[int, int] = field(default_factory=dict)
    caught_up_at: dict[int, float] = field(default_factory=dict)
    previous_fetch: dict[int, tuple[float, int]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition


@dataclass(frozen=True)
class RoleChange:
    replica: Replica
    role: str
    leader: int  # the leader to follow (follower), or this node


class ReplicaManager:
    def __init__(self, node_id: int, write_isr: Callable[[str, int, PartitionState, tuple[int, ...]], PartitionState | None],
                 *, lag_time_max_ms: int = 30000, clock: Callable[[], float] = time.monotonic):
        self.node_id = node_id
        self.write_isr = write_isr
        self.lag_time_max_s = lag_time_max_ms / 1000
        self.clock = clock
        self.replicas: dict[tuple[str, int], Replica] = {}
        self._by_log: dict[int, Replica] = {}  # id(plog) -> its replica, for update_hw_of
        self.generation = 0  # moves whenever a replica comes, goes or changes role or leader
        self.isr_shrinks = self.isr_expands = 0  # for /metrics

    # --- state from the cluster ---------------------------------------------------------
    def apply(self, view: ClusterView, logs: dict[tuple[str, int], PartitionLog], *,
              registered: bool = True) -> list[RoleChange]:
        """Bring every local partition's role in line with the view; return what changed.

        An unregistered broker (restarted while ZooKeeper still holds its previous session) leads
        nothing, even where the state still names it: the controller has not seen it return."""
        changes = []
        for key, plog in logs.items():
            state = view.states.get(key)
            replicas = view.replicas(*key)
            if state is None or self.node_id not in replicas:
                continue
            rep = self.replicas.get(key)
            if rep is None or rep.plog is not plog:
                rep = self.replicas[key] = Replica(key[0], key[1], plog, state, replicas)
                plog.replicated = True
                old_role, old_epoch, old_leader = None, -1, None
            else:
                old_role, old_epoch, old_leader = rep.role, rep.state.leader_epoch, rep.state.leader
            rep.replicas = replicas
            if state.version < rep.state.version and old_role is not None:
                continue  # our own ISR write is newer than this view
            rep.state = state
            if state.leader == self.node_id:
                role = LEADER if registered else OFFLINE
            elif state.leader >= 0:
                role = FOLLOWER
            else:
                role = OFFLINE
            if role != old_role or state.leader_epoch != old_epoch or state.leader != old_leader:
                rep.role = role
                if role == LEADER:
                    self._become_leader(rep)
                changes.append(RoleChange(rep, role, state.leader))
            elif role == LEADER:
                self._forget_removed(rep)
        for key in [k for k in self.replicas if k not in logs or self.node_id not in view.replicas(*k)]:
            rep = self.replicas.pop(key)
            changes.append(RoleChange(rep, OFFLINE, -1))
        if changes:
            self.generation += 1
            self._by_log = {id(rep.plog): rep for rep in self.replicas.values()}
        return changes

    def _become_leader(self, rep: Replica) -> None:
        plog = rep.plog
        plog.leader_epoch = rep.state.leader_epoch  # appended batches carry it (AMQP and coordinator writes too)
        plog.epochs.assign(rep.state.leader_epoch, plog.next_offset)
        now = self.clock()
        rep.follower_end.clear()
        rep.previous_fetch.clear()
        # followers get a full lag period to show up before the ISR shrinks
        rep.caught_up_at = {b: now for b in rep.replicas if b != self.node_id}
        self.update_hw(rep)
        log.info("became leader", extra={"fields": {"topic": rep.topic, "partition": rep.partition,
                                                    "leader_epoch": rep.state.leader_epoch, "isr": list(rep.state.isr),
                                                    "log_end_offset": plog.next_offset}})

    def _forget_removed(self, rep: Replica) -> None:
        for b in [b for b in rep.caught_up_at if b not in rep.replicas]:
            rep.caught_up_at.pop(b, None)
            rep.follower_end.pop(b, None)
            rep.previous_fetch.pop(b, None)

    # --- questions from the request handlers ----------------------------------------------
    def get(self, topic: str, partition: int) -> Replica | None:
        return self.replicas.get((topic, partition))

    def leader_of(self, topic: str, partition: int) -> Replica | None:
        rep = self.replicas.get((topic, partition))
        return rep if rep is not None and rep.role == LEADER else None

    def leaders(self) -> Iterator[Replica]:
        return (r for r in self.replicas.values() if r.role == LEADER)

    # --- the leader's side of replication ---------------------------------------------------
    def record_fetch(self, rep: Replica, follower: int, fetch_offset: int) -> bool:
        """A follower fetched at ``fetch_offset`` (its log end); return True if the HW moved."""
        if follower not in rep.replicas:
            return False
        now = self.clock()
        leo = rep.plog.next_offset
        rep.follower_end[follower] = fetch_offset
        if fetch_offset >= leo:
            rep.caught_up_at[follower] = now
        else:
            previous = rep.previous_fetch.get(follower)
            if previous is not None and fetch_offset >= previous[1]:
                rep.caught_up_at[follower] = previous[0]
        rep.previous_fetch[follower] = (now, leo)
        if follower not in rep.state.isr and self._can_join(rep, follower, fetch_offset):
            self._change_isr(rep, rep.state.isr + (follower,), "caught up")
        return self.update_hw(rep)

    def _can_join(self, rep: Replica, follower: int, fetch_offset: int) -> bool:
        epoch_start = next((start for epoch, start in reversed(rep.plog.epochs.entries)
                            if epoch == rep.state.leader_epoch), 0)
        return fetch_offset >= rep.plog.high_watermark and fetch_offset >= epoch_start

    def update_hw(self, rep: Replica) -> bool:
        if rep.role != LEADER:
            return False
        plog = rep.plog
        hw = plog.local_end_offset
        for b in rep.state.isr:
            if b != self.node_id:
                hw = min(hw, rep.follower_end.get(b, 0))
        before = plog.high_watermark
        plog.advance_high_watermark(hw)
        return plog.high_watermark != before

    def update_all_hw(self) -> bool:
        moved = False
        for rep in self.leaders():
            moved |= self.update_hw(rep)
        return moved

    def update_hw_of(self, plogs) -> bool:
        """update_hw of the leaders whose logs are among ``plogs`` (those written to lately)."""
        moved = False
        by_log = self._by_log
        for plog in plogs:  # (not a walk of every replica per group commit)
            rep = by_log.get(id(plog))
            if rep is not None and rep.role == LEADER and rep.plog is plog:
                moved |= self.update_hw(rep)
        return moved

    def shrink_isr(self) -> bool:
        """Drop followers that have not caught up for the lag time, and brokers that are no
        longer replicas (a reassignment's old replica can catch up with a new leader that has not
        seen the move end yet); return True if any HW moved."""
        now = self.clock()
        moved = False
        for rep in list(self.leaders()):
            gone = [b for b in rep.state.isr if b != self.node_id and b not in rep.replicas]
            stale = [b for b in rep.state.isr if b != self.node_id and b not in gone
                     and now - rep.caught_up_at.get(b, now) > self.lag_time_max_s]
            if gone or stale:
                isr = tuple(b for b in rep.state.isr if b not in stale and b not in gone)
                reasons = []
                if stale:
                    reasons.append(f"replica(s) {stale} lagging more than {int(self.lag_time_max_s * 1000)} ms")
                if gone:
                    reasons.append(f"broker(s) {gone} no longer replicas")
                why = "; ".join(reasons)
                if self._change_isr(rep, isr, why):
                    moved |= self.update_hw(rep)
        return moved

    def _change_isr(self, rep: Replica, isr: tuple[int, ...], why: str) -> bool:
        new = self.write_isr(rep.topic, rep.partition, rep.state, isr)
        if new is None:
            return False
        log.info("isr changed", extra={"fields": {"topic": rep.topic, "partition": rep.partition,
                                                  "isr": list(new.isr), "why": why}})
        if len(new.isr) < len(rep.state.isr):
            self.isr_shrinks += 1
        else:
            self.isr_expands += 1
        rep.state = new
        return True

    # --- the follower's side ----------------------------------------------------------------
    @staticmethod
    def follower_hw(rep: Replica, leader_hw: int) -> None:
        rep.plog.advance_high_watermark(min(leader_hw, rep.plog.next_offset))
