"""The AMQP side of the broker process: the router, the open connections, and their timers.

Glue between Twisted and :class:`routing.broker.Router`: after each batch of input it asks the
router to append what was published and then lets queues deliver and channels confirm; after
each group-commit fsync (:meth:`log_moved`) it does the same for everything that became durable;
:meth:`tick` runs TTL expiry, ``x-expires`` and the ack-floor checkpoint.
"""
from __future__ import annotations

import functools

import logging
import time
from importlib import metadata
from typing import Callable

from gateway.security.users import UserStore
from routing.broker import Router
from routing.deprecated import DeprecatedFeatures

log = logging.getLogger(__name__)

PRODUCT = "gateway"
CONSUMER_TIMEOUT_CHECK_S = 1.0  # how often unacknowledged deliveries are checked against their timeout


@functools.cache
def broker_version() -> str:  # read from the package's metadata once: it was a file parse per connection
    try:
        return metadata.version("gateway-broker")
    except metadata.PackageNotFoundError:
        return "0"


class AmqpService:
    def __init__(self, router: Router, reactor, request_flush, alarms=None, cluster_name: str = "gateway",
                 users: UserStore | None = None):
        self.router = router
        self.users = users if users is not None else UserStore(None)  # None: guest/guest in memory
        self.alarms = alarms
        self.alarm_reason: str | None = None  # "low on disk" / "low on memory" while an alarm is on
        self.reactor = reactor
        self.connections: set = set()  # AMQP 0-9-1
        self.amqp10_connections: set = set()  # AMQP 1.0 (gateway.amqp10), handed over after the protocol header
        self.confirming: set = set()  # connections with publishes waiting for their confirm
        self.output_pending: set = set()  # connections holding output for the end of this input
        self.accepting = True
        # limits (gateway.config): set by the server; 0 = none
        self.max_connections_per_user = 0
        self.channel_max = 2047
        self.max_message_bytes = 128 * 1024 * 1024
        self.too_many_connections: Callable[[], bool] = lambda: False  # the global limit, both protocols
        self.cluster_name = cluster_name
        self.node_name = "gateway@0"  # this node as the management API names it (set by gateway.server)
        self._request_flush = request_flush
        router.on_appended = request_flush
        router.on_storage_error = self.storage_failed
        self._delayed_max = router.delayed_max
        self._delay_timer = None  # the one timer of the next delayed-message release
        self._delay_due: int | None = None
        self.deprecated = DeprecatedFeatures()  # RabbitMQ's deprecated features not permitted (--deprecated-features-*)
        self.consumer_timeout_ms = 1_800_000  # --consumer-timeout-ms (RabbitMQ's consumer_timeout); 0: none
        self._timeouts_checked = 0.0

    def use_router(self, router: Router) -> None:
        """Cluster mode: the AMQP model is rebuilt when this broker becomes (or stops being) the AMQP home."""
        router.on_appended = self._request_flush
        router.on_storage_error = self.storage_failed
        router.delayed_max = self._delayed_max
        self.router = router

    @property
    def delayed_max(self) -> int:
        return self._delayed_max

    @delayed_max.setter
    def delayed_max(self, value: int) -> None:
        self._delayed_max = self.router.delayed_max = value

    def server_properties(self, capabilities: dict) -> dict:
        return {"product": PRODUCT, "version": broker_version(), "platform": "Python/Twisted",
                "copyright": "the gateway authors", "information": "one log, Kafka and AMQP 0-9-1",
                "cluster_name": self.cluster_name, "capabilities": dict(capabilities)}

    def after_input(self) -> None:
        """A connection handled what it received: append, deliver what was appended, confirm,
        and write the deliveries out now, before the group commit's fsync thread (started at the
        end of this reactor pass) competes for the CPU: RabbitMQ's order, deliveries first."""
        self.router.settle_appends()
        self._send_confirms()
        self.schedule_delayed()
        self.write_pending()

    def write_pending(self) -> None:
        for connection in list(self.output_pending):
            connection._flush()

    def _send_confirms(self) -> None:
        for connection in list(self.confirming):
            connection.send_confirms()
            if not connection.confirms_waiting:
                self.confirming.discard(connection)

    def forwards_settled(self) -> None:
        """Publishes forwarded to queues led by other brokers were stored (or refused): their
        confirms may go; nothing of this broker's own logs moved, so the queues are not walked
        unless an at-least-once dead letter waits for its copies (one may have been forwarded)."""
        if self.router.dead_letters.settling:
            self.router.log_moved()
        self._send_confirms()
        self.write_pending()

    def log_moved(self) -> None:
        """An fsync moved high watermarks: confirms may go out; Kafka-produced records may be in queues."""
        self.router.log_moved()  # releases held delayed messages that came due before they were durable
        self._send_confirms()
        self.schedule_delayed()

    def tick(self) -> None:
        try:
            self.router.tick()
            self._release_delayed()  # e.g. what came due while the broker was down
            now = time.monotonic()
            if now - self._timeouts_checked >= CONSUMER_TIMEOUT_CHECK_S:
                self._timeouts_checked = now
                for connection in list(self.connections) + list(self.amqp10_connections):
                    connection.check_consumer_timeouts(now, self.consumer_timeout_ms)
            self.router.checkpoint()
            self._check_alarms()
            self._send_confirms()
        except Exception:
            log.exception("AMQP housekeeping failed; will retry at the next tick")

    # --- delayed messages (routing.delayed) -------------------------------------------------
    def schedule_delayed(self) -> None:
        """One reactor timer for the earliest held delayed message; nothing polls."""
        due = self.router.next_delayed_due()
        if due is None:
            return
        if self._delay_timer is not None and self._delay_timer.active():
            if self._delay_due is not None and self._delay_due <= due:
                return
            self._delay_timer.cancel()
        self._delay_due = due
        self._delay_timer = self.reactor.callLater(max(0.0, due / 1000 - self.router.clock()), self._release_delayed)

    def _release_delayed(self) -> None:
        if self._delay_timer is not None and self._delay_timer.active():
            self._delay_timer.cancel()
        self._delay_timer = None
        if self.router.release_delayed():
            self.after_input()  # append, deliver, and schedule the next release
            return
        due = self.router.next_delayed_due()  # not durable yet: log_moved releases it after the fsync
        if due is not None and due > self.router.clock() * 1000:
            self.schedule_delayed()

    def storage_failed(self) -> bool:
        """A log write failed for want of space: block publishers now, not at the next tick.
        True the first time (until space is back), for the caller to log it once."""
        if self.alarms is None or self.alarms.write_failed:
            return False
        self.alarms.note_write_failure()
        self._check_alarms()
        return True

    def _check_alarms(self) -> None:
        if self.alarms is None:
            return
        active = self.alarms.check()
        reason = " and ".join(f"low on {name}" for name in sorted(active)) or None
        if reason != self.alarm_reason:
            self.alarm_reason = reason
            for connection in list(self.connections) + list(self.amqp10_connections):
                connection.alarm_changed()

    def stop(self) -> None:
        self.accepting = False
        for connection in list(self.connections):
            connection.drain_input()  # acks a client sent just before the stop still count
        self.after_input()
        for connection in list(self.connections) + list(self.amqp10_connections):
            connection.close_connection(320, "broker forced connection closure with reason 'shutdown'")
        self.router.checkpoint(clean_stop=True)
