"""``GET /metrics``: Prometheus text format through ``prometheus-client``.

Three sets of names: the broker's own (``gateway_*``, here), RabbitMQ's Prometheus plugin's
(``rabbitmq_*``, gateway.management.rabbit_metrics) and the Kafka exporter's (``kafka_*``,
gateway.management.kafka_exporter_metrics), so that stock dashboards and alerts work.
``/metrics/per-object`` is the same with RabbitMQ's queue metrics per queue instead of summed;
``/metrics/detailed`` (gateway.management.detailed_metrics) serves chosen families only.

Everything is read from the live broker when scraped (a custom collector), so the hot paths
keep only plain integer counters. Latency histograms (Kafka requests per API, AMQP methods,
fsync) are :class:`Latency` objects: a bisect into fixed buckets and an increment, cheaper
than a prometheus-client Histogram per observation on a path that runs per message.
"""
from __future__ import annotations

import time
from bisect import bisect_left

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from twisted.web import resource

from gateway.management.kafka_exporter_metrics import KafkaExporterCollector
from gateway.netutil import RANGES_SENT
from gateway.management.rabbit_metrics import RabbitCollector

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Latency:
    """Counts of observations per bucket, per label value; :meth:`observe` is the hot path."""

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, label: str, seconds: float) -> None:
        counts = self.counts.get(label)
        if counts is None:
            counts = self.counts[label] = [0] * (len(BUCKETS) + 1)
            self.sums[label] = 0.0
        counts[bisect_left(BUCKETS, seconds)] += 1
        self.sums[label] += seconds

    def observe_many(self, label: str, seconds_each: float, count: int) -> None:
        """``count`` observations of ``seconds_each`` (a batch's average), at the cost of one."""
        counts = self.counts.get(label)
        if counts is None:
            counts = self.counts[label] = [0] * (len(BUCKETS) + 1)
            self.sums[label] = 0.0
        counts[bisect_left(BUCKETS, seconds_each)] += count
        self.sums[label] += seconds_each * count

    def family(self, name: str, doc: str, label: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=[label])
        for value, counts in sorted(self.counts.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(BUCKETS + (float("inf"),), counts):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric([value], buckets, self.sums[value])
        return family


# One set per process: the protocols observe into these, the collector reads them.
KAFKA_REQUESTS = Latency()
AMQP_METHODS = Latency()
FSYNC = Latency()


class BrokerCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        b = self.broker
        yield from self._kafka(b)
        yield from self._amqp(b)
        connections = GaugeMetricFamily("gateway_connections", "Open client connections", labels=["protocol"])
        connections.add_metric(["amqp"], len(b.amqp.connections))
        connections.add_metric(["amqp10"], len(b.amqp.amqp10_connections))
        connections.add_metric(["kafka"], len(b.kafka.connections))
        yield connections
        yield KAFKA_REQUESTS.family("gateway_kafka_request_seconds",
                                    "Kafka request latency, receipt to response (incl. waiting for fsync)", "api")
        yield AMQP_METHODS.family("gateway_amqp_method_seconds", "AMQP method handling time", "method")
        yield FSYNC.family("gateway_fsync_seconds", "Duration of one group-commit fsync pass", "kind")
        # One node: the ISR is always this node and the counters stay 0, so dashboards need no special case.
        replicas = b.cluster.replicas if b.cluster is not None else None
        yield CounterMetricFamily("gateway_isr_shrinks", "ISR shrinks made by this broker as leader",
                                  value=replicas.isr_shrinks if replicas else 0)
        yield CounterMetricFamily("gateway_isr_expands", "ISR expands made by this broker as leader",
                                  value=replicas.isr_expands if replicas else 0)
        under = sum(1 for r in replicas.leaders() if len(r.state.isr) < len(r.replicas)) if replicas else 0
        yield GaugeMetricFamily("gateway_under_replicated_partitions",
                                "Partitions led here whose ISR is smaller than their replica set", value=under)
        yield GaugeMetricFamily("gateway_offline_partitions", "Partitions with no leader (reported by the "
                                "controller, 0 on other brokers, as Kafka's OfflinePartitionsCount)",
                                value=_offline_partitions(b.cluster))

    def _kafka(self, b):
        records_in = CounterMetricFamily("gateway_topic_records_in", "Records produced", labels=["topic"])
        bytes_in = CounterMetricFamily("gateway_topic_bytes_in", "Bytes produced (stored batches)", labels=["topic"])
        bytes_out = CounterMetricFamily("gateway_topic_bytes_out", "Bytes fetched by consumers", labels=["topic"])
        for topic, (r_in, by_in, by_out) in sorted(b.kafka.traffic.items()):
            records_in.add_metric([topic], r_in)
            bytes_in.add_metric([topic], by_in)
            bytes_out.add_metric([topic], by_out)
        yield from (records_in, bytes_in, bytes_out)
        fetched = CounterMetricFamily("gateway_kafka_fetch_record_bytes", "Stored record bytes sent in Fetch answers: "
                                      "from the segment files with sendfile, or read and copied (TLS, a full socket)",
                                      labels=["path"])
        for path, count in RANGES_SENT.items():
            fetched.add_metric([path], count)
        yield fetched
        hw = GaugeMetricFamily("gateway_partition_high_watermark", "High watermark", labels=["topic", "partition"])
        start = GaugeMetricFamily("gateway_partition_log_start_offset", "Log start offset",
                                  labels=["topic", "partition"])
        size = GaugeMetricFamily("gateway_partition_size_bytes", "Bytes on disk", labels=["topic", "partition"])
        for (topic, partition), plog in sorted(b.kafka.logs.logs.items()):
            labels = [topic, str(partition)]
            hw.add_metric(labels, plog.high_watermark)
            start.add_metric(labels, plog.log_start_offset)
            size.add_metric(labels, sum(s.size for s in plog.segments))
        yield from (hw, start, size)
        lag = GaugeMetricFamily("gateway_group_lag", "Consumer group lag (HW - committed offset)",
                                labels=["group", "topic", "partition"])
        groups = b.kafka.groups
        for listing in sorted(groups.list_groups()):
            for (topic, partition), (offset, _e, _m) in sorted(groups.fetch_offsets(listing[0], None).items()):
                plog = b.kafka.partition(topic, partition)
                if plog is not None and offset >= 0:
                    lag.add_metric([listing[0], topic, str(partition)], max(plog.high_watermark - offset, 0))
        yield lag

    def _amqp(self, b):
        labels = ["vhost", "queue"]
        ready = GaugeMetricFamily("gateway_queue_messages_ready", "Messages ready for delivery", labels=labels)
        unacked = GaugeMetricFamily("gateway_queue_messages_unacked", "Delivered, not yet acknowledged",
                                    labels=labels)
        consumers = GaugeMetricFamily("gateway_queue_consumers", "Consumers", labels=labels)
        published = CounterMetricFamily("gateway_queue_messages_published", "Messages stored", labels=labels)
        published_bytes = CounterMetricFamily("gateway_queue_bytes_published", "Body bytes stored", labels=labels)
        delivered = CounterMetricFamily("gateway_queue_messages_delivered", "Deliveries (incl. basic.get)",
                                        labels=labels)
        acked = CounterMetricFamily("gateway_queue_messages_acked", "Acknowledgements", labels=labels)
        for vhost in sorted(b.amqp.router.vhosts):
            for name, q in sorted(b.amqp.router.vhosts[vhost].queues.items()):
                key = [vhost, name]
                ready.add_metric(key, q.message_count())
                unacked.add_metric(key, 0 if q.is_stream else q.unacked_count())
                consumers.add_metric(key, q.consumer_count())
                published.add_metric(key, q.stats.published)
                published_bytes.add_metric(key, q.stats.published_bytes)
                delivered.add_metric(key, q.stats.delivered)
                acked.add_metric(key, q.stats.acked)
        yield from (ready, unacked, consumers, published, published_bytes, delivered, acked)


def _offline_partitions(cluster) -> int:
    """Partitions of the cluster without a live leader; counted by the controller only, so that
    a sum over brokers counts each once. Always 0 on a single node (it leads everything)."""
    if cluster is None or not cluster.agent.is_controller:
        return 0
    view = cluster.view
    offline = 0
    for name, topic in view.topics.items():
        for partition in range(len(topic.replicas)):
            state = view.state(name, partition)
            if state is None or state.leader < 0:
                offline += 1
    return offline


class MetricsResource(resource.Resource):
    """``/metrics``; with ``per_object``, ``/metrics/per-object`` (mounted by gateway.http)."""
    isLeaf = False  # children: per-object, detailed

    def __init__(self, broker, per_object: bool = False):
        super().__init__()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        self.registry.register(RabbitCollector(broker, per_object=per_object))
        self.registry.register(KafkaExporterCollector(broker))

    def render_GET(self, request):
        request.setHeader(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
        return generate_latest(self.registry)


def timed(latency: Latency, label: str, started: float) -> None:
    latency.observe(label, time.monotonic() - started)
