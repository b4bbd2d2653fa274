"""The stream protocol in a spread cluster (``--amqp-cluster-mode spread``): what RabbitMQ's
stream plugin does on a cluster of nodes, over our replicated topics.

* Every broker registers its advertised stream address, and its TLS one if it has a TLS stream
  listener (ZooKeeper, next to Kafka's and AMQP's), so Metadata names each stream's leader (the
  leader of its topic) and replicas (the other in-sync replicas) by their own stream address, the
  TLS one on a TLS connection: rstream and RabbitMQ's clients connect a producer to the leader and
  a consumer to a replica.
* A publisher is declared on the leader only; another broker answers STREAM_NOT_AVAILABLE, as
  RabbitMQ answers when it cannot reach the leader, and the client asks Metadata again.
* A subscription is served where the stream has a replica (the leader's too), read from the
  local log below its high watermark: :class:`ReplicaStream`. A broker with none answers
  STREAM_NOT_AVAILABLE, as RabbitMQ does without a local member.
* Stored offsets are consumer-group offsets in ``__consumer_offsets`` (replicated): a broker that
  does not coordinate the consumer name sends them to the one that does (OffsetCommit,
  OffsetFetch), so they survive a failover like a Kafka group's. Publisher de-duplication is
  rebuilt from the writer headers of the new leader's log (routing.streams.Writers).
* Single-active-consumer groups are decided at each stream's leader: gateway.stream.sac.
"""
from __future__ import annotations

import logging

from twisted.internet import defer

from core.groups.retention import KEEP as STORED_OFFSET
from core.offsets import OFFSETS_TOPIC
from core.replication import LEADER
from gateway.logs import fields

log = logging.getLogger(__name__)

NO_BROKER = 0xFFFF  # Metadata's leader reference when a stream has no leader
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
COMMIT_VERSION, FETCH_VERSION = 8, 7  # the versions whose fields are filled in below
ELECTION_WAIT_S, ELECTION_POLL_S = 10.0, 0.05  # how long Create waits for a new stream's leader


class ReplicaStream:
    """A stream led by another broker, read from this broker's replica of its topic.

    It stands in for the queue in a subscription (name, vhost, plog, deleted) and sits in the
    vhost's set of consuming queues, so that every time the replica's high watermark may have moved
    (after each fetch from the leader, Router.log_moved) its subscriptions pull."""
    is_stream = True
    remote = False

    def __init__(self, vhost, queue, plog, logs: dict):
        self.vhost_model = vhost
        self.logs = logs  # the broker's open partition logs: a replica moved away is no longer there
        self.queue = queue  # the RemoteQueue (or, once led here, the queue) the stream is in the model
        self.name, self.vhost, self.topic, self.partition = queue.name, queue.vhost, queue.topic, queue.partition
        self.plog = plog
        self.consumers: list = []

    @property
    def deleted(self) -> bool:
        current = self.vhost_model.queues.get(self.name)
        return current is None or current.topic != self.topic or \
            self.logs.get((self.topic, self.partition)) is not self.plog

    def add_consumer(self, sub) -> None:
        self.consumers.append(sub)
        self.vhost_model.consuming.add(self)

    def remove_consumer(self, sub) -> None:
        if sub in self.consumers:
            self.consumers.remove(sub)
        if not self.consumers:
            self.vhost_model.consuming.discard(self)

    def may_deliver(self) -> bool:
        return True

    def dispatch(self) -> int:
        if self.deleted:
            self.vhost_model.consuming.discard(self)
            for sub in list(self.consumers):
                sub.cancelled_by_server(self)
            return 0
        return sum(sub.pull(self) for sub in list(self.consumers))


class StreamCluster:
    def __init__(self, node, peers, node_id: int):
        self.node = node  # gateway.cluster.node.ClusterNode
        self.peers = peers  # gateway.cluster.peers.PeerClients
        self.node_id = node_id

    # --- Metadata ---------------------------------------------------------------------------------
    def brokers(self, listener: str = "stream") -> list[tuple[int, str, int]]:
        """Every live broker with a listener of this kind: (reference, host, port). A TLS client is
        told the brokers' TLS addresses, as RabbitMQ advertises its TLS port to TLS connections."""
        tls = listener == "stream_tls"
        return [(b.node_id, *((b.stream_tls_host, b.stream_tls_port) if tls else (b.stream_host, b.stream_port)))
                for _, b in sorted(self.node.view.brokers.items()) if (b.stream_tls_port if tls else b.stream_port) > 0]

    def placement(self, queue, listener: str = "stream") -> tuple[int, list[int]]:
        """The stream's leader (NO_BROKER if none) and its other in-sync replicas, among ``brokers``."""
        listed = {ref for ref, _, _ in self.brokers(listener)}
        state = self.node.view.state(queue.topic, queue.partition)
        if state is None or state.leader not in listed:
            return NO_BROKER, []
        return state.leader, [b for b in state.isr if b != state.leader and b in listed]

    def when_led(self, queues: list) -> defer.Deferred:
        """Fires once every one of ``queues`` has a leader Metadata can name (or after
        ELECTION_WAIT_S), and their definitions are committed, so the leaders know them: RabbitMQ
        answers Create once the stream is ready, and clients publish next."""
        return defer.gatherResults([self._elected(queues), self.node.broker.amqp_home.committed()])

    def _elected(self, queues: list) -> defer.Deferred:
        d = defer.Deferred()
        deadline = self.node.reactor.seconds() + ELECTION_WAIT_S

        def check() -> None:
            if all(self.placement(q)[0] != NO_BROKER for q in queues) or self.node.reactor.seconds() > deadline:
                d.callback(None)
            else:
                self.node.reactor.callLater(ELECTION_POLL_S, check)
        check()
        return d

    # --- where a stream is served -----------------------------------------------------------------
    def led_here(self, vhost, queue):
        """The queue, local, if this broker leads its topic; else None. A queue whose topic came to
        be led here since the last leadership walk (a tick away) is made local now, so a publisher
        that Metadata sent here is not refused in that moment."""
        rep = self.node.replicas.get(queue.topic, queue.partition)
        if rep is None or rep.role != LEADER:
            return None
        if queue.remote:
            self.node.broker.amqp_home.walk_leadership()
            queue = vhost.queues.get(queue.name)
        return queue if queue is not None and not queue.remote and not queue.deleted else None

    def readable(self, vhost, queue):
        """What a subscription reads: the queue when led here, this broker's replica of it, or None."""
        if not queue.remote:
            return queue
        rep = self.node.replicas.get(queue.topic, queue.partition)
        return None if rep is None else ReplicaStream(vhost, queue, rep.plog, self.node.broker.logs.logs)

    # --- stored offsets: at the consumer name's group coordinator ---------------------------------
    def _coordinator(self, offsets, reference: str) -> int | None:
        """None when this broker coordinates ``reference``; else the coordinator (-1: none now)."""
        partition = offsets.partition_for(reference)
        if self.node.replicas.leader_of(OFFSETS_TOPIC, partition) is not None:
            return None
        state = self.node.view.state(OFFSETS_TOPIC, partition)
        return state.leader if state is not None and state.leader in self.node.view.brokers else -1

    def store_offset(self, offsets, reference: str, topic: str, partition: int, offset: int, committed) -> None:
        """Commit ``offset`` + 1 for ``reference`` here (``committed``, a callable) or at its coordinator."""
        coordinator = self._coordinator(offsets, reference)
        if coordinator is None:
            committed()
            return
        if coordinator < 0:
            log.warning("stream offset not stored: no coordinator for its consumer name now",
                        extra=fields(reference=reference, topic=topic))
            return
        data = {"group_id": reference, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "committed_offset": offset + 1,
                                                           "committed_leader_epoch": -1,
                                                           "committed_metadata": STORED_OFFSET}]}]}
        d = self.peers.call(coordinator, OFFSET_COMMIT, data, version=COMMIT_VERSION)

        def done(answer) -> None:
            codes = [p.error_code for t in answer.topics for p in t.partitions]
            if any(codes):
                log.warning("stream offset not stored at broker %d (error %s)", coordinator, codes,
                            extra=fields(reference=reference, topic=topic))

        d.addCallbacks(done, lambda f: log.warning("stream offset not sent to broker %d: %s", coordinator,
                                                   f.getErrorMessage(), extra=fields(reference=reference)))

    def query_offset(self, offsets, reference: str, topic: str, partition: int) -> defer.Deferred:
        """The committed offset (next to read) of ``reference``, or None; fails if no coordinator answers."""
        coordinator = self._coordinator(offsets, reference)
        if coordinator is None:
            stored = offsets.fetch(reference, [(topic, partition)]).get((topic, partition))
            return defer.succeed(None if stored is None else stored.offset)
        if coordinator < 0:
            return defer.fail(RuntimeError("no coordinator for the consumer name now"))
        data = {"group_id": reference, "topics": [{"name": topic, "partition_indexes": (partition,)}],
                "require_stable": False}

        def done(answer):
            if answer.error_code:
                raise RuntimeError(f"OffsetFetch answered error {answer.error_code}")
            for t in answer.topics:
                for p in t.partitions:
                    if p.partition_index == partition and not p.error_code and p.committed_offset >= 0:
                        return p.committed_offset
            return None
        return self.peers.call(coordinator, OFFSET_FETCH, data, version=FETCH_VERSION).addCallback(done)
