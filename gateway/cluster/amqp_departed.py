"""The non-durable AMQP definitions of a broker that has left the cluster, removed by the others.

In cluster mode 'spread' a broker's non-durable queues, exchanges and bindings are stored in
``__amqp_state`` tagged with that broker (routing.vhost_definitions), so that a publish on any
broker reaches them; the broker removes its own when it starts again. One that does not come
back would leave them on every broker: queues that take publishes nobody will ever read, names
that cannot be declared again. RabbitMQ deletes a node's transient queues when the node goes
down. Here the broker leading ``__amqp_state`` does it once a broker has been gone from the
cluster for ``--departed-broker-after-ms`` (a restart takes less, and cleans up after itself):
it removes the definitions (every broker applies the removal from the log, and consumers of
those queues are cancelled there) and deletes the topics of the departed broker's queues.
"""
from __future__ import annotations

import logging
import time

from twisted.internet import threads

from gateway.logs import fields
from routing import definitions
from routing.definitions_follower import apply_changes
from routing.state import STATE_TOPIC

log = logging.getLogger(__name__)


LOOK_EVERY_S = 5.0  # the stored definitions are walked this often, not at every tick


class DepartedBrokers:
    def __init__(self, spread, after_s: float, clock=time.monotonic):
        self.spread = spread  # gateway.cluster.amqp_spread.AmqpSpread
        self.after_s = after_s
        self.clock = clock
        self.missing_since: dict[int, float] = {}  # broker -> when this broker first saw it gone
        self._looked = float("-inf")

    def check(self) -> None:
        """At each tick: remove what brokers gone long enough left behind (on the state topic's leader)."""
        spread = self.spread
        if not spread.opened or spread.node.replicas.leader_of(STATE_TOPIC, 0) is None:
            self.missing_since.clear()  # another broker decides; a new leader starts its clock afresh
            return
        if self.clock() - self._looked < LOOK_EVERY_S:
            return
        self._looked = self.clock()
        router = spread.broker.amqp.router
        gone = definitions.transient_owners(router._stored) - set(spread.node.view.brokers) - {None}
        now = self.clock()
        self.missing_since = {node: self.missing_since.get(node, now) for node in gone}
        for node, since in list(self.missing_since.items()):
            if now - since >= self.after_s:
                del self.missing_since[node]
                self.remove(router, node)

    def remove(self, router, node: int) -> None:
        changes = definitions.removals_of_node(router._stored, node)
        if not changes:
            return
        topics = []
        for vhost_name, key, _ in changes:
            kind, _, name = key.partition(":")
            vhost = router.vhosts.get(vhost_name)
            if kind == "queue" and vhost is not None and name in vhost.queues:
                topics.append(vhost.queues[name].topic)
        apply_changes(router, changes)  # here, as the other brokers will from the log
        router.state.append_journal(definitions.JOURNAL, changes)
        log.warning("broker %d has been gone from the cluster for %.0f s: its non-durable AMQP definitions are "
                    "removed", node, self.after_s, extra=fields(broker=node, definitions=len(changes),
                                                               topics=len(topics)))
        agent = self.spread.node.agent
        for topic in topics:
            threads.deferToThread(agent.delete_topic, topic).addErrback(self._not_deleted, topic)

    @staticmethod
    def _not_deleted(failure, topic: str) -> None:
        log.warning("topic %s of a departed broker's queue not deleted: %s", topic, failure.getErrorMessage())
