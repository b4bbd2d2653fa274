"""Single-active-consumer groups across a spread cluster, decided where RabbitMQ decides them: by
one coordinator per stream, here the stream's leader.

Consumers of one group (same vhost, stream and ``name``) may subscribe on different brokers, and
one of them is active. The leader of the stream keeps the stream's groups (:class:`Coordinator`);
the broker holding a consumer registers it there and carries out what the leader decides
(:class:`ClusterActiveConsumers`, the cluster's stand-in for subscriptions.ActiveConsumers), so
the client hears ConsumerUpdate exactly as from one broker and a consumer made active starts
where its answer says. Requests are the brokers' StreamConsumer API (wire.kafka_private) over
their peer links, or a call on the next loop turn when the leader is this broker.

* The rule is one broker's (subscriptions.elected): the first consumer of a group is active, and
  stays so while others join; a super stream's partition goes to member ``partition mod size``.
* A change is made in two steps: the broker of the consumer losing its turn deactivates it and
  answers, and only then is the next one activated, so no two are told to be active at once. An
  order that fails is sent again at the next tick.
* A consumer whose subscription or connection ends leaves its group; the leader drops the
  consumers of a broker that left the cluster (its ZooKeeper session expired).
* A new leader starts with no groups: every broker registers its consumers again at its next tick,
  saying which one is active (it stays active). For :data:`REBUILD_S` after a takeover a group
  with no active member elects nobody, so a registration still on its way from the broker that
  holds the active consumer is not overtaken.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from twisted.internet import task

from gateway.logs import fields as log_fields
from gateway.stream.subscriptions import elected
from wire.kafka_private import ACTIVATE, DEACTIVATE, JOIN, LEAVE, StreamConsumerRequest

log = logging.getLogger(__name__)

REBUILD_S = 2.5  # after a takeover: the brokers' registrations arrive within a tick (0.5 s) of their view's

OK = (ErrorCode.none, None)


@dataclass(eq=False)
class Member:
    node: int  # the broker holding the consumer
    id: int  # the consumer's id there
    active: bool = False  # active as far as the coordinator knows (told so, or said so when registering)
    busy: bool = False  # an order to its broker is on its way


@dataclass(eq=False)
class Group:
    key: tuple[str, str, str]  # vhost, stream, name
    topic: str
    partition: int  # the stream's topic partition, led here
    index: int  # its super stream partition index (-1: a plain stream)
    epoch: int  # the leader epoch this broker built the group in
    members: list[Member] = field(default_factory=list)

    def chosen(self) -> Member:
        if self.index < 0:  # a plain stream's active consumer keeps its turn while others come
            current = next((m for m in self.members if m.active), None)
            if current is not None:
                return current
        return self.members[elected(len(self.members), self.index)]


class Coordinator:
    """The groups of the streams this broker leads."""

    def __init__(self, node, node_id: int, send):
        self.node = node  # gateway.cluster.node.ClusterNode
        self.node_id = node_id
        self.send = send  # (broker, request fields) -> Deferred of (error code, message)
        self.groups: dict[tuple[str, str, str], Group] = {}
        self.taken_over: dict[tuple[str, int], float] = {}  # stream partition -> when this broker took it over

    def took_over(self, topic: str, partition: int) -> None:
        """This broker leads the partition now; a first leader (epoch 0) had nobody's groups to rebuild."""
        rep = self.node.replicas.leader_of(topic, partition)
        if rep is not None and rep.state.leader_epoch > 0:
            self.taken_over[(topic, partition)] = self.node.reactor.seconds()

    def _epoch(self, topic: str, partition: int) -> int | None:
        rep = self.node.replicas.leader_of(topic, partition)
        return None if rep is None else rep.state.leader_epoch

    def handle(self, req, queue) -> tuple[ErrorCode, str | None]:
        """A join or leave from the broker holding the consumer."""
        epoch = self._epoch(queue.topic, queue.partition)
        if epoch is None:
            return ErrorCode.not_coordinator, f"broker {self.node_id} does not lead stream '{req.stream}'"
        key = (req.vhost, req.stream, req.name)
        group = self.groups.get(key)
        if group is not None and (group.epoch != epoch or group.topic != queue.topic):
            del self.groups[key]  # built while this broker led the stream before, or a stream since deleted
            group = None
        if req.op == LEAVE:
            if group is not None:
                group.members = [m for m in group.members if (m.node, m.id) != (req.broker, req.member)]
                self._reconcile(group)
            return OK
        if group is None:
            group = self.groups[key] = Group(key, queue.topic, queue.partition, req.partition, epoch)
        member = next((m for m in group.members if (m.node, m.id) == (req.broker, req.member)), None)
        if member is None:
            group.members.append(Member(req.broker, req.member, active=req.active))
        elif not member.busy:  # registered again (the answer to its first join was lost): as it says
            member.active = req.active
        self._reconcile(group)
        return OK

    def _reconcile(self, group: Group) -> None:
        """The next step towards one active member, the chosen one; one order at a time per group."""
        if self.groups.get(group.key) is not group or any(m.busy for m in group.members):
            return
        if not group.members or self._epoch(group.topic, group.partition) != group.epoch:
            del self.groups[group.key]  # empty, or no longer led here: a leader that lost it orders nothing
            return
        chosen = group.chosen()
        stale = next((m for m in group.members if m.active and m is not chosen), None)
        if stale is not None:
            self._order(group, stale, DEACTIVATE)
        elif not chosen.active:
            since = self.taken_over.get((group.topic, group.partition))
            if since is not None and self.node.reactor.seconds() < since + REBUILD_S:
                return  # the active consumer may not have been registered again yet: the tick comes back
            self._order(group, chosen, ACTIVATE)

    def _order(self, group: Group, member: Member, op: int) -> None:
        member.busy = True
        vhost, stream, name = group.key
        d = self.send(member.node, {"op": op, "vhost": vhost, "stream": stream, "name": name, "broker": self.node_id,
                                    "member": member.id, "partition": group.index, "active": op == ACTIVATE})

        def answered(result) -> None:
            code, message = result
            member.busy = False
            if code == ErrorCode.none:
                member.active = op == ACTIVATE
            elif code == ErrorCode.unknown_member_id:  # it left meanwhile
                group.members = [m for m in group.members if m is not member]
            else:  # the broker's view lags behind ours: the next tick sends it again
                log.info("stream consumer order refused by broker %d: %s", member.node, message,
                         extra=log_fields(stream=stream, name=name))
                return
            self._reconcile(group)

        def failed(failure) -> None:
            member.busy = False
            log.info("stream consumer order not answered by broker %d: %s", member.node, failure.getErrorMessage(),
                     extra=log_fields(stream=stream, name=name))
        d.addCallbacks(answered, failed)

    def tick(self) -> None:
        live = self.node.view.brokers
        for key, group in list(self.groups.items()):
            if self._epoch(group.topic, group.partition) != group.epoch:
                del self.groups[key]  # not led here any more (or deleted): the new leader rebuilds it
                continue
            gone = [m for m in group.members if m.node not in live]
            if gone:
                log.info("stream consumers of brokers that left the cluster dropped", extra=log_fields(
                    stream=key[1], name=key[2], brokers=sorted({m.node for m in gone})))
                group.members = [m for m in group.members if m.node in live]
            self._reconcile(group)


@dataclass(eq=False)
class _Leave:
    where: tuple[int, int]  # the (leader, leader epoch) the consumer was registered with
    request: dict
    busy: bool = False


class ClusterActiveConsumers:
    """This broker's single-active-consumer subscriptions in a spread cluster (the interface of
    subscriptions.ActiveConsumers), and the coordinator of the streams it leads; ``handle`` answers
    the StreamConsumer requests of the other brokers."""

    def __init__(self, service, cluster):
        self.service = service  # gateway.stream.service.StreamService: the AMQP model's streams
        self.node, self.node_id, self.peers = cluster.node, cluster.node_id, cluster.peers
        self.coordinator = Coordinator(self.node, self.node_id, self.send)
        self.members: dict[int, object] = {}  # member id -> Subscription
        self.registered: dict[int, tuple[int, int]] = {}  # member id -> (leader, leader epoch) joined at
        self.leaving: dict[int, _Leave] = {}  # leaves not answered yet
        self._ids = itertools.count(1)

    def took_over(self, topic: str, partition: int) -> None:
        self.coordinator.took_over(topic, partition)

    # --- the links -----------------------------------------------------------------------------------
    def send(self, node: int, request: dict):
        """A StreamConsumer request to ``node``: (error code, message). To this broker on the next
        loop turn, as an answer from another broker would come."""
        if node == self.node_id:
            return task.deferLater(self.node.reactor, 0, self.handle, StreamConsumerRequest(**request))
        return self.peers.stream_consumer(node, request)

    def handle(self, req) -> tuple[ErrorCode, str | None]:
        if req.op in (JOIN, LEAVE):
            vhost = self.service.router.vhosts.get(req.vhost)
            queue = vhost.queues.get(req.stream) if vhost is not None else None
            if queue is None or not queue.is_stream:
                return ErrorCode.unknown_topic_or_partition, f"no stream '{req.stream}' in vhost '{req.vhost}' here"
            return self.coordinator.handle(req, queue)
        sub = self.members.get(req.member)
        if sub is None or (sub.connection.vhost.name, sub.queue.name, sub.sac_name) != (req.vhost, req.stream,
                                                                                        req.name):
            return ErrorCode.unknown_member_id, "the consumer is gone from this broker"
        where = self._coordinator_of(sub.queue)
        if where is None or where[0] != req.broker:  # an order from a broker that no longer leads the stream
            return ErrorCode.not_coordinator, f"broker {req.broker} does not lead stream '{req.stream}' here"
        active = req.op == ACTIVATE
        if sub.active != active:
            sub.active = active
            log.info("stream single active consumer %s", "activated" if active else "deactivated", extra=log_fields(
                stream=req.stream, name=req.name, subscription=sub.id, coordinator=req.broker))
            sub.connection.consumer_update(sub, active)
        return OK

    # --- ActiveConsumers' interface ------------------------------------------------------------------
    def join(self, vhost: str, stream: str, sub) -> None:
        sub.active = False  # until the stream's leader says otherwise
        sub.sac_member = next(self._ids)
        self.members[sub.sac_member] = sub
        self._register(sub)

    def leave(self, vhost: str, stream: str, sub) -> None:
        member = sub.sac_member
        if self.members.pop(member, None) is None:
            return
        # where it registered; else where a join whose answer was lost may have landed all the same
        where = self.registered.pop(member, None) or self._coordinator_of(sub.queue)
        if where is not None:
            self.leaving[member] = _Leave(where, self._request(LEAVE, sub, member))
            self._send_leave(member)

    # --- registrations -------------------------------------------------------------------------------
    def _coordinator_of(self, queue) -> tuple[int, int] | None:
        """(leader, leader epoch) of the stream, if it has a live leader."""
        state = self.node.view.state(queue.topic, queue.partition)
        if state is None or state.leader not in self.node.view.brokers:
            return None
        return state.leader, state.leader_epoch

    def _request(self, op: int, sub, member: int) -> dict:
        return {"op": op, "vhost": sub.connection.vhost.name, "stream": sub.queue.name, "name": sub.sac_name,
                "broker": self.node_id, "member": member, "active": sub.active,
                "partition": sub.queue.partition if sub.super_stream else -1}

    def _register(self, sub) -> None:
        member = sub.sac_member
        where = self._coordinator_of(sub.queue)
        if where is None:
            return  # no leader now: the tick registers it once there is one
        self.registered[member] = where

        def retry(why) -> None:
            if self.registered.get(member) == where:
                del self.registered[member]  # the next tick registers it again
                log.info("stream consumer not registered at broker %d: %s", where[0], why,
                         extra=log_fields(stream=sub.queue.name, name=sub.sac_name))
        self.send(where[0], self._request(JOIN, sub, member)).addCallbacks(
            lambda result: None if result[0] == ErrorCode.none else retry(result[1]),
            lambda failure: retry(failure.getErrorMessage()))

    def _send_leave(self, member: int) -> None:
        leave = self.leaving[member]
        leave.busy = True

        def answered(result) -> None:
            leave.busy = False
            if result[0] in (ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.unknown_topic_or_partition):
                self.leaving.pop(member, None)  # done, or that broker keeps no group of it any more

        def failed(failure) -> None:
            leave.busy = False
        self.send(leave.where[0], leave.request).addCallbacks(answered, failed)

    def tick(self) -> None:
        """Register again where a stream's leader changed (a new one rebuilds its groups), send again
        what was not answered, and let the coordinator go on."""
        for member, sub in list(self.members.items()):
            where = self._coordinator_of(sub.queue)
            if where is not None and self.registered.get(member) != where:
                self._register(sub)
        for member, leave in list(self.leaving.items()):
            if leave.busy:
                continue
            queue = self.service.router.vhosts.get(leave.request["vhost"])
            queue = queue.queues.get(leave.request["stream"]) if queue is not None else None
            if queue is None or self._coordinator_of(queue) != leave.where:
                del self.leaving[member]  # that leadership is over: the new leader never had the consumer
            else:
                self._send_leave(member)
        self.coordinator.tick()
