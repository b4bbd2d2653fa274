"""The stream protocol's model over the AMQP one: streams are stream queues, super streams are
partitioned topics with their routing exchange, and named publishers are de-duplicated.

A stream is a stream queue (``x-queue-type: stream``) of the vhost: a stream created over the
stream protocol is one pika can consume with ``x-stream-offset``, and a stream queue declared by
pika is one a stream client can subscribe to. Its records live in the queue's topic.

A super stream ``invoices`` of N partitions is, as RabbitMQ builds it, a durable direct exchange
``invoices`` (argument ``x-super-stream: true``) bound to N partition streams ``invoices-0`` ...
with the binding keys (``0`` ... by default) and ``x-stream-partition-order`` arguments. Here the
partition streams are partitions 0..N-1 of one Kafka topic ``invoices`` (see
:meth:`routing.vhost.VirtualHost.backing`), so Kafka producers and consumer groups use the same
records.

Publisher de-duplication: a publisher declared with a name (reference) numbers its messages
(publishing ids); a message whose id is not above the last one stored for that name on that
stream is confirmed but not stored again. The last stored message of each publish batch carries
the record header ``x-stream-writer`` (``<publishing id> <name>``); the table of names is
rebuilt from those headers, once per stream after a start, so it survives restarts and crashes
exactly as the records do.
"""
from __future__ import annotations

from typing import Any

from core.names import queue_topic
from routing.errors import NOT_FOUND, PRECONDITION_FAILED, ChannelError
from routing.queue import Queue
from routing.queue_arguments import parse_interval
from routing.vhost import VirtualHost
from wire.records import Header

WRITER_HEADER = "x-stream-writer"
FILTER_HEADER = "x-stream-filter-value"  # also RabbitMQ's header for AMQP publishers' filter values
_INT_ARGUMENTS = ("x-max-length-bytes", "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
                  "x-stream-filter-size-bytes", "x-stream-initial-offset")
_TEXT_ARGUMENTS = ("x-max-age", "x-queue-leader-locator")
REBUILD_BYTES = 256 << 20  # publisher names are re-learnt from this much of a stream's tail after a start
STREAM_OWNER = object()  # the owner passed for queue operations: stream queues are never exclusive


def stream_arguments(given: dict[str, str]) -> dict[str, Any]:
    """Create's string arguments as a stream queue's typed ones; 406 for a bad value.

    Stream clients (rstream, RabbitMQ's Java and .NET clients) send RabbitMQ's names without the
    ``x-`` prefix (``max-length-bytes``, ``max-age``, ``stream-max-segment-size-bytes``,
    ``initial-cluster-size``, ``queue-leader-locator``, ``stream-initial-offset``); RabbitMQ maps them to the queue arguments
    and leaves out names it does not know, and so does this."""
    arguments: dict[str, Any] = {"x-queue-type": "stream"}
    for key, value in given.items():
        if not key.startswith("x-"):
            key = "x-" + key
        if key in _INT_ARGUMENTS:
            try:
                arguments[key] = int(value)
            except ValueError:
                raise ChannelError(PRECONDITION_FAILED, f"stream argument {key} must be an integer, got {value!r}") \
                    from None
        elif key in _TEXT_ARGUMENTS:
            arguments[key] = value
    return arguments


def stream(vhost: VirtualHost, name: str) -> Queue:
    """The stream queue ``name``; 404 if there is none (a classic or quorum queue is not a stream)."""
    queue = vhost.queues.get(name)
    if queue is None or not queue.is_stream:
        raise ChannelError(NOT_FOUND, f"stream '{name}' does not exist in vhost '{vhost.name}'")
    return queue


def create(vhost: VirtualHost, name: str, arguments: dict[str, str]) -> Queue:
    """Declare a durable stream queue; 406 with "exists" if it (or a queue of that name) exists."""
    if name in vhost.queues:
        raise ChannelError(PRECONDITION_FAILED, f"stream '{name}' already exists in vhost '{vhost.name}'")
    return vhost.declare_queue(name, owner=STREAM_OWNER, durable=True, arguments=stream_arguments(arguments))


def delete(vhost: VirtualHost, name: str) -> None:
    stream(vhost, name)
    vhost.delete_queue(name, owner=STREAM_OWNER)


# --- super streams ----------------------------------------------------------------------------
def create_super(vhost: VirtualHost, name: str, partitions: list[str], binding_keys: list[str],
                 arguments: dict[str, str]) -> None:
    """The topic of ``len(partitions)`` partitions, its partition streams, the exchange and bindings."""
    if not partitions or len(partitions) != len(binding_keys) or len(set(partitions)) != len(partitions):
        raise ChannelError(PRECONDITION_FAILED, f"super stream '{name}' needs as many distinct partitions as "
                                                f"binding keys (got {len(partitions)} and {len(binding_keys)})")
    if name in vhost.super_streams or name in vhost.exchanges:
        raise ChannelError(PRECONDITION_FAILED, f"super stream '{name}' already exists in vhost '{vhost.name}'")
    taken = [p for p in partitions if p in vhost.queues]
    if taken:
        raise ChannelError(PRECONDITION_FAILED, f"stream '{taken[0]}' already exists in vhost '{vhost.name}'")
    typed = stream_arguments(arguments)
    topic = queue_topic(vhost.name, name)
    if vhost.logs.store.get_topic(topic) is not None:
        raise ChannelError(PRECONDITION_FAILED, f"topic '{topic}' already exists: choose another super stream name")
    vhost.logs.create_topic(topic, len(partitions), _topic_configs(typed),
                            **vhost.placement({**typed, "x-durable": True, "x-queue-name": name, "x-vhost": vhost.name,
                                               "x-partitions": len(partitions)}))
    vhost.super_streams[name] = list(partitions)
    try:
        exchange = vhost.declare_exchange(name, "direct", durable=True, arguments={"x-super-stream": True})
        for order, (partition, key) in enumerate(zip(partitions, binding_keys)):
            vhost.declare_queue(partition, owner=STREAM_OWNER, durable=True, arguments=dict(typed))
            exchange.bind(("queue", partition), key, {"x-stream-partition-order": order})
    except Exception:
        delete_super(vhost, name)
        raise
    vhost.on_change()


def delete_super(vhost: VirtualHost, name: str) -> None:
    partitions = vhost.super_streams.get(name)
    if partitions is None:
        raise ChannelError(NOT_FOUND, f"super stream '{name}' does not exist in vhost '{vhost.name}'")
    for partition in partitions:
        if partition in vhost.queues:
            vhost.delete_queue(partition, owner=STREAM_OWNER)
    if name in vhost.exchanges:
        vhost.delete_exchange(name)
    del vhost.super_streams[name]
    topic = queue_topic(vhost.name, name)
    if vhost.logs.store.get_topic(topic) is not None:
        vhost.logs.delete_topic(topic)
    vhost.on_change()


def partitions(vhost: VirtualHost, name: str) -> list[str]:
    """The partition streams of a super stream in partition order (from the exchange's bindings,
    as RabbitMQ answers, so an exchange bound by hand works too)."""
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise ChannelError(NOT_FOUND, f"super stream '{name}' does not exist in vhost '{vhost.name}'")
    bound = sorted((b.arguments.get("x-stream-partition-order", 0), b.destination[1]) for b in exchange.bindings()
                   if b.destination[0] == "queue")
    out: list[str] = []
    for _, queue in bound:
        if queue not in out:
            out.append(queue)
    return out


def route(vhost: VirtualHost, name: str, routing_key: str) -> list[str]:
    exchange = vhost.exchanges.get(name)
    if exchange is None:
        raise ChannelError(NOT_FOUND, f"super stream '{name}' does not exist in vhost '{vhost.name}'")
    return sorted(dest[1] for dest in exchange.route(routing_key) if dest[0] == "queue")


def _topic_configs(arguments: dict[str, Any]) -> dict[str, str]:
    configs = {"cleanup.policy": "delete"}
    if "x-max-length-bytes" in arguments:
        configs["retention.bytes"] = str(arguments["x-max-length-bytes"])
    if "x-stream-max-segment-size-bytes" in arguments:
        configs["segment.bytes"] = str(arguments["x-stream-max-segment-size-bytes"])
    if "x-max-age" in arguments:
        ms = parse_interval(arguments["x-max-age"])
        if ms is None:
            raise ChannelError(PRECONDITION_FAILED, f"invalid x-max-age {arguments['x-max-age']!r}")
        configs["retention.ms"] = str(ms)
    return configs


# --- publisher de-duplication -----------------------------------------------------------------
class Writers:
    """Per stream queue: publisher name -> the last publishing id stored."""

    def __init__(self) -> None:
        self._tables: dict[Queue, dict[str, int]] = {}

    def table(self, queue: Queue) -> dict[str, int]:
        table = self._tables.get(queue)
        if table is None or queue.deleted:
            table = self._tables[queue] = self._rebuild(queue)
        return table

    def sequence(self, queue: Queue, name: str) -> int:
        """The last publishing id stored for ``name`` (0 if none, as RabbitMQ answers)."""
        return max(self.last(queue, name), 0)

    def last(self, queue: Queue, name: str) -> int:
        """The last publishing id stored for ``name``, -1 if none: a new name's id 0 is stored (as
        RabbitMQ does), only ids up to one already stored are duplicates."""
        return self.table(queue).get(name, -1)

    def stored(self, queue: Queue, name: str, publishing_id: int) -> None:
        table = self.table(queue)
        if publishing_id > table.get(name, -1):
            table[name] = publishing_id

    def forget(self, queue: Queue) -> None:
        self._tables.pop(queue, None)

    @staticmethod
    def _rebuild(queue: Queue) -> dict[str, int]:
        """From the writer headers of the stream's newest segments, up to REBUILD_BYTES of them (the
        scan runs on the reactor). A name silent for longer is forgotten: its publisher's next ids
        are stored as new, as for a name never seen (nothing is lost, old ids are not filtered)."""
        table: dict[str, int] = {}
        plog = queue.plog
        start, scanned = plog.log_start_offset, 0
        for segment in reversed(plog.segments):
            start = max(segment.base_offset, plog.log_start_offset)
            scanned += segment.size
            if scanned >= REBUILD_BYTES:
                break
        for batch in plog.replay(start):
            for record in batch.records:
                for header in record.headers:
                    if header.key == WRITER_HEADER and header.value:
                        text = header.value.decode("utf-8", "replace")
                        pid, _, name = text.partition(" ")
                        if pid.isdigit() and int(pid) > table.get(name, -1):
                            table[name] = int(pid)
        return table


def writer_header(name: str, publishing_id: int) -> Header:
    return Header(WRITER_HEADER, f"{publishing_id} {name}".encode())
