"""The names of the common Kafka exporter (danielqsj/kafka_exporter), read from this broker.

Dashboards built for that exporter (Grafana's "Kafka Exporter Overview", id 7589) and lag
alerts written for it work against this broker's ``/metrics`` without running an exporter.
Labels and meanings are the exporter's: ``current_offset`` is the high watermark (the newest
offset consumers can read), ``oldest_offset`` the log start offset, lag is the high watermark
minus the group's committed offset.

In cluster mode every broker answers for the partitions it leads (the only ones whose high
watermark it knows for sure), so summing over brokers counts each partition once;
``kafka_topic_partitions`` is cluster metadata that every broker reports alike.
"""
from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily

PARTITION = ["topic", "partition"]
GROUP_PARTITION = ["consumergroup", "topic", "partition"]


class KafkaExporterCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        b = self.broker
        yield from self._brokers(b)
        yield from self._topics(b)
        yield from self._groups(b)

    @staticmethod
    def _brokers(b):
        if b.cluster is not None:
            members = [(i, f"{info.host}:{info.port}") for i, info in sorted(b.cluster.view.brokers.items())]
        else:
            host, port = b.kafka.advertised()
            members = [(b.settings.node_id, f"{host}:{port}")]
        yield GaugeMetricFamily("kafka_brokers", "brokers in the cluster", value=len(members))
        info = GaugeMetricFamily("kafka_broker_info", "1 per broker, with its id and address", labels=["id", "address"])
        for node_id, address in members:
            info.add_metric([str(node_id), address], 1)
        yield info

    @staticmethod
    def _led_partitions(b):
        """(topic, partition, log, leader, replicas, isr) of every partition this broker leads."""
        node = b.settings.node_id
        for (topic, partition), plog in sorted(b.kafka.logs.logs.items()):
            if b.cluster is None:
                yield topic, partition, plog, node, (node,), (node,)
                continue
            rep = b.cluster.replicas.leader_of(topic, partition)
            if rep is not None:
                yield topic, partition, plog, rep.state.leader, tuple(rep.replicas), tuple(rep.state.isr)

    def _topics(self, b):
        count = GaugeMetricFamily("kafka_topic_partitions", "partitions of the topic", labels=["topic"])
        for name, md in sorted(b.kafka.logs.store.topics().items()):
            count.add_metric([name], md.partitions)
        yield count
        families = {
            "current_offset": "the partition's high watermark (next offset to be read)",
            "oldest_offset": "the partition's log start offset",
            "in_sync_replica": "replicas of the partition in sync with its leader",
            "leader": "the broker id leading the partition",
            "leader_is_preferred": "1 if Topic/Partition is using the Preferred Broker",
            "replicas": "replicas assigned to the partition",
            "under_replicated_partition": "1 if Topic/Partition is under Replicated",
        }
        out = {key: GaugeMetricFamily(f"kafka_topic_partition_{key}", doc, labels=PARTITION)
               for key, doc in families.items()}
        for topic, partition, plog, leader, replicas, isr in self._led_partitions(b):
            labels = [topic, str(partition)]
            for key, value in (("current_offset", plog.high_watermark), ("oldest_offset", plog.log_start_offset),
                               ("in_sync_replica", len(isr)), ("leader", leader),
                               ("leader_is_preferred", int(bool(replicas) and replicas[0] == leader)),
                               ("replicas", len(replicas)),
                               ("under_replicated_partition", int(len(isr) < len(replicas)))):
                out[key].add_metric(labels, value)
        yield from out.values()

    @staticmethod
    def _groups(b):
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "the group's committed offset for the partition", labels=GROUP_PARTITION)
        current_sum = GaugeMetricFamily("kafka_consumergroup_current_offset_sum",
                                        "the group's committed offsets on the topic, summed",
                                        labels=["consumergroup", "topic"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "records the group has still to read: high watermark minus committed offset, "
                                                           "per partition", labels=GROUP_PARTITION)
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum", "records the group has still to read: high watermark minus committed offset, "
                                                                   "summed over the topic",
                                    labels=["consumergroup", "topic"])
        members = GaugeMetricFamily("kafka_consumergroup_members", "members of the group",
                                    labels=["consumergroup"])
        groups = b.kafka.groups
        for group_id in sorted(listing[0] for listing in groups.list_groups()):
            members.add_metric([group_id], len(groups.describe_group(group_id).members))
            sums: dict[str, list[int]] = {}
            for (topic, partition), (offset, _epoch, _md) in sorted(groups.fetch_offsets(group_id, None).items()):
                plog = b.kafka.partition(topic, partition)
                if plog is None or offset < 0:  # held by another broker, or nothing committed
                    continue
                behind = max(plog.high_watermark - offset, 0)
                labels = [group_id, topic, str(partition)]
                current.add_metric(labels, offset)
                lag.add_metric(labels, behind)
                totals = sums.setdefault(topic, [0, 0])
                totals[0] += offset
                totals[1] += behind
            for topic, (offset_total, lag_total) in sorted(sums.items()):
                current_sum.add_metric([group_id, topic], offset_total)
                lag_sum.add_metric([group_id, topic], lag_total)
        yield from (current, current_sum, lag, lag_sum, members)
