"""The stream protocol's commands on an open connection: streams, publishers, subscriptions.

Mixed into :class:`gateway.stream.connection.StreamConnection`; each handler takes a decoded
:class:`wire.stream_codec.Request`. Errors from the AMQP model (ChannelError) become the
request's response code in the connection's frame loop.
"""
from __future__ import annotations

import logging
import time

from core.groups.retention import KEEP as STORED_OFFSET
from core.offsets import OffsetAndMetadata
from gateway.logs import fields
from gateway.stream.subscriptions import Subscription, start_offset
from routing import stream_message, streams
from routing.broker import Publish
from routing.errors import ACCESS_REFUSED, ChannelError
from wire import stream_codec as sc
from wire.records import Record

log = logging.getLogger(__name__)

MAX_PUBLISHERS = MAX_SUBSCRIPTIONS = 256  # ids are one octet
MAX_REFERENCE_BYTES = 255  # publisher and consumer names, as RabbitMQ limits them
MAX_NAME_BYTES = 255  # a stream is a queue: its name must be one an AMQP client can give (shortstr)


def name_problem(name: str | None) -> str | None:
    """Why ``name`` cannot name a new stream or super stream (RabbitMQ refuses empty and ``amq.``
    names; a null string or one past a short string cannot be a queue name); None if it can."""
    if not name:
        return "a stream needs a name"
    if name.startswith("amq."):
        return f"stream name '{name}' starts with the reserved prefix 'amq.'"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"stream name of {len(name.encode())} bytes is longer than {MAX_NAME_BYTES}"
    return None


def reference_too_long(reference: str | None) -> bool:
    return reference is not None and len(reference.encode()) > MAX_REFERENCE_BYTES


class StreamCommands:
    # --- permissions ------------------------------------------------------------------------
    def check(self, name: str, permission: str) -> None:
        granted = self.permission(self.vhost.name)
        if granted is None or not granted.allows(permission, name):
            raise ChannelError(ACCESS_REFUSED, f"{permission} access to stream '{name}' in vhost '{self.vhost.name}' "
                                               f"refused for user '{self.username}'")

    # --- streams ----------------------------------------------------------------------------
    def refuse(self, command: int, correlation_id: int, code: int, reason: str) -> None:
        log.info("stream request refused: %s", reason, extra=fields(conn=self.conn_id, peer=self.peer,
                                                                     command=command))
        self.write(sc.error_response(command, correlation_id, code))

    def on_create(self, r) -> None:
        problem = name_problem(r.stream)
        if problem is not None:
            self.refuse(sc.CREATE, r.correlation_id, sc.PRECONDITION_FAILED, problem)
            return
        self.check(r.stream, "configure")
        if r.stream in self.vhost.queues:
            self.write(sc.response(sc.CREATE, r.correlation_id, sc.STREAM_ALREADY_EXISTS))
            return
        queue = streams.create(self.vhost, r.stream, self.spread_leaders(r.arguments))
        log.info("stream created", extra=fields(vhost=self.vhost.name, stream=r.stream, user=self.username))
        self.answer_when_led(sc.CREATE, r.correlation_id, [queue])

    def answer_when_led(self, command: int, correlation_id: int, queues: list) -> None:
        """Create's answer; in a cluster once the new streams have leaders, so a client's next
        Metadata names them."""
        if self.service.cluster is None:
            self.write(sc.response(command, correlation_id))
            return
        self.service.cluster.when_led(queues).addCallback(lambda _: self.write(sc.response(command, correlation_id)))

    def spread_leaders(self, arguments: dict[str, str]) -> dict[str, str]:
        """In a cluster, streams are led where they spread best (like topics) unless the client says."""
        if self.service.cluster is None or {"queue-leader-locator", "x-queue-leader-locator"} & set(arguments):
            return arguments
        return {**arguments, "queue-leader-locator": "balanced"}

    def on_delete(self, r) -> None:
        self.check(r.stream, "configure")
        queue = streams.stream(self.vhost, r.stream)
        self.service.writers.forget(queue)
        streams.delete(self.vhost, r.stream)
        self.write(sc.response(sc.DELETE, r.correlation_id))
        self.service.stream_deleted(self.vhost.name, r.stream)

    def on_create_super_stream(self, r) -> None:
        problem = next(filter(None, map(name_problem, [r.super_stream, *r.partitions])), None)
        if problem is None and None in r.binding_keys:
            problem = "a binding key is a null string"
        if problem is not None:
            self.refuse(sc.CREATE_SUPER_STREAM, r.correlation_id, sc.PRECONDITION_FAILED, problem)
            return
        self.check(r.super_stream, "configure")
        if r.super_stream in self.vhost.super_streams:
            self.write(sc.response(sc.CREATE_SUPER_STREAM, r.correlation_id, sc.STREAM_ALREADY_EXISTS))
            return
        streams.create_super(self.vhost, r.super_stream, r.partitions, r.binding_keys, self.spread_leaders(r.arguments))
        log.info("super stream created", extra=fields(vhost=self.vhost.name, super_stream=r.super_stream,
                                                      partitions=len(r.partitions), user=self.username))
        self.answer_when_led(sc.CREATE_SUPER_STREAM, r.correlation_id,
                             [self.vhost.queues[name] for name in r.partitions if name in self.vhost.queues])

    def on_delete_super_stream(self, r) -> None:
        self.check(r.super_stream, "configure")
        partitions = list(self.vhost.super_streams.get(r.super_stream, ()))
        streams.delete_super(self.vhost, r.super_stream)
        self.write(sc.response(sc.DELETE_SUPER_STREAM, r.correlation_id))
        for name in partitions:
            self.service.stream_deleted(self.vhost.name, name)

    def on_metadata(self, r) -> None:
        cluster = self.service.cluster
        if cluster is None:
            host, port = self.service.advertised(self.listener)
            brokers, place = [(0, host, port)], lambda queue: (0, [0])
        else:  # each broker by its address for this listener's kind (plain or TLS)
            brokers = cluster.brokers(self.listener)
            place = lambda queue: cluster.placement(queue, self.listener)  # noqa: E731
        out = []
        for name in r.streams:
            queue = self.vhost.queues.get(name or "")
            if queue is not None and queue.is_stream:
                leader, replicas = place(queue)
                out.append((name, sc.OK if leader != 0xFFFF else sc.STREAM_NOT_AVAILABLE, leader, replicas))
            else:
                out.append((name, sc.STREAM_DOES_NOT_EXIST, 0xFFFF, []))
        self.write(sc.encode_metadata(r.correlation_id, brokers, out))

    def on_route(self, r) -> None:
        names = streams.route(self.vhost, r.super_stream, r.routing_key)
        self.write(sc.encode_streams(sc.ROUTE, r.correlation_id, sc.OK, names))

    def on_partitions(self, r) -> None:
        names = streams.partitions(self.vhost, r.super_stream)
        self.write(sc.encode_streams(sc.PARTITIONS, r.correlation_id, sc.OK, names))

    def on_stream_stats(self, r) -> None:
        queue = streams.stream(self.vhost, r.stream)
        if self.service.cluster is not None:
            queue = self.service.cluster.readable(self.vhost, queue)
            if queue is None:
                self.refuse(sc.STREAM_STATS, r.correlation_id, sc.STREAM_NOT_AVAILABLE,
                            f"stream '{r.stream}' has no replica on this broker")
                return
        plog = queue.plog
        stats = {"first_chunk_id": plog.log_start_offset if plog.high_watermark > plog.log_start_offset else -1,
                 "committed_chunk_id": plog.high_watermark - 1 if plog.high_watermark > plog.log_start_offset else -1}
        self.write(sc.encode_stream_stats(r.correlation_id, sc.OK, stats))

    def on_exchange_command_versions(self, r) -> None:
        for key, _, high in r.versions:
            if key == sc.DELIVER:
                self.deliver_version = min(high, sc.VERSIONS[sc.DELIVER][1])
        self.write(sc.encode_command_versions(r.correlation_id))

    # --- publishing ---------------------------------------------------------------------------
    def on_declare_publisher(self, r) -> None:
        if reference_too_long(r.reference):
            self.refuse(sc.DECLARE_PUBLISHER, r.correlation_id, sc.PRECONDITION_FAILED, "publisher name too long")
            return
        if r.publisher_id in self.publishers:
            raise ChannelError(406, f"publisher {r.publisher_id} is already declared on this connection")
        queue = streams.stream(self.vhost, r.stream)
        self.check(r.stream, "write")
        if self.service.cluster is not None:
            queue = self.service.cluster.led_here(self.vhost, queue)
        if queue is None:  # RabbitMQ's answer when the leader cannot be reached: the client asks Metadata for it
            self.refuse(sc.DECLARE_PUBLISHER, r.correlation_id, sc.STREAM_NOT_AVAILABLE,
                        f"stream '{r.stream}' is led by another broker")
            return
        reference = r.reference or None
        if reference is not None and any(ref == reference and q is queue for q, ref in self.publishers.values()):
            raise ChannelError(406, f"publisher name '{reference}' is already in use on stream '{r.stream}'")
        self.publishers[r.publisher_id] = (queue, reference)
        self.write(sc.response(sc.DECLARE_PUBLISHER, r.correlation_id))

    def on_delete_publisher(self, r) -> None:
        if self.publishers.pop(r.publisher_id, None) is None:
            self.write(sc.response(sc.DELETE_PUBLISHER, r.correlation_id, sc.PUBLISHER_DOES_NOT_EXIST))
            return
        self.write(sc.response(sc.DELETE_PUBLISHER, r.correlation_id))

    def on_query_publisher_sequence(self, r) -> None:
        if reference_too_long(r.reference):
            self.refuse(sc.QUERY_PUBLISHER_SEQUENCE, r.correlation_id, sc.PRECONDITION_FAILED,
                        "publisher name too long")
            return
        queue = streams.stream(self.vhost, r.stream)
        if self.service.cluster is not None and queue.remote:  # from this broker's replica, if it has one
            replica = self.service.cluster.readable(self.vhost, queue)
            if replica is None:
                self.refuse(sc.QUERY_PUBLISHER_SEQUENCE, r.correlation_id, sc.STREAM_NOT_AVAILABLE,
                            f"stream '{r.stream}' has no replica on this broker")
                return
            sequence = streams.Writers().sequence(replica, r.reference or "")  # read once, not kept
        else:
            sequence = self.service.writers.sequence(queue, r.reference or "")
        self.write(sc.encode_u64_response(sc.QUERY_PUBLISHER_SEQUENCE, r.correlation_id, sc.OK, sequence))

    def on_publish(self, r) -> None:
        publisher = self.publishers.get(r.publisher_id)
        if publisher is None:
            self.write(sc.encode_publish_error(r.publisher_id, [(pid, sc.PUBLISHER_DOES_NOT_EXIST)
                                                                for pid, _, _ in r.messages]))
            return
        queue, reference = publisher
        if queue.deleted:
            current = self.vhost.queues.get(queue.name)
            moved = current is not None and current.is_stream  # led by another broker now (a failover)
            code = sc.STREAM_NOT_AVAILABLE if moved else sc.STREAM_DOES_NOT_EXIST
            self.write(sc.encode_publish_error(r.publisher_id, [(pid, code) for pid, _, _ in r.messages]))
            if moved:  # as RabbitMQ does when a stream's leader changes: the client asks Metadata again
                self.publishers.pop(r.publisher_id, None)
                self.write(sc.encode_metadata_update(sc.STREAM_NOT_AVAILABLE, queue.name))
            return
        router, writers = self.service.router, self.service.writers
        last = writers.last(queue, reference) if reference is not None else -1
        now_ms = int(time.time() * 1000)
        errors, duplicates, staged = [], [], []
        limit = self.service.max_message_bytes
        if self.service.alarm_reason:  # publishing is blocked while a resource alarm is on
            errors = [(pid, sc.PRECONDITION_FAILED) for pid, _, _ in r.messages]
        else:
            for pid, filter_value, message in r.messages:
                if reference is not None and pid <= last:
                    duplicates.append(pid)  # stored before: confirmed, not stored again
                    continue
                if message is None or len(message) > limit:  # None: a sub-entry batch above the codec's limit
                    errors.append((pid, sc.PRECONDITION_FAILED))
                    continue
                key, value, headers, timestamp = stream_message.record_from_stream(message, now_ms)
                if filter_value is not None:
                    headers = (*headers, streams.Header(streams.FILTER_HEADER, filter_value.encode()))
                staged.append((pid, Record(0, timestamp, key, value, headers)))
                last = max(last, pid)
        if staged and reference is not None:  # the batch's last record names the publisher's progress
            pid, record = staged[-1]
            staged[-1] = (pid, Record(0, record.timestamp, record.key, record.value,
                                      (*record.headers, streams.writer_header(reference, last))))
            writers.stored(queue, reference, last)
        for pid, record in staged:
            publish = Publish()
            router.stage_stored(queue, record, publish)
            self.pending.append((r.publisher_id, pid, publish, queue))
        if duplicates:
            self.write(sc.encode_publish_confirm(r.publisher_id, duplicates))
        if errors:
            self.write(sc.encode_publish_error(r.publisher_id, errors))
        if staged:
            self.service.confirming.add(self)

    @property
    def confirms_waiting(self) -> bool:
        return bool(self.pending)

    def send_confirms(self) -> None:
        """Confirm (or refuse) every publish whose records are durable, in order, one frame per publisher."""
        confirms: dict[int, list[int]] = {}
        errors: dict[int, list[tuple[int, int]]] = {}
        done = 0
        for publisher_id, pid, publish, queue in self.pending:
            if publish.rejected or (queue.deleted and not publish.targets):
                errors.setdefault(publisher_id, []).append((pid, sc.INTERNAL_ERROR))
                self.service.writers.forget(queue)  # re-learn what is really stored
            elif publish.targets and publish.durable():
                confirms.setdefault(publisher_id, []).append(pid)
            else:
                break  # confirms go out in publish order
            done += 1
        if not done:
            return
        del self.pending[:done]
        for publisher_id, ids in confirms.items():
            self.write(sc.encode_publish_confirm(publisher_id, ids))
        for publisher_id, errs in errors.items():
            self.write(sc.encode_publish_error(publisher_id, errs))

    # --- consuming ----------------------------------------------------------------------------
    def on_subscribe(self, r) -> None:
        if r.subscription_id in self.subscriptions:
            self.write(sc.response(sc.SUBSCRIBE, r.correlation_id, sc.SUBSCRIPTION_ID_ALREADY_EXISTS))
            return
        queue = streams.stream(self.vhost, r.stream)
        self.check(r.stream, "read")
        if self.service.cluster is not None:
            queue = self.service.cluster.readable(self.vhost, queue)
            if queue is None:  # RabbitMQ's answer without a local member: subscribe where Metadata says
                self.refuse(sc.SUBSCRIBE, r.correlation_id, sc.STREAM_NOT_AVAILABLE,
                            f"stream '{r.stream}' has no replica on this broker")
                return
        sub = Subscription(self, r.subscription_id, queue, start_offset(queue, r.offset_spec), r.credit,
                           r.properties)
        self.subscriptions[r.subscription_id] = sub
        self.write(sc.response(sc.SUBSCRIBE, r.correlation_id))
        queue.add_consumer(sub)
        if sub.sac_name is not None:
            self.service.active.join(self.vhost.name, r.stream, sub)
        sub.pull(queue)

    def on_unsubscribe(self, r) -> None:
        sub = self.subscriptions.pop(r.subscription_id, None)
        if sub is None:
            self.write(sc.response(sc.UNSUBSCRIBE, r.correlation_id, sc.SUBSCRIPTION_ID_DOES_NOT_EXIST))
            return
        self.drop_subscription(sub)
        self.write(sc.response(sc.UNSUBSCRIBE, r.correlation_id))

    def drop_subscription(self, sub: Subscription) -> None:
        sub.queue.remove_consumer(sub)
        if sub.sac_name is not None:
            self.service.active.leave(self.vhost.name, sub.queue.name, sub)

    def on_credit(self, r) -> None:
        sub = self.subscriptions.get(r.subscription_id)
        if sub is None:
            self.write(sc.encode_credit_error(sc.SUBSCRIPTION_ID_DOES_NOT_EXIST, r.subscription_id))
            return
        sub.credit = min(sub.credit + r.credit, 0xFFFF)
        sub.pull(sub.queue)

    def pull_all(self) -> None:
        for sub in list(self.subscriptions.values()):
            sub.pull(sub.queue)

    def consumer_update(self, sub: Subscription, active: bool) -> None:
        """Tell a single-active-consumer subscription it became active (or passive)."""
        cid = self.next_correlation()
        sub.awaiting_update = cid if active else None
        self.write(sc.encode_consumer_update(cid, sub.id, active))

    def on_response(self, r) -> None:
        if r.command == sc.CONSUMER_UPDATE:
            for sub in self.subscriptions.values():
                if sub.awaiting_update == r.correlation_id:
                    sub.awaiting_update = None
                    if r.offset_spec[0] != sc.OFFSET_NONE:  # none: from where it subscribed
                        sub.position = start_offset(sub.queue, r.offset_spec)
                    sub.pull(sub.queue)
        elif r.command == sc.CLOSE:
            self.closing = True
            self.transport.loseConnection()

    def on_store_offset(self, r) -> None:
        queue = self.vhost.queues.get(r.stream or "")
        if queue is None or not queue.is_stream or not r.reference:
            return  # no response is defined for StoreOffset: RabbitMQ ignores it too
        if reference_too_long(r.reference):
            log.warning("stream store-offset ignored: the consumer name is longer than %d bytes", MAX_REFERENCE_BYTES,
                        extra=fields(user=self.username, vhost=self.vhost.name, stream=r.stream))
            return
        granted = self.permission(self.vhost.name)
        if granted is None or not granted.allows("read", r.stream):
            log.warning("stream store-offset refused: no read permission", extra=fields(
                user=self.username, vhost=self.vhost.name, stream=r.stream, reference=r.reference))
            return
        if r.offset >= 2**63 - 1:  # the protocol's u64; stored offsets are Kafka's signed 64-bit ones
            log.warning("stream store-offset ignored: the offset is past any a stream can hold", extra=fields(
                user=self.username, vhost=self.vhost.name, stream=r.stream, reference=r.reference, offset=r.offset))
            return
        def commit() -> None:
            self.service.offsets.commit(r.reference, {(queue.topic, queue.partition): OffsetAndMetadata(
                r.offset + 1, metadata=STORED_OFFSET)})  # kept as long as the stream, not expired
            self.service.request_flush()
        if self.service.cluster is None:
            commit()
        else:  # at the consumer name's coordinator, wherever it is
            self.service.cluster.store_offset(self.service.offsets, r.reference, queue.topic, queue.partition,
                                              r.offset, commit)

    def on_query_offset(self, r) -> None:
        if reference_too_long(r.reference):
            self.refuse(sc.QUERY_OFFSET, r.correlation_id, sc.PRECONDITION_FAILED, "consumer name too long")
            return
        queue = streams.stream(self.vhost, r.stream)
        if self.service.cluster is not None:
            d = self.service.cluster.query_offset(self.service.offsets, r.reference or "", queue.topic,
                                                  queue.partition)
            d.addCallbacks(lambda stored: self._answer_offset(r.correlation_id, stored),
                           lambda failure: self.refuse(sc.QUERY_OFFSET, r.correlation_id, sc.STREAM_NOT_AVAILABLE,
                                                       f"stored offset not read: {failure.getErrorMessage()}"))
            return
        found = self.service.offsets.fetch(r.reference or "", [(queue.topic, queue.partition)])
        stored = found.get((queue.topic, queue.partition))
        self._answer_offset(r.correlation_id, None if stored is None else stored.offset)

    def _answer_offset(self, correlation_id: int, stored: int | None) -> None:
        """QueryOffset's answer from the committed offset (the next to read), None for none."""
        if stored is None or stored <= 0:
            self.write(sc.encode_u64_response(sc.QUERY_OFFSET, correlation_id, sc.NO_OFFSET, 0))
            return
        self.write(sc.encode_u64_response(sc.QUERY_OFFSET, correlation_id, sc.OK, stored - 1))

    handlers = {
        sc.CREATE: on_create, sc.DELETE: on_delete, sc.METADATA: on_metadata, sc.ROUTE: on_route,
        sc.PARTITIONS: on_partitions, sc.STREAM_STATS: on_stream_stats,
        sc.EXCHANGE_COMMAND_VERSIONS: on_exchange_command_versions,
        sc.CREATE_SUPER_STREAM: on_create_super_stream, sc.DELETE_SUPER_STREAM: on_delete_super_stream,
        sc.DECLARE_PUBLISHER: on_declare_publisher, sc.DELETE_PUBLISHER: on_delete_publisher,
        sc.QUERY_PUBLISHER_SEQUENCE: on_query_publisher_sequence, sc.PUBLISH: on_publish,
        sc.SUBSCRIBE: on_subscribe, sc.UNSUBSCRIBE: on_unsubscribe, sc.CREDIT: on_credit,
        sc.STORE_OFFSET: on_store_offset, sc.QUERY_OFFSET: on_query_offset,
    }
