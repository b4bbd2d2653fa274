"""Cluster mode of one broker: ZooKeeper metadata, partition roles, and the follower fetchers.

:class:`ClusterNode` is the broker-thread end of core.cluster. Each view the ZooKeeper agent
publishes is applied here: partitions newly assigned to this broker are opened, those moved
away (or deleted) are closed and removed, and every local partition becomes leader or
follower as its state says. Followers are served by one :class:`LeaderFetcher` per leader.
Request handlers ask :meth:`leader_log` whether this broker leads a partition.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from twisted.internet import threads

from core.cluster.store import ZkMetadataStore
from core.cluster.view import BrokerInfo, ClusterView
from core.cluster.zk import ZkAgent
from core.errors import LogError, OffsetMismatchError
from core.names import is_internal_topic
from core.replication import FOLLOWER, LEADER, ReplicaManager
from gateway.cluster import shared_docs
from gateway.cluster.fetcher import LeaderFetcher
from gateway.cluster.state_followers import StateFollowers
from gateway.logs import fields
from routing.state import STATE_TOPIC
from wire.errors import CorruptBatchError

log = logging.getLogger(__name__)

ISR_TICK_S = 0.5


class ClusterNode:
    def __init__(self, settings, reactor, me: BrokerInfo):
        self.node_id = settings.node_id
        self.reactor = reactor
        self.agent = ZkAgent(settings.zookeeper, me, self._published,
                             session_timeout_s=settings.zookeeper_session_timeout_ms / 1000)
        self.store = ZkMetadataStore(self.agent, settings.default_replication_factor)
        self.replicas = ReplicaManager(self.node_id, self.agent.update_isr,
                                       lag_time_max_ms=settings.replica_lag_time_max_ms)
        self.state_followers = StateFollowers(self.node_id, self.replicas)  # read by Fetch and Produce
        self.fetchers: dict[int, LeaderFetcher] = {}
        self.broker = None  # gateway.server.Broker, set by it; its logs are opened after start()
        self.active = False  # True once the logs are open: views then move partitions

    # --- life cycle ---------------------------------------------------------------------
    def start(self) -> str:
        """Join the cluster (blocking); return the cluster id. Views before the logs open are kept."""
        cluster_id = self.agent.start()
        self.store.update(self.agent.view)
        return cluster_id

    def activate(self) -> None:
        self.active = True
        self.sync()

    def stop(self) -> None:
        self.active = False
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        self.agent.stop()

    def _published(self, view: ClusterView) -> None:  # the agent's thread
        self.reactor.callFromThread(self._on_view, view)

    def _on_view(self, view: ClusterView) -> None:
        self.store.update(view)
        if self.broker is not None:
            shared_docs.refresh(self.broker.kafka)  # quotas and group configs another broker altered
        if self.active:
            self.sync()

    @property
    def view(self) -> ClusterView:
        return self.store.view

    # --- applying a view --------------------------------------------------------------------
    def sync(self) -> None:
        logs = self.broker.logs
        topics = self.store.topics()
        for (name, p) in list(logs.logs):
            topic = topics.get(name)
            if topic is None and name in self.view.topics:
                continue  # our own write is newer than this view
            if topic is None:
                self._drop_topic(name)
            elif not topic.is_replica(p, self.node_id):
                self._unfollow(name, p)
                logs.drop_partition(name, p)
                log.info("partition moved away; local replica removed", extra=fields(topic=name, partition=p))
        for name, topic in topics.items():
            for p in range(topic.partitions):
                if topic.is_replica(p, self.node_id) and (name, p) not in logs.logs:
                    logs.open_partition(topic, p)
        for change in self.replicas.apply(self.view, logs.logs, registered=self.agent.registered):
            rep = change.replica
            if change.role == FOLLOWER:
                self._follow(rep.topic, rep.partition, change.leader, rep.state.leader_epoch)
            else:
                self._unfollow(rep.topic, rep.partition)
            if change.role == LEADER:
                self.broker.became_leader(rep.topic, rep.partition)
            else:
                self.broker.stopped_leading(rep.topic, rep.partition)
        home = self.broker.amqp_home
        if home is not None:
            home.ensure_state_topic()
            home.sync()
        self.broker.kafka.waiters.notify()
        self.broker.amqp.log_moved()

    def _drop_topic(self, name: str) -> None:
        """A topic another broker deleted: forget it here too."""
        for (topic, p) in [k for k in self.broker.logs.logs if k[0] == name]:
            self._unfollow(topic, p)
        self.broker.kafka.forget_topic(name)
        log.info("topic deleted by the cluster; local replicas removed", extra=fields(topic=name))

    def _follow(self, topic: str, partition: int, leader: int, epoch: int) -> None:
        for other_id, fetcher in self.fetchers.items():
            if other_id != leader:
                fetcher.unfollow(topic, partition)
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = LeaderFetcher(self.node_id, leader, self, self._call)
        fetcher.follow(topic, partition, epoch)

    def _unfollow(self, topic: str, partition: int) -> None:
        for fetcher in self.fetchers.values():
            fetcher.unfollow(topic, partition)

    def _call(self, fn, *args):
        return threads.blockingCallFromThread(self.reactor, fn, *args)

    # --- periodic ------------------------------------------------------------------------------
    def tick(self) -> None:
        if not self.active:
            return
        if self.broker.amqp_home is not None:
            self.broker.amqp_home.tick()
        # shrunk ISRs; and, as a safety net, any leader's HW that moved without a write since
        # the group commits (which look at written logs only)
        if self.replicas.shrink_isr() | self.replicas.update_all_hw():
            self.broker.kafka.waiters.notify()
            self.broker.amqp.log_moved()

    def flushed(self, written) -> bool:
        """The group commit made more of the leaders' logs ``written`` since the last one durable:
        their high watermarks may move (True if one did)."""
        moved = self.replicas.update_hw_of(written)
        if moved and self.replicas.leader_of(STATE_TOPIC, 0) is not None:
            self._state_committed()
        return moved

    def _state_committed(self) -> None:
        """The AMQP model's topic, led here, may have a new high watermark: what the other brokers
        wrote applies here now, before a write waiting for it is answered (not at the next tick)."""
        home = self.broker.amqp_home
        if home is not None:
            home.state_fetched()

    # --- for the request handlers --------------------------------------------------------------
    def leader_log(self, topic: str, partition: int, current_epoch: int = -1):
        """(log, leader epoch, error) for a request that must go to the partition's leader."""
        rep = self.replicas.get(topic, partition)
        if rep is None or rep.role != LEADER:
            if self.store.get_topic(topic) is None:
                return None, -1, ErrorCode.unknown_topic_or_partition
            return None, -1, ErrorCode.not_leader_or_follower
        epoch = rep.state.leader_epoch
        if current_epoch >= 0 and current_epoch != epoch:
            return None, epoch, (ErrorCode.fenced_leader_epoch if current_epoch < epoch
                                 else ErrorCode.unknown_leader_epoch)
        return rep.plog, epoch, ErrorCode.none

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The epoch this broker leads the partition in; -1 if it does not lead it."""
        rep = self.replicas.leader_of(topic, partition)
        return rep.state.leader_epoch if rep is not None else -1

    def replica_fetched(self, topic: str, partition: int, follower: int, fetch_offset: int) -> None:
        rep = self.replicas.leader_of(topic, partition)
        if rep is not None and self.replicas.record_fetch(rep, follower, fetch_offset):
            if topic == STATE_TOPIC:
                self._state_committed()
            self.broker.kafka.waiters.notify()
            if not is_internal_topic(topic):  # the broker's own topics (the AMQP state) hold no messages
                self.broker.amqp.log_moved()

    def in_sync(self, topic: str, partition: int) -> int:
        rep = self.replicas.get(topic, partition)
        return len(rep.state.isr) if rep is not None else 0

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self.view.brokers.values(), key=lambda b: b.node_id)

    # --- the fetchers' questions (run on the broker's thread through _call) ----------------------
    def leader_address(self, leader: int) -> tuple[str, int] | None:
        info = self.view.brokers.get(leader)
        return (info.host, info.port) if info else None

    def log_end(self, topic: str, partition: int) -> int | None:
        plog = self.broker.logs.logs.get((topic, partition))
        return plog.next_offset if plog is not None else None

    def latest_epochs(self, keys) -> dict[tuple[str, int], int]:
        out = {}
        for key in keys:
            plog = self.broker.logs.logs.get(key)
            if plog is not None:
                out[key] = plog.epochs.latest_epoch
        return out

    def apply_truncation(self, leader: int, results) -> list[tuple[str, int]]:
        """Truncate each replica where its log parts from the leader's; return those now ready to fetch."""
        done = []
        for topic, partition, error, asked, epoch, end in results:
            rep = self.replicas.get(topic, partition)
            if rep is None or rep.role != FOLLOWER or rep.state.leader != leader or error:
                continue
            plog = rep.plog
            if asked < 0 or epoch < 0:
                target = min(plog.high_watermark, plog.next_offset)  # no epoch to compare: keep what was committed
            elif epoch == asked:
                target = min(end, plog.next_offset)
            else:
                mine = plog.epochs.end_offset_for(epoch, plog.next_offset)[1]
                target = min(end, mine if mine >= 0 else plog.high_watermark)
            if target < plog.next_offset:
                log.info("truncating replica to the leader's epoch boundary", extra=fields(
                    topic=topic, partition=partition, leader=leader, log_end_offset=plog.next_offset, to=target))
                plog.truncate_to(target)
                self.broker.kafka.producers.reset(topic, partition)
            done.append((topic, partition))
        return done

    def apply_fetched(self, leader: int, fetched) -> list[tuple[str, int]]:
        """Append what a leader sent; return partitions that must truncate again before fetching."""
        again, appended = [], False
        for f in fetched:
            rep = self.replicas.get(f.topic, f.partition)
            if rep is None or rep.role != FOLLOWER or rep.state.leader != leader:
                continue
            if f.error == ErrorCode.offset_out_of_range:
                if f.log_start_offset > rep.plog.next_offset:
                    # the leader's log starts past this replica's end (retention, DeleteRecords, a
                    # stream created with x-stream-initial-offset): start again, empty, there
                    rep.plog.restart_at(f.log_start_offset)
                    self.broker.kafka.producers.reset(f.topic, f.partition)
                else:
                    again.append((f.topic, f.partition))
                continue
            if f.error:
                continue
            if f.records:
                try:
                    rep.plog.append_replica(f.records)
                    appended = True
                except OffsetMismatchError:
                    again.append((f.topic, f.partition))
                    continue
                except (LogError, CorruptBatchError) as exc:
                    log.error("replica append failed: %s", exc, extra=fields(topic=f.topic, partition=f.partition))
                    again.append((f.topic, f.partition))
                    continue
            self.replicas.follower_hw(rep, f.high_watermark)
        if appended:
            self.broker.request_flush()
        self.broker.kafka.waiters.notify()
        if any(f.topic != STATE_TOPIC for f in fetched):
            # a queue's replica moved (a stream read here, a queue about to be led here); the state
            # topic alone, fetched several times a second for the others' ack floors, moves none
            self.broker.amqp.log_moved()
        home = self.broker.amqp_home
        if home is not None and any(f.topic == STATE_TOPIC for f in fetched):
            home.state_fetched()  # spread mode: a definition (a policy...) made elsewhere applies now
        return again
