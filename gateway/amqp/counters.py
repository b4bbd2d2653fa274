"""Running totals the AMQP front door keeps for the RabbitMQ-named metrics (``rabbitmq_global_*``,
read by gateway.management.rabbit_metrics).

Per-queue totals (``routing.queue.QueueStats``) vanish with their queue and per-channel ones
with their channel, so a sum of them can go down, which Prometheus reads as a counter reset.
These live as long as the process. They are plain integers in ``__slots__`` objects, one
attribute increment on the paths that run per message; /metrics reads them when scraped.
"""
from __future__ import annotations


class ProtocolCounters:
    """What RabbitMQ counts per protocol (label ``protocol="amqp091"``), plus connection and
    channel churn and queue declarations."""

    __slots__ = ("received", "received_confirm", "routed", "unroutable_dropped", "unroutable_returned",
                 "confirmed", "connections_opened", "connections_closed", "channels_opened", "channels_closed",
                 "queues_declared")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


class QueueTypeCounters:
    """What RabbitMQ counts per protocol and queue type: deliveries, gets, redeliveries, acks."""

    __slots__ = ("delivered", "consume_manual_ack", "consume_auto_ack", "get_manual_ack", "get_auto_ack",
                 "get_empty", "redelivered", "acknowledged")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)


AMQP = ProtocolCounters()
# keyed by routing.queue_arguments.QueueArguments.queue_type; the metrics name them as RabbitMQ's modules
BY_QUEUE_TYPE = {"classic": QueueTypeCounters(), "quorum": QueueTypeCounters(), "stream": QueueTypeCounters()}
RABBIT_QUEUE_TYPES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                      "stream": "rabbit_stream_queue"}
