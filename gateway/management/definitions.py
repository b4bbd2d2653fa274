"""Definitions: the broker's objects as one JSON document, in RabbitMQ's format.

``GET /api/definitions`` exports users (with RabbitMQ password hashes), vhosts, permissions,
runtime parameters (vhost limits, operator policies), policies, queues, exchanges and
bindings, plus ``topics`` (Kafka topics with their partition counts and configs) that
RabbitMQ does not have and ignores. ``POST /api/definitions`` imports such a document (one
exported by RabbitMQ too); ``/api/definitions/{vhost}`` does the same for one vhost, whose
objects carry no ``vhost`` key. ``gateway serve --definitions FILE`` imports a file at
start-up, as RabbitMQ's ``load_definitions``.

Import creates what is missing and updates what exists (users' tags and hashes, policies,
limits); a declaration that conflicts with an existing object (another exchange type, other
queue arguments) is refused with RabbitMQ's error, and what was imported before it stays.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from gateway.amqp.service import broker_version
from gateway.logs import fields
from gateway.management import views
from gateway.management.errors import ApiError, bad
from routing.errors import ChannelError, ConnectionError
from routing.vhost import DEFAULT_EXCHANGES

log = logging.getLogger(__name__)

_DEFAULT_EXCHANGES = frozenset(name for name, _ in DEFAULT_EXCHANGES) | {""}


class _DefinitionsOwner:
    """The owner of queues declared by an import: never exclusive, never a connection."""


OWNER = _DefinitionsOwner()


# --- export ----------------------------------------------------------------------------------

def _vhost_objects(v, with_vhost: bool) -> dict[str, list]:
    tag = {"vhost": v.name} if with_vhost else {}
    queues = [{"name": q.name, **tag, "durable": q.durable, "auto_delete": q.auto_delete,
               "arguments": views.jsonable(q.arguments)}
              for q in sorted(v.queues.values(), key=lambda q: q.name) if q.exclusive_owner is None]
    exchanges = [{"name": x.name, **tag, "type": x.type_name, "durable": x.durable, "auto_delete": x.auto_delete,
                  "internal": x.internal, "arguments": views.jsonable(x.arguments)}
                 for x in sorted(v.exchanges.values(), key=lambda x: x.name) if x.name not in _DEFAULT_EXCHANGES]
    exclusive = {q.name for q in v.queues.values() if q.exclusive_owner is not None}
    bindings = [{k: b[k] for k in ("source", "vhost", "destination", "destination_type", "routing_key", "arguments")
                 if with_vhost or k != "vhost"}
                for b in views.bindings(v) if b["source"] and not
                (b["destination_type"] == "queue" and b["destination"] in exclusive)]
    policies = [{**tag, "name": name, **p} for name, p in sorted(v.policies.items())]
    parameters = [{"value": dict(v.limits), **tag, "component": "vhost-limits", "name": "limits"}] if v.limits else []
    parameters += [{"value": dict(p), **tag, "component": "operator_policy", "name": name}
                   for name, p in sorted(v.operator_policies.items())]
    return {"parameters": parameters, "policies": policies, "queues": queues, "exchanges": exchanges,
            "bindings": bindings}


def _header() -> dict:
    version = broker_version()
    return {"rabbit_version": version, "rabbitmq_version": version, "product_name": "gateway",
            "product_version": version}


def export_definitions(broker, vhost=None) -> dict:
    if vhost is not None:
        return {**_header(), **_vhost_objects(vhost, False)}
    users = broker.users
    users.maybe_reload()
    doc: dict[str, Any] = {
        **_header(),
        "users": [{"name": u.name, "password_hash": u.password_hash, "hashing_algorithm": u.hashing_algorithm,
                   "tags": list(u.tags), "limits": {}} for u in sorted(users.users.values(), key=lambda u: u.name)],
        "vhosts": [], "permissions": [], "topic_permissions": [],
        "parameters": [], "global_parameters": [{"name": "cluster_name", "value": broker.amqp.cluster_name}],
        "policies": [], "queues": [], "exchanges": [], "bindings": [],
    }
    for v in sorted(broker.amqp.router.vhosts.values(), key=lambda v: v.name):
        meta = v.metadata
        doc["vhosts"].append({"name": v.name, "description": meta.get("description", ""),
                              "tags": list(meta.get("tags", [])), "limits": [],
                              "metadata": {"description": meta.get("description", ""),
                                           "tags": list(meta.get("tags", []))}})
        for key, items in _vhost_objects(v, True).items():
            doc[key].extend(items)
    doc["permissions"] = [{"user": u.name, "vhost": name, **p.to_json()}
                          for u in sorted(users.users.values(), key=lambda u: u.name)
                          for name, p in sorted(u.permissions.items())]
    doc["topics"] = _topics(broker)
    return doc


def _topics(broker) -> list[dict]:
    """Kafka topics that are neither internal nor the storage of an AMQP queue or exchange log."""
    backing = {q.topic for v in broker.amqp.router.vhosts.values() for q in v.queues.values()}
    backing |= {x.topic for v in broker.amqp.router.vhosts.values()
                for x in (*v.exchange_logs.values(), *v.delay_logs.values())}
    return [{"name": md.name, "partitions": md.partitions, "configs": dict(md.configs)}
            for md in sorted(broker.kafka.logs.store.topics().values(), key=lambda md: md.name)
            if md.name not in backing and not md.name.startswith("__")]


# --- import ----------------------------------------------------------------------------------

def _items(doc: dict, key: str) -> list[dict]:
    items = doc.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise bad(f"definitions: '{key}' must be a list of objects")
    return items


def _need(item: dict, key: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise bad(f"definitions: every {what} needs a '{key}' (text); got {json.dumps(item)[:200]}")
    return value


def _flag(item: dict, key: str, default: bool) -> bool:
    value = item.get(key, default)
    return value.lower() == "true" if isinstance(value, str) else bool(value)


def import_definitions(broker, doc: Any, vhost_name: str | None = None) -> dict[str, int]:
    """Apply ``doc``; returns counts per kind (for the log). ``vhost_name``: a one-vhost document."""
    if not isinstance(doc, dict):
        raise bad("definitions must be a JSON object")
    router, users = broker.amqp.router, broker.users
    counts: dict[str, int] = {}

    def where(item: dict) -> str:
        return vhost_name if vhost_name is not None else str(item.get("vhost", "/"))

    def vhost_of(item: dict):
        name = where(item)
        v = router.vhosts.get(name)
        if v is None:
            raise bad(f"definitions: vhost '{name}' does not exist (list it under 'vhosts')")
        return v

    with router.definitions_batch():
        if vhost_name is None:
            for u in _items(doc, "users"):
                _import_user(users, u)
            for item in _items(doc, "vhosts"):
                name = _need(item, "name", "vhost")
                v = router.vhost_create(name)
                meta = item.get("metadata") or {}
                tags = item.get("tags", meta.get("tags", []))
                v.metadata = {"description": str(item.get("description", meta.get("description", ""))),
                              "tags": [t for t in (tags.split(",") if isinstance(tags, str) else tags) if t],
                              "default_queue_type": str(item.get("default_queue_type", "undefined"))}
            for p in _items(doc, "permissions"):
                users.set_permissions(_need(p, "user", "permission"), _need(p, "vhost", "permission"),
                                      str(p.get("configure", "")), str(p.get("write", "")), str(p.get("read", "")))
            for g in _items(doc, "global_parameters"):
                if g.get("name") == "cluster_name" and isinstance(g.get("value"), str):
                    broker.amqp.cluster_name = g["value"]
        for p in _items(doc, "parameters"):
            v, component = vhost_of(p), p.get("component")
            value = p.get("value") or {}
            if component == "vhost-limits" and isinstance(value, dict):
                for limit, amount in value.items():
                    v.set_limit(limit, int(amount))
            elif component == "operator_policy" and isinstance(value, dict):
                v.set_policy(_need(p, "name", "operator policy"), str(value.get("pattern", "")),
                             dict(value.get("definition") or {}), int(value.get("priority", 0)),
                             str(value.get("apply-to", "all")), operator=True)
            else:
                log.warning("definitions: parameter skipped, this broker has no such component",
                            extra=fields(component=component, name=p.get("name"), vhost=where(p)))
        for p in _items(doc, "policies"):
            vhost_of(p).set_policy(_need(p, "name", "policy"), _need(p, "pattern", "policy"),
                                   dict(p.get("definition") or {}), int(p.get("priority", 0)),
                                   str(p.get("apply-to", "all")))
        for x in _items(doc, "exchanges"):
            vhost_of(x).declare_exchange(_need(x, "name", "exchange"), _need(x, "type", "exchange"),
                                         durable=_flag(x, "durable", True), auto_delete=_flag(x, "auto_delete", False),
                                         internal=_flag(x, "internal", False), arguments=x.get("arguments") or {})
        for q in _items(doc, "queues"):
            vhost_of(q).declare_queue(_need(q, "name", "queue"), owner=OWNER, durable=_flag(q, "durable", True),
                                      auto_delete=_flag(q, "auto_delete", False), arguments=q.get("arguments") or {})
        for b in _items(doc, "bindings"):
            v = vhost_of(b)
            source, dest = _need(b, "source", "binding"), _need(b, "destination", "binding")
            key, args = str(b.get("routing_key", "")), b.get("arguments") or {}
            if b.get("destination_type", "queue") == "queue":
                v.bind_queue(dest, source, key, args, OWNER)
            else:
                v.bind_exchange(dest, source, key, args)
        if vhost_name is None:
            store = broker.kafka.logs.store
            for t in _items(doc, "topics"):
                name = _need(t, "name", "topic")
                if store.get_topic(name) is None:
                    broker.kafka.logs.create_topic(name, int(t.get("partitions", 1)),
                                                   {str(k): str(val) for k, val in (t.get("configs") or {}).items()})
    for key in ("users", "vhosts", "permissions", "parameters", "policies", "exchanges", "queues", "bindings",
                "topics"):
        if doc.get(key):
            counts[key] = len(doc[key])
    broker.amqp.after_input()
    return counts


def _import_user(users, u: dict) -> None:
    name = _need(u, "name", "user")
    tags = u.get("tags", [])
    tags = [t.strip() for t in tags.split(",") if t.strip()] if isinstance(tags, str) else list(tags)
    password_hash = str(u.get("password_hash", ""))
    algorithm = str(u.get("hashing_algorithm") or "rabbit_password_hashing_sha256")
    existing = users.get(name)
    if existing is None:
        users.add_user(name, None)
    if existing is None or existing.password_hash != password_hash:  # our own export back: SCRAM stays
        if "password" in u:
            users.change_password(name, str(u["password"]))
        else:
            users.set_password_hash(name, password_hash, algorithm)
    users.set_tags(name, tags)


def load_file(broker, path: Path) -> None:
    """``--definitions FILE`` at start-up: a file that is missing or wrong stops the start
    (ValueError naming the file and the fault)."""
    try:
        counts = import_definitions(broker, json.loads(Path(path).read_text()))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot load definitions from {path}: {exc}") from None
    except ApiError as exc:
        raise ValueError(f"cannot load definitions from {path}: {exc.reason}") from None
    except (ChannelError, ConnectionError) as exc:
        raise ValueError(f"cannot load definitions from {path}: {exc.reply_text}") from None
    log.info("definitions loaded", extra=fields(file=str(path), **counts))


class Definitions:
    def __init__(self, api):
        self.api = api
        self.broker = api.broker

    def routes(self) -> list[tuple[str, tuple[str, ...], Callable]]:
        return [
            ("GET", ("definitions",), lambda user: self._export(None)),
            ("GET", ("definitions", "*"), lambda user, v: self._export(v)),
            ("POST", ("definitions",), lambda user, body: self._import(body, None)),
            ("POST", ("definitions", "*"), lambda user, v, body: self._import(body, self.api.vhost(v).name)),
        ]

    def _export(self, vhost: str | None) -> dict:
        self.api.vhost_home_check()
        return export_definitions(self.broker, self.api.vhost(vhost) if vhost is not None else None)

    def _import(self, body: dict, vhost: str | None) -> None:
        self.api.vhost_home_check()
        counts = import_definitions(self.broker, body, vhost)
        self.api.clear_auth_cache()
        log.info("definitions imported through the management API", extra=fields(vhost=vhost, **counts))
