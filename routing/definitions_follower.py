"""A broker's copy of the AMQP model that another broker writes, kept current from the log.

In cluster mode the durable definitions are records of the replicated ``__amqp_state`` topic
(routing.state.LogState: one record per journal entry, compacted). A broker that holds a replica
of that topic but does not write it follows the records below the high watermark as they arrive
and applies each entry to live vhosts of its own :class:`routing.broker.Router`: vhosts with their
policies, limits and metadata, exchanges, queues and bindings. So the whole model is known on
every broker and a routing decision (which queues an exchange and a routing key reach) can be
made where a client is connected, as RabbitMQ's nodes each hold every definition.

A follower's model writes nothing back and opens no logs: its queues have no cursor here (their
delivery state lives where their topic is led), so it is for reading and routing only.
"""
from __future__ import annotations

import json
import logging
from typing import Iterable

from core.log import PartitionLog
from routing import definitions
from routing.errors import ChannelError
from routing.remote_queue import RemoteQueue
from routing.state import decode_state_records
from routing.delayed import RemoteDelayLog
from core.names import queue_topic
from routing.delayed import DELAYED_TYPE
from routing.vhost import VirtualHost
from routing.vhost_definitions import DELAY_LOG_PREFIX, exchange_class

log = logging.getLogger(__name__)

DEFAULT_VHOST = "/"


class DefinitionsFollower:
    def __init__(self, router, plog: PartitionLog, *, position: int | None = None, own: bytes | None = None,
                 in_flight: dict[bytes, int] | None = None):
        """``own``: the origin header of this broker's own writes, already applied when made (its
        router writes through routing.state; without ``own`` it writes nothing: NoState);
        ``in_flight``: its state's count of those not read back yet (routing.state.LogState)."""
        self.router = router
        self.plog = plog
        self.position = plog.log_start_offset if position is None else position  # the next offset to apply
        self.own = own
        self.in_flight = in_flight
        self.applied = 0  # entries applied so far (for logs and tests)

    def catch_up(self) -> int:
        """Apply the state log's new records below its high watermark; returns how many entries."""
        end = self.plog.high_watermark
        if end <= self.position:
            return 0
        changes: list[definitions.Change] = []
        records = self.plog.replay(self.position, end=end)
        for (_, entry), value in decode_state_records(records, self.position, end, definitions.JOURNAL,
                                                          self.own, self.in_flight):
            if entry is not None:
                vhost, key = json.loads(entry)
                changes.append((vhost, key, None if value is None else value[2]))
            elif value is not None:  # a whole document written before journals: every entry of it
                for vhost, doc in value.get("vhosts", {}).items():
                    changes += [(vhost, key, v) for key, v in definitions.entries_of_doc(doc).items()]
        self.position = end
        apply_changes(self.router, changes)
        self.applied += len(changes)
        return len(changes)


REMOTE_OWNER = "a connection to another broker"  # owns, here, an exclusive queue declared elsewhere


def apply_changes(router, changes: Iterable[definitions.Change]) -> None:
    """Make ``router``'s vhosts what the journal's changes say, without writing anything back
    (its record of what is stored learns them too, so that it never writes them again)."""
    changes = list(changes)
    router._stored.apply(changes)
    deferred = []
    for vhost_name, key, value in changes:
        value = None if value is None else definitions.decode(value)
        vhost = router.vhosts.get(vhost_name)
        if key == definitions.SETTINGS:
            if value is None:  # the vhost was deleted (its settings entry is its presence)
                if vhost_name != DEFAULT_VHOST:
                    router.vhosts.pop(vhost_name, None)
                continue
            _settings(vhost or router.vhost_create(vhost_name, persist=False), value)
            continue
        if vhost is None:
            if value is None:
                continue  # the vhost went first: nothing of it is left to remove
            vhost = router.vhost_create(vhost_name, persist=False)
        kind, _, name = key.partition(":")
        try:
            if kind in definitions.PART_OF_KIND:
                _setting(vhost, definitions.PART_OF_KIND[kind], name, value)
            elif kind == "exchange":
                _exchange(vhost, name, value)
            elif kind == "queue":
                _queue(vhost, name, value)
            elif kind == "binding":
                binding = definitions.decode(json.loads(name))
                if not _binding(vhost, binding, value) and value is not None:
                    deferred.append((vhost, key, binding))
        except (ChannelError, KeyError, TypeError, ValueError) as exc:
            log.warning("AMQP definition %r of vhost %r not applied here: %s", key, vhost_name, exc)
    # The entries of one write come in no set order (a definitions import is one diff of a whole
    # vhost): a binding that came before its exchange is bound now, if the write still keeps it.
    for vhost, key, binding in deferred:
        value = router._stored.vhosts.get(vhost.name, {}).get(key)
        try:
            if value is not None:
                _binding(vhost, binding, definitions.decode(value))
        except (ChannelError, KeyError, TypeError, ValueError) as exc:
            log.warning("AMQP definition %r of vhost %r not applied here: %s", key, vhost.name, exc)


def _settings(vhost: VirtualHost, value: dict) -> None:
    vhost.metadata = dict(value.get("metadata", {}))
    # a broker of an older version writes every policy, limit and super stream in this entry
    for part in definitions.PART_OF_KIND.values():
        if part in value:
            items = value[part]
            if isinstance(items, list):
                items = {item["name"]: item for item in items}
            current = getattr(vhost, part)
            for name in list(current):
                if name not in items:
                    _setting(vhost, part, name, None)
            for name, item in items.items():
                _setting(vhost, part, name, item)


def _setting(vhost: VirtualHost, part: str, name: str, value) -> None:
    """One policy, operator policy, limit or super stream (``part`` names the vhost's dict of them)."""
    held = getattr(vhost, part)
    if value is None:
        held.pop(name, None)
    elif part in ("policies", "operator_policies"):
        held[name] = {k: v for k, v in value.items() if k != "name"}
    elif part == "super_streams":
        held[name] = list(value)
        for partition in value:  # partition streams applied before their super stream
            queue = vhost.queues.get(partition)
            if queue is not None and queue.remote:
                queue.topic, queue.partition = vhost.backing(partition)
    else:
        held[name] = value


def _exchange(vhost: VirtualHost, name: str, e: dict | None) -> None:
    existing = vhost.exchanges.get(name)
    if e is None:
        held = vhost.delay_logs.pop(name, None)
        if held is not None:
            held.deleted = True
        if existing is not None:
            del vhost.exchanges[name]
            for other in vhost.exchanges.values():
                other.unbind_destination(("exchange", name))
        return
    if existing is not None and existing.type_name == e["type"] and existing.arguments == e["arguments"]:
        return
    exchange = exchange_class(e["type"], e["arguments"])(name, durable=e.get("durable", True),
                                                          auto_delete=e["auto_delete"], internal=e["internal"],
                                                          arguments=e["arguments"])
    exchange.home_node = e.get("node")
    if e["type"] == DELAYED_TYPE:
        exchange.type_name = DELAYED_TYPE
        if name not in vhost.delay_logs:  # its held messages live where its delay log is led
            vhost.delay_logs[name] = RemoteDelayLog(vhost.name, name, queue_topic(vhost.name, DELAY_LOG_PREFIX + name))
    if existing is not None:  # replaced (deleted and declared again elsewhere): its bindings carry over
        for b in existing.bindings():
            exchange.bind(b.destination, b.routing_key, b.arguments)
    vhost.exchanges[name] = exchange


def _queue(vhost: VirtualHost, name: str, q: dict | None) -> None:
    existing = vhost.queues.get(name)
    if q is None:
        if existing is not None:
            existing.deleted = True
            del vhost.queues[name]
            vhost.consuming.discard(existing)
            for exchange in vhost.exchanges.values():
                exchange.unbind_destination(("queue", name))
            existing.cancel_consumers()  # deleted on another broker: its consumers here are told
        return
    if existing is not None and existing.arguments == q["arguments"] and existing.auto_delete == q["auto_delete"]:
        return
    topic, partition = vhost.backing(name)
    queue = RemoteQueue(vhost.name, name, topic, None, durable=q.get("durable", True),
                        exclusive_owner=REMOTE_OWNER if q.get("exclusive") else None,
                        auto_delete=q["auto_delete"], arguments=q["arguments"])  # served where its topic is led
    queue.partition = partition
    queue.home_node = q.get("node")
    vhost._install(queue)


def _binding(vhost: VirtualHost, key: list, b: dict | None) -> bool:
    """False if its exchange is not here (gone first, with its bindings; or not come yet)."""
    source, kind, destination, routing_key, arguments = key
    exchange = vhost.exchanges.get(source)
    if exchange is None:
        return False
    if b is None:
        exchange.unbind((kind, destination), routing_key, arguments)
    else:
        exchange.bind((kind, destination), routing_key, arguments)
    return True
