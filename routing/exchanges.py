"""Exchanges: routing tables from (routing key, headers) to destinations, one class per type.

Each type is a small class behind :class:`Exchange`, whose interface is five members:
``bind``/``unbind`` (True when the binding set changed), ``route`` (a set of destinations),
``bindings()`` and ``is_unused``. Destinations are opaque hashable values; the vhost uses
``("queue", name)`` and ``("exchange", name)``, and :func:`route_through` relies on that
convention to follow exchange-to-exchange bindings.

A binding is identified, as in RabbitMQ, by (destination, routing key, arguments): the same
destination bound twice with different arguments is two bindings, and routing returns it once.

Semantics follow RabbitMQ (not only the AMQP spec):

- direct: routing key equals binding key.
- fanout: every destination, keys ignored.
- topic: keys are split on ``.`` into words, an empty key being *zero* words (so ``*`` does
  not match ``""`` but ``#`` does; ``"a."`` is the two words ``a`` and ``""``); ``*`` matches
  exactly one word, ``#`` zero or more. Bindings live in a trie and route results are cached
  per routing key until the bindings change.
- headers: ``x-match`` is ``all`` (the default), ``any``, ``all-with-x`` or ``any-with-x``; other
  binding arguments starting with ``x-`` take part only in the ``-with-x`` modes. A binding
  value of void (None) matches on the header's presence; otherwise values compare as RabbitMQ's
  Erlang ``==`` does: numbers by value (1 == 1.0), strings as bytes, booleans only with
  booleans. ``all`` with no pattern matches every message, ``any`` with none matches nothing.

Exchanges keep no queue state and do no I/O; they are plain state machines a vhost owns.
"""
from __future__ import annotations

import datetime
import decimal
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from routing.errors import PRECONDITION_FAILED, ChannelError

__all__ = ["Binding", "Exchange", "DirectExchange", "FanoutExchange", "TopicExchange", "HeadersExchange",
           "EXCHANGE_TYPES", "route_through"]


@dataclass(frozen=True)
class Binding:
    destination: Hashable
    routing_key: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


def _freeze(value: Any) -> Hashable:
    """A hashable form of an AMQP field value that keeps True apart from 1 and str apart from bytes."""
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((k, _freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_freeze(v) for v in value))
    if isinstance(value, bytearray):
        value = bytes(value)
    return (type(value).__name__, value)


class Exchange:
    """The base: binding bookkeeping. Subclasses index bindings in ``_added``/``_removed``."""

    type_name: ClassVar[str] = ""

    def __init__(self, name: str, *, durable: bool = False, auto_delete: bool = False, internal: bool = False,
                 arguments: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = dict(arguments or {})
        alternate = self.arguments.get("alternate-exchange")
        self.alternate_exchange: str | None = alternate if isinstance(alternate, str) and alternate else None
        self._bindings: dict[tuple, Binding] = {}
        self.dedup = None  # a routing.dedup.Deduplicator when declared with x-message-deduplication

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} bindings={len(self._bindings)}>"

    def bind(self, destination: Hashable, routing_key: str = "", arguments: Mapping[str, Any] | None = None) -> bool:
        """Add a binding; False if it already existed. May raise ChannelError (406)."""
        arguments = dict(arguments or {})
        key = (destination, routing_key, _freeze(arguments))
        if key in self._bindings:
            return False
        binding = Binding(destination, routing_key, arguments)
        self._added(binding)  # validates first: a refused binding is not recorded
        self._bindings[key] = binding
        return True

    def unbind(self, destination: Hashable, routing_key: str = "", arguments: Mapping[str, Any] | None = None) -> bool:
        """Remove a binding; False if there was none."""
        binding = self._bindings.pop((destination, routing_key, _freeze(dict(arguments or {}))), None)
        if binding is None:
            return False
        self._removed(binding)
        return True

    def has_binding(self, destination: Hashable, routing_key: str = "",
                    arguments: Mapping[str, Any] | None = None) -> bool:
        return (destination, routing_key, _freeze(dict(arguments or {}))) in self._bindings

    def unbind_destination(self, destination: Hashable) -> list[Binding]:
        """Remove every binding to ``destination`` (its queue or exchange was deleted)."""
        gone = [b for b in self._bindings.values() if b.destination == destination]
        for binding in gone:
            self.unbind(binding.destination, binding.routing_key, binding.arguments)
        return gone

    def bindings(self) -> Iterator[Binding]:
        return iter(list(self._bindings.values()))

    @property
    def is_unused(self) -> bool:
        """No bindings with this exchange as source (what exchange.delete if-unused checks)."""
        return not self._bindings

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set:
        raise NotImplementedError

    def _added(self, binding: Binding) -> None:
        raise NotImplementedError

    def _removed(self, binding: Binding) -> None:
        raise NotImplementedError


def _count_add(counts: dict, destination: Hashable) -> None:
    counts[destination] = counts.get(destination, 0) + 1


def _count_remove(counts: dict, destination: Hashable) -> None:
    left = counts[destination] - 1
    if left:
        counts[destination] = left
    else:
        del counts[destination]


class DirectExchange(Exchange):
    type_name = "direct"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._by_key: dict[str, dict[Hashable, int]] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set:
        counts = self._by_key.get(routing_key)
        return set(counts) if counts else set()

    def _added(self, binding: Binding) -> None:
        _count_add(self._by_key.setdefault(binding.routing_key, {}), binding.destination)

    def _removed(self, binding: Binding) -> None:
        counts = self._by_key[binding.routing_key]
        _count_remove(counts, binding.destination)
        if not counts:
            del self._by_key[binding.routing_key]


class FanoutExchange(Exchange):
    type_name = "fanout"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._counts: dict[Hashable, int] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set:
        return set(self._counts)

    def _added(self, binding: Binding) -> None:
        _count_add(self._counts, binding.destination)

    def _removed(self, binding: Binding) -> None:
        _count_remove(self._counts, binding.destination)


def _words(key: str) -> list[str]:
    return key.split(".") if key else []  # RabbitMQ: "" is zero words, "a." is ["a", ""]


class _TrieNode:
    __slots__ = ("children", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _TrieNode] = {}
        self.destinations: dict[Hashable, int] = {}


class TopicExchange(Exchange):
    """Binding keys in a word trie; ``*`` and ``#`` are children like any word."""

    type_name = "topic"
    CACHE_SIZE = 4096  # routing keys whose result is remembered until the bindings change

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._root = _TrieNode()
        self._cache: dict[str, frozenset] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set:
        cached = self._cache.get(routing_key)
        if cached is None:
            found: set = set()
            self._match(self._root, _words(routing_key), 0, found, set())
            cached = frozenset(found)
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[routing_key] = cached
        return set(cached)

    def _match(self, node: _TrieNode, words: list[str], i: int, found: set, seen: set) -> None:
        # seen: (node, i) pairs already explored; keeps "#.#.#" patterns linear, not exponential
        state = (id(node), i)
        if state in seen:
            return
        seen.add(state)
        children = node.children
        hash_child = children.get("#")
        if hash_child is not None:  # "#" swallows zero or more words
            for j in range(i, len(words) + 1):
                self._match(hash_child, words, j, found, seen)
        if i == len(words):
            found.update(node.destinations)
            return
        child = children.get(words[i])
        if child is not None:
            self._match(child, words, i + 1, found, seen)
        star = children.get("*")
        if star is not None:
            self._match(star, words, i + 1, found, seen)

    def _added(self, binding: Binding) -> None:
        node = self._root
        for word in _words(binding.routing_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _TrieNode()
            node = child
        _count_add(node.destinations, binding.destination)
        self._cache.clear()

    def _removed(self, binding: Binding) -> None:
        path = [self._root]
        words = _words(binding.routing_key)
        for word in words:
            path.append(path[-1].children[word])
        _count_remove(path[-1].destinations, binding.destination)
        for depth in range(len(words), 0, -1):  # prune empty branches
            node = path[depth]
            if node.destinations or node.children:
                break
            del path[depth - 1].children[words[depth - 1]]
        self._cache.clear()


_X_MATCH_MODES = {"all": (True, False), "any": (False, False), "all-with-x": (True, True), "any-with-x": (False, True)}
_VOID = object()  # a void (None) field value
_MISSING = object()


def _value(value: Any) -> Hashable:
    """An AMQP field value as RabbitMQ's Erlang ``==`` sees it (see the module docstring)."""
    if value is None:
        return _VOID
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if isinstance(value, str):
        return ("bin", value.encode())
    if isinstance(value, (bytes, bytearray)):
        return ("bin", bytes(value))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return ("num", int(value.timestamp()))
    if isinstance(value, decimal.Decimal):
        return ("decimal", value)
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((k, _value(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_value(v) for v in value))
    return ("other", value)


class _HeadersPattern:
    __slots__ = ("destination", "match_all", "items")

    def __init__(self, destination: Hashable, arguments: Mapping[str, Any]) -> None:
        mode = arguments.get("x-match", "all")
        if isinstance(mode, (bytes, bytearray)):
            mode = bytes(mode).decode("utf-8", "replace")
        if not isinstance(mode, str):
            raise ChannelError(PRECONDITION_FAILED, f"Invalid x-match field type {type(mode).__name__} "
                                                    f"(value {mode!r}); expected longstr")
        if mode not in _X_MATCH_MODES:
            raise ChannelError(PRECONDITION_FAILED, f"Invalid x-match field value <<\"{mode}\">>; "
                                                    f"expected all, any, all-with-x, or any-with-x")
        self.destination = destination
        self.match_all, with_x = _X_MATCH_MODES[mode]
        self.items = tuple((key, _value(value)) for key, value in arguments.items()
                           if key != "x-match" and (with_x or not key.startswith("x-")))

    def matches(self, headers: Mapping[str, Any], values: dict) -> bool:
        match_all = self.match_all
        for key, wanted in self.items:
            if key in headers:
                if wanted is _VOID:
                    hit = True
                else:
                    got = values.get(key, _MISSING)
                    if got is _MISSING:
                        got = values[key] = _value(headers[key])
                    hit = got == wanted
            else:
                hit = False
            if hit != match_all:  # a miss decides "all", a hit decides "any"
                return hit
        return match_all


class HeadersExchange(Exchange):
    type_name = "headers"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self._patterns: dict[tuple, _HeadersPattern] = {}

    def route(self, routing_key: str, headers: Mapping[str, Any] | None = None) -> set:
        headers = headers or {}
        values: dict = {}  # header values converted once per message, on demand
        return {p.destination for p in self._patterns.values() if p.matches(headers, values)}

    def _added(self, binding: Binding) -> None:
        pattern = _HeadersPattern(binding.destination, binding.arguments)
        self._patterns[(binding.destination, binding.routing_key, _freeze(binding.arguments))] = pattern

    def _removed(self, binding: Binding) -> None:
        del self._patterns[(binding.destination, binding.routing_key, _freeze(binding.arguments))]


EXCHANGE_TYPES: dict[str, type[Exchange]] = {
    cls.type_name: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)}


def route_through(exchanges: Mapping[str, Exchange], start: str, routing_key: str,
                  headers: Mapping[str, Any] | None = None) -> set:
    """The queue destinations a publish to ``start`` reaches, as RabbitMQ's router walks them.

    Destinations ``("exchange", name)`` are followed (each exchange at most once, so cycles
    end); every other destination is a queue and is collected. An exchange whose own route
    finds no destination at all hands the message to its ``alternate_exchange``, if that
    exists. Exchanges missing from ``exchanges`` are skipped.
    """
    queues: set = set()
    first = exchanges.get(start)
    if first is None:
        return queues
    seen = {start}
    work = [first]
    while work:
        exchange = work.pop()
        found = exchange.route(routing_key, headers)
        if not found and exchange.alternate_exchange is not None:
            found = {("exchange", exchange.alternate_exchange)}
        for destination in found:
            if isinstance(destination, tuple) and len(destination) == 2 and destination[0] == "exchange":
                name = destination[1]
                if name not in seen:
                    seen.add(name)
                    nxt = exchanges.get(name)
                    if nxt is not None:
                        work.append(nxt)
            else:
                queues.add(destination)
    return queues
