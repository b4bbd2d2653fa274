"""The stream protocol's side of the broker process: connections, publisher names, active consumers.

It shares the AMQP service's router (streams are stream queues), users, OAuth validator, limits
and group commit: a stream connection with publishes waiting joins the AMQP service's set of
connections to confirm, so confirms go out after the same fsync.
"""
from __future__ import annotations

from typing import Callable

from gateway.amqp.service import PRODUCT, broker_version
from gateway.stream.subscriptions import ActiveConsumers
from routing.streams import Writers
from wire import stream_codec as sc

# the RabbitMQ release whose stream protocol this broker speaks: every command up to
# CreateSuperStream/DeleteSuperStream and Publish/Deliver version 2 (filtering) came by 3.13
STREAM_PROTOCOL_VERSION = "3.13.0"


class StreamService:
    def __init__(self, amqp, offsets, reactor, advertised: Callable[[], tuple[str, int]], request_flush):
        self.amqp = amqp
        self.offsets = offsets  # core.offsets.OffsetStore: stored offsets are consumer-group offsets
        self.reactor = reactor
        self.advertised = advertised
        self.request_flush = request_flush
        self.connections: set = set()
        self.writers = Writers()
        self.active = ActiveConsumers()  # in a spread cluster: gateway.stream.sac.ClusterActiveConsumers
        self.cluster = None  # gateway.stream.cluster.StreamCluster in a spread cluster

    # shared with the AMQP side
    @property
    def router(self):
        return self.amqp.router

    @property
    def users(self):
        return self.amqp.users

    @property
    def oauth(self):
        return getattr(self.amqp, "oauth", None)

    @property
    def confirming(self) -> set:
        return self.amqp.confirming

    @property
    def alarm_reason(self) -> str | None:
        return self.amqp.alarm_reason

    @property
    def max_message_bytes(self) -> int:
        return self.amqp.max_message_bytes

    def after_input(self) -> None:
        self.amqp.after_input()

    def server_properties(self) -> dict[str, str]:
        # "version" is the RabbitMQ release whose stream commands this broker serves: clients gate
        # features on it (RabbitMQ's Java client asks ExchangeCommandVersions only of 3.11 or newer,
        # and without that answer refuses super-stream creation and filtering); our own version is
        # "gateway_version"
        return {"product": PRODUCT, "version": STREAM_PROTOCOL_VERSION, "gateway_version": broker_version(),
                "platform": "Python/Twisted", "information": "one log: Kafka, AMQP 0-9-1 and RabbitMQ streams",
                "copyright": "the gateway authors"}

    def stream_deleted(self, vhost: str, name: str) -> None:
        """Tell every connection with a publisher or subscription on a deleted stream, as RabbitMQ does."""

        for connection in list(self.connections):
            if connection.vhost is None or connection.vhost.name != vhost:
                continue
            subs = [s for s in connection.subscriptions.values() if s.queue.name == name]
            pubs = [i for i, (q, _) in connection.publishers.items() if q.name == name]
            for sub in subs:
                connection.subscriptions.pop(sub.id, None)
                connection.drop_subscription(sub)
            for pid in pubs:
                connection.publishers.pop(pid, None)
            if subs or pubs:
                connection.write(sc.encode_metadata_update(sc.STREAM_NOT_AVAILABLE, name))

    def stop(self) -> None:
        for connection in list(self.connections):
            connection.close_connection(1, "broker shutting down")
