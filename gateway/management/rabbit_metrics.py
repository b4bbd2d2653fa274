"""The names RabbitMQ's Prometheus plugin (``rabbitmq_prometheus``) exposes, read from this broker.

RabbitMQ's Grafana dashboards, alert rules and exporters' users know these names, so they
work against this broker unchanged. The label sets and meanings are RabbitMQ's:

- ``rabbitmq_identity_info`` carries ``rabbitmq_node``, ``rabbitmq_cluster`` and
  ``rabbitmq_cluster_permanent_id``; RabbitMQ's Overview dashboard joins every query on it
  (``* on(instance, job) group_left(rabbitmq_cluster, rabbitmq_node)``), so without it no panel
  shows anything. It is on every endpoint, with ``rabbitmq_endpoint`` naming which one.
- ``rabbitmq_global_*`` are process-lifetime counters (gateway.amqp.counters) labelled
  ``protocol="amqp091"``; publishers and consumers have an ``amqp10`` series too (AMQP 1.0 links); deliveries and acks also by ``queue_type`` (``rabbit_classic_queue``...).
- Queue metrics are one unlabelled sum on ``/metrics`` and one series per queue (``vhost``,
  ``queue``) on ``/metrics/per-object``, as RabbitMQ's aggregated and per-object modes.

Where RabbitMQ reports something of the Erlang VM, the Python process stands in: resident
memory is the process RSS (what the memory alarm compares), ``rabbitmq_build_info`` carries
``python_version`` instead of ``erlang_version``.
"""
from __future__ import annotations

import os
import platform
from importlib import metadata

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gateway.alarms import fd_limit, open_fds, resident_bytes
from gateway.amqp.counters import AMQP, BY_QUEUE_TYPE, RABBIT_QUEUE_TYPES
from gateway.amqp.service import broker_version
from gateway.management import views

PROTOCOL = "amqp091"  # the label of AMQP 0-9-1 series
PROTOCOL_10 = "amqp10"  # and of AMQP 1.0 ones, where a figure is kept for them


def node_name(broker) -> str:
    """The node name, as the management API's ``node`` field shows it."""
    return views.node_name(broker.settings.node_id)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "0"


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def identity(broker, endpoint: str) -> GaugeMetricFamily:
    info = GaugeMetricFamily("rabbitmq_identity_info", "which node and cluster these series come from (join key of RabbitMQ's dashboards)",
                             labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_cluster_permanent_id",
                                     "rabbitmq_endpoint"])
    # The Kafka cluster id is created once with the data (or the ZooKeeper cluster) and never
    # changes: what RabbitMQ's permanent id is for.
    info.add_metric([node_name(broker), broker.amqp.cluster_name, broker.kafka.cluster_id, endpoint], 1)
    return info


class RabbitCollector:
    """``/metrics`` (``per_object=False``) and ``/metrics/per-object`` in RabbitMQ's names."""

    def __init__(self, broker, per_object: bool = False):
        self.broker = broker
        self.per_object = per_object

    def collect(self):
        b = self.broker
        yield identity(b, "per-object" if self.per_object else "metrics")
        yield self._build_info()
        yield from self._resources(b)
        yield from self._totals(b)
        yield from self._churn(b)
        yield from self._global(b)
        yield from self._queues(b)

    @staticmethod
    def _build_info() -> GaugeMetricFamily:
        info = GaugeMetricFamily("rabbitmq_build_info", "versions of this broker and of its Python",
                                 labels=["rabbitmq_version", "prometheus_plugin_version", "prometheus_client_version",
                                         "product_name", "product_version", "python_version"])
        version = broker_version()
        info.add_metric([version, version, _version("prometheus_client"), "gateway", version,
                         platform.python_version()], 1)
        return info

    @staticmethod
    def _resources(b):
        alarms = b.amqp.alarms
        active = alarms.active if alarms is not None else frozenset()
        fds, max_fds = open_fds(), fd_limit()
        stat = os.statvfs(b.data_dir)
        yield _gauge("rabbitmq_alarms_memory_used_watermark", "1 while the memory alarm blocks publishers",
                     int("memory" in active))
        yield _gauge("rabbitmq_alarms_free_disk_space_watermark", "1 while the disk alarm blocks publishers",
                     int("disk" in active))
        # No separate file descriptor alarm here: it is on when the descriptors are all in use.
        yield _gauge("rabbitmq_alarms_file_descriptor_limit", "1 when every allowed file descriptor is in use",
                     int(fds >= max_fds))
        yield _gauge("rabbitmq_process_resident_memory_bytes", "resident memory of the broker process, bytes", resident_bytes())
        yield _gauge("rabbitmq_resident_memory_limit_bytes", "resident memory at which the memory alarm goes on, bytes",
                     alarms.memory_limit if alarms is not None else 0)
        yield _gauge("rabbitmq_disk_space_available_bytes", "free bytes on the data directory's file system",
                     stat.f_bavail * stat.f_frsize)
        yield _gauge("rabbitmq_disk_space_available_limit_bytes", "free bytes below which the disk alarm goes on",
                     alarms.disk_free_limit if alarms is not None else 0)
        yield _gauge("rabbitmq_process_open_fds", "file descriptors the broker holds open", fds)
        yield _gauge("rabbitmq_process_max_fds", "the broker's soft limit on open file descriptors", max_fds)
        yield _gauge("rabbitmq_process_open_tcp_sockets", "client connections open, AMQP and Kafka",
                     len(b.amqp.connections) + len(b.amqp.amqp10_connections) + len(b.kafka.connections))
        yield _gauge("rabbitmq_process_max_tcp_sockets", "connections allowed (--max-connections, else the descriptor limit)",
                     b.settings.max_connections or max_fds)

    @staticmethod
    def _totals(b):
        channels = [ch for c in b.amqp.connections for ch in c.channels.values()]
        yield _gauge("rabbitmq_connections", "AMQP connections open now, 0-9-1 and 1.0",
                     len(b.amqp.connections) + len(b.amqp.amqp10_connections))
        yield _gauge("rabbitmq_channels", "AMQP channels open now", len(channels))
        yield _gauge("rabbitmq_consumers", "AMQP consumers subscribed now", sum(len(ch.consumers) for ch in channels))
        yield _gauge("rabbitmq_queues", "AMQP queues that exist now", sum(len(v.queues) for v in b.amqp.router.vhosts.values()))

    @staticmethod
    def _churn(b):
        router = b.amqp.router
        # both AMQP versions: a connection is counted as it is accepted, before its header says which
        yield _counter("rabbitmq_connections_opened_total", "AMQP connections accepted since start",
                       AMQP.connections_opened)
        yield _counter("rabbitmq_connections_closed_total", "AMQP connections ended since start, closed or dropped",
                       AMQP.connections_closed)
        yield _counter("rabbitmq_channels_opened_total", "AMQP channels opened since start", AMQP.channels_opened)
        yield _counter("rabbitmq_channels_closed_total", "AMQP channels ended since start", AMQP.channels_closed)
        yield _counter("rabbitmq_queues_declared_total", "queue.declare calls answered since start", AMQP.queues_declared)
        # cluster mode rebuilds the router when the AMQP home moves: these start again from 0 then
        yield _counter("rabbitmq_queues_created_total", "queues that came into being since start",
                       getattr(router, "queues_created", 0))
        yield _counter("rabbitmq_queues_deleted_total", "queues removed since start (deleted, expired, auto-deleted)",
                       getattr(router, "queues_deleted", 0))

    @staticmethod
    def _global(b):
        proto = [PROTOCOL]
        for name, doc, value in (
                ("received", "messages published since start", AMQP.received),
                ("received_confirm", "messages published on confirm-mode channels since start",
                 AMQP.received_confirm),
                ("routed", "published messages that reached at least one queue", AMQP.routed),
                ("unroutable_dropped", "published messages that reached no queue and were "
                                       "discarded (not mandatory)", AMQP.unroutable_dropped),
                ("unroutable_returned", "published messages that reached no queue and went "
                                        "back to their publisher (mandatory)", AMQP.unroutable_returned),
                ("confirmed", "publisher confirms sent since start", AMQP.confirmed)):
            family = CounterMetricFamily(f"rabbitmq_global_messages_{name}_total", doc, labels=["protocol"])
            family.add_metric(proto, value)
            yield family
        channels = [ch for c in b.amqp.connections for ch in c.channels.values()]
        publishers = GaugeMetricFamily("rabbitmq_global_publishers", "channels that have published",
                                       labels=["protocol"])
        publishers.add_metric(proto, sum(1 for ch in channels if ch.publishing))
        consumers = GaugeMetricFamily("rabbitmq_global_consumers", "AMQP consumers subscribed now", labels=["protocol"])
        consumers.add_metric(proto, sum(len(ch.consumers) for ch in channels))
        # AMQP 1.0, as RabbitMQ 4 counts it: sender links publish, receiver links of a queue consume
        links = [link for c in b.amqp.amqp10_connections for s in c.sessions.values() for link in s.links.values()]
        publishers.add_metric([PROTOCOL_10], sum(1 for link in links if not link.attach.role
                                                 and getattr(getattr(link, "node", None), "kind", "") != "management"))
        consumers.add_metric([PROTOCOL_10], sum(1 for link in links if getattr(link, "queue", None) is not None))
        yield from (publishers, consumers)
        for name, attr, doc in (
                ("delivered", "delivered", "deliveries since start, consume and get"),
                ("delivered_consume_manual_ack", "consume_manual_ack", "deliveries through basic.consume "
                 "that await an ack"),
                ("delivered_consume_auto_ack", "consume_auto_ack", "deliveries through basic.consume "
                 "without acks"),
                ("delivered_get_manual_ack", "get_manual_ack", "deliveries through basic.get "
                 "that await an ack"),
                ("delivered_get_auto_ack", "get_auto_ack", "deliveries through basic.get "
                 "without acks"),
                ("get_empty", "get_empty", "basic.get calls that found the queue empty"),
                ("redelivered", "redelivered", "deliveries flagged redelivered"),
                ("acknowledged", "acknowledged", "deliveries acknowledged by their consumers")):
            family = CounterMetricFamily(f"rabbitmq_global_messages_{name}_total", doc,
                                         labels=["protocol", "queue_type"])
            for queue_type, counts in BY_QUEUE_TYPE.items():
                family.add_metric([PROTOCOL, RABBIT_QUEUE_TYPES[queue_type]], getattr(counts, attr))
            yield family

    def _queues(self, b):
        labels = ["vhost", "queue"] if self.per_object else []
        ready = GaugeMetricFamily("rabbitmq_queue_messages_ready", "messages waiting for a consumer",
                                  labels=labels)
        unacked = GaugeMetricFamily("rabbitmq_queue_messages_unacked",
                                    "messages delivered and not yet acknowledged", labels=labels)
        depth = GaugeMetricFamily("rabbitmq_queue_messages", "messages in the queue, waiting or "
                                                             "unacknowledged", labels=labels)
        consumers = GaugeMetricFamily("rabbitmq_queue_consumers", "consumers subscribed to the queue", labels=labels)
        published = CounterMetricFamily("rabbitmq_queue_messages_published_total",
                                        "messages appended to the queue since start", labels=labels)
        families = (ready, unacked, depth, consumers, published)
        sums = [0] * len(families)
        for row in queue_rows(b):
            if self.per_object:
                for family, value in zip(families, row[2:]):
                    family.add_metric(list(row[:2]), value)
            else:
                sums = [s + v for s, v in zip(sums, row[2:])]
        if not self.per_object:
            for family, value in zip(families, sums):
                family.add_metric([], value)
        yield from families


def queue_rows(b, vhosts=None):
    """(vhost, queue, ready, unacked, messages, consumers, published) per queue, by vhost and name."""
    for vhost_name in sorted(b.amqp.router.vhosts):
        if vhosts is not None and vhost_name not in vhosts:
            continue
        for name, q in sorted(b.amqp.router.vhosts[vhost_name].queues.items()):
            ready = q.message_count()
            unacked = 0 if q.is_stream else q.unacked_count()
            yield vhost_name, name, ready, unacked, ready + unacked, q.consumer_count(), q.stats.published
