"""The management API's OpenAPI 3 description, served at ``/api/openapi.json``.

Built from the tables the API itself runs on: the routes (and their rule in
:mod:`gateway.management.authz`) and the request schemas of :mod:`gateway.management.schemas`.
A route added without a rule fails at start-up, and a body schema is the same object the
validation layer checks, so the description cannot drift from what the API does.
"""
from __future__ import annotations

from gateway.management import authz, schemas

ERROR = {"type": "object", "properties": {"error": {"type": "string"}, "reason": {"type": "string"}}}


def _schema(spec) -> dict:
    if isinstance(spec, schemas.Kind):
        return dict(spec.openapi)
    if isinstance(spec, list):
        return {"type": "array", "items": _schema(spec[0])}
    return {"type": "object", "properties": {name: _schema(kind) for name, kind in spec.items()}}


def _path(method: str, pattern: tuple[str, ...]) -> tuple[str, list[dict]]:
    _, vhost_index = authz.RULES[(method, pattern)]
    parts, params, star, named = [], [], 0, 0
    for part in pattern:
        if part != "*":
            parts.append(part)
            continue
        if star == vhost_index:
            name = "vhost"
        else:
            named += 1
            name = "name" if named == 1 else f"name{named}"
        parts.append("{" + name + "}")
        params.append({"name": name, "in": "path", "required": True, "schema": {"type": "string"}})
        star += 1
    return "/api/" + "/".join(parts), params


def describe(routes) -> dict:
    paths: dict[str, dict] = {}
    for method, pattern, _ in routes:
        path, params = _path(method, pattern)
        rule, _ = authz.RULES[(method, pattern)]
        op = {
            "operationId": f"{method.lower()}_{'_'.join(p if p != '*' else 'x' for p in pattern)}",
            "description": f"who may call it: {rule} (gateway.management.authz)",
            "parameters": params,
            "responses": {str(code): {"description": text, "content": {"application/json": {"schema": ERROR}}}
                          for code, text in (("400", "bad request"), ("401", "not authorised"), ("404", "not found"))},
        }
        op["responses"].update({"200": {"description": "OK", "content": {"application/json": {"schema": {}}}},
                                "201": {"description": "created"}, "204": {"description": "done"}})
        if rule == authz.ANON:
            op["security"] = []
        body = schemas.BY_PATTERN.get((method, pattern))
        if method in ("PUT", "POST"):
            op["requestBody"] = {"required": False, "content": {"application/json": {
                "schema": _schema(body) if body is not None else {"type": "object"}}}}
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "gateway management API", "version": "1",
                 "description": "RabbitMQ-compatible management HTTP API of the gateway broker"},
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "security": [{"basic": []}],
        "paths": paths,
    }
