"""Cluster mode: a transaction coordinator's markers for partitions led by other brokers.

Kafka's design (KIP-98): once PrepareCommit/PrepareAbort is durable, the coordinator sends
WriteTxnMarkers (API 27) to the leader of every partition of the transaction; that leader
appends the control batch and answers once it is on the in-sync replicas. Only when every
partition has answered does the coordinator write CompleteCommit/CompleteAbort. A partition
whose leader moved, is unknown or cannot be reached is asked again (at its new leader, from
the latest cluster view) until it answers, as Kafka's coordinator retries: for as long as
this broker coordinates the transaction (a new coordinator finishes it from its replica of
the log); a partition of a deleted topic counts as done.

The blocking admin client does the talking, one worker thread per leader and round, so the
reactor never waits on a socket.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from twisted.internet import defer, task, threads

from core.transactions import RemoteMarkers
from gateway.ctl.kafka_client import KafkaAdmin, KafkaClientError
from gateway.logs import fields

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
RETRY_S = 0.5
WARN_EVERY_S = 60.0  # markers still not written: said in the log this often
_DONE = (ErrorCode.none, ErrorCode.unknown_topic_or_partition)  # deleted topics have nothing to mark


@defer.inlineCallbacks
def send(ctx, markers: RemoteMarkers, coordinator_epoch: int = 0):
    """Fires (with None) once every partition's leader has the marker; fails if this broker stops
    coordinating the transaction meanwhile."""
    left = set(markers.partitions)
    waited = 0.0
    while left:
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, partition in sorted(left):
            state = ctx.cluster.view.state(topic, partition)
            if ctx.cluster.store.get_topic(topic) is None:
                left.discard((topic, partition))  # deleted meanwhile
            elif state is not None and state.leader in ctx.cluster.view.brokers:
                by_leader.setdefault(state.leader, []).append((topic, partition))
        rounds = []
        for leader, partitions in by_leader.items():
            if leader == ctx.node_id:
                rounds.append(_write_here(ctx, markers, partitions))
                continue
            info = ctx.cluster.view.brokers[leader]
            rounds.append(threads.deferToThread(_call, f"{info.host}:{info.port}", markers, partitions,
                                                coordinator_epoch).addErrback(_unreachable, leader, partitions))
        results = yield defer.gatherResults(rounds) if rounds else defer.succeed([])
        for answered in results:
            for tp, error in answered:
                if error in _DONE:
                    left.discard(tp)
        if not left:
            return
        if markers.transactional_id and not ctx.transactions.coordinates(markers.transactional_id):
            raise KafkaClientError(f"no longer the coordinator of {markers.transactional_id!r}: its new "
                                   f"coordinator writes the markers for {sorted(left)}")
        yield task.deferLater(ctx.reactor, RETRY_S, lambda: None)
        waited += RETRY_S
        if waited % WARN_EVERY_S < RETRY_S:
            log.warning("transaction markers still not written after %.0f s; retrying", waited,
                        extra=fields(transactional_id=markers.transactional_id, partitions=sorted(left)))


def _write_here(ctx, markers: RemoteMarkers, partitions) -> defer.Deferred:
    """This broker became the partition's leader since the step began: append the marker here
    and wait, as a remote leader would, until the in-sync replicas have it."""
    out, waits = [], []
    for topic, partition in partitions:
        written = None
        if ctx.cluster.replicas.leader_of(topic, partition) is not None:
            written = ctx.transactions.write_marker(topic, partition, markers.producer_id, markers.epoch,
                                                    markers.commit)
        if written is None:
            out.append(((topic, partition), ErrorCode.not_leader_or_follower))
        else:
            waits.append(((topic, partition), ctx.partition(topic, partition), written[2]))
    if not waits:
        return defer.succeed(out)
    ctx.request_flush()

    def durable(in_time: bool) -> list:
        return out + [(tp, ErrorCode.none if plog.high_watermark > last else ErrorCode.request_timed_out)
                      for tp, plog, last in waits]
    return ctx.waiters.wait(lambda: all(plog.high_watermark > last for _, plog, last in waits),
                            30.0).addCallback(durable)


def _unreachable(failure, leader: int, partitions) -> list:
    log.info("transaction markers for %s not written at broker %d yet: %s", partitions, leader,
             failure.getErrorMessage())
    return [(tp, ErrorCode.not_leader_or_follower) for tp in partitions]


# --- on a worker thread ---------------------------------------------------------------------------

def _call(address: str, markers: RemoteMarkers, partitions, coordinator_epoch: int) -> list:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    with KafkaAdmin(address, timeout=35.0, client_id="gateway-txn-markers") as client:
        answer = client.call(WRITE_TXN_MARKERS, {"markers": [{
            "producer_id": markers.producer_id, "producer_epoch": markers.epoch,
            "transaction_result": markers.commit, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]})
    return [((t.name, p.partition_index), p.error_code) for m in answer.markers for t in m.topics
            for p in t.partitions]
