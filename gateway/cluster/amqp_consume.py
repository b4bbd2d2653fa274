"""AMQP consumers of queues led by other brokers, served as members of the queue's share group.

DESIGN.md's "delivery state is one thing": at the leader, a share group named like an AMQP queue
competes for that queue's messages (routing.share). So a consumer connected to broker A of a
queue led by broker B is, at B, a member of the share group named like the queue: one
:class:`ShareLink` per consumer runs its share session (KIP-932 ShareFetch, ShareAcknowledge)
over the brokers' Kafka connection:

* the fetch's record budget is the consumer's credit (its prefetch less what it holds unacked;
  a bounded batch for consumers without a prefetch or with no-ack), so the leader never hands
  out more than the client may take, as a RabbitMQ channel's credit to a queue process;
* acks, nacks and rejects become acknowledgements (accept; release for a requeue; reject
  otherwise, which dead-letters at the leader as the queue's arguments say), sent with the
  next request of the session;
* a cancelled consumer or a closed channel closes the session (epoch -1): the leader returns
  what the member still held to the queue, flagged redelivered, as RabbitMQ requeues a closed
  channel's unacked messages; a session the leader dropped (it restarted) opens again.

Requests of one session go one at a time, in order (their epochs must follow each other).
"""
from __future__ import annotations

import logging
import uuid

from kio.schema.errors import ErrorCode

from routing.share import ACCEPT, RELEASE
from wire.records import decode_batch, iter_batches

log = logging.getLogger(__name__)

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
MAX_WAIT_MS = 200  # a parked fetch holds the session; acks made meanwhile wait for it this long at most
UNBOUNDED_BATCH = 100  # the record budget of a consumer without a prefetch (or no-ack)
RETRY_S = 0.5
_SESSION_GONE = (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch)


class ShareLink:
    def __init__(self, reactor, peers, leader_of, topic_id_of, queue, consumer, node_id: int):
        self.reactor = reactor
        self.peers = peers
        self.leader_of = leader_of  # (topic, partition) -> node id or -1
        self.topic_id_of = topic_id_of  # topic -> uuid.UUID or None
        self.queue = queue  # the routing.remote_queue.RemoteQueue
        self.consumer = consumer  # gateway.amqp.channel.Consumer (has_credit, deliver, prefetch, unacked, no_ack)
        self.member = f"amqp-{node_id}-{uuid.uuid4().hex[:12]}"
        self.epoch = 0  # the epoch of the session's next request (0: open one)
        self.busy = False
        self.closed = False
        self.wait_ms = MAX_WAIT_MS if not getattr(consumer, "getter", False) else 0  # basic.get waits for nothing
        self.acks: dict[int, int] = {}  # offset -> acknowledge type, for the next request
        self.held: set[int] = set()  # offsets delivered to the consumer and not settled yet
        self._retry = None

    # --- from the channel ------------------------------------------------------------------------------
    def acknowledge(self, offsets, kind: int) -> None:
        for offset in offsets:
            if offset in self.held:
                self.held.discard(offset)
                self.acks[offset] = kind
        self.poke()

    def close(self) -> None:
        """The consumer is gone: settle what was decided, end the session; the rest goes back."""
        self.closed = True
        self.held.clear()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        self.poke()

    # --- the session --------------------------------------------------------------------------------------
    def poke(self) -> None:
        if self.busy:
            return
        if self.closed:
            if self.epoch > 0:
                self._send_close()
            return
        budget = self._budget()
        if budget > 0:
            self._send_fetch(budget)
        elif self.acks and self.epoch > 0:
            self._send_acks()  # settles without acquiring (a fetch would take a record it cannot deliver)
        # else no credit: the next ack (dispatch) pokes again

    def _budget(self) -> int:
        consumer = self.consumer
        if not consumer.has_credit():
            return 0
        if getattr(consumer, "getter", False):
            return 1
        if consumer.prefetch and not consumer.no_ack:
            return max(consumer.prefetch - consumer.unacked - len(self.held), 0)
        return UNBOUNDED_BATCH

    def _target(self):
        leader = self.leader_of(self.queue.topic, self.queue.partition)
        topic_id = self.topic_id_of(self.queue.topic)
        return (leader, topic_id) if leader >= 0 and topic_id is not None else (None, None)

    def _send_fetch(self, budget: int) -> None:
        leader, topic_id = self._target()
        if leader is None:
            self._later()
            return
        acks, self.acks = self.acks, {}
        partition = {"partition_index": self.queue.partition, "acknowledgement_batches": _batches(acks)}
        request = {"group_id": self.queue.name, "member_id": self.member, "share_session_epoch": self.epoch,
                   "max_wait": self.wait_ms, "min_bytes": 1, "max_bytes": 8 << 20,
                   "max_records": max(budget, 1), "batch_size": max(budget, 1),
                   "topics": [{"topic_id": topic_id, "partitions": [partition]}], "forgotten_topics_data": []}
        if self.epoch == 0:
            partition["acknowledgement_batches"] = []  # a session cannot open with acknowledgements
            self.acks = acks
        self.busy = True
        self.peers.call(leader, SHARE_FETCH, request).addCallbacks(
            lambda answer: self._fetched(answer, acks, budget), lambda failure: self._failed(failure, acks))

    def _fetched(self, answer, acks: dict, budget: int) -> None:
        self.busy = False
        if answer.error_code:
            self._session_error(answer.error_code, acks)
            return
        self.epoch += 1
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
        self.poke()

    def _deliver(self, p) -> None:
        counts = {}
        for run in p.acquired_records:
            for offset in range(run.first_offset, run.last_offset + 1):
                counts[offset] = run.delivery_count
        data = bytes(p.records or b"")
        buf = bytearray(data)
        for pos, _header in iter_batches(buf):
            for record in decode_batch(buf, pos).records:
                count = counts.pop(record.offset, None)
                if count is None:
                    continue
                if self.closed:
                    self.acks[record.offset] = RELEASE
                    continue
                if self.consumer.no_ack:  # settled as it goes out
                    self.acks[record.offset] = ACCEPT
                else:
                    self.held.add(record.offset)
                    self.queue.delivered(record.offset, count, self)
                self.consumer.deliver(self.queue, record.offset, record, count > 1)
        for offset in counts:  # acquired but not in the batches (a gap): give it back
            self.acks[offset] = RELEASE

    def _acknowledge_request(self, epoch: int) -> tuple[int | None, dict, dict]:
        leader, topic_id = self._target()
        acks, self.acks = self.acks, {}
        request = {"group_id": self.queue.name, "member_id": self.member, "share_session_epoch": epoch,
                   "topics": [{"topic_id": topic_id, "partitions": [
                       {"partition_index": self.queue.partition, "acknowledgement_batches": _batches(acks)}]}]}
        return leader, request, acks

    def _send_acks(self) -> None:
        leader, request, acks = self._acknowledge_request(self.epoch)
        if leader is None:
            self.acks = {**acks, **self.acks}
            self._later()
            return
        self.busy = True

        def done(answer) -> None:
            self.busy = False
            if answer.error_code:
                self._session_error(answer.error_code, acks)
                return
            self.epoch += 1
            self.poke()

        self.peers.call(leader, SHARE_ACKNOWLEDGE, request).addCallbacks(done, lambda f: self._failed(f, acks))

    def _send_close(self) -> None:
        leader, request, _ = self._acknowledge_request(-1)
        self.epoch = 0
        if leader is None:
            return  # the leader is gone: its session went with it

        def done(_):
            self.busy = False

        self.busy = True
        self.peers.call(leader, SHARE_ACKNOWLEDGE, request).addBoth(done)

    def _session_error(self, error: int, acks: dict) -> None:
        if error in _SESSION_GONE:  # the leader lost the session (restarted, or moved): open another
            log.info("share session of queue %s at its leader ended (%s); opening another", self.queue.name,
                     ErrorCode(error).name)
            self.epoch = 0
            self.held.clear()  # the leader returned them to the queue: they come again, redelivered
            self.acks = {}
        else:
            self.acks = {**acks, **self.acks}
        self._later()

    def _failed(self, failure, acks: dict) -> None:
        self.busy = False
        log.warning("share fetch of queue %s failed: %s", self.queue.name, failure.getErrorMessage())
        self.epoch = 0  # a lost connection may have lost the session too: start a new one
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


