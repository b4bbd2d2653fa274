"""Typed calls over the inter-broker links (gateway.cluster.peers): plain arguments in, plain
dicts and tuples out, so the AMQP forwarding code never builds kio entities itself.

:class:`PeerApis` is mixed into ``PeerClients`` (it needs only its ``call``). :class:`ShareMember`
is one member of one share group at one broker, with the KIP-932 bookkeeping a member needs:
join with ShareGroupHeartbeat (member epoch 0), then ShareFetch whose session epoch is 0 to open
the session and then 1, 2, ...; acknowledgements ride on a fetch or a ShareAcknowledge as
batches (first offset, last offset, AcknowledgeType: 1 accept, 2 release, 3 reject); epoch -1
closes the session (what the member still holds goes back to the queue), heartbeat epoch -1
leaves the group. A share group named like an AMQP queue and reading its topic IS that queue
(routing/share.py), which is how a consumer on another broker reads a queue at its leader.
"""
from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from wire.kafka import api_name
from wire.kafka_private import AMQP_REPLY, STREAM_CONSUMER

PRODUCE, FETCH, METADATA = 0, 1, 3
SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
ACCEPT, RELEASE, REJECT = 1, 2, 3  # Kafka's AcknowledgeType (0 is a gap)
OPEN_EPOCH, FINAL_EPOCH, MAX_EPOCH = 0, -1, 2**31 - 1
SHARE_LANE = "share"  # share fetches may wait (max_wait): their own connection, see peers.py

# {(topic_id, partition): [(first_offset, last_offset, AcknowledgeType or a type per offset), ...]}
Acks = dict[tuple[uuid.UUID, int], list[tuple[int, int, "int | tuple[int, ...]"]]]


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _ack_topics(acks: Acks | None) -> dict[uuid.UUID, list[dict]]:
    """Acknowledgement batches as request topics: topic id -> [partition dicts]."""
    topics: dict[uuid.UUID, list[dict]] = {}
    for (topic_id, partition), batches in (acks or {}).items():
        topics.setdefault(topic_id, []).append({"partition_index": partition, "acknowledgement_batches": [
            {"first_offset": first, "last_offset": last,
             "acknowledge_types": tuple(kind) if isinstance(kind, (tuple, list)) else (kind,)}
            for first, last, kind in batches]})
    return topics


def _top(answer) -> dict:
    return {"error_code": answer.error_code, "error_message": answer.error_message}


class PeerApis:
    """The calls the inter-broker layer makes, by node id. Every method returns a Deferred."""

    def call(self, node_id: int, api_key: int, data, version=None, timeout=None, lane: str = "main"):
        raise NotImplementedError

    def produce(self, node_id: int, topic: str, partition: int, batch: bytes, acks: int = -1,
                timeout_ms: int = 30_000, lane: str = "main"):
        """Append one record batch (wire.records bytes) at the leader: (error_code, base_offset);
        acks=0 has no answer, so (NONE, -1) once it is written."""
        return self.produce_many(node_id, {(topic, partition): batch}, acks, timeout_ms, lane).addCallback(
            lambda answers: answers[(topic, partition)])

    def produce_many(self, node_id: int, batches: dict[tuple[str, int], bytes], acks: int = -1,
                     timeout_ms: int = 30_000, lane: str = "main"):
        """One Produce carrying a batch for each (topic, partition) led by ``node_id``: what a loop
        turn gathered for that leader. {(topic, partition): (error_code, base_offset)}."""
        topics: dict[str, list[dict]] = {}
        for (topic, partition), batch in batches.items():
            topics.setdefault(topic, []).append({"index": partition, "records": batch})
        data = {"transactional_id": None, "acks": acks, "timeout": _ms(timeout_ms),
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}
        # the broker may wait timeout_ms for its ISR: the call's own timeout is longer
        d = self.call(node_id, PRODUCE, data, timeout=timeout_ms / 1000 + 5, lane=lane)

        def done(answer):
            if answer is None:
                return {key: (ErrorCode.none, -1) for key in batches}
            out = {(t.name, p.index): (p.error_code, p.base_offset)
                   for t in answer.responses for p in t.partition_responses}
            # a partition the answer leaves out was not appended
            return {key: out.get(key, (ErrorCode.unknown_server_error, -1)) for key in batches}
        return d.addCallback(done)

    def metadata(self, node_id: int, topics: list[str] | None = None, lane: str = "main"):
        """The Metadata response (all topics for None)."""
        data = {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        return self.call(node_id, METADATA, data, lane=lane)

    def topic_ids(self, node_id: int, topics: list[str], lane: str = "main"):
        """{topic name: topic id} for those of ``topics`` the broker knows."""
        return self.metadata(node_id, topics, lane).addCallback(
            lambda answer: {t.name: t.topic_id for t in answer.topics if not t.error_code})

    def fetch(self, node_id: int, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20,
              max_wait_ms: int = 0, lane: str = "main"):
        """Read from one partition (read-uncommitted): (error_code, high_watermark, records bytes)."""
        data = {"replica_id": -1, "max_wait": _ms(max_wait_ms), "min_bytes": 1 if max_wait_ms else 0,
                "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                            "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": []}

        def done(answer):
            if answer.error_code:
                return answer.error_code, -1, b""
            p = answer.responses[0].partitions[0]
            return p.error_code, p.high_watermark, bytes(p.records or b"")
        return self.call(node_id, FETCH, data, timeout=max_wait_ms / 1000 + 10, lane=lane).addCallback(done)

    def stream_consumer(self, node_id: int, fields: dict, timeout: float = 10.0):
        """One StreamConsumer request (wire.kafka_private: single-active-consumer groups, decided at
        each stream's leader): (error_code, error_message)."""
        return self.call(node_id, STREAM_CONSUMER, fields, version=0, timeout=timeout).addCallback(
            lambda answer: (answer.error_code, answer.error_message))

    def amqp_reply(self, node_id: int, vhost: str, name: str, properties: bytes | None, body: bytes):
        """A Direct Reply-To reply for the requester's broker (properties None: only ask whether the
        requester is there); a Deferred of whether it was handed over (is there)."""
        fields = {"vhost": vhost, "name": name, "properties": properties, "body": body}
        return self.call(node_id, AMQP_REPLY, fields, version=0).addCallback(lambda answer: bool(answer.delivered))

    # --- share groups (KIP-932) ---------------------------------------------------------------
    def share_group_heartbeat(self, node_id: int, group: str, member_id: str, member_epoch: int,
                              topics: list[str] | None = None, rack_id: str | None = None, lane: str = "main"):
        """{error_code, error_message, member_id, member_epoch, heartbeat_interval_ms,
        assignment: {topic_id: [partitions]} or None when unchanged}."""
        data = {"group_id": group, "member_id": member_id, "member_epoch": member_epoch, "rack_id": rack_id,
                "subscribed_topic_names": None if topics is None else tuple(topics)}

        def done(answer):
            assignment = None
            if answer.assignment is not None:
                assignment = {t.topic_id: list(t.partitions) for t in answer.assignment.topic_partitions}
            return {**_top(answer), "member_id": answer.member_id, "member_epoch": answer.member_epoch,
                    "heartbeat_interval_ms": int(answer.heartbeat_interval.total_seconds() * 1000),
                    "assignment": assignment}
        return self.call(node_id, SHARE_GROUP_HEARTBEAT, data, lane=lane).addCallback(done)

    def share_fetch(self, node_id: int, group: str, member_id: str, session_epoch: int,
                    partitions: dict[uuid.UUID, list[int]] | None = None, acks: Acks | None = None,
                    forget: dict[uuid.UUID, list[int]] | None = None, max_records: int = 500,
                    max_wait_ms: int = 0, max_bytes: int = 50 << 20, lane: str = SHARE_LANE):
        """Acquire up to ``max_records`` (the consumer's prefetch) from the session's partitions
        (those of ``partitions`` join it), acknowledging ``acks`` first. Returns {error_code,
        error_message, lock_timeout_ms, partitions: {(topic_id, partition): {error_code,
        acknowledge_error_code, records (batch bytes), acquired: [(first, last, delivery_count)]}}}."""
        topics = _ack_topics(acks)
        for topic_id, indexes in (partitions or {}).items():
            present = {p["partition_index"] for p in topics.setdefault(topic_id, [])}
            topics[topic_id] += [{"partition_index": i, "acknowledgement_batches": []}
                                 for i in indexes if i not in present]
        data = {"group_id": group, "member_id": member_id, "share_session_epoch": session_epoch,
                "max_wait": _ms(max_wait_ms), "min_bytes": 1, "max_bytes": max_bytes, "max_records": max_records,
                "batch_size": max_records,
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [{"topic_id": t, "partitions": list(ps)} for t, ps in (forget or {}).items()]}

        def done(answer):
            out = {}
            for t in answer.responses:
                for p in t.partitions:
                    out[(t.topic_id, p.partition_index)] = {
                        "error_code": p.error_code, "acknowledge_error_code": p.acknowledge_error_code,
                        "records": bytes(p.records or b""),
                        "acquired": [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records]}
            return {**_top(answer), "partitions": out,
                    "lock_timeout_ms": int(answer.acquisition_lock_timeout.total_seconds() * 1000)}
        return self.call(node_id, SHARE_FETCH, data, timeout=max_wait_ms / 1000 + 10, lane=lane).addCallback(done)

    def share_acknowledge(self, node_id: int, group: str, member_id: str, session_epoch: int, acks: Acks,
                          lane: str = SHARE_LANE):
        """Acknowledge without fetching: {error_code, error_message, partitions: {(topic_id,
        partition): error_code}}. Epoch -1 also closes the session."""
        data = {"group_id": group, "member_id": member_id, "share_session_epoch": session_epoch,
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in _ack_topics(acks).items()]}

        def done(answer):
            return {**_top(answer), "partitions": {(t.topic_id, p.partition_index): p.error_code
                                                   for t in answer.responses for p in t.partitions}}
        return self.call(node_id, SHARE_ACKNOWLEDGE, data, lane=lane).addCallback(done)


class ShareError(RuntimeError):
    """A share-group request answered with an error (``code`` is the ErrorCode)."""

    def __init__(self, api_key: int, code: ErrorCode, message: str | None):
        super().__init__(f"{api_name(api_key)}: {ErrorCode(code).name}" + (f": {message}" if message else ""))
        self.code = code


class ShareMember:
    """One member of share group ``group`` at broker ``node_id``, reading ``topics``. Keeps the
    member epoch and the share session epoch; requests of one member are sent one at a time
    (each result before the next call), as a session's epochs require."""

    def __init__(self, peers: PeerApis, node_id: int, group: str, topics: list[str], member_id: str | None = None):
        self.peers, self.node_id, self.group, self.topics = peers, node_id, group, list(topics)
        self.member_id = member_id or str(uuid.uuid4())  # v1: the member names itself (KIP-1082)
        self.member_epoch = 0
        self.session_epoch = OPEN_EPOCH  # the epoch the next ShareFetch/ShareAcknowledge carries
        self.assignment: dict[uuid.UUID, list[int]] = {}

    def heartbeat(self):
        """Join (member epoch 0) or stay in the group; the assignment is kept. Fails with
        ShareError on an error answer (FENCED/UNKNOWN_MEMBER: join again with epoch 0)."""
        first = self.member_epoch == 0

        def done(answer):
            if answer["error_code"]:
                if answer["error_code"] in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
                    self.member_epoch = 0
                raise ShareError(SHARE_GROUP_HEARTBEAT, answer["error_code"], answer["error_message"])
            self.member_epoch = answer["member_epoch"]
            if answer["assignment"] is not None:
                self.assignment = answer["assignment"]
            return answer
        return self.peers.share_group_heartbeat(self.node_id, self.group, self.member_id, self.member_epoch,
                                                self.topics if first else None).addCallback(done)

    def _next_epoch(self, api_key: int, sent: int):
        def after(answer):
            if answer["error_code"] in (ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch):
                self.session_epoch = OPEN_EPOCH  # the broker forgot the session: open a new one
            elif sent == FINAL_EPOCH:
                self.session_epoch = OPEN_EPOCH
            else:
                self.session_epoch = 1 if sent == MAX_EPOCH else sent + 1
            if answer["error_code"]:
                raise ShareError(api_key, answer["error_code"], answer["error_message"])
            return answer

        def lost(failure):
            self.session_epoch = OPEN_EPOCH  # unknown whether the broker applied it: start over
            return failure
        return after, lost

    def fetch(self, max_records: int, acks: Acks | None = None, max_wait_ms: int = 0,
              partitions: dict[uuid.UUID, list[int]] | None = None):
        """ShareFetch on the member's assignment (or ``partitions``); acks need an open session."""
        epoch = self.session_epoch
        if acks and epoch == OPEN_EPOCH:
            raise ValueError("acknowledgements cannot ride on the ShareFetch that opens a session")
        wanted = partitions if partitions is not None else (self.assignment if epoch == OPEN_EPOCH else None)
        after, lost = self._next_epoch(SHARE_FETCH, epoch)
        return self.peers.share_fetch(self.node_id, self.group, self.member_id, epoch, wanted, acks,
                                      max_records=max_records, max_wait_ms=max_wait_ms).addCallbacks(after, lost)

    def acknowledge(self, acks: Acks, close: bool = False):
        """ShareAcknowledge; ``close`` makes it the session's last request (epoch -1)."""
        epoch = FINAL_EPOCH if close else self.session_epoch
        after, lost = self._next_epoch(SHARE_ACKNOWLEDGE, epoch)
        return self.peers.share_acknowledge(self.node_id, self.group, self.member_id, epoch,
                                            acks).addCallbacks(after, lost)

    def close(self, acks: Acks | None = None):
        """End the share session (its unacknowledged records go back), then leave the group."""
        if self.session_epoch == OPEN_EPOCH and not acks:
            d = self._leave(None)
        else:
            d = self.acknowledge(acks or {}, close=True).addCallback(self._leave)
        return d

    def _leave(self, _):
        self.member_epoch = -1
        return self.peers.share_group_heartbeat(self.node_id, self.group, self.member_id, -1)
