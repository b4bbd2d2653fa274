"""What each follower of the AMQP model's topic (``__amqp_state``) was told and has applied.

A broker applies definitions from that topic only below the high watermark its leader told it,
and it applies what a fetch answer brings before it fetches again. So a follower's next fetch
says it has applied everything below the high watermark of the answer before: a write to the
topic is answered (and a declaration's -ok sent) once every other in-sync replica has applied it,
which is how a queue declared on one broker is known on the others when its -ok comes. The
leader's Fetch handler keeps this book; Produce and gateway.cluster.amqp_spread read it.
"""
from __future__ import annotations


class StateFollowers:
    def __init__(self, node_id: int, replicas):
        self.node_id = node_id
        self.replicas = replicas  # core.replication.ReplicaManager: who is in sync
        self._told: dict[tuple[int, int], int] = {}  # (replica, partition) -> the high watermark it was told
        self._applied: dict[tuple[int, int], int] = {}  # (replica, partition) -> it has applied below this

    def told(self, replica: int, partition: int, high_watermark: int) -> None:
        self._told[(replica, partition)] = high_watermark

    def untold(self, replica: int, partition: int, high_watermark: int) -> bool:
        """Whether ``replica`` has not been told this high watermark yet (its fetch is answered at once)."""
        return high_watermark > self._told.get((replica, partition), -1)

    def fetched(self, replica: int, partition: int) -> bool:
        """``replica`` fetched again: it has applied what it was told. True if that moved."""
        key = (replica, partition)
        told = self._told.get(key, -1)
        if self._applied.get(key, -1) == told:
            return False
        self._applied[key] = told
        return True

    def applied_everywhere(self, topic: str, partition: int, end: int) -> bool:
        """Whether every other in-sync replica of ``topic`` has applied it below ``end``."""
        rep = self.replicas.get(topic, partition)
        if rep is None:
            return True
        applied = self._applied
        return all(applied.get((b, partition), -1) >= end for b in rep.state.isr if b != self.node_id)

    def forget(self) -> None:
        """Led here in a new term: what followers were told in an earlier one says nothing now."""
        self._told.clear()
        self._applied.clear()
