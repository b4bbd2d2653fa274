"""The last minutes of the node in samples: totals every few seconds, rates between them.

The dashboard draws its charts (message rates, queue depth, consumer lag) from these; the
overview's ``message_stats`` gives the latest rates, like RabbitMQ's ``*_details.rate``.
"""
from __future__ import annotations

import time
from collections import deque

SAMPLE_S = 5.0
KEEP = 120  # ten minutes of samples

# totals that only grow: their rates per second are charted
COUNTERS = ("amqp_published", "amqp_delivered", "amqp_acked", "kafka_records_in", "kafka_bytes_in",
            "kafka_bytes_out")
# levels charted as they are
GAUGES = ("queue_messages", "queue_unacked", "group_lag", "connections")


def totals(broker) -> dict[str, int]:
    """The node's counters and levels right now."""
    out = dict.fromkeys(COUNTERS + GAUGES, 0)
    for vhost in broker.amqp.router.vhosts.values():
        for q in vhost.queues.values():
            out["amqp_published"] += q.stats.published
            out["amqp_delivered"] += q.stats.delivered
            out["amqp_acked"] += q.stats.acked
            unacked = 0 if q.is_stream else q.unacked_count()
            out["queue_unacked"] += unacked
            out["queue_messages"] += q.message_count() + unacked
    for records_in, bytes_in, bytes_out in broker.kafka.traffic.values():
        out["kafka_records_in"] += records_in
        out["kafka_bytes_in"] += bytes_in
        out["kafka_bytes_out"] += bytes_out
    groups = broker.kafka.groups
    for listing in groups.list_groups():
        for (topic, partition), (offset, _epoch, _md) in groups.fetch_offsets(listing[0], None).items():
            plog = broker.kafka.partition(topic, partition)
            if plog is not None and offset >= 0:
                out["group_lag"] += max(plog.high_watermark - offset, 0)
    out["connections"] = len(broker.amqp.connections) + len(broker.kafka.connections)
    return out


class History:
    def __init__(self, broker, clock=time.time):
        self.broker = broker
        self.clock = clock
        self.samples: deque[dict] = deque(maxlen=KEEP)

    def sample(self) -> None:
        doc = totals(self.broker)
        doc["time"] = self.clock()
        previous = self.samples[-1] if self.samples else None
        for name in COUNTERS:
            elapsed = doc["time"] - previous["time"] if previous else 0
            doc[name + "_rate"] = (round(max(doc[name] - previous[name], 0) / elapsed, 2)
                                   if previous and elapsed > 0 else 0.0)
        self.samples.append(doc)

    def rates(self) -> dict:
        """The latest totals and per-second rates, named as RabbitMQ's message_stats where they match."""
        if not self.samples:
            self.sample()
        last = self.samples[-1]
        names = {"amqp_published": "publish", "amqp_delivered": "deliver_get", "amqp_acked": "ack"}
        out = {}
        for name in COUNTERS:
            key = names.get(name, name)
            out[key] = last[name]
            out[key + "_details"] = {"rate": last[name + "_rate"]}
        return out

    def as_json(self) -> dict:
        return {"interval_seconds": SAMPLE_S, "samples": list(self.samples)}
