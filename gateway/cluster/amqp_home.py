"""AMQP in cluster mode: one broker is the AMQP home, every other broker forwards to it.

The home is the leader of ``__amqp_state`` partition 0 (routing.state: durable definitions and
ack floors, replicated like any topic). Queue and exchange-log topics are created with the
home as their first replica and marked to follow that partition's leadership, so the
controller keeps them led by the home whenever the home is in sync. The home runs the AMQP
model (routing.broker.Router) over those logs; an AMQP client connected to any other broker is
forwarded there byte for byte (Twisted's port forwarder), so every broker accepts every AMQP
client and any queue can be used from any of them.

Replication per queue, RabbitMQ's way of asking for it:
* ``x-queue-type: quorum`` (and streams): ``x-quorum-initial-group-size`` replicas, default
  ``--default-replication-factor``;
* a classic queue matching a policy with ``ha-mode`` ``all`` (every broker) or ``exactly``
  (``ha-params`` replicas), also when the policy comes after the queue
  (gateway.cluster.amqp_mirrors);
* any other classic queue: one replica, on the home (as a non-mirrored RabbitMQ queue lives on
  one node).
Publisher confirms wait for the high watermark, that is for every in-sync replica.

Every other broker that holds a replica of ``__amqp_state`` keeps a copy of the whole model
(vhosts, policies, exchanges, queues, bindings) current with that replica, below its high
watermark (routing.definitions_follower): what a routing decision or the management API's view
needs is then known on every broker, not only on the home.

When the home dies the controller elects a new leader of ``__amqp_state`` from its ISR; that
broker reads the definitions and ack floors from its replica, waits until it leads the queues
it holds in sync, and opens for AMQP; messages not acked before the failure are delivered
again, flagged redelivered. Clients of the old home reconnect (to any broker).
"""
from __future__ import annotations

import logging

from twisted.internet import protocol
from twisted.protocols.portforward import ProxyFactory

from core.errors import LogError
from core.replication import LEADER
from routing.broker import Router
from routing.definitions_follower import DefinitionsFollower
from routing.state import STATE_TOPIC, STATE_TOPIC_CONFIGS, LogState, NoState
from gateway.cluster.amqp_mirrors import MirrorKeeper
from gateway.logs import fields

log = logging.getLogger(__name__)

SHUTDOWN_TEXT = "broker forced connection closure with reason 'the AMQP home moved to another broker'"


class AmqpHome:
    def __init__(self, broker, node):
        self.broker = broker
        self.node = node
        self.node_id = node.node_id
        self.is_home = False
        self.waiting = False  # leads __amqp_state, waiting to lead its queues before opening
        self.follower: DefinitionsFollower | None = None  # not the home: the model, followed from the state log
        self.mirrors = MirrorKeeper(self)  # ha-mode policies: classic queues' replicas follow them

    # --- which broker is home ------------------------------------------------------------
    def home_id(self) -> int:
        state = self.node.view.state(STATE_TOPIC, 0)
        return state.leader if state is not None and state.leader in self.node.view.brokers else -1

    def ensure_state_topic(self) -> None:
        """Create ``__amqp_state`` once enough brokers are registered (any broker may; one wins)."""
        if self.broker.logs.store.get_topic(STATE_TOPIC) is not None:
            return
        try:
            self.broker.logs.create_topic(STATE_TOPIC, 1, STATE_TOPIC_CONFIGS)
            log.info("created the AMQP state topic", extra=fields(topic=STATE_TOPIC))
        except LogError as exc:
            log.debug("AMQP state topic not created yet: %s", exc)

    def sync(self) -> None:
        """After every view: become home, stay home, or stop being home."""
        if self.is_home:
            if self.home_id() != self.node_id:  # the cluster elected another home
                self._resign()
            return
        self._follow()
        if self.node.replicas.leader_of(STATE_TOPIC, 0) is None:
            self.waiting = False
            return
        pending = self._queues_not_led()
        if pending:
            if not self.waiting:
                log.info("AMQP home elected; waiting to lead its queues", extra=fields(queues=len(pending)))
            self.waiting = True
            return
        self.waiting = False
        self._open()

    def state_fetched(self) -> None:
        """Home mode serves AMQP on the home only: other brokers' copies of the model follow at the tick."""

    def tick(self) -> None:
        if not self.is_home:
            self.sync()  # a home waiting to lead its queues re-checks without a new view
        else:
            self.mirrors.check(self.broker.amqp.router.vhosts, self.local_queues)

    def local_queues(self):
        """The queues whose delivery state this broker holds (it leads their topics)."""
        for vhost in self.broker.amqp.router.vhosts.values():
            for queue in vhost.queues.values():
                if not queue.remote:
                    yield queue

    def _follow(self) -> None:
        """Bring this broker's copy of the model up to the state log's high watermark."""
        plog = self.broker.logs.logs.get((STATE_TOPIC, 0))
        if plog is None:
            self.follower = None
            return
        if self.follower is None or self.follower.plog is not plog:
            self.follower = DefinitionsFollower(Router(self.broker.data_dir, self.broker.logs, state=NoState()), plog)
        applied = self.follower.catch_up()
        if applied:
            log.debug("AMQP definitions followed", extra=fields(entries=applied, offset=self.follower.position))

    def model(self) -> Router | None:
        """The AMQP model this broker knows: its own on the home, else its followed copy (None: none yet)."""
        if self.is_home:
            return self.broker.amqp.router
        return self.follower.router if self.follower is not None else None

    def _queues_not_led(self) -> list[str]:
        view = self.node.view
        out = []
        for name, topic in view.topics.items():
            if topic.follows != STATE_TOPIC:
                continue
            state = view.state(name, 0)
            if state is not None and self.node_id in state.isr and state.leader != self.node_id:
                out.append(name)  # in sync here: the controller moves it to us shortly
        return out

    def _open(self) -> None:
        broker = self.broker
        plog = broker.logs.get_log(STATE_TOPIC, 0)
        router = Router(broker.data_dir, broker.logs, state=LogState(plog))
        router.placement = self.placement
        router.available = self.available
        broker.amqp.use_router(router)
        router.load()
        self.is_home = True
        self.follower = None
        log.info("this broker is the AMQP home", extra=fields(node_id=self.node_id,
                                                              queues=sum(len(v.queues) for v in router.vhosts.values())))

    def _resign(self) -> None:
        broker = self.broker
        for connection in list(broker.amqp.connections):
            connection.confirms_waiting.clear()  # nothing is confirmed from a log this broker no longer leads
            connection.close_connection(320, SHUTDOWN_TEXT)
        broker.amqp.confirming.clear()
        broker.amqp.use_router(Router(broker.data_dir, broker.logs, state=NoState()))
        self.is_home = False
        log.warning("no longer the AMQP home; AMQP clients are forwarded to the new one",
                    extra=fields(home=self.home_id()))

    # --- queue placement ----------------------------------------------------------------------
    def placement(self, arguments: dict) -> dict:
        live = sorted(self.node.view.brokers)
        others = [b for b in live if b != self.node_id]
        wanted = self._replicas_wanted(arguments, len(live))
        start = hash(arguments.get("x-queue-name", "")) % max(len(others), 1)
        rotated = others[start:] + others[:start]
        return {"assignment": [tuple([self.node_id] + rotated[:max(wanted, 1) - 1])], "follows": STATE_TOPIC}

    def _replicas_wanted(self, arguments: dict, live: int) -> int:
        if arguments.get("x-queue-type") in ("quorum", "stream"):
            size = arguments.get("x-quorum-initial-group-size") or arguments.get("x-initial-cluster-size") or \
                self.node.store.default_replication_factor
            return min(int(size), live)
        policy = self._policy_for(arguments)
        if policy is not None:
            mode = policy.get("ha-mode")
            if mode == "all":
                return live
            if mode == "exactly":
                return min(int(policy.get("ha-params", 1)), live)
        return 1

    def _policy_for(self, arguments: dict) -> dict | None:
        name = arguments.get("x-queue-name")
        vhost = self.broker.amqp.router.vhosts.get(arguments.get("x-vhost", "/"))
        if name is None or vhost is None:
            return None
        return vhost.effective_policy(name)

    def available(self, topic: str, partition: int = 0) -> bool:
        """Whether the home may append to a queue's partition (a super stream's topic has one per
        stream): it leads it, or just created it as the partition's first replica."""
        rep = self.node.replicas.get(topic, partition)
        if rep is not None:
            return rep.role == LEADER
        meta = self.broker.logs.store.get_topic(topic)
        return meta is not None and len(meta.replicas) > partition and meta.replicas[partition][0] == self.node_id

    # --- the AMQP listener ---------------------------------------------------------------------
    def door(self, local_factory) -> "AmqpDoor":
        return AmqpDoor(self, local_factory)


class AmqpDoor(protocol.Factory):
    """The AMQP listener of a cluster broker: served here on the home, forwarded to it elsewhere."""
    noisy = False

    def __init__(self, home: AmqpHome, local_factory):
        self.home = home
        self.local = local_factory

    def buildProtocol(self, addr):
        if self.home.is_home:
            return self.local.buildProtocol(addr)
        home = self.home.node.view.brokers.get(self.home.home_id())
        if home is None or home.node_id == self.home.node_id or home.amqp_port < 0:
            return None  # no home yet (or still opening here): the client retries
        forward = ProxyFactory(home.amqp_host, home.amqp_port)
        forward.noisy = False
        return forward.buildProtocol(addr)

