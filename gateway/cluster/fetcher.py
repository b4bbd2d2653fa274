"""Follower fetchers: one thread per leader broker, pulling its partitions' batches as a replica.

They speak the Kafka protocol to the leader like any replica would: OffsetForLeaderEpoch first,
to find where this replica's log parts from the leader's (truncated there, so replicas never
diverge), then Fetch with ``replica_id`` set to this broker, at this replica's log end offset.
The blocking client of the admin commands does the talking; every change to a log is handed
to the broker's thread (``apply``), which owns the logs.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable

from kio.schema.errors import ErrorCode

from gateway.ctl.kafka_client import KafkaAdmin, KafkaClientError

log = logging.getLogger(__name__)

FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
FETCH_VERSION, OFFSET_FOR_LEADER_EPOCH_VERSION = 12, 4
MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 1 << 20
RESPONSE_MAX_BYTES = 16 << 20
RETRY_S = 0.5


@dataclass
class Target:
    leader_epoch: int
    truncated: bool = False  # OffsetForLeaderEpoch done for this epoch: fetch from the log end


@dataclass(frozen=True)
class Fetched:
    topic: str
    partition: int
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes


class LeaderFetcher:
    """Replicates the partitions this broker follows on one leader."""

    def __init__(self, node_id: int, leader_id: int, owner, call: Callable):
        self.node_id = node_id
        self.leader_id = leader_id
        # owner (gateway.cluster.node.ClusterNode) answers on the broker's thread: leader_address,
        # log_end, latest_epochs, apply_truncation, apply_fetched
        self.owner = owner
        self.call = call  # runs fn(*args) on the broker's thread and returns its result
        self.targets: dict[tuple[str, int], Target] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"replica-fetcher-{leader_id}", daemon=True)
        self._thread.start()

    # --- from the broker's thread ------------------------------------------------------
    def follow(self, topic: str, partition: int, leader_epoch: int) -> None:
        with self._lock:
            self.targets[(topic, partition)] = Target(leader_epoch)
        self._wake.set()

    def unfollow(self, topic: str, partition: int) -> None:
        with self._lock:
            self.targets.pop((topic, partition), None)

    def needs_truncation(self, topic: str, partition: int) -> None:
        with self._lock:
            target = self.targets.get((topic, partition))
            if target is not None:
                target.truncated = False

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def __len__(self) -> int:
        return len(self.targets)

    # --- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        client: KafkaAdmin | None = None
        failures = 0
        while not self._stop.is_set():
            with self._lock:
                targets = {k: Target(t.leader_epoch, t.truncated) for k, t in self.targets.items()}
            if not targets:
                self._wake.wait(RETRY_S)
                self._wake.clear()
                continue
            try:
                if client is None:
                    address = self.owner.leader_address(self.leader_id)
                    if address is None:
                        raise KafkaClientError(f"broker {self.leader_id} is not registered")
                    client = KafkaAdmin(f"{address[0]}:{address[1]}", timeout=10,
                                        client_id=f"replica-{self.node_id}").__enter__()
                pending = [k for k, t in targets.items() if not t.truncated]
                if pending:
                    self._truncate(client, {k: targets[k] for k in pending})
                    continue
                self._fetch(client, targets)
                failures = 0
            except (KafkaClientError, OSError) as exc:
                if client is not None:
                    client.__exit__(None, None, None)
                    client = None
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("replica fetcher: %s", exc, extra={"fields": {"leader": self.leader_id}})
                self._stop.wait(RETRY_S)
            except Exception:
                log.exception("replica fetcher failed; retrying", extra={"fields": {"leader": self.leader_id}})
                self._stop.wait(RETRY_S)
        if client is not None:
            client.__exit__(None, None, None)

    def _truncate(self, client: KafkaAdmin, targets: dict[tuple[str, int], Target]) -> None:
        requests = self.call(self.owner.latest_epochs, list(targets))
        topics: dict[str, list[dict]] = {}
        for (topic, partition), epoch in requests.items():
            topics.setdefault(topic, []).append({"partition": partition, "leader_epoch": epoch,
                                                 "current_leader_epoch": targets[(topic, partition)].leader_epoch})
        answer = client._call(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        results = [(t.topic, p.partition, int(p.error_code), requests[(t.topic, p.partition)], p.leader_epoch,
                    p.end_offset) for t in answer.topics for p in t.partitions]
        done = self.call(self.owner.apply_truncation, self.leader_id, results)
        with self._lock:
            for key in done:
                target = self.targets.get(key)
                if target is not None and target.leader_epoch == targets[key].leader_epoch:
                    target.truncated = True
        if len(done) < len(results):
            self._stop.wait(RETRY_S)  # the leader does not lead some of them yet: ask again shortly

    def _fetch(self, client: KafkaAdmin, targets: dict[tuple[str, int], Target]) -> None:
        topics: dict[str, list[dict]] = {}
        for (topic, partition), target in targets.items():
            end = self.owner.log_end(topic, partition)
            if end is None:
                continue
            topics.setdefault(topic, []).append({
                "partition": partition, "current_leader_epoch": target.leader_epoch, "fetch_offset": end,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": PARTITION_MAX_BYTES})
        if not topics:
            self._stop.wait(RETRY_S)
            return
        answer = client._call(FETCH, FETCH_VERSION, {
            "replica_id": self.node_id, "max_wait": MAX_WAIT_MS, "min_bytes": 1, "max_bytes": RESPONSE_MAX_BYTES,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()], "forgotten_topics_data": []})
        if answer.error_code:
            raise KafkaClientError(f"leader {self.leader_id} refused the replica fetch: {ErrorCode(answer.error_code).name}")
        fetched = [Fetched(t.topic, p.partition_index, int(p.error_code), p.high_watermark, p.log_start_offset,
                           bytes(p.records or b"")) for t in answer.responses for p in t.partitions]
        retry = self.call(self.owner.apply_fetched, self.leader_id, fetched)
        for key in retry:
            self.needs_truncation(*key)
        if any(f.error not in (0, ErrorCode.offset_out_of_range) for f in fetched):
            self._stop.wait(RETRY_S)  # not the leader (yet/any more): the next view will say who is
