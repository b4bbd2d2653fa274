"""A virtual host: its exchanges, its queues and the bindings between them, with RabbitMQ's rules.

Every operation either changes the model or raises the exception RabbitMQ would raise
(:mod:`routing.errors`), with its reply code and text. Queues are created and deleted through
``topics``, the part of the log manager the vhost needs (a queue is a one-partition topic named
by :func:`core.names.queue_topic`). Durable definitions are reported to ``on_change`` so the
owner can persist them; this module does no I/O of its own.
"""
from __future__ import annotations

import base64
import logging
import os
from typing import Any, Callable, Hashable, Iterable

from core.errors import InvalidPartitionsError, InvalidTopicError, TopicExistsError, UnknownTopicError
from core.log_manager import LogManager
from core.names import queue_topic
from routing.errors import ACCESS_REFUSED, PRECONDITION_FAILED, RESOURCE_LOCKED, ChannelError, inequivalent, not_found
from routing.dead_letter import strategy_argument
from routing.dedup import Deduplicator
from routing.delayed import DELAYED_TYPE, DelayLog, RemoteDelayLog
from routing.exchange_log import ExchangeLog
from routing.exchanges import EXCHANGE_TYPES, Exchange, route_through
from routing.policies import PoliciesMixin
from routing.priorities import check_max_priority
from routing.queue import Queue
from routing.remote_queue import remote_stub
from routing.vhost_definitions import DEFAULT_EXCHANGES, DELAY_LOG_PREFIX, DefinitionsMixin, exchange_class

log = logging.getLogger(__name__)

_SYSTEM_EXCHANGES = frozenset(name for name, _ in DEFAULT_EXCHANGES)
# Queue topics take any message an AMQP client may send (the codec stops bodies at 512 MiB).
QUEUE_TOPIC_CONFIGS = {"max.message.bytes": str(1 << 30)}
# Topics of transient queues are not fsync'd before delivery or confirm: they die with the broker anyway.
TRANSIENT_TOPIC_CONFIGS = {**QUEUE_TOPIC_CONFIGS, "flush.messages": str(2**62), "flush.ms": str(2**62)}


_LOCKED = ("cannot obtain exclusive access to locked queue '{name}' in vhost '{vhost}'. It could be originally "
           "declared on another connection or the exclusive property value does not match that of the original "
           "declaration.")


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _queue_key(name: str) -> tuple[str, str]:
    return ("queue", name)


class VirtualHost(PoliciesMixin, DefinitionsMixin):
    def __init__(self, name: str, logs: LogManager, *, on_change: Callable[..., None] = lambda *touched: None,
                 on_queue: Callable[[Queue, bool], None] = lambda queue, created: None):
        self.name = name
        self.logs = logs
        self.on_change = on_change  # durable definitions changed; names what, as routing.definitions reads it
        self.on_queue = on_queue  # a queue was created (True) or removed (False)
        self.exchanges: dict[str, Exchange] = {}
        self.queues: dict[str, Queue] = {}
        self.consuming: set[Queue] = set()  # the queues with consumers: what a group commit may let deliver
        self.exchange_logs: dict[str, ExchangeLog] = {}  # exchanges declared with x-log: true
        self.delay_logs: dict[str, DelayLog] = {}  # exchanges of type x-delayed-message
        self.dead_letter: Callable | None = None  # installed on every queue (see routing.broker)
        # cluster mode: extra create_topic arguments (replicas) for a queue with these arguments
        self.placement: Callable[[dict], dict] = lambda arguments: {}
        self.available: Callable[[str, int], bool] = lambda topic, partition=0: True  # cluster mode: led here
        self.remote_stubs = False  # cluster mode 'spread': a queue led elsewhere is a RemoteQueue here
        # cluster mode 'spread': non-durable definitions are stored too (flagged), for the other
        # brokers to route to them; ``node_id`` is the broker whose they are
        self.share_transient = False
        self.node_id = -1
        self.policies: dict[str, dict] = {}  # name -> {"pattern", "definition", "apply-to", "priority"}
        self.operator_policies: dict[str, dict] = {}  # the same shape; they cap the queues' limits
        self._policies_seen: str | None = None  # the policies last applied to the queues (refresh_policies)
        self.limits: dict[str, int] = {}  # "max-connections", "max-queues" (RabbitMQ's vhost limits)
        self.metadata: dict[str, Any] = {}  # description, tags, default_queue_type (RabbitMQ's vhost metadata)
        # super streams (routing.super_streams): name -> its partition streams, in partition order;
        # partition stream i is a stream queue over partition i of the super stream's topic
        self.super_streams: dict[str, list[str]] = {}
        for exchange_name, type_name in DEFAULT_EXCHANGES:
            self.exchanges[exchange_name] = EXCHANGE_TYPES[type_name](exchange_name, durable=True)

    # --- exchanges ---------------------------------------------------------------------
    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise not_found("exchange", name, self.name)
        return exchange

    def declare_exchange(self, name: str, type_name: str, *, passive: bool = False, durable: bool = False,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: dict[str, Any] | None = None) -> Exchange:
        if name == "":
            raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if passive:
            return self.exchange(name)
        cls = exchange_class(type_name, arguments or {})
        existing = self.exchanges.get(name)
        if existing is None and name.startswith("amq."):
            raise ChannelError(ACCESS_REFUSED, f"exchange name '{name}' contains reserved prefix 'amq.*'")
        if existing is not None:
            for what, stored, given in (("type", existing.type_name, type_name),
                                        ("durable", existing.durable, durable),
                                        ("auto_delete", existing.auto_delete, auto_delete),
                                        ("internal", existing.internal, internal)):
                if stored != given:
                    if isinstance(stored, bool):
                        stored, given = _bool_text(stored), _bool_text(given)
                    raise inequivalent("exchange", name, self.name, what, stored, given)
            return existing
        dedup = Deduplicator.from_arguments(arguments or {}, f"exchange '{name}' in vhost '{self.name}'")
        exchange = cls(name, durable=durable, auto_delete=auto_delete, internal=internal, arguments=arguments)
        exchange.dedup = dedup
        if exchange.arguments.get("x-log") is True:
            self._open_exchange_log(name)
        if type_name == DELAYED_TYPE:
            exchange.type_name = DELAYED_TYPE  # routes as its x-delayed-type, reports its declared type
            self._open_delay_log(name)
        self.exchanges[name] = exchange
        if durable or self.share_transient:
            self.on_change(("exchange", name))
        return exchange

    def delete_exchange(self, name: str, *, if_unused: bool = False) -> None:
        if name == "":
            raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        if name in _SYSTEM_EXCHANGES:
            raise ChannelError(ACCESS_REFUSED, f"deletion of system exchange '{name}' in vhost '{self.name}' not "
                                               f"allowed")
        exchange = self.exchanges.get(name)
        if exchange is None:
            return  # deleting what is not there succeeds, as in RabbitMQ 3.x
        if if_unused and not (exchange.is_unused and not self._bound_as_destination(name)):
            raise ChannelError(PRECONDITION_FAILED, f"exchange '{name}' in vhost '{self.name}' in use")
        del self.exchanges[name]
        gone_log = self.exchange_logs.pop(name, None)
        if gone_log is not None:
            gone_log.deleted = True  # the topic stays: it is the record of the traffic
        delay_log = self.delay_logs.pop(name, None)
        if delay_log is not None:  # RabbitMQ's plugin drops held messages with their exchange
            delay_log.deleted = True
            if self.logs.store.get_topic(delay_log.topic) is not None:
                self.logs.delete_topic(delay_log.topic)
        for other in list(self.exchanges.values()):
            if other.unbind_destination(("exchange", name)):
                self._maybe_auto_delete(other)
        if exchange.durable or self.share_transient:
            self.on_change(("exchange", name))

    def _open_exchange_log(self, name: str) -> None:
        try:
            topic = queue_topic(self.name, name)
        except InvalidTopicError as exc:
            raise ChannelError(PRECONDITION_FAILED, str(exc)) from None
        owner = next((q for q in self.queues.values() if q.topic == topic), None)
        if owner is not None:
            raise ChannelError(PRECONDITION_FAILED, f"topic '{topic}' for the log of exchange '{name}' is the topic of "
                                                    f"queue '{owner.name}' in vhost '{self.name}': choose another "
                                                    f"exchange name")
        plog = self._queue_log(topic, True)
        self.exchange_logs[name] = ExchangeLog(self.name, name, topic, plog)

    def _open_delay_log(self, name: str, state: dict | None = None) -> None:
        try:
            topic = queue_topic(self.name, DELAY_LOG_PREFIX + name)
        except InvalidTopicError as exc:
            raise ChannelError(PRECONDITION_FAILED, str(exc)) from None
        state = state or {}
        try:
            # held messages are replicated as a quorum queue's are (cluster mode; one broker: no-op)
            plog = self._queue_log(topic, True, None, {"x-queue-type": "quorum"}, DELAY_LOG_PREFIX + name)
        except UnknownTopicError:
            if not self.remote_stubs:
                raise
            self.delay_logs[name] = RemoteDelayLog(self.name, name, topic)  # led by another broker
            return
        self.delay_logs[name] = DelayLog(self.name, name, topic, plog, floor=state.get("floor", 0),
                                         released=state.get("released"))

    def _bound_as_destination(self, name: str) -> bool:
        key = ("exchange", name)
        return any(b.destination == key for e in self.exchanges.values() for b in e.bindings())

    def _maybe_auto_delete(self, exchange: Exchange) -> None:
        if exchange.auto_delete and exchange.is_unused and exchange.name in self.exchanges:
            self.delete_exchange(exchange.name)

    def bind_exchange(self, destination: str, source: str, routing_key: str, arguments: dict | None) -> None:
        self._check_bindable(source, destination_exchange=True)
        dest = self.exchange(destination)
        src = self.exchange(source)
        if src.bind(("exchange", destination), routing_key, arguments) and self.stores(src) and self.stores(dest):
            self.on_change(("binding", source, ("exchange", destination), routing_key, arguments))

    def unbind_exchange(self, destination: str, source: str, routing_key: str, arguments: dict | None) -> None:
        """Idempotent, as RabbitMQ: unbinding from or to an exchange that is gone is unbind-ok."""
        self._check_bindable(source, destination_exchange=True)
        src = self.exchanges.get(source)
        if src is None or destination not in self.exchanges:
            return
        if src.unbind(("exchange", destination), routing_key, arguments):
            self._maybe_auto_delete(src)
            self.on_change(("binding", source, ("exchange", destination), routing_key, arguments))

    def _check_bindable(self, source: str, destination_exchange: bool = False) -> None:
        if source == "":
            raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")

    # --- queues ------------------------------------------------------------------------
    def queue(self, name: str, owner: Hashable | None = None) -> Queue:
        """The queue ``name``; 404 if missing, 405 if exclusive to another connection."""
        queue = self.queues.get(name)
        if queue is None:
            raise not_found("queue", name, self.name)
        if queue.exclusive_owner is not None and queue.exclusive_owner != owner:
            raise ChannelError(RESOURCE_LOCKED, _LOCKED.format(name=name, vhost=self.name))
        return queue

    def declare_queue(self, name: str, *, owner: Hashable, passive: bool = False, durable: bool = False,
                      exclusive: bool = False, auto_delete: bool = False, arguments: dict[str, Any] | None = None,
                      ack_floor: int = 0) -> Queue:
        arguments = dict(arguments or {})
        if passive:
            if name == "":
                raise not_found("queue", name, self.name)
            queue = self.queue(name, owner)
            queue.last_used = queue.clock()  # any declare renews x-expires
            return queue
        if name == "":
            name = "amq.gen-" + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        elif name.startswith("amq."):
            raise ChannelError(ACCESS_REFUSED, f"queue name '{name}' contains reserved prefix 'amq.*'")
        existing = self.queues.get(name)
        if existing is not None:
            self.queue(name, owner)  # 405 when it belongs to another connection
            if exclusive and existing.exclusive_owner is None:
                raise ChannelError(RESOURCE_LOCKED, _LOCKED.format(name=name, vhost=self.name))
            self._check_equivalent(existing, durable, exclusive, auto_delete, arguments)
            existing.last_used = existing.clock()  # a redeclare renews x-expires
            return existing
        self._check_queue_limit(name, len(self.queues))
        if arguments.get("x-queue-type") in ("quorum", "stream"):
            what = "non-durable" if not durable else "exclusive-owner" if exclusive else \
                "auto-delete" if auto_delete else None
            if what is not None:
                raise ChannelError(PRECONDITION_FAILED, f"invalid property '{what}' for queue '{name}' in vhost "
                                                        f"'{self.name}'")
        try:
            topic, partition = self.backing(name)
        except InvalidTopicError as exc:
            raise ChannelError(PRECONDITION_FAILED, str(exc)) from None
        if name in self.super_streams and name not in self.super_streams[name]:
            # a super stream's topic is named like it: a queue of that name would share its log
            # with the super stream's first partition (the topic-exists check misses a one-partition one)
            raise ChannelError(PRECONDITION_FAILED, f"'{name}' is a super stream in vhost '{self.name}' and its "
                                                    f"topic holds the partitions: choose another queue name")
        for xlog in self.exchange_logs.values():
            if xlog.topic == topic:
                raise ChannelError(PRECONDITION_FAILED, f"topic '{topic}' is the log of exchange '{xlog.name}' in vhost "
                                                        f"'{self.name}': choose another queue name")
        queue = Queue(self.name, name, topic, None, durable=durable, exclusive_owner=owner if exclusive else None,
                      auto_delete=auto_delete, arguments=arguments, ack_floor=ack_floor)  # validates arguments
        # arguments the queue's type does not take: refused at declaration, as RabbitMQ does (a
        # definition saved before these checks still loads at start-up)
        check_max_priority(arguments, queue.args.queue_type, name, self.name)
        strategy_argument(arguments, name, self.name, queue.args.queue_type)
        queue.partition = partition
        try:
            queue.attach(self._queue_log(topic, durable, _stream_configs(queue), arguments, name, partition))
        except UnknownTopicError:
            if not self.remote_stubs:
                raise
            queue = remote_stub(queue)  # placed on another broker, which serves it
        self._install(queue)
        self.on_queue(queue, True)
        if durable or self.share_transient:
            self.on_change(("queue", name))
        return queue

    def backing(self, queue_name: str) -> tuple[str, int]:
        """(topic, partition) that holds a queue: its own topic, or a super stream's partition."""
        for super_name, partitions in self.super_streams.items():
            if queue_name in partitions:
                return queue_topic(self.name, super_name), partitions.index(queue_name)
        return queue_topic(self.name, queue_name), 0

    def _queue_log(self, topic: str, durable: bool, extra: dict | None = None, arguments: dict | None = None,
                   name: str | None = None, partition: int = 0):
        if partition or (name is not None and any(name in p for p in self.super_streams.values())):
            if not self.available(topic, partition):  # a super stream's partition: its topic is made with all of them
                raise UnknownTopicError(f"topic {topic!r} is led by another broker")
            return self.logs.get_log(topic, partition)
        configs = {**(QUEUE_TOPIC_CONFIGS if durable else TRANSIENT_TOPIC_CONFIGS), **(extra or {})}
        existing = self.logs.store.get_topic(topic)
        if existing is not None and existing.partitions != 1:
            raise ChannelError(PRECONDITION_FAILED, f"topic '{topic}' already exists with {existing.partitions} "
                                                    f"partitions; a queue needs a topic of one partition: choose "
                                                    f"another queue name")
        try:
            self.logs.create_topic(topic, 1, configs, **self.placement(
                {**(arguments or {}), "x-durable": durable, "x-queue-name": name, "x-vhost": self.name}))
        except TopicExistsError:
            # A topic that Kafka clients made, or a durable queue coming back: its data is the queue's.
            if extra:
                self.logs.alter_topic_configs(topic, extra)
        except InvalidPartitionsError as exc:  # the broker's partition budget (--max-partitions) is spent
            raise ChannelError(PRECONDITION_FAILED, f"cannot declare queue '{name or topic}' in vhost "
                                                    f"'{self.name}': {exc}") from None
        if not self.available(topic):
            raise UnknownTopicError(f"topic {topic!r} is led by another broker")
        return self.logs.get_log(topic, 0)

    def _install(self, queue: Queue) -> None:
        queue.dead_letter = self.dead_letter
        queue.on_empty_auto_delete = self._auto_delete_queue
        queue.policy_delivery_limit = lambda: self._policy_value(queue.name, "delivery-limit")
        queue.policy_dead_letter_strategy = lambda: self._policy_value(queue.name, "dead-letter-strategy", str)
        queue.policy_value = lambda key, kind=int: self._policy_value(queue.name, key, kind)
        queue.consuming = self.consuming
        self.apply_policies_to(queue)
        self.queues[queue.name] = queue

    def _auto_delete_queue(self, queue: Queue) -> None:
        if queue.name in self.queues and not queue.deleted:
            self.delete_queue(queue.name, owner=queue.exclusive_owner)

    def _check_equivalent(self, queue: Queue, durable: bool, exclusive: bool, auto_delete: bool,
                          arguments: dict) -> None:
        for what, stored, given in (("durable", queue.durable, durable),
                                    ("auto_delete", queue.auto_delete, auto_delete)):
            if stored != given:
                raise inequivalent("queue", queue.name, self.name, what, _bool_text(stored), _bool_text(given))
        for key in set(queue.arguments) | set(arguments):
            if key in ("x-queue-type",) and arguments.get(key, "classic") == queue.arguments.get(key, "classic"):
                continue
            stored, given = queue.arguments.get(key), arguments.get(key)
            if stored != given or type(stored) is not type(given):
                if stored is not None and given is not None:
                    detail = f"received '{_text(given)}' but current is '{_text(stored)}'"
                else:
                    detail = f"received {_describe(given)} but current is {_describe(stored)}"
                raise ChannelError(PRECONDITION_FAILED, f"inequivalent arg '{key}' for queue '{queue.name}' in vhost "
                                                        f"'{self.name}': {detail}")

    def bind_queue(self, queue_name: str, exchange_name: str, routing_key: str, arguments: dict | None,
                   owner: Hashable) -> None:
        if exchange_name == "":
            raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        queue = self.queue(queue_name, owner)
        exchange = self.exchange(exchange_name)
        if exchange.bind(_queue_key(queue.name), routing_key, arguments) and self.stores(queue) and \
                self.stores(exchange):
            self.on_change(("binding", exchange_name, ("queue", queue.name), routing_key, arguments))

    def unbind_queue(self, queue_name: str, exchange_name: str, routing_key: str, arguments: dict | None,
                     owner: Hashable) -> None:
        """Idempotent, as RabbitMQ (aio-pika's RPC pattern unbinds its auto-delete reply queue after
        it is gone): a missing queue or exchange is unbind-ok; another connection's exclusive queue is not."""
        if exchange_name == "":
            raise ChannelError(ACCESS_REFUSED, "operation not permitted on the default exchange")
        exchange = self.exchanges.get(exchange_name)
        if queue_name not in self.queues or exchange is None:
            return
        queue = self.queue(queue_name, owner)
        if exchange.unbind(_queue_key(queue.name), routing_key, arguments):
            self._maybe_auto_delete(exchange)
            self.on_change(("binding", exchange_name, ("queue", queue.name), routing_key, arguments))

    def purge_queue(self, name: str, owner: Hashable) -> int:
        return self.queue(name, owner).purge()

    def delete_queue(self, name: str, *, owner: Hashable, if_unused: bool = False, if_empty: bool = False) -> int:
        queue = self.queues.get(name)
        if queue is None:
            return 0
        self.queue(name, owner)
        if if_unused and queue.consumers:
            raise ChannelError(PRECONDITION_FAILED, f"queue '{name}' in vhost '{self.name}' in use")
        count = queue.message_count()
        if if_empty and count:
            raise ChannelError(PRECONDITION_FAILED, f"queue '{name}' in vhost '{self.name}' not empty")
        self._remove(queue)
        return count

    def _remove(self, queue: Queue) -> None:
        queue.deleted = True
        del self.queues[queue.name]
        self.consuming.discard(queue)
        for exchange in list(self.exchanges.values()):
            if exchange.unbind_destination(_queue_key(queue.name)):
                self._maybe_auto_delete(exchange)
        queue.cancel_consumers()
        try:
            if not any(queue.name in p for p in self.super_streams.values()):  # the super stream owns that topic
                self.logs.delete_topic(queue.topic)
        except Exception:  # already gone (a Kafka client deleted the topic): nothing left to remove
            pass
        self.on_queue(queue, False)
        if queue.durable or self.share_transient:
            self.on_change(("queue", queue.name))

    def topic_deleted(self, topic: str) -> None:
        """The topic behind a queue or an exchange log was deleted (through Kafka)."""
        for queue in [q for q in self.queues.values() if q.topic == topic]:
            self._remove(queue)  # consumers get basic.cancel, bindings go
        for name in [n for n in self.super_streams if queue_topic(self.name, n) == topic]:
            del self.super_streams[name]
            self.on_change()
        for name, xlog in list(self.exchange_logs.items()):
            if xlog.topic == topic:
                xlog.deleted = True
                del self.exchange_logs[name]

    def dismantle(self) -> None:
        """The vhost is being deleted: its queues and exchange logs go, with their topics."""
        for queue in list(self.queues.values()):
            self._remove(queue)
        for name in self.super_streams:
            if self.logs.store.get_topic(queue_topic(self.name, name)) is not None:
                self.logs.delete_topic(queue_topic(self.name, name))
        for xlog in [*self.exchange_logs.values(), *self.delay_logs.values()]:
            xlog.deleted = True
            if self.logs.store.get_topic(xlog.topic) is not None:
                self.logs.delete_topic(xlog.topic)
        self.exchange_logs.clear()
        self.delay_logs.clear()

    def owner_gone(self, owner: Hashable) -> None:
        """A connection closed: its exclusive queues go with it."""
        for queue in [q for q in self.queues.values() if q.exclusive_owner == owner]:
            self._remove(queue)

    # --- routing -----------------------------------------------------------------------
    def route(self, exchange_name: str, routing_key: str, headers: dict | None) -> list[Queue]:
        """The queues a publish reaches; 404 for a missing exchange, 403 for an internal one."""
        if exchange_name == "":
            queue = self.queues.get(routing_key)
            return [queue] if queue is not None else []
        exchange = self.exchanges.get(exchange_name)
        if exchange is None:
            raise not_found("exchange", exchange_name, self.name)
        if exchange.internal:
            raise ChannelError(ACCESS_REFUSED, f"cannot publish to internal exchange '{exchange_name}' in vhost "
                                               f"'{self.name}'")
        found = route_through(self.exchanges, exchange_name, routing_key, headers)
        queues = self.queues
        return [queues[name] for _, name in found if name in queues]

    def all_queues(self) -> Iterable[Queue]:
        return list(self.queues.values())


def _stream_configs(queue: Queue) -> dict[str, str]:
    """A stream queue's retention arguments as its topic's configs."""
    if not queue.is_stream:
        return {}
    configs = {}
    if queue.args.max_length_bytes is not None:
        configs["retention.bytes"] = str(queue.args.max_length_bytes)
    if queue.args.max_age_ms is not None:
        configs["retention.ms"] = str(queue.args.max_age_ms)
    segment = queue.arguments.get("x-stream-max-segment-size-bytes")
    if isinstance(segment, int) and not isinstance(segment, bool) and segment > 0:
        configs["segment.bytes"] = str(segment)
    return configs


def _text(value) -> str:
    if isinstance(value, bool):
        return _bool_text(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _describe(value) -> str:
    """An argument value as RabbitMQ names it in an inequivalence error (clients send ints as I or l)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "signedint" if -2**31 <= value < 2**31 else "long"
    else:
        kind = {str: "longstr", bytes: "longstr", float: "double"}.get(type(value), type(value).__name__)
    return f"the value '{_text(value)}' of type '{kind}'"
