"""``ha-mode`` policies applied to classic queues that exist: their topics' replicas follow them.

RabbitMQ mirrors a classic queue as soon as an ``ha-mode`` policy matches it, and stops when none
does. A queue's replicas are placed when it is declared (gateway.cluster.amqp_home placement);
afterwards the broker leading a classic queue's topic compares them at each tick with what the
policies ask now, and asks for a reassignment of the partition (Kafka's: new replicas copy the
log and join the in-sync replicas, the leader stays first): more replicas when a policy asks for
more (``ha-mode: all`` counts a broker that joins), fewer when it asks for fewer or none applies.
A broker that is down keeps its replica (it catches up when back), as a Kafka partition's does,
so ``ha-mode: all`` does not shed it. Quorum queues and streams keep the members they were
declared with, as in RabbitMQ.
"""
from __future__ import annotations

import json
import logging

from twisted.internet import threads
from twisted.python.failure import Failure

from core.cluster.view import Reassignment
from gateway.logs import fields

log = logging.getLogger(__name__)

MAX_PER_TICK = 100  # reassignments asked per tick: a policy matching 10,000 queues spreads over ticks


class MirrorKeeper:
    def __init__(self, home):
        self.home = home  # gateway.cluster.amqp_home.AmqpHome (or its spread successor)
        self.asking: set[tuple[str, int]] = set()  # reassignments being written to ZooKeeper
        self._seen = None  # what the last full look saw: nothing changed, no need to look again

    def check(self, vhosts, queues) -> None:
        """``vhosts``: the model's; ``queues()``: the queues whose topics this broker leads. They
        are looked at only when the cluster's view, a vhost's policies or its queues changed (10,000
        queues each tick would cost a few per cent of a core)."""
        home, view = self.home, self.home.node.view
        seen = (view, [(v.name, len(v.queues), json.dumps(v.policies, sort_keys=True)) for v in vhosts.values()])
        if self._seen is not None and self._seen[0] is view and self._seen[1] == seen[1]:
            return
        self._seen = seen
        live = sorted(view.brokers)
        wanted_moves = []
        for queue in queues():
            if queue.args.queue_type != "classic":
                continue
            arguments = queue.arguments or {}
            key = (queue.topic, queue.partition)
            state = view.state(*key)
            current = tuple(view.replicas(*key))
            if state is None or state.leader != home.node_id or not current or key in view.reassignments \
                    or key in self.asking:
                continue
            known = len(set(live) | set(current))  # a broker that is down still counts for ha-mode all
            wanted = max(home._replicas_wanted({**arguments, "x-queue-name": queue.name, "x-vhost": queue.vhost},
                                               known), 1)
            if wanted == len(current):
                continue
            target = _target(current, state.leader, live, wanted, queue.name)
            if target != current:
                wanted_moves.append(Reassignment(queue.topic, queue.partition, target, current))
            if len(wanted_moves) >= MAX_PER_TICK:
                self._seen = None  # the rest at the next tick
                break
        if wanted_moves:
            keys = {(r.topic, r.partition) for r in wanted_moves}
            self.asking |= keys
            log.info("classic queues' replicas follow their ha-mode policies", extra=fields(
                queues=len(wanted_moves), first=wanted_moves[0].topic, replicas=list(wanted_moves[0].target)))
            threads.deferToThread(home.node.agent.request_reassignment, wanted_moves).addBoth(self._asked, keys)

    def _asked(self, result, keys: set) -> None:
        self.asking -= keys
        if isinstance(result, Failure):
            self._seen = None
            log.warning("replicas of %d classic queue(s) not reassigned: %s; asked again at the next tick",
                        len(keys), result.getErrorMessage())


def _target(current: tuple[int, ...], leader: int, live: list[int], wanted: int, name: str) -> tuple[int, ...]:
    """``wanted`` replicas: the leader first, then those kept (live ones first), then live brokers
    added, starting at a place the queue's name picks so that mirrors spread."""
    others = sorted((b for b in current if b != leader), key=lambda b: b not in live)
    replicas = [leader] + others[:wanted - 1]
    candidates = [b for b in live if b not in replicas]
    if candidates:
        start = sum(name.encode()) % len(candidates)  # the same on every run, unlike hash()
        candidates = candidates[start:] + candidates[:start]
    return tuple(replicas + candidates[:wanted - len(replicas)])
