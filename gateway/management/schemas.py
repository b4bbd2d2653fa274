"""Request bodies of the management API: parsed with depth and number limits, then checked
against one schema per endpoint that types every field as RabbitMQ does. A body that does not
fit is refused with 400 ``bad_request`` naming the field, before any handler sees it, so a
handler never meets a list where it expects an object (or an infinite number) and fails with
500. Fields a schema does not name are left alone, as RabbitMQ ignores them.
"""
from __future__ import annotations

import json
import math
from typing import Any

from gateway.management.errors import ApiError, bad

MAX_DEPTH = 64  # definitions files nest about 5 deep; a few thousand levels would blow the stack
MAX_INT = 2 ** 63 - 1  # RabbitMQ's numbers that matter here are signed 64-bit at most


class Kind:
    """A field's type: ``name`` is how an error names it; ``check(value)`` says whether it fits."""

    def __init__(self, name: str, check, openapi: dict):
        self.name, self.check, self.openapi = name, check, openapi


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -MAX_INT - 1 <= v <= MAX_INT


STR = Kind("a string", lambda v: isinstance(v, str), {"type": "string"})
INT = Kind("a whole number", _is_int, {"type": "integer", "format": "int64"})
# rabbitmqadmin sends flags as the strings "true"/"false"; RabbitMQ's API takes both forms
BOOL = Kind("a boolean", lambda v: isinstance(v, bool) or (isinstance(v, str) and v.lower() in ("true", "false")),
            {"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["true", "false"]}]})
OBJ = Kind("an object", lambda v: isinstance(v, dict), {"type": "object"})
STR_LIST = Kind("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                {"type": "array", "items": {"type": "string"}})
TAGS = Kind("a comma-separated string or a list of strings",
            lambda v: isinstance(v, str) or STR_LIST.check(v),
            {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})
DELIVERY_MODE = Kind("1 or 2", lambda v: _is_int(v) and v in (1, 2), {"type": "integer", "enum": [1, 2]})
PRIORITY = Kind("a whole number from 0 to 255", lambda v: _is_int(v) and 0 <= v <= 255,
                {"type": "integer", "minimum": 0, "maximum": 255})
# rabbitmqadmin sends some numbers as text ("count=5"); RabbitMQ parses those
INT_TEXT = Kind("a whole number", lambda v: _is_int(v) or (isinstance(v, str) and v.lstrip("-").isdigit()
                                                            and len(v) < 20),
                {"oneOf": [{"type": "integer"}, {"type": "string", "pattern": "^-?[0-9]{1,19}$"}]})
COUNT = Kind("a whole number of at least 0", lambda v: INT_TEXT.check(v) and int(v) >= 0,
             {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]{1,18}$"}]})
NULLABLE_INT = Kind("a whole number", lambda v: v is None or v == "" or INT_TEXT.check(v),
                    {"oneOf": [{"type": "integer"}, {"type": "string", "enum": [""]}], "nullable": True})

PARTITIONS = Kind("a whole number from 1 to 10000", lambda v: _is_int(v) and 1 <= v <= 10_000,
                  {"type": "integer", "minimum": 1, "maximum": 10_000})

# RabbitMQ decodes an empty JSON array as an empty argument table (pyrabbit2 sends one); any
# other array is refused
ARGUMENTS = Kind("an object", lambda v: isinstance(v, dict) or v == [], {"oneOf": [
    {"type": "object"}, {"type": "array", "maxItems": 0}]})
ARGS = {"arguments": ARGUMENTS}
PROPERTIES = {  # AMQP basic properties as the publish endpoint takes them
    "content_type": STR, "content_encoding": STR, "headers": OBJ, "delivery_mode": DELIVERY_MODE,
    "priority": PRIORITY, "correlation_id": STR, "reply_to": STR, "expiration": STR, "message_id": STR,
    "timestamp": INT, "type": STR, "user_id": STR, "app_id": STR, "cluster_id": STR,
}
# Policy keys whose value RabbitMQ's policy validators require to be a whole number.
POLICY_INTS = ("max-length", "max-length-bytes", "message-ttl", "expires", "delivery-limit", "max-age-seconds",
               "stream-max-segment-size-bytes", "initial-cluster-size", "ha-sync-batch-size", "queue-version",
               "delayed-retry-min", "delayed-retry-max")
POLICY_STRS = ("overflow", "queue-mode", "dead-letter-exchange", "dead-letter-routing-key", "ha-mode",
               "ha-sync-mode", "ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator",
               "queue-leader-locator", "max-age", "alternate-exchange", "federation-upstream-set",
               "dead-letter-strategy", "delayed-retry-type")
POLICY = {"pattern": STR, "definition": OBJ, "priority": INT_TEXT, "apply-to": STR}
QUEUE = {"durable": BOOL, "auto_delete": BOOL, "exclusive": BOOL, **ARGS, "queue_type": STR, "node": STR}
EXCHANGE = {"type": STR, "durable": BOOL, "auto_delete": BOOL, "internal": BOOL, **ARGS}
BINDING = {"routing_key": STR, **ARGS}
VHOST = {"description": STR, "tags": TAGS, "default_queue_type": STR, "tracing": BOOL}
USER = {"password": STR, "password_hash": STR, "hashing_algorithm": STR, "tags": TAGS}
PERMISSION = {"configure": STR, "write": STR, "read": STR}
# A definitions file: each list's entries typed as the endpoint that makes one would type them.
DEFINITIONS = {
    "users": [{"name": STR, **USER}], "vhosts": [{"name": STR, **VHOST}],
    "permissions": [{"user": STR, "vhost": STR, **PERMISSION}],
    "topic_permissions": [{"user": STR, "vhost": STR, "exchange": STR, "write": STR, "read": STR}],
    "queues": [{"name": STR, "vhost": STR, **QUEUE}], "exchanges": [{"name": STR, "vhost": STR, **EXCHANGE}],
    "bindings": [{"source": STR, "vhost": STR, "destination": STR, "destination_type": STR, **BINDING}],
    "policies": [{"name": STR, "vhost": STR, **POLICY}],
    "parameters": [{"name": STR, "vhost": STR, "component": STR, "value": OBJ}],
    "global_parameters": [{"name": STR}],
}

# The body of every endpoint that takes one: a field -> Kind, a nested schema (dict) or a list
# of one schema (a JSON array of such objects).
BODIES: dict[tuple[str, str], dict] = {
    ("PUT", "queues/*/*"): QUEUE,
    ("POST", "queues/*/*/get"): {"count": COUNT, "ackmode": STR, "encoding": STR, "truncate": NULLABLE_INT},
    ("PUT", "exchanges/*/*"): EXCHANGE,
    ("POST", "exchanges/*/*/publish"): {"routing_key": STR, "payload": STR, "payload_encoding": STR,
                                        "properties": PROPERTIES},
    ("POST", "bindings/*/e/*/*/*"): BINDING,
    ("PUT", "vhosts/*"): VHOST,
    ("PUT", "users/*"): USER,
    ("POST", "users/bulk-delete"): {"users": STR_LIST},
    ("PUT", "permissions/*/*"): PERMISSION,
    ("PUT", "policies/*/*"): POLICY,
    ("PUT", "operator-policies/*/*"): POLICY,
    ("PUT", "vhost-limits/*/*"): {"value": INT_TEXT},
    ("PUT", "parameters/*/*/*"): {"component": STR, "vhost": STR, "name": STR, "value": OBJ},
    ("PUT", "cluster-name"): {"name": STR},
    ("PUT", "topics/*"): {"partitions": PARTITIONS, "configs": OBJ},
    ("POST", "definitions"): DEFINITIONS,
    ("POST", "definitions/*"): DEFINITIONS,
}
BY_PATTERN = {(m, tuple(p.split("/"))): schema for (m, p), schema in BODIES.items()}


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 19:
        raise ValueError(f"the number {text[:24]}... is out of range")
    return int(text)


def parse(raw: bytes) -> Any:
    """JSON with finite numbers of at most 64 bits and at most MAX_DEPTH levels; else 400."""
    try:  # json's C scanner raises RecursionError on a very deep document rather than crashing
        doc = json.loads(raw, parse_float=_finite, parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError:
        raise bad(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise bad(f"the request body is not JSON: {exc}") from None
    stack = [(doc, 1)]
    while stack:  # iterative: the handlers and the schema walk below recurse over what is left
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                raise bad(f"the request body nests deeper than {MAX_DEPTH} levels")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return doc


def check(method: str, pattern: tuple[str, ...], body: dict) -> None:
    schema = BY_PATTERN.get((method, pattern))
    if schema is not None:
        _check_object(body, schema, "")
    if method == "PUT" and pattern[0] in ("policies", "operator-policies") and isinstance(body.get("definition"), dict):
        _check_definition(body["definition"], "definition")
    if pattern[0] == "definitions":
        for i, p in enumerate(body.get("policies") or []):
            if isinstance(p.get("definition"), dict):
                _check_definition(p["definition"], f"policies[{i}].definition")


def _check_definition(definition: dict, where: str) -> None:
    for key, value in definition.items():
        if key in POLICY_INTS and not _is_int(value):
            raise _field(f"{where}.{key}", INT)
        if key in POLICY_STRS and not isinstance(value, str):
            raise _field(f"{where}.{key}", STR)


def _check_object(doc: dict, schema: dict, prefix: str) -> None:
    for name, kind in schema.items():
        if name not in doc or (doc[name] is None and kind is not NULLABLE_INT):
            continue
        value, where = doc[name], prefix + name
        if isinstance(kind, Kind):
            if not kind.check(value):
                raise _field(where, kind)
        elif isinstance(kind, list):
            if not isinstance(value, list):
                raise bad(f"'{where}' must be a list of objects")
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    raise bad(f"'{where}[{i}]' must be an object")
                _check_object(item, kind[0], f"{where}[{i}].")
        else:
            if not isinstance(value, dict):
                raise bad(f"'{where}' must be an object")
            _check_object(value, kind, where + ".")


def _field(where: str, kind: Kind) -> ApiError:
    return bad(f"'{where}' must be {kind.name}")
