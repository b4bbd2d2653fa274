"""AMQP consumers of queues led by other brokers: credit-based links to the leader.

A consumer connected here of a queue led by broker L (a routing.remote_queue RemoteQueue) is a
:class:`QueueLink`: at L it is one of the queue's consumers (gateway.cluster.link_server), picked
by the queue's own dispatch, as a RabbitMQ channel's consumer is served by a queue process on
another node. Every link of this broker to L shares one *session* (:class:`LeaderLinks`) and two
connections: operations (open, credit, settle, get, drain, close) go on one, sent together at the
end of each loop turn; the other carries one poll at a time, which L answers with the deliveries
and other events of every link of the session (wire.amqp_link). An AMQP 0-9-1 consumer's link
says at its opening how the consumer's frames look (channel, frame-max, consumer tag), so L
sends a classic queue's deliveries as those frames and this broker only fills in the delivery
tag: the record is not read back and encoded here.

* credit: each link tells L how many deliveries it may have had in all: what it received plus its
  consumer's room now (its prefetch less what it holds unacked, the channel's global prefetch; a
  bounded batch for consumers without one or with no-ack; an AMQP 1.0 link's own link credit).
  A closed TCP window or a flow-stopped channel has no room;
* acks, nacks and rejects become settlements at L (ack; requeue; reject, which dead-letters there
  as the queue's arguments say; AMQP 1.0 ``released``: back without counting a delivery);
* a cancelled consumer or closed channel closes its link: L returns what it held to the queue,
  flagged redelivered, as RabbitMQ requeues a closed channel's unacked messages;
* any failure of the session (L restarted or went away, a call failed or timed out) ends it on
  both sides: what its links held goes back at L, and each link opens again, in a new session,
  at the queue's leader then (another broker after a failover).
"""
from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from wire import amqp_link as wl
from wire.kafka_private import AMQP_LINK

log = logging.getLogger(__name__)

POLL_MS = 5000  # a poll waits at the leader this long for events (L hears from us at least this often)
UNBOUNDED_BATCH = 100  # the room of a consumer without a prefetch (or no-ack)
RETRY_S = 0.5
OPS_LANE, POLL_LANE = "amqp-links", "amqp-links-poll"  # a parked poll must not hold back the operations' answers


class LeaderLinks:
    """The session of this broker's links to one leader: operations out, one poll at a time."""

    def __init__(self, links: "ConsumerLinks", leader: int):
        self.owner = links
        self.reactor, self.peers = links.reactor, links.peers
        self.leader = leader
        self.session = f"{links.node_id}-{uuid.uuid4().hex}"
        self.opening = True  # until an answer came: the leader may start the session with a request
        self.links: dict[int, "QueueLink"] = {}
        self.ops: list[bytes] = []
        self.dirty: set["QueueLink"] = set()  # links whose credit may have changed this loop turn
        self.polling = False
        self.ended = False
        self._flush = None

    def add(self, link: "QueueLink") -> int:
        link_id = self.owner.next_id()
        self.links[link_id] = link
        self.send(link.open_op(link_id))
        if not self.polling:
            self._poll()
        return link_id

    def send(self, op: bytes) -> None:
        self.ops.append(op)
        self.soon()

    def touch(self, link: "QueueLink") -> None:
        self.dirty.add(link)
        self.soon()

    def soon(self) -> None:
        if self._flush is None and not self.ended:
            self._flush = self.reactor.callLater(0, self.flush)

    def flush(self) -> None:
        self._flush = None
        if self.ended:
            return
        dirty, self.dirty = self.dirty, set()
        for link in dirty:
            link.update_credit()
        if not self.ops:
            return
        ops, self.ops = b"".join(self.ops), []
        request = {"session": self.session, "opening": self.opening, "wait_ms": -1, "ops": ops}
        self.peers.call(self.leader, AMQP_LINK, request, version=0, lane=OPS_LANE).addCallbacks(
            self._answered, self._failed).addErrback(self._crashed)

    def _poll(self) -> None:
        if self.ended or not self.links:
            self.polling = False
            return
        self.polling = True
        request = {"session": self.session, "opening": self.opening, "wait_ms": POLL_MS, "ops": b""}
        self.peers.call(self.leader, AMQP_LINK, request, version=0, timeout=POLL_MS / 1000 + 10,
                        lane=POLL_LANE).addCallbacks(self._polled, self._failed).addErrback(self._crashed)

    def _answered(self, answer) -> None:
        if self.ended:
            return
        if answer.error_code:
            self.end(f"{ErrorCode(answer.error_code).name}: {answer.error_message}")
        else:
            self.opening = False

    def _polled(self, answer) -> None:
        if self.ended:
            return
        if answer.error_code:
            self.end(f"{ErrorCode(answer.error_code).name}: {answer.error_message}")
            return
        self.opening = False
        links, deliver, frames = self.links, wl.DELIVER, wl.DELIVER_FRAMES
        for event in wl.read_events(answer.events):
            link = links.get(event[1])
            if link is None:
                continue
            kind = event[0]  # deliveries, most events, straight to the link (one call less per message)
            if kind == frames:
                link._deliver_frames(event[2], event[3], event[4], event[5])
            elif kind == deliver:
                link._deliver(event[2], event[3], event[4], event[5])
            else:
                link.event(event)
        self._poll()

    def _failed(self, failure) -> None:
        if not self.ended:
            self.end(failure.getErrorMessage())

    def _crashed(self, failure) -> None:
        """A bug while handling an answer: logged, and the session starts over rather than stalls."""
        log.error("AMQP link session to broker %d failed: %s", self.leader, failure.getTraceback())
        self.end("an internal error")

    def forget(self, link_id: int) -> None:
        self.links.pop(link_id, None)
        if not self.links:  # the next link starts a new session (the leader lets this one idle out)
            self.owner.ended(self)

    def end(self, why: str) -> None:
        """The session is over (the leader gives back what its links held): each link starts again."""
        if self.ended:
            return
        self.ended = True
        if self._flush is not None and self._flush.active():
            self._flush.cancel()
        self._flush = None
        self.owner.ended(self)
        links, self.links = list(self.links.values()), {}
        if links:
            log.info("AMQP link session to broker %d ended (%s); its %d link(s) open again", self.leader, why,
                     len(links))
        for link in links:
            link.restart()


class ConsumerLinks:
    """This broker's link sessions, one per leader; makes the link of each remote consumer."""

    def __init__(self, reactor, peers, leader_of, node_id: int):
        self.reactor, self.peers, self.leader_of, self.node_id = reactor, peers, leader_of, node_id
        self.sessions: dict[int, LeaderLinks] = {}
        self._ids = 0

    def next_id(self) -> int:
        self._ids = (self._ids + 1) & 0xFFFFFFFF
        return self._ids

    def session(self, leader: int) -> LeaderLinks:
        session = self.sessions.get(leader)
        if session is None:
            session = self.sessions[leader] = LeaderLinks(self, leader)
        return session

    def ended(self, session: LeaderLinks) -> None:
        if self.sessions.get(session.leader) is session:
            del self.sessions[session.leader]

    def link(self, queue, consumer) -> "QueueLink":
        return QueueLink(self, queue, consumer)


class QueueLink:
    """One consumer (or one channel's basic.get calls) of a queue led elsewhere."""

    def __init__(self, links: ConsumerLinks, queue, consumer):
        self.links = links
        self.queue = queue  # the routing.remote_queue.RemoteQueue
        self.consumer = consumer  # gateway.amqp.consuming.Consumer, an AMQP 1.0 receiver, or a Getter
        self.getter = getattr(consumer, "getter", False)
        self._budget = getattr(consumer, "fetch_budget", None)  # an AMQP 1.0 link's exact credit
        self.session: LeaderLinks | None = None
        self.id = 0
        self.received = 0  # deliveries received in this session
        self.limit = 0  # the credit limit the leader has (or is being sent)
        # what it delivered and the consumer has not settled is in the queue's _by_offset
        self.gets = 0  # basic.get calls sent and not answered
        self.closed = False
        self.draining = None  # an AMQP 1.0 drain: called once the leader has said it is drained
        self._retry = None

    # --- the session ---------------------------------------------------------------------------
    def _attach(self) -> bool:
        if self.session is not None:
            return True
        leader = self.links.leader_of(self.queue.topic, self.queue.partition)
        if leader < 0:
            self._later()
            return False
        self.received = 0
        self.session = self.links.session(leader)
        self.limit = -1 if self.getter else self._room()
        self.id = self.session.add(self)
        return True

    def open_op(self, link_id: int) -> bytes:
        c = self.consumer
        target = getattr(c, "encoded_target", None)  # an AMQP 0-9-1 consumer: the leader may send its frames
        return wl.op_open(link_id, self.queue.vhost, self.queue.name, bool(getattr(c, "no_ack", False)),
                          bool(getattr(c, "exclusive", False)), getattr(c, "priority", 0) or 0, self.limit,
                          target() if target is not None and not self.getter else None)

    def restart(self) -> None:
        """The session ended: the leader took back what was held; open again, a moment later."""
        self.session = None
        self.queue.forget_link(self)  # an ack of what it held settles nothing now
        self.gets = 0
        if not self.closed:
            self._later()

    def _later(self) -> None:
        if self._retry is None or not self._retry.active():
            self._retry = self.links.reactor.callLater(RETRY_S, self.poke)

    # --- from the queue and the channel ----------------------------------------------------------
    def poke(self) -> None:
        """Credit may have grown, or a basic.get waits: tell the leader (at the end of the loop turn)."""
        if self.closed or not self._attach():
            return
        if self.getter:
            waiting = len(self.consumer.waiting)
            while self.gets < waiting:
                self.gets += 1
                self.session.send(wl.op_get(self.id, self.consumer.no_ack))
            return
        self.session.touch(self)

    def update_credit(self) -> None:
        if self.closed or self.session is None:
            return
        limit = self.received + self._room()
        if limit != self.limit:
            self.limit = limit
            self.session.send(wl.op_credit(self.id, limit))

    def _room(self) -> int:
        consumer = self.consumer
        if self.getter or not consumer.has_credit():
            return 0
        exact = self._budget
        if exact is not None:  # an AMQP 1.0 link: never more than its link credit
            return max(exact(), 0)
        if consumer.no_ack:
            return UNBOUNDED_BATCH
        room = consumer.prefetch - consumer.unacked if consumer.prefetch else UNBOUNDED_BATCH
        channel = getattr(consumer, "channel", None)
        if channel is not None and channel.global_prefetch:  # basic.qos global: the channel's unacked count too
            room = min(room, channel.global_prefetch - len(channel.unacked))
        return max(room, 0)

    def acknowledge(self, offsets, how: int) -> None:
        """Settle ``offsets``, delivered by this link (the queue's _by_offset says which link each came by)."""
        if not offsets or self.session is None:
            return
        self.session.send(wl.op_settle(self.id, how, offsets))
        self.session.touch(self)

    def drain(self, done) -> None:
        """An AMQP 1.0 drain: ``done()`` once the leader has dispatched what it could and said so."""
        self.draining = done
        if self._attach():
            self.update_credit()  # the drain's credit first: the leader dispatches on it, then says drained
            self.session.send(wl.op_drain(self.id))

    def close(self) -> None:
        """The consumer is gone: settle what was decided, then close; the leader takes back the rest."""
        self.closed = True
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        session, self.session = self.session, None
        if session is not None and not session.ended:
            session.send(wl.op_close(self.id))
            session.forget(self.id)

    # --- from the leader ------------------------------------------------------------------------------
    def event(self, event: tuple) -> None:
        kind = event[0]
        if kind == wl.DELIVER:
            self._deliver(*event[2:])
        elif kind == wl.DELIVER_FRAMES:
            self._deliver_frames(*event[2:])
        elif kind == wl.EMPTY:
            self.gets = max(self.gets - 1, 0)
            self.consumer.found_nothing()
        elif kind == wl.DRAINED:
            done, self.draining = self.draining, None
            if done is not None:
                done()
        elif kind == wl.CLOSED:
            log.info("AMQP link of queue %s closed by its leader: %s", self.queue.name, event[2])
            session, self.session = self.session, None
            if session is not None:
                session.forget(self.id)
            if not self.closed:
                self._later()  # the queue's leader may have moved: try again (a deleted queue cancels it here)

    def _deliver(self, offset: int, count: int, redelivered: bool, record) -> None:
        self.received += 1
        if self.getter:
            self.gets = max(self.gets - 1, 0)
        consumer, exact = self.consumer, self._budget
        # an AMQP 1.0 link's credit may have been lowered meanwhile (a flow with less): a transfer
        # without credit breaks the protocol, so the message goes back, uncounted
        if exact is not None and exact() <= 0:
            self.session.send(wl.op_settle(self.id, wl.RELEASE, (offset,)))
            return
        if not consumer.no_ack:
            self.queue.delivered(offset, count, self)
        consumer.deliver(self.queue, offset, record, redelivered)

    def _deliver_frames(self, offset: int, count: int, redelivered: bool, frames: bytes) -> None:
        """A delivery the leader encoded for this link's AMQP 0-9-1 consumer (its open said how)."""
        self.received += 1
        consumer = self.consumer
        if not consumer.no_ack:
            self.queue.delivered(offset, count, self)
        consumer.deliver_encoded(self.queue, offset, frames, redelivered)
