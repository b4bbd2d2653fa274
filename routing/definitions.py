"""Durable AMQP definitions kept one change at a time.

A vhost's durable definitions (what ``VirtualHost.durable_definitions`` reports) are held here as
entries: ``settings`` (its metadata; its presence is the vhost's), one entry per named thing in
it (``policy:<name>``, ``operator-policy:<name>``, ``limit:<name>``, ``super-stream:<name>``,
``exchange:<name>``, ``queue:<name>``) and one ``binding:[...]`` per binding. Brokers of a
cluster write the same journal, so each named thing is its own entry: a policy set on one broker
and a limit set on another at the same moment are two entries, and neither write undoes the
other (older journals kept every policy, limit and super stream inside ``settings``; they are
still read, and rewritten as entries at the next start). A change appends
only the entries it touched to the state's journal (routing.state), so declaring the 10,000th
queue costs what declaring the first did; the whole document is rewritten only when the journal
outgrows it (a file state) or never (the compacted ``__amqp_state`` topic keeps the latest
record per entry by itself).

The vhost names what it changed (``("queue", name)``, ``("exchange", name)``, ``("binding",
source, destination, routing key, arguments)``); a change that names nothing (policies, super
streams) is found by comparing the vhost's whole definitions with what was stored. An exchange
or queue that goes takes the stored bindings that name it along, as RabbitMQ deletes them.
"""
from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any, Iterable

from routing.vhost_definitions import binding_definition

JOURNAL = "definitions"
SETTINGS = "settings"
_LISTS = {"policies": "policy:", "operator_policies": "operator-policy:"}  # parts listing {"name": ...}
_MAPS = {"limits": "limit:", "super_streams": "super-stream:"}  # parts mapping a name to its value
PART_OF_KIND = {prefix[:-1]: part for part, prefix in (*_LISTS.items(), *_MAPS.items())}  # "policy": "policies"

Change = tuple[str, str, Any]  # (vhost, entry key, value; None: the entry is gone)


# --- JSON for definitions: AMQP argument values that JSON lacks get a tagged form ----------

def encode(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime.datetime):
        return {"$timestamp": value.timestamp()}
    if isinstance(value, float):
        return {"$float": repr(value)}
    return value


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag == "$bytes":
                return base64.b64decode(inner)
            if tag == "$decimal":
                return decimal.Decimal(inner)
            if tag == "$timestamp":
                return datetime.datetime.fromtimestamp(inner, datetime.timezone.utc)
            if tag == "$float":
                return float(inner)
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


# --- entries <-> documents -------------------------------------------------------------------

def _binding_key(source: str, kind: str, destination: str, routing_key: str, arguments: Any) -> str:
    return "binding:" + json.dumps([source, kind, destination, routing_key, arguments], sort_keys=True,
                                   separators=(",", ":"))


def _binding_entry(b: dict) -> tuple[str, dict]:
    return _binding_key(b["source"], b["destination_type"], b["destination"], b["routing_key"], b["arguments"]), b


def entries_of_doc(doc: dict) -> dict[str, Any]:
    """A vhost's (encoded) definitions document as entries."""
    entries: dict[str, Any] = {SETTINGS: {"metadata": doc["metadata"]} if "metadata" in doc else {}}
    for part, prefix in _LISTS.items():
        for item in doc.get(part, ()):
            entries[prefix + item["name"]] = item
    for part, prefix in _MAPS.items():
        for name, value in doc.get(part, {}).items():
            entries[prefix + name] = value
    for e in doc.get("exchanges", ()):
        entries["exchange:" + e["name"]] = e
    for q in doc.get("queues", ()):
        entries["queue:" + q["name"]] = q
    for b in doc.get("bindings", ()):
        key, value = _binding_entry(b)
        entries[key] = value
    return entries


def doc_of_entries(entries: dict[str, Any], builtin_exchanges: Iterable[str]) -> dict:
    """The document a vhost restores from; bindings whose ends are not stored are left out."""
    exchanges, queues, bindings = [], [], []
    settings = dict(entries.get(SETTINGS, {}))  # an older journal's settings hold the parts themselves
    lists = {part: {item["name"]: item for item in settings.get(part, ())} for part in _LISTS}
    maps = {part: dict(settings.get(part, {})) for part in _MAPS}
    for key, value in entries.items():
        kind, _, name = key.partition(":")
        part = PART_OF_KIND.get(kind)
        if part is not None:
            (lists if part in lists else maps)[part][name] = value
        elif key.startswith("exchange:"):
            exchanges.append(value)
        elif key.startswith("queue:"):
            queues.append(value)
        elif key.startswith("binding:"):
            bindings.append(value)
    sources = {e["name"] for e in exchanges} | set(builtin_exchanges)
    ends = {("exchange", name) for name in sources} | {("queue", q["name"]) for q in queues}
    bindings = [b for b in bindings if b["source"] in sources and (b["destination_type"], b["destination"]) in ends]
    settings.update({part: list(items.values()) for part, items in lists.items()}, **maps)
    return {**settings, "exchanges": exchanges, "queues": queues, "bindings": bindings}


def _refs(value: dict) -> tuple[tuple[str, str], ...]:
    """The exchange and queue a stored binding names (it goes when either does)."""
    return ("exchange", value["source"]), (value["destination_type"], value["destination"])


class DefinitionEntries:
    """What the journal holds, per vhost, with the stored bindings indexed by what they name."""

    def __init__(self) -> None:
        self.vhosts: dict[str, dict[str, Any]] = {}
        self._naming: dict[tuple[str, str, str], set[str]] = {}  # (vhost, kind, name) -> binding keys

    def __len__(self) -> int:
        return sum(len(entries) for entries in self.vhosts.values())

    def apply(self, changes: Iterable[Change]) -> None:
        for vhost, key, value in changes:
            entries = self.vhosts.setdefault(vhost, {})
            old = entries.pop(key, None) if value is None else entries.get(key)
            if key.startswith("binding:"):
                if old is not None:
                    for kind, name in _refs(old):
                        self._naming.get((vhost, kind, name), set()).discard(key)
                if value is not None:
                    for kind, name in _refs(value):
                        self._naming.setdefault((vhost, kind, name), set()).add(key)
            if value is not None:
                entries[key] = value
            elif not entries:
                del self.vhosts[vhost]

    def changes(self) -> list[Change]:
        """Every entry as a change (what a state without a journal of its own is given to keep)."""
        return [(vhost, key, value) for vhost, entries in self.vhosts.items() for key, value in entries.items()]

    def diff(self, vhost: str, wanted: dict[str, Any], keys: Iterable[str] | None = None) -> list[Change]:
        """Changes turning the stored entries of ``vhost`` (those among ``keys``, or all) into ``wanted``."""
        stored = self.vhosts.get(vhost, {})
        keys = set(stored) | set(wanted) if keys is None else keys
        out = []
        for key in keys:
            value = wanted.get(key)
            if stored.get(key) != value:
                out.append((vhost, key, value))
        return out

    def named(self, vhost: str, kind: str, name: str) -> set[str]:
        """Stored binding keys that name this exchange or queue."""
        return set(self._naming.get((vhost, kind, name), ()))

    def documents(self, builtin_exchanges: Iterable[str]) -> dict:
        builtin = tuple(builtin_exchanges)
        return {"vhosts": {vhost: doc_of_entries(entries, builtin) for vhost, entries in self.vhosts.items()}}


def touched_entries(vhost, touched: tuple, entries: DefinitionEntries, builtin: frozenset[str]) -> list[Change]:
    """The changes one named change of ``vhost`` (a VirtualHost) makes to the stored entries."""
    name = vhost.name
    kind = touched[0]
    if kind == "binding":
        _, source, destination, routing_key, arguments = touched
        key, value = _binding_entry(encode(binding_definition(source, destination, routing_key, arguments)))
        exchange = vhost.exchanges.get(source)
        target = (vhost.queues if destination[0] == "queue" else vhost.exchanges).get(destination[1])
        present = (exchange is not None and vhost.stores(exchange) and target is not None and vhost.stores(target)
                   and exchange.has_binding(destination, routing_key, arguments))
        return entries.diff(name, {key: value} if present else {}, [key])
    entry_name = touched[1]
    if kind == "exchange" and entry_name in builtin:
        return []
    key = f"{kind}:{entry_name}"
    found = (vhost.queues if kind == "queue" else vhost.exchanges).get(entry_name)
    if found is not None and vhost.stores(found):
        return entries.diff(name, {key: encode(vhost.stored_definition(found))}, [key])
    # gone (or never durable): its entry and every stored binding naming it
    return entries.diff(name, {}, [key, *entries.named(name, kind, entry_name)])


def split_transient(entries: DefinitionEntries, node_id: int) -> tuple[list[Change], list[Change]]:
    """Cluster mode 'spread', at start-up: the stored non-durable definitions are not restored as
    durable ones. Returns (removals of this broker's own, with the bindings naming them: they went
    with its last run; the other brokers' and their bindings, to apply as they are), and takes
    both out of ``entries``' documents by removing them from ``entries`` (the caller stores the
    removals and applies the rest after restoring)."""
    own = removals_of_node(entries, node_id)
    others: list[Change] = []
    for vhost, key, value, bindings in _transient(entries):
        if value.get("node") != node_id:
            others += [(vhost, key, value)] + [b for b in bindings if b[2] is not None]
    entries.apply((v, k, None) for v, k, _ in own + others)
    return own, others


def transient_owners(entries: DefinitionEntries) -> set[int]:
    """The brokers that stored non-durable definitions are tagged with."""
    return {value.get("node") for _, _, value, _ in _transient(entries)}


def removals_of_node(entries: DefinitionEntries, node_id: int) -> list[Change]:
    """The changes removing a broker's non-durable definitions and the bindings naming them."""
    out: dict[tuple[str, str], Change] = {}  # a binding naming two of them is removed once
    for vhost, key, value, bindings in _transient(entries):
        if value.get("node") == node_id:
            out[(vhost, key)] = (vhost, key, None)
            out.update(((v, b), (v, b, None)) for v, b, _ in bindings)
    return list(out.values())


def _transient(entries: DefinitionEntries):
    """(vhost, key, value, the stored bindings naming it) of each stored non-durable definition."""
    for vhost, stored in list(entries.vhosts.items()):
        for key, value in list(stored.items()):
            if isinstance(value, dict) and value.get("durable") is False:
                kind, _, name = key.partition(":")
                yield vhost, key, value, [(vhost, b, stored.get(b)) for b in entries.named(vhost, kind, name)]
