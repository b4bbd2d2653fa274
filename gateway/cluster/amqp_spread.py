"""AMQP in cluster mode 'spread': every broker runs the AMQP model, each queue is led where placed.

RabbitMQ's cluster model (``--amqp-cluster-mode spread``; 'home', gateway.cluster.amqp_home,
runs all of AMQP on one broker). Each broker:

* keeps the whole model: its own router writes its changes to the replicated ``__amqp_state``
  (at that topic's leader: appended here when it leads it, else sent there as a Produce), each
  record tagged with the writing broker (routing.state ORIGIN), and applies the other brokers'
  changes as its replica of the topic gets them (routing.definitions_follower);
* serves every AMQP client itself: a publish is routed where it arrives; what reaches a queue
  led here is appended locally, what reaches a queue led elsewhere (a routing.remote_queue
  RemoteQueue) goes to that broker as a Produce, batched per leader and loop turn
  (gateway.cluster.amqp_forward), and the publisher's confirm waits for its answer;
* places a new queue by RabbitMQ's queue-leader-locator: ``client-local`` (the default, and
  always for exclusive and non-durable queues) leads it here, ``balanced`` on the broker that
  leads the fewest partitions; the argument ``x-queue-leader-locator`` beats a policy's
  ``queue-leader-locator``, which beats ``--queue-leader-locator``;
* serves a consumer (and basic.get) of a queue led elsewhere over a credit-based link to the
  leader (gateway.cluster.amqp_consume; the leader's end: gateway.cluster.link_server), its
  credit being the consumer's prefetch;
* turns a queue into a local one when it comes to lead its topic (a failover, a move) and into a
  RemoteQueue when it stops leading it.

Non-durable exchanges, queues and bindings are stored too (flagged, with the broker they belong
to), so that a publish on any broker reaches, say, an RPC client's exclusive reply queue on
another; a broker's own are removed when it starts again.

The figures of a queue led elsewhere (declare-ok, delete-ok and its if-empty / if-unused) and its
purge are asked of the leader and the other brokers (gateway.cluster.amqp_queue_ops).

The non-durable definitions of a broker that has left the cluster for good are removed by the
state topic's leader (gateway.cluster.amqp_departed).
"""
from __future__ import annotations

import json
import logging

from twisted.internet import defer, protocol, threads
from twisted.python.failure import Failure

from core.cluster.view import Reassignment
from core.replication import LEADER
from gateway.cluster.amqp_consume import ConsumerLinks, QueueLink
from gateway.cluster.amqp_departed import DepartedBrokers
from gateway.cluster.amqp_home import AmqpHome
from gateway.cluster.amqp_queue_ops import QueueOps
from gateway.logs import fields
from routing import definitions
from routing.broker import Router
from routing.delayed import DelayLog, RemoteDelayLog
from routing.definitions_follower import DefinitionsFollower
from routing.queue import Queue, position_key
from routing.remote_queue import RemoteQueue
from routing.state import STATE_TOPIC, LogState, decode_state_records
from wire.records import Record, encode_batch

log = logging.getLogger(__name__)

LEADERSHIP_WALK_S = 5.0  # the leadership walk's safety net: at least this often
WRITTEN_WAIT_S = 5.0  # how long a declaration's answer waits for its state record to be committed


def leadership_signature(view, replicas, vhosts: dict) -> tuple:
    """What the leadership walk reads, cheap to compare: the view and the queue and delayed-log
    objects themselves, not their ids. Holding them keeps a replaced stub alive until the next
    walk, so its successor cannot take its freed address and look unchanged."""
    return (view, replicas.generation,
            tuple((tuple(vhost.queues.values()), tuple(vhost.delay_logs.values())) for vhost in vhosts.values()))


FLOORS = "floors"  # the journal of queue ack floors: one record per queue, the latest wins


class SpreadState(LogState):
    """routing.state for one broker of a spread cluster: reads its replica of ``__amqp_state``
    (below the high watermark), writes through the topic's leader, tags what it writes."""

    def __init__(self, spread: "AmqpSpread", plog):
        super().__init__(plog, origin=str(spread.node_id).encode(), track=definitions.JOURNAL)
        self.spread = spread
        self._floors: dict[str, dict] = {}

    def open(self) -> None:
        super().open(self.plog.high_watermark)

    def read(self, name, default):
        if name == "ack-floors":  # the latest floor of every queue, whoever led it last
            return {change[1]: change[2] for change in self._journals.get(FLOORS, {}).values()} or default
        return super().read(self._per_node(name), default)

    def latest_floors(self) -> dict[str, dict]:
        """Every queue's floor as the replica has it now (another broker may have led it since open)."""
        floors = {}
        records = self.plog.replay(end=self.plog.high_watermark)
        for (_, entry), value in decode_state_records(records, end=self.plog.high_watermark, only=FLOORS):
            if entry is not None:
                key = json.loads(entry)[1]
                if value is None:
                    floors.pop(key, None)
                else:
                    floors[key] = value[2]
        return floors

    def write(self, name, doc, *, pretty=False):
        if name == "ack-floors":
            changes = [("", key, value) for key, value in doc.items() if self._floors.get(key) != value]
            changes += [("", key, None) for key in self._floors if key not in doc and not key.startswith("share:")]
            self._floors = dict(doc)
            if changes:
                self.append_journal(FLOORS, changes)
            return
        super().write(self._per_node(name), doc, pretty=pretty)

    def read_journal(self, name):
        if name == FLOORS:
            return None, list(self._journals.get(FLOORS, {}).values())
        return super().read_journal(name)

    def _per_node(self, name: str) -> str:
        return f"{name}@{self.spread.node_id}" if name == "transient" else name

    def _append(self, records: list[Record]) -> None:
        self.spread.append_state(encode_batch(self._tagged(records)))


class AmqpSpread(AmqpHome):
    """Shares AmqpHome's state-topic creation and replica counting; replaces its single home."""

    def __init__(self, broker, node, forwarder):
        super().__init__(broker, node)
        self.forwarder = forwarder  # gateway.cluster.amqp_forward.PublishForwarder
        self.links = None  # gateway.cluster.amqp_consume.ConsumerLinks, made with the first remote consumer
        self.opened = False
        self.own_follower: DefinitionsFollower | None = None
        self._outbox: list[bytes] = []  # state records for the topic's leader, in order
        self._sending = False
        self._stored = 0  # outbox batches stored at the leader so far (the outbox holds the rest)
        self._local_end = None  # (log, end offset) of the last batch appended here, as the topic's leader
        self._asked = False  # a reassignment adding this broker to the state topic's replicas is under way
        self.departed = DepartedBrokers(self, broker.settings.departed_broker_after_ms / 1000)
        self._walked, self._walked_at = None, 0.0  # what the last leadership walk saw, and when

    # --- opening ---------------------------------------------------------------------------------
    def sync(self) -> None:
        self.ensure_state_topic()
        self._replicate_state_here()
        plog = self.broker.logs.logs.get((STATE_TOPIC, 0))
        if not self.opened:
            if plog is not None and self.home_id() >= 0:
                self._open(plog)
            return
        self._catch_up()
        self._leadership()

    def _catch_up(self) -> None:
        follower = self.own_follower
        if follower is None:
            return
        plog = self.broker.logs.logs.get((STATE_TOPIC, 0))
        if plog is not None and plog is not follower.plog:
            self._rebind(plog)
        follower.catch_up()

    def _rebind(self, plog) -> None:
        """This broker's replica of the state topic was removed and made again (two brokers asking
        for a replica at once: the later reassignment drops the earlier one's broker, which asks
        again): follow the new replica from where the old one was applied, or every definition
        made since would be missed here."""
        log.info("following the new replica of the AMQP state topic here", extra=fields(
            position=self.own_follower.position, high_watermark=plog.high_watermark))
        self.own_follower.plog = plog
        state = self.broker.amqp.router.state
        if isinstance(state, SpreadState):
            state.plog = plog

    def tick(self) -> None:
        self.sync()
        self._send_state()
        self.departed.check()
        if self.opened:
            self.mirrors.check(self.broker.amqp.router.vhosts, self.local_queues)

    def state_fetched(self) -> None:
        """This broker's replica of the state topic got records or a new high watermark: apply the
        definitions other brokers made (a policy, a binding) now rather than at the next tick, so a
        queue led here follows a policy within a replication round trip of its PUT."""
        self._catch_up()

    def _open(self, plog) -> None:
        broker = self.broker
        state = SpreadState(self, plog)
        router = Router(broker.data_dir, broker.logs, state=state)
        router.placement = self.placement
        router.available = self.available
        router.committed = self.committed
        router.forward = self.forwarder.forward
        router.remote_stubs = True
        router.share_transient, router.node_id = True, self.node_id  # other brokers route to our transient queues
        router.direct_replies.node_id = self.node_id  # Direct Reply-To names say which broker to reply to
        router.reply_elsewhere = self.forwarder.peers.amqp_reply
        # one broker per process: every RemoteQueue's consumers are served over links from here
        RemoteQueue.link_factory = self._link
        RemoteQueue.ops = QueueOps(broker.reactor, self.forwarder.peers, lambda: sorted(self.node.view.brokers),
                                   self.node_id, self._replicated_here)
        broker.amqp.use_router(router)
        router.load()
        self.own_follower = DefinitionsFollower(router, plog, position=state.opened_at, own=state.origin,
                                                in_flight=state.in_flight)
        self.opened = self.is_home = True
        self._leadership()
        log.info("AMQP served on this broker (cluster mode 'spread')", extra=fields(
            node_id=self.node_id, queues=sum(len(v.queues) for v in router.vhosts.values())))

    def _replicate_state_here(self) -> None:
        """Every broker needs its own replica of the state topic: ask for one if this one has none."""
        view = self.node.view
        topic = view.topics.get(STATE_TOPIC)
        if topic is None or self._asked or (STATE_TOPIC, 0) in view.reassignments:
            return
        replicas = tuple(view.replicas(STATE_TOPIC, 0))
        if self.node_id in replicas:
            return
        self._asked = True
        target = replicas + (self.node_id,)
        log.info("asking for a replica of the AMQP state topic here", extra=fields(replicas=list(target)))
        threads.deferToThread(self.node.agent.request_reassignment,
                              [Reassignment(STATE_TOPIC, 0, target, replicas)]).addBoth(self._asked_done)

    def _asked_done(self, result) -> None:
        self._asked = False
        if isinstance(result, Failure):
            log.warning("replica of the AMQP state topic not requested: %s", result.getErrorMessage())

    def _link(self, queue: RemoteQueue, consumer) -> QueueLink:
        if self.links is None:
            self.links = ConsumerLinks(self.broker.reactor, self.forwarder.peers, self.forwarder.leader_of, self.node_id)
        return self.links.link(queue, consumer)

    def _replicated_here(self, queue) -> bool:
        return self.node_id in self.node.view.replicas(queue.topic, queue.partition)

    # --- writing the state topic -------------------------------------------------------------------
    def append_state(self, batch: bytes) -> None:
        """Append a state batch at the topic's leader: here, or sent there (in order, retried)."""
        if not self._outbox:
            rep = self.node.replicas.leader_of(STATE_TOPIC, 0)
            if rep is not None:
                rep.plog.append(batch)
                self._local_end = (rep.plog, rep.plog.next_offset)
                self.broker.request_flush()
                return
        self._outbox.append(batch)
        self._send_state()

    def committed(self) -> defer.Deferred:
        """:meth:`written`, asked once the definitions batch under way (a connection's read, whose
        changes are written at its end) has been written."""
        d = defer.Deferred()
        self.broker.amqp.router.after_batch(lambda: self.written().chainDeferred(d))
        return d

    def written(self, timeout_s: float = WRITTEN_WAIT_S) -> defer.Deferred:
        """Fires once every state record this broker has written so far is committed (every in-sync
        replica of the state topic has it, so the other brokers apply it a fetch later), or after
        ``timeout_s``: what a declaration's answer waits for, as RabbitMQ's waits for its metadata store."""
        waiters, waits = self.broker.kafka.waiters, []
        if self._outbox:
            target = self._stored + len(self._outbox)
            waits.append(waiters.wait(lambda: self._stored >= target, timeout_s))
        if self._local_end is not None:
            plog, end = self._local_end
            def committed() -> bool:  # (or no longer led here: the next leader has what it took)
                rep = self.node.replicas.leader_of(STATE_TOPIC, 0)
                return rep is None or rep.plog is not plog or (
                    plog.high_watermark >= end and self.node.state_followers.applied_everywhere(STATE_TOPIC, 0, end))
            waits.append(waiters.wait(committed, timeout_s))
        return defer.gatherResults(waits) if waits else defer.succeed(None)

    def _send_state(self) -> None:
        if self._sending or not self._outbox:
            return
        rep = self.node.replicas.leader_of(STATE_TOPIC, 0)
        if rep is not None:  # we lead it now: what waited goes in here, in order
            for batch in self._outbox:
                rep.plog.append(batch)
            self._stored += len(self._outbox)
            self._local_end = (rep.plog, rep.plog.next_offset)
            self._outbox.clear()
            self.broker.request_flush()
            return
        leader = self.home_id()
        if leader < 0:
            return  # no leader right now: the next tick tries again
        self._sending = True
        batch = self._outbox[0]
        d = self.forwarder.produce(leader, STATE_TOPIC, 0, batch)

        def sent(error: int) -> None:
            self._sending = False
            if error:
                log.warning("AMQP state record not stored at broker %d (error %d); sending it again", leader, error)
                return
            self._outbox.pop(0)
            self._stored += 1
            self.broker.kafka.waiters.notify()  # (a declaration may wait for it: written())
            self._send_state()

        def failed(failure) -> None:
            self._sending = False
            log.warning("AMQP state record not sent to broker %d: %s; sending it again", leader,
                        failure.getErrorMessage())

        d.addCallbacks(sent, failed)

    # --- placement -----------------------------------------------------------------------------------
    def placement(self, arguments: dict) -> dict:
        live = sorted(self.node.view.brokers)
        wanted = max(self._replicas_wanted(arguments, len(live)), 1)
        local = (not arguments.get("x-durable", True) or arguments.get("x-exclusive")
                 or self._locator(arguments) != "balanced")
        first = self.node_id if local else self._least_loaded(live)
        assignment = []
        for p in range(int(arguments.get("x-partitions", 1))):  # a super stream's partitions: leaders in turn
            leader = live[(live.index(first) + p) % len(live)] if first in live else first
            others = [b for b in live if b != leader]
            start = (hash(arguments.get("x-queue-name", "")) + p) % max(len(others), 1)
            rotated = others[start:] + others[:start]
            assignment.append(tuple([leader] + rotated[:wanted - 1]))
        return {"assignment": assignment}

    def _locator(self, arguments: dict) -> str:
        given = arguments.get("x-queue-leader-locator")
        if isinstance(given, bytes):
            given = given.decode("utf-8", "replace")
        if given in ("client-local", "balanced"):
            return given
        policy = self._policy_for(arguments) or {}
        if policy.get("queue-leader-locator") in ("client-local", "balanced"):
            return policy["queue-leader-locator"]
        return self.broker.settings.queue_leader_locator

    def _least_loaded(self, live: list[int]) -> int:
        """The live broker leading the fewest partitions; a partition not elected yet (created
        since the last view, by this broker too) counts for its preferred leader."""
        led = {b: 0 for b in live}
        view = self.node.view
        for name, topic in self.node.store.assignments().items():
            for p, replicas in enumerate(topic.replicas):
                state = view.state(name, p)
                leader = state.leader if state is not None and state.leader >= 0 else replicas[0]
                if leader in led:
                    led[leader] += 1
        return min(live, key=lambda b: (led[b], b))

    def available(self, topic: str, partition: int = 0) -> bool:
        """Whether this broker leads the queue's partition (or has just created it, as first replica)."""
        return AmqpHome.available(self, topic, partition)

    # --- leadership moves ----------------------------------------------------------------------------
    def walk_leadership(self) -> None:
        """The leadership walk now, whatever the last one saw (a queue is asked for in between)."""
        if self.opened:
            self._walked = None
            self._leadership()

    def _leadership(self) -> None:
        """Queues whose topic this broker came to lead become local; those it lost, remote.

        Runs at every tick, but walks the queues only when something it reads changed since its
        last walk (the cluster view, this broker's replicas, the set of queues and delayed-message
        logs), and at least every :data:`LEADERSHIP_WALK_S` as a safety net: with thousands of
        queues on every broker the walk was a quarter of an idle broker's periodic work."""
        router = self.broker.amqp.router
        now = self.broker.reactor.seconds()
        seen = leadership_signature(self.node.view, self.node.replicas, router.vhosts)
        if seen == self._walked and now - self._walked_at < LEADERSHIP_WALK_S:
            return
        self._walked, self._walked_at = seen, now
        floors = None
        view = self.node.view
        for vhost in router.vhosts.values():
            for queue in list(vhost.queues.values()):
                state = view.state(queue.topic, queue.partition)
                leader = state.leader if state is not None else -1
                rep = self.node.replicas.get(queue.topic, queue.partition)
                leads = rep is not None and rep.role == LEADER
                if queue.remote:
                    queue.leader = leader
                    if rep is not None and not leads:
                        queue.read_replica(rep.plog)  # a stream's consumers here read this replica
                    if leads:
                        if floors is None:
                            floors = router.state.latest_floors()
                        self._make_local(vhost, queue, rep.plog, floors)
                elif state is not None and not leads and leader != -1:
                    self._make_remote(vhost, queue, leader)
            for name, held in list(vhost.delay_logs.items()):
                state = view.state(held.topic, 0)
                leader = state.leader if state is not None else -1
                rep = self.node.replicas.get(held.topic, 0)
                leads = rep is not None and rep.role == LEADER
                if held.remote:
                    held.leader = leader
                    if leads:
                        if floors is None:
                            floors = router.state.latest_floors()
                        saved = floors.get(held.topic, {}).get("delayed", {})
                        vhost.delay_logs[name] = DelayLog(vhost.name, name, held.topic, rep.plog,
                                                          floor=saved.get("floor", 0), released=saved.get("released"))
                        log.info("delayed-message exchange's log led here now", extra=fields(
                            exchange=name, vhost=vhost.name, held=vhost.delay_logs[name].held))
                elif state is not None and not leads and leader != -1:
                    held.deleted = True
                    vhost.delay_logs[name] = RemoteDelayLog(vhost.name, name, held.topic, leader)

    def _make_local(self, vhost, stub: RemoteQueue, plog, floors: dict) -> None:
        position = floors.get(position_key(stub.topic, stub.partition), {})
        queue = Queue(vhost.name, stub.name, stub.topic, None, durable=stub.durable, exclusive_owner=None,
                      auto_delete=stub.auto_delete, arguments=stub.arguments, ack_floor=position.get("floor", 0),
                      delivery_counts={int(o): n for o, n in position.get("deliveries", {}).items()})
        queue.partition = stub.partition
        queue.attach(plog)
        vhost._install(queue)
        log.info("queue led here now", extra=fields(queue=queue.name, vhost=vhost.name, floor=queue.ack_floor))

    def _make_remote(self, vhost, queue: Queue, leader: int) -> None:
        for consumer in list(queue.consumers):
            queue.remove_consumer(consumer, auto_delete=False)  # a move is not the last consumer leaving
            cancelled = getattr(consumer, "cancelled_by_server", None)
            if cancelled is not None:
                cancelled(queue)
        vhost.consuming.discard(queue)
        stub = RemoteQueue(vhost.name, queue.name, queue.topic, None, durable=queue.durable, exclusive_owner=None,
                           auto_delete=queue.auto_delete, arguments=queue.arguments, leader=leader)
        stub.partition = queue.partition
        queue.deleted = True
        vhost._install(stub)
        log.info("queue led by another broker now", extra=fields(queue=queue.name, vhost=vhost.name, leader=leader))

    # --- the AMQP listener -----------------------------------------------------------------------------
    def door(self, local_factory) -> "SpreadDoor":
        return SpreadDoor(self, local_factory)


class SpreadDoor(protocol.Factory):
    """Every broker serves AMQP clients itself, once its model is open."""
    noisy = False

    def __init__(self, spread: AmqpSpread, local_factory):
        self.spread = spread
        self.local = local_factory

    def buildProtocol(self, addr):
        return self.local.buildProtocol(addr) if self.spread.opened else None
