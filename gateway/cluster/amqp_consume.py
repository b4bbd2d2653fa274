"""AMQP consumers of queues led by other brokers, served as members of the queue's share group.

DESIGN.md's "delivery state is one thing": at the leader, a share group named like an AMQP queue
competes for that queue's messages (routing.share). So a consumer connected to broker A of a
queue led by broker B is, at B, a member of the share group named like the queue: one
:class:`ShareLink` per consumer runs its share session (KIP-932 ShareFetch, ShareAcknowledge)
over the brokers' Kafka connection:

* the fetch's record budget is the consumer's credit (its prefetch less what it holds unacked;
  a bounded batch for consumers without a prefetch or with no-ack; an AMQP 1.0 link's own link
  credit, its ``fetch_budget``), so the leader never hands out more than the client may take, as
  a RabbitMQ channel's credit to a queue process;
* acks, nacks and rejects become acknowledgements (accept; release for a requeue; reject
  otherwise, which dead-letters at the leader as the queue's arguments say), sent with the
  next request of the session;
* a cancelled consumer or a closed channel closes the session (epoch -1): the leader returns
  what the member still held to the queue, flagged redelivered, as RabbitMQ requeues a closed
  channel's unacked messages; a session the leader dropped (it restarted) opens again.

One fetch of a session is out at a time; acknowledgements go at once, past a parked fetch, on
the same connection, so the leader sees the session's epochs in order.
"""
from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from routing.share import ACCEPT, RELEASE
from wire.records import decode_batch, iter_batches

log = logging.getLogger(__name__)

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
MAX_WAIT_MS = 5000  # a fetch waits at the leader until records come (acks pass it meanwhile)
UNBOUNDED_BATCH = 100  # the record budget of a consumer without a prefetch (or no-ack)
RETRY_S = 0.5


class ShareLink:
    def __init__(self, reactor, peers, leader_of, topic_id_of, queue, consumer, node_id: int):
        self.reactor = reactor
        self.peers = peers
        self.leader_of = leader_of  # (topic, partition) -> node id or -1
        self.topic_id_of = topic_id_of  # topic -> uuid.UUID or None
        self.queue = queue  # the routing.remote_queue.RemoteQueue
        self.consumer = consumer  # gateway.amqp.channel.Consumer (has_credit, deliver, prefetch, unacked, no_ack)
        self.node_id = node_id
        self.member = self._new_member()
        self.lane = f"share-{uuid.uuid4().hex[:12]}"  # its own connection: its fetch may wait long there
        self.epoch = 0  # the epoch of the session's next request (0: open one)
        self.opening = False  # the request opening the session is on its way
        self.fetching = False  # a fetch is out (parked at the leader until records come or its wait ends)
        self.closed = False
        self.wait_ms = MAX_WAIT_MS if not getattr(consumer, "getter", False) else 0  # basic.get waits for nothing
        self.acks: dict[int, int] = {}  # offset -> acknowledge type, for the next request
        self.held: set[int] = set()  # offsets delivered to the consumer and not settled yet
        self._retry = None
        self._soon = None  # a poke at the end of this loop turn
        self.draining = None  # an AMQP 1.0 drain: called once the leader answered a fetch

    def _new_member(self) -> str:
        return f"amqp-{self.node_id}-{uuid.uuid4().hex[:12]}"

    # --- from the channel ------------------------------------------------------------------------------
    def acknowledge(self, offsets, kind: int) -> None:
        for offset in offsets:
            if offset in self.held:
                self.held.discard(offset)
                self.acks[offset] = kind
        if self._soon is None:  # the acks of one loop turn (a client's pipelined acks) go as one request
            self._soon = self.reactor.callLater(0, self._poke_soon)

    def _poke_soon(self) -> None:
        self._soon = None
        self.poke()

    def drain(self, done) -> None:
        """An AMQP 1.0 drain: ``done()`` once the leader has answered the fetch out now, else the
        next one (a draining link's fetches wait for nothing; their records reach it first)."""
        self.draining = done

    def close(self) -> None:
        """The consumer is gone: settle what was decided, end the session; the rest goes back."""
        self.closed = True
        self.held.clear()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self.poke()

    # --- the session --------------------------------------------------------------------------------------
    def poke(self) -> None:
        """Send what is due: the session's opening fetch, acknowledgements (they pass a parked
        fetch: requests of one connection are taken in order, so epochs stay in sequence), the
        next fetch once the last one is back and there is credit, or the closing request."""
        if self.opening:
            return
        if self.closed:
            # at once, past a parked fetch: the leader gives back what the session held, and a
            # fetch still parked there takes nothing more once its session is closed
            if self.epoch > 0:
                self._send_close()
            elif not self.fetching:
                self.peers.close_lane(self.lane)
            return
        if self.epoch > 0 and self.acks:
            self._send_acks()
        if not self.fetching:
            budget = self._budget()
            if budget > 0:
                self._send_fetch(budget)

    def _budget(self) -> int:
        consumer = self.consumer
        if not consumer.has_credit():
            return 0
        exact = getattr(consumer, "fetch_budget", None)
        if exact is not None:  # an AMQP 1.0 link: never more than its link credit
            return max(exact(), 0)
        if getattr(consumer, "getter", False):
            return 1
        if consumer.no_ack:
            return UNBOUNDED_BATCH
        budget = consumer.prefetch - consumer.unacked if consumer.prefetch else UNBOUNDED_BATCH
        channel = getattr(consumer, "channel", None)
        if channel is not None and channel.global_prefetch:  # basic.qos global: the channel's unacked count too
            budget = min(budget, channel.global_prefetch - len(channel.unacked))
        return max(budget, 0)

    def _target(self):
        leader = self.leader_of(self.queue.topic, self.queue.partition)
        topic_id = self.topic_id_of(self.queue.topic)
        return (leader, topic_id) if leader >= 0 and topic_id is not None else (None, None)

    def _next_epoch(self) -> int:
        epoch = self.epoch
        self.epoch = 1 if epoch == 2**31 - 1 else epoch + 1
        return epoch

    def _send_fetch(self, budget: int) -> None:
        leader, topic_id = self._target()
        if leader is None:
            self._later()
            return
        opening = self.epoch == 0
        acks = {} if opening else self.acks  # a session cannot open with acknowledgements
        if not opening:
            self.acks = {}
        partition = {"partition_index": self.queue.partition, "acknowledgement_batches": _batches(acks)}
        wait = 0 if getattr(self.consumer, "drain", False) else self.wait_ms  # an AMQP 1.0 drain waits for nothing
        request = {"group_id": self.queue.name, "member_id": self.member, "share_session_epoch": self._next_epoch(),
                   "max_wait": wait, "min_bytes": 1, "max_bytes": 8 << 20,
                   "max_records": budget, "batch_size": budget,
                   "topics": [{"topic_id": topic_id, "partitions": [partition]}], "forgotten_topics_data": []}
        self.fetching, self.opening = True, opening
        member = self.member
        self.peers.call(leader, SHARE_FETCH, request, lane=self.lane).addCallbacks(
            lambda answer: self._fetched(answer, member), lambda failure: self._failed(failure, member))

    def _fetched(self, answer, member: str) -> None:
        if member != self.member:
            return  # an answer to a session given up since
        self.fetching = self.opening = False
        if answer.error_code:
            self._session_error(answer.error_code)
            return
        got = False
        for topic in answer.responses:
            for p in topic.partitions:
                if p.error_code:
                    log.debug("share fetch of queue %s: %s", self.queue.name, ErrorCode(p.error_code).name)
                    self._later()
                    return
                if p.acquired_records:
                    got = True
                    self._deliver(p)
        if not got and hasattr(self.consumer, "found_nothing"):
            self.consumer.found_nothing()
        done, self.draining = self.draining, None
        if done is not None:
            done()
        self.poke()

    def _deliver(self, p) -> None:
        counts = {}  # in the order of the acquired ranges: the leader's order (priorities first)
        for run in p.acquired_records:
            for offset in range(run.first_offset, run.last_offset + 1):
                counts[offset] = run.delivery_count
        buf = bytearray(p.records or b"")
        records = {}
        for pos, _header in iter_batches(buf):
            for record in decode_batch(buf, pos).records:
                if record.offset in counts:
                    records[record.offset] = record
        exact = getattr(self.consumer, "fetch_budget", None)
        for offset in list(counts):
            record = records.get(offset)
            if record is None:
                continue
            count = counts.pop(offset)
            # an AMQP 1.0 link's credit may have been lowered while the fetch waited (a flow with
            # less): a transfer without credit breaks the protocol, so the message goes back
            if self.closed or (exact is not None and exact() <= 0):
                self.acks[offset] = RELEASE
                continue
            if self.consumer.no_ack:  # settled as it goes out
                self.acks[offset] = ACCEPT
            else:
                self.held.add(offset)
                self.queue.delivered(offset, count, self)
            self.consumer.deliver(self.queue, offset, record, count > 1)
        for offset in counts:  # acquired but not in the batches (a gap): give it back
            self.acks[offset] = RELEASE

    def _acknowledge_request(self, epoch: int) -> tuple[int | None, dict]:
        leader, topic_id = self._target()
        acks, self.acks = self.acks, {}
        request = {"group_id": self.queue.name, "member_id": self.member, "share_session_epoch": epoch,
                   "topics": [{"topic_id": topic_id, "partitions": [
                       {"partition_index": self.queue.partition, "acknowledgement_batches": _batches(acks)}]}]}
        return leader, request

    def _send_acks(self) -> None:
        if self._target()[0] is None:
            self._later()
            return
        leader, request = self._acknowledge_request(self._next_epoch())
        member = self.member

        def done(answer) -> None:
            if member != self.member:
                return
            if answer.error_code:
                self._session_error(answer.error_code)
            else:
                self.poke()

        self.peers.call(leader, SHARE_ACKNOWLEDGE, request, lane=self.lane).addCallbacks(
            done, lambda f: self._failed(f, member))

    def _send_close(self) -> None:
        leader, request = self._acknowledge_request(-1)
        self.epoch = 0
        lane = self.lane
        if leader is None:  # the leader is gone, and its session with it
            self.peers.close_lane(lane)
            return
        d = self.peers.call(leader, SHARE_ACKNOWLEDGE, request, lane=lane)
        if self.closed:  # the link is done with its connection once the leader has the close
            d.addBoth(lambda _: self.peers.close_lane(lane))
        else:
            d.addErrback(lambda failure: None)

    def _session_error(self, error: int) -> None:
        log.info("share session of queue %s at its leader ended (%s); opening another", self.queue.name,
                 ErrorCode(error).name)
        self._restart()

    def _failed(self, failure, member: str) -> None:
        if member != self.member or self.closed:
            return  # an old session's, or the link's own lane closed under a parked fetch
        log.warning("share session of queue %s: %s", self.queue.name, failure.getErrorMessage())
        self._restart()

    def _restart(self) -> None:
        """Give the session up (what it held comes back at the leader, redelivered) and open
        another under a new member id, so that late answers to the old one are told apart."""
        if self.epoch > 0:
            self._send_close()
        self.member = self._new_member()  # on the same lane: the old session's close goes first
        self.epoch, self.opening, self.fetching = 0, False, False
        for offset in self.held:
            self.queue.delivery_counts.pop(offset, None)
        self.held.clear()
        self.acks = {}
        self._later()

    def _later(self) -> None:
        if self._retry is None or not self._retry.active():
            self._retry = self.reactor.callLater(RETRY_S, self.poke)


def _batches(acks: dict[int, int]) -> list[dict]:
    """Acknowledgements as batches of consecutive offsets of one kind."""
    out: list[dict] = []
    for offset in sorted(acks):
        kind = acks[offset]
        last = out[-1] if out else None
        if last is not None and last["last_offset"] == offset - 1 and last["acknowledge_types"] == [kind]:
            last["last_offset"] = offset
        else:
            out.append({"first_offset": offset, "last_offset": offset, "acknowledge_types": [kind]})
    return out


