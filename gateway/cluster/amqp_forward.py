"""Publishes for queues led by other brokers, sent to their leaders as Kafka Produce requests.

The router (routing.broker.Router.commit) hands over one record batch per RemoteQueue per loop
turn; they are gathered per leader and sent together at the end of the turn, one Produce per
leader (acks=-1, so the answer means every in-sync replica has them, which is what a publisher
confirm promises), as a Kafka producer batches per broker. A queue's batches go in order over the
one connection to its leader, so the order of one channel's publishes to a queue is kept. When
the answer comes, each publish waiting for it is told: stored (its confirm can go once its other
copies are stored too) or refused (nack). The brokers speak nothing but Kafka to each other
(DESIGN.md): no private link for AMQP.

A queue whose leader this broker does not know yet (a queue just declared on another broker,
whose topic's leadership has not reached this broker's view of the cluster; a failover under way)
holds its batches, in order, for up to :data:`LEADER_WAIT_S`, asking again every
:data:`LEADER_POLL_S`; then they are refused, so a queue whose only broker is down answers with
a nack, not a hang.
"""
from __future__ import annotations

import logging
from typing import Callable

from kio.schema.errors import ErrorCode

from gateway.logs import fields
from wire.produce_request import ProduceBody

log = logging.getLogger(__name__)

PRODUCE = 0
TIMEOUT_MS = 30_000
LEADER_WAIT_S, LEADER_POLL_S = 3.0, 0.05


class PublishForwarder:
    def __init__(self, reactor, peers, leader_of: Callable[[str, int], int], on_answered: Callable[[], None]):
        self.reactor = reactor
        self.peers = peers  # call(node_id, api_key, data) -> Deferred of the response
        self.leader_of = leader_of  # (topic, partition) -> node id, -1 if none
        self.on_answered = on_answered  # publishes were settled: confirms may go out
        self._pending: dict[int, list[tuple[str, int, bytes, list]]] = {}
        self._scheduled = None
        # (topic, partition) -> (queue, since, [(batch, publishes)]): batches waiting for a leader
        self._leaderless: dict[tuple[str, int], tuple[object, float, list]] = {}
        self._asking = None
        self.sent = self.failed = 0  # batches, for the metrics and tests

    def forward(self, queue, batch: bytes, count: int, publishes: list) -> None:
        key = (queue.topic, queue.partition)
        held = self._leaderless.get(key)
        leader = self.leader_of(*key) if held is None else -1  # (behind held ones: the order is kept)
        if leader < 0:
            if held is None:
                held = self._leaderless[key] = (queue, self.reactor.seconds(), [])
                if self._asking is None:
                    self._asking = self.reactor.callLater(LEADER_POLL_S, self._ask_leaders)
            held[2].append((batch, publishes))
            return
        self._queue(leader, queue.topic, queue.partition, batch, publishes)

    def _queue(self, leader: int, topic: str, partition: int, batch: bytes, publishes: list) -> None:
        self._pending.setdefault(leader, []).append((topic, partition, batch, publishes))
        if self._scheduled is None:
            self._scheduled = self.reactor.callLater(0, self.flush)

    def _ask_leaders(self) -> None:
        """Batches held for want of a leader: sent once one is known, refused after LEADER_WAIT_S."""
        self._asking = None
        now = self.reactor.seconds()
        for key, (queue, since, batches) in list(self._leaderless.items()):
            leader = self.leader_of(*key)
            if leader < 0 and now - since < LEADER_WAIT_S:
                continue
            del self._leaderless[key]
            for batch, publishes in batches:
                if leader < 0:
                    self._settle(publishes, f"queue '{queue.name}' in vhost '{queue.vhost}' has no leader right now")
                else:
                    self._queue(leader, key[0], key[1], batch, publishes)
            if leader < 0:
                self.on_answered()
        if self._leaderless:
            self._asking = self.reactor.callLater(LEADER_POLL_S, self._ask_leaders)

    def flush(self) -> None:
        self._scheduled = None
        pending, self._pending = self._pending, {}
        for leader, items in pending.items():
            while items:  # a partition appears once per request: a second batch for it goes in the next
                request, rest, seen = [], [], set()
                for item in items:
                    (rest if (item[0], item[1]) in seen else request).append(item)
                    seen.add((item[0], item[1]))
                self._send(leader, request)
                items = rest

    def produce(self, leader: int, topic: str, partition: int, batch: bytes):
        """One batch to one partition at ``leader``; a Deferred of its error code."""
        d = self.peers.call(leader, PRODUCE, _request([(topic, partition, batch, None)]))
        return d.addCallback(lambda answer: _errors(answer).get((topic, partition), int(ErrorCode.unknown_server_error)))

    def _send(self, leader: int, items: list) -> None:
        d = self.peers.call(leader, PRODUCE, _request(items))

        def answered(answer) -> None:
            errors = _errors(answer)
            for topic, partition, _, publishes in items:
                error = errors.get((topic, partition), int(ErrorCode.unknown_server_error))
                if error:
                    self.failed += 1
                    self._settle(publishes, f"broker {leader} answered {ErrorCode(error).name} for {topic}")
                else:
                    self.sent += 1
                    self._settle(publishes, None)
            self.on_answered()

        def failed(failure) -> None:
            self.failed += len(items)
            for _, _, _, publishes in items:
                self._settle(publishes, failure.getErrorMessage())
            self.on_answered()

        d.addCallbacks(answered, failed)

    @staticmethod
    def _settle(publishes: list, error: str | None) -> None:
        for publish in publishes:
            publish.forwarded -= 1
            if error is not None:
                publish.rejected = True
        if error is not None and publishes:
            log.warning("forwarded publishes not stored: %s", error, extra=fields(publishes=len(publishes)))


def _request(items: list) -> ProduceBody:
    topics: dict[str, list[tuple[int, bytes]]] = {}
    for topic, partition, batch, _ in items:
        topics.setdefault(topic, []).append((partition, batch))
    return ProduceBody(-1, TIMEOUT_MS, topics)


def _errors(answer) -> dict[tuple[str, int], int]:
    return {(t.name, p.index): int(p.error_code) for t in answer.responses for p in t.partition_responses}

