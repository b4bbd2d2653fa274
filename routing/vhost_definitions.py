"""A virtual host's durable definitions: what is stored (RabbitMQ's definitions export and the
definitions journal) and how exchanges, queues and bindings come back from it after a restart.

A mixin of :class:`routing.vhost.VirtualHost`, kept apart so that the vhost module stays about
the live model and RabbitMQ's rules for changing it.
"""
from __future__ import annotations

import logging

from core.errors import UnknownTopicError
from core.names import queue_topic
from routing.dedup import Deduplicator
from routing.delayed import DELAYED_TYPE
from routing.errors import COMMAND_INVALID, PRECONDITION_FAILED, ChannelError, ConnectionError
from routing.exchanges import EXCHANGE_TYPES, Exchange
from routing.queue import Queue, position_key
from routing.remote_queue import remote_stub

log = logging.getLogger("routing.vhost")

DEFAULT_EXCHANGES = (("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
                     ("amq.headers", "headers"), ("amq.match", "headers"))
DELAY_LOG_PREFIX = "amq.delayed."  # + exchange name: the queue-topic name of a delay log (reserved prefix)


def exchange_class(type_name: str, arguments: dict):
    """The routing class of a declared type; x-delayed-message routes as its x-delayed-type."""
    if type_name == DELAYED_TYPE:
        inner = arguments.get("x-delayed-type")
        if isinstance(inner, bytes):
            inner = inner.decode("utf-8", "replace")
        if inner not in EXCHANGE_TYPES:
            raise ChannelError(PRECONDITION_FAILED, "Invalid argument, 'x-delayed-type' must be an existing "
                                                    "exchange type")
        return EXCHANGE_TYPES[inner]
    cls = EXCHANGE_TYPES.get(type_name)
    if cls is None:
        raise ConnectionError(COMMAND_INVALID, f"unknown exchange type '{type_name}'")
    return cls


def exchange_definition(exchange: Exchange) -> dict:
    """A durable exchange as the stored definitions hold it (routing.definitions keeps these)."""
    return {"name": exchange.name, "type": exchange.type_name, "auto_delete": exchange.auto_delete,
            "internal": exchange.internal, "arguments": exchange.arguments}


def queue_definition(queue: Queue) -> dict:
    return {"name": queue.name, "arguments": queue.arguments, "auto_delete": queue.auto_delete}


def binding_definition(source: str, destination: tuple[str, str], routing_key: str, arguments) -> dict:
    kind, name = destination
    return {"source": source, "destination_type": kind, "destination": name, "routing_key": routing_key,
            "arguments": dict(arguments or {})}


class DefinitionsMixin:
    # --- definitions -------------------------------------------------------------------
    def stores(self, thing) -> bool:
        """Whether an exchange or queue is among the stored definitions."""
        return thing.durable or self.share_transient

    def stored_definition(self, thing) -> dict:
        """An exchange's or queue's stored definition; a non-durable one (cluster mode 'spread')
        says so, whether it is exclusive, and which broker it belongs to."""
        is_queue = isinstance(thing, Queue)
        found = queue_definition(thing) if is_queue else exchange_definition(thing)
        if thing.durable:
            return found
        extra = {"durable": False, "node": getattr(thing, "home_node", None) or self.node_id}
        if is_queue and thing.exclusive_owner is not None:
            extra["exclusive"] = True
        return {**found, **extra}

    def durable_definitions(self, stored: bool = False) -> dict:
        """The durable definitions (RabbitMQ's export); ``stored``: what the definitions journal
        keeps, which in cluster mode 'spread' has the non-durable ones too (stored_definition)."""
        default = {name for name, _ in DEFAULT_EXCHANGES}
        kept = self.stores if stored else (lambda thing: thing.durable)
        exchanges = [self.stored_definition(e) for e in self.exchanges.values() if kept(e) and e.name not in default]
        queues = [self.stored_definition(q) for q in self.queues.values() if kept(q)]
        durable_exchanges = {e.name for e in self.exchanges.values() if kept(e)}
        durable_queues = {q.name for q in self.queues.values() if kept(q)}
        bindings = []
        for exchange in self.exchanges.values():
            if exchange.name not in durable_exchanges:
                continue
            for binding in exchange.bindings():
                kind, name = binding.destination
                if (kind == "queue" and name in durable_queues) or (kind == "exchange" and name in durable_exchanges):
                    bindings.append(binding_definition(exchange.name, binding.destination, binding.routing_key,
                                                       binding.arguments))
        return {"exchanges": exchanges, "queues": queues, "bindings": bindings, **self._policy_definitions(),
                "metadata": dict(self.metadata), "super_streams": {k: list(v) for k, v in self.super_streams.items()}}

    def restore(self, definitions: dict, positions: dict[str, dict]) -> None:
        """Recreate durable exchanges, queues and bindings after a restart."""
        self._restore_policies(definitions)
        self.metadata.update(definitions.get("metadata", {}))
        for e in definitions.get("exchanges", ()):
            if e["name"] not in self.exchanges:
                exchange = self.exchanges[e["name"]] = exchange_class(e["type"], e["arguments"])(
                    e["name"], durable=True, auto_delete=e["auto_delete"], internal=e["internal"],
                    arguments=e["arguments"])
                exchange.dedup = Deduplicator.from_arguments(e["arguments"], f"exchange '{e['name']}'")
                if e["arguments"].get("x-log") is True:
                    self._open_exchange_log(e["name"])
                if e["type"] == DELAYED_TYPE:
                    exchange.type_name = DELAYED_TYPE
                    topic = queue_topic(self.name, DELAY_LOG_PREFIX + e["name"])
                    self._open_delay_log(e["name"], positions.get(topic, {}).get("delayed"))
        self.super_streams.update(definitions.get("super_streams", {}))
        for q in definitions.get("queues", ()):
            topic, partition = self.backing(q["name"])
            position = positions.get(position_key(topic, partition), {})
            queue = Queue(self.name, q["name"], topic, None, durable=True, exclusive_owner=None,
                          auto_delete=q["auto_delete"], arguments=q["arguments"],
                          ack_floor=position.get("floor", 0), delivered_bound=position.get("delivered"),
                          delivery_counts={int(o): n for o, n in position.get("deliveries", {}).items()},
                          dead_lettering={int(o): r for o, r in position.get("dead-lettering", {}).items()},
                          prioritised=position.get("prioritised", False))
            queue.partition = partition
            try:
                queue.attach(self._queue_log(topic, True, None, q["arguments"], q["name"], partition))
            except UnknownTopicError:  # cluster mode: led by another broker (or its only replica is down)
                if not self.remote_stubs:
                    log.warning("queue %s in vhost %s is unavailable: none of its replicas is on this broker",
                                q["name"], self.name)
                    continue
                queue = remote_stub(queue)
            self._install(queue)
        for b in definitions.get("bindings", ()):
            source = self.exchanges.get(b["source"])
            if source is not None:
                source.bind((b["destination_type"], b["destination"]), b["routing_key"], b["arguments"])
