"""What only a queue's leader knows, asked from another broker of a spread cluster: its figures
(declare-ok, delete-ok, the management API) and its purge. Calls the brokers' own AmqpQueue API
(wire.kafka_private, answered by gateway.kafka.apis.amqp_queue) over the peer links.

A queue's consumers are spread too: each broker counts those connected to it, so the figures
ask every live broker (in parallel) and add their consumers up; the messages are the leader's.
A broker that does not answer counts for nothing (the figures are a snapshot, as RabbitMQ's);
a purge the leader cannot answer is an error the client hears. A queue just declared may have no
leader serving it yet (a replicated one's election takes a moment, and the elected broker makes
the queue its own at its next tick): its figures are asked again until the leader answers as
such, up to :data:`LEADER_WAIT_S`, so that declare-ok, as RabbitMQ's for a quorum queue, means
the queue can take publishes (a forwarded publish to a queue not served yet is refused); a stream queue's
waits for this broker's replica too, which its consumers here read.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from twisted.internet import defer, task

from wire.kafka_private import AMQP_QUEUE, FIGURES, PURGE

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0
LEADER_WAIT_S = 10.0


@dataclass(frozen=True)
class Figures:
    ready: int
    unacked: int
    consumers: int
    led: bool  # its leader answered (it serves the queue)
    leader: int = -1  # the broker that answered as its leader


class QueueUnavailable(RuntimeError):
    """The queue's leader did not answer (down, moving) or refused."""


class QueueOps:
    def __init__(self, reactor, peers, live: Callable[[], list[int]], node_id: int,
                 replicated_here: Callable[[object], bool] = lambda queue: False):
        self.reactor = reactor
        self.replicated_here = replicated_here  # whether this broker is one of the queue's replicas
        self.peers = peers  # gateway.cluster.peers.PeerClients
        self.live = live  # the live brokers' ids
        self.node_id = node_id

    def _ask(self, node: int, queue, op: int):
        return self.peers.call(node, AMQP_QUEUE, {"vhost": queue.vhost, "queue": queue.name, "op": op},
                               version=0, timeout=TIMEOUT_S)

    def figures(self, queue, wait: bool = True) -> defer.Deferred:
        """Figures of a queue led elsewhere (``queue`` is this broker's RemoteQueue); never fails.
        ``wait``: until its leader serves it (answers as its leader), if it does not yet."""
        d = self._figures(queue)
        return d.addCallback(self._served, queue, 0.0) if wait else d

    def _served(self, figures: "Figures", queue, waited: float):
        ready = figures.led and (not queue.is_stream or queue.reads_here or not self.replicated_here(queue))
        if ready or queue.deleted or waited >= LEADER_WAIT_S:
            return figures
        return task.deferLater(self.reactor, 0.05, self._figures, queue).addCallback(
            self._served, queue, waited + 0.05)

    def _figures(self, queue) -> defer.Deferred:
        others = [b for b in self.live() if b != self.node_id]
        asked = [self._ask(b, queue, FIGURES).addErrback(self._unanswered, b, queue) for b in others]

        def add_up(answers) -> Figures:
            ready = unacked = 0
            led, leader = False, -1
            consumers = queue.consumer_count()
            for node, answer in zip(others, answers):
                if answer is None or answer.error_code:
                    continue
                consumers += answer.consumer_count
                if answer.leads:
                    ready, unacked, led, leader = answer.message_count, answer.unacked_count, True, node
            return Figures(ready, unacked, consumers, led, leader)
        return defer.gatherResults(asked).addCallback(add_up)

    def purge(self, queue) -> defer.Deferred:
        """The number of messages purged at the queue's leader; fails with QueueUnavailable."""
        if queue.leader >= 0:
            return self._purge_at(queue.leader, queue)

        # this broker's view has no leader for it this instant (the stub is new, or a view update
        # lags): the broker answering its figures as leader is the one
        def found(figures: Figures) -> defer.Deferred:
            if not figures.led:
                raise QueueUnavailable(f"queue '{queue.name}' has no leader right now")
            return self._purge_at(figures.leader, queue)
        return self.figures(queue).addCallback(found)

    def _purge_at(self, leader: int, queue) -> defer.Deferred:
        def answered(answer) -> int:
            if answer.error_code:
                raise QueueUnavailable(f"broker {leader} did not purge queue '{queue.name}': "
                                       f"{answer.error_message or answer.error_code.name}")
            return answer.message_count

        def failed(failure):
            raise QueueUnavailable(f"broker {leader}, leader of queue '{queue.name}', did not answer: "
                                   f"{failure.getErrorMessage()}")
        return self._ask(leader, queue, PURGE).addCallbacks(answered, failed)

    @staticmethod
    def _unanswered(failure, node: int, queue) -> None:
        log.info("no figures of queue %r from broker %d: %s", queue.name, node, failure.getErrorMessage())
        return None
