"""Client quotas (KIP-546): values per quota entity, kept in the data directory.

An entity is a set of (type, name) components: ``user``, ``client-id`` (alone or together)
or ``ip`` (alone). A name of None is that type's default (``<default>`` in Kafka's tools), so
``{user: None}`` applies to every user without a quota of their own. Keys are Kafka's:
``producer_byte_rate`` and ``consumer_byte_rate`` (whole bytes per second),
``request_percentage`` and ``controller_mutation_rate`` for user/client-id entities,
``connection_creation_rate`` (whole connections per second) for ip entities.

:meth:`ClientQuotaStore.byte_rate` resolves the quota that applies to a (user, client-id) pair
in Kafka's order, most specific first::

    user+client-id, user+<default client-id>, user, <default user>+client-id,
    <default user>+<default client-id>, <default user>, client-id, <default client-id>

and names the bucket the traffic is counted in: the matched entity's components with the
client's actual names, so a default quota limits each user (or client id) on its own while a
quota of one user alone is shared by all that user's client ids.

File ``<data-dir>/client-quotas.json``, rewritten whole (temporary file, fsync, rename)::

    {"version": 1, "entities": [{"entity": {"user": "alice", "client-id": null},
                                 "quotas": {"producer_byte_rate": 1024.0}}]}

Thread-safety: none; the owner's thread only.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Iterable

from core.checkpoint import write_atomic

log = logging.getLogger(__name__)

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotas component match types

# key -> whole numbers only (Kafka's LONG/INT keys) or any double
_CLIENT_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
                CONTROLLER_MUTATION_RATE: False}
_IP_KEYS = {CONNECTION_CREATION_RATE: True}
_LONG_MAX = 2 ** 63 - 1

Entity = tuple[tuple[str, str | None], ...]  # components sorted by type


class QuotaError(Exception):
    """A request Kafka refuses with INVALID_REQUEST (``unsupported``: UNSUPPORTED_VERSION)."""

    def __init__(self, message: str, unsupported: bool = False):
        super().__init__(message)
        self.unsupported = unsupported


def entity_of(components: Iterable[tuple[str, str | None]]) -> Entity:
    """A validated entity: known types, each once, no empty names, an allowed combination."""
    seen: dict[str, str | None] = {}
    for kind, name in components:
        if kind in seen:
            raise QuotaError(f"Invalid empty client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP):
            raise QuotaError(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise QuotaError(f"Empty {kind} not supported")
        seen[kind] = name
    if not seen or (IP in seen and len(seen) > 1):
        # Kafka's text, missing space included
        raise QuotaError("Invalid empty client quota entity" if not seen else
                         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
    return tuple(sorted(seen.items()))


# the order Java's HashMap lists these types in (by their hash), as Kafka prints an entity
_JAVA_ORDER = {CLIENT_ID: 0, USER: 1, IP: 2}


def entity_text(components: Iterable[tuple[str, str | None]]) -> str:
    """An entity as Kafka names it in its error messages: ``ClientQuotaEntity(entries={user=null})``."""
    entries = sorted(dict(components).items(), key=lambda kv: (_JAVA_ORDER.get(kv[0], 3), kv[0]))
    return "ClientQuotaEntity(entries={%s})" % ", ".join(
        f"{kind}={'null' if name is None else name}" for kind, name in entries)


def _keys_for(entity: Entity) -> dict[str, bool]:
    return _IP_KEYS if entity[0][0] == IP else _CLIENT_KEYS


class ClientQuotaStore:
    FILE = "client-quotas.json"
    VERSION = 1

    def __init__(self, data_dir: Path, document=None):
        """``document``: cluster mode's copy every broker shares (read() -> dict | None,
        write(dict), name), instead of the file in the data directory."""
        self.path = Path(data_dir) / self.FILE
        self.document = document
        self._quotas: dict[Entity, dict[str, float]] = self._read()
        self._keys = self._keys_set()  # every key some entity sets: the hot path's "nothing to do"

    def _keys_set(self) -> frozenset[str]:
        return frozenset(k for q in self._quotas.values() for k in q)

    def _read(self) -> dict[Entity, dict[str, float]]:
        try:
            doc = json.loads(self.path.read_text()) if self.document is None else (self.document.read() or {})
            out = {}
            for item in doc.get("entities", []):
                values = {k: float(v) for k, v in item.get("quotas", {}).items()}
                if values:
                    out[tuple(sorted(item["entity"].items()))] = values
            return out
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # written atomically, so a hand edit
            where = self.path if self.document is None else self.document.name
            log.error("%s is unreadable (%s): no client quotas apply until it is fixed or rewritten", where, exc)
            return {}

    def reload(self) -> None:
        """Cluster mode: another broker rewrote the shared document."""
        self._quotas = self._read()
        self._keys = self._keys_set()

    def _write(self, quotas: dict[Entity, dict[str, float]]) -> None:
        doc = {"version": self.VERSION, "entities": [{"entity": dict(e), "quotas": q}
                                                     for e, q in sorted(quotas.items(), key=repr)]}
        if self.document is not None:
            self.document.write(doc)
            return
        write_atomic(self.path, json.dumps(doc, indent=1).encode())

    # --- KIP-546 ---------------------------------------------------------------------
    def entries(self) -> dict[Entity, dict[str, float]]:
        return {e: dict(q) for e, q in self._quotas.items()}

    def describe(self, components: Iterable[tuple[str, int, str | None]], strict: bool
                 ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities a DescribeClientQuotas filter selects, with their values (Kafka's rules)."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for kind, match_type, match in components:
            if not kind:
                raise QuotaError("Invalid empty entity type.")
            if kind in exact or kind in specified:
                raise QuotaError(f"Entity type {kind} cannot appear more than once in the filter.")
            if kind not in (USER, CLIENT_ID, IP):
                raise QuotaError(f"Unsupported entity type {kind}", unsupported=True)
            if match_type == MATCH_EXACT:
                if match is None:
                    raise QuotaError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[kind] = match
            elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
                if match is not None:
                    which = "DEFAULT" if match_type == MATCH_DEFAULT else "SPECIFIED"
                    raise QuotaError(f"Request specified MATCH_TYPE_{which}, but also specified a match string.")
                if match_type == MATCH_DEFAULT:
                    exact[kind] = None
                else:
                    specified.add(kind)
            else:
                raise QuotaError(f"Unknown match type {match_type}")
        if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (set(exact) | specified)):
            raise QuotaError("Invalid entity filter component combination. IP filter component should not be "
                             "used with user or clientId filter component.")
        if strict and not exact and not specified:
            return []
        out = []
        for entity, values in self._quotas.items():
            names = dict(entity)
            if any(kind not in names or names[kind] != name for kind, name in exact.items()):
                continue
            if any(kind not in names or names[kind] is None for kind in specified):
                continue
            if strict and len(names) != len(exact) + len(specified):
                continue
            out.append((entity, dict(values)))
        return out

    def alter(self, alterations: Iterable[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
              validate_only: bool) -> list[tuple[list[tuple[str, str | None]], str | None]]:
        """Apply each (components, [(key, value, remove)]) alteration; answer (components, error
        message or None) once per entity, as Kafka's controller does: an entity named again is
        answered "Ignoring duplicate entity" (what its first alteration changed stays changed).

        An entity with any invalid op is left as it was; the others change (and the file is
        rewritten once) unless ``validate_only``. Raises OSError, changing nothing, if the file
        cannot be written."""
        results: dict[frozenset, tuple[list[tuple[str, str | None]], str | None]] = {}
        staged: dict[Entity, dict[str, float]] = {}
        for components, ops in alterations:
            key = frozenset(components)
            if key in results:
                results[key] = (results[key][0], f"Ignoring duplicate entity {entity_text(components)}")
                continue
            try:
                entity = entity_of(components)
                staged[entity] = self._altered(entity, ops)
                results[key] = (components, None)
            except QuotaError as exc:
                results[key] = (components, str(exc))
        if not validate_only and staged:
            quotas = dict(self._quotas)
            for entity, values in staged.items():
                if values:
                    quotas[entity] = values
                else:
                    quotas.pop(entity, None)
            self._write(quotas)  # first: if it fails (OSError) nothing has changed
            self._quotas = quotas
            self._keys = self._keys_set()
        return list(results.values())

    def _altered(self, entity: Entity, ops: list[tuple[str, float, bool]]) -> dict[str, float]:
        valid = _keys_for(entity)
        values = dict(self._quotas.get(entity, {}))
        names = [key for key, _value, _remove in ops]
        if len(set(names)) < len(names):  # Kafka notes the key, then answers the entity as named twice
            raise QuotaError(f"Ignoring duplicate entity {entity_text(entity)}")
        for key, value, remove in ops:  # Kafka's checks and messages, in its order
            if remove:
                values.pop(key, None)
                continue
            if key not in valid:
                raise QuotaError(f"Invalid configuration key {key}")
            if not math.isfinite(value):
                raise QuotaError(f"Quota {key} must be a finite number")
            if value <= 0:
                raise QuotaError(f"Quota {key} must be greater than 0")
            if valid[key] and value > _LONG_MAX:
                raise QuotaError(f"Proposed value for {key} is too large for a LONG.")
            if valid[key] and value != int(value):
                raise QuotaError(f"{key} cannot be a fractional value.")
            values[key] = float(value)
        return values

    # --- enforcement -----------------------------------------------------------------
    def has(self, key: str) -> bool:
        """Whether any entity sets ``key`` (nothing to enforce otherwise)."""
        return key in self._keys

    def byte_rate(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(quota, bucket) for ``key`` of this user and client id, or None when no quota applies."""
        candidates = (
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        )
        for entity, bucket in candidates:
            value = self._quotas.get(entity, {}).get(key)
            if value is not None:
                return value, bucket
        return None
