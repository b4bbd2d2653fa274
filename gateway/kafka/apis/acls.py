"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) over :mod:`gateway.security.acl`.

Without an authorizer (``--authorizer none``, the default) they answer SECURITY_DISABLED, as
Kafka does. Creating and deleting need ALTER on the cluster, describing needs DESCRIBE.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from gateway.logs import fields
from gateway.security.acl import (
    OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES, CLUSTER_NAME, AclBinding, AclFilter, code_of, validate,
)
from wire.kafka import respond

log = logging.getLogger(__name__)

DISABLED = "No Authorizer is configured on the broker (start it with --authorizer acl)"


def _allowed(ctx, conn, operation: str) -> bool:
    ok = ctx.authorizer.authorize(f"User:{conn.principal_name}", conn.peer_host, operation, "cluster", CLUSTER_NAME)
    if not ok:
        log.warning("Kafka request denied", extra=fields(peer=conn.peer, conn=conn.conn_id, principal=f"User:{conn.principal_name}",
                                                        operation=operation, resource=f"cluster:{CLUSTER_NAME}"))
    return ok


def _binding(c) -> AclBinding:
    return AclBinding(RESOURCE_TYPES.get(c.resource_type, "unknown"), c.resource_name,
                      PATTERN_TYPES.get(getattr(c, "resource_pattern_type", 3), "unknown"), c.principal, c.host,
                      OPERATIONS.get(c.operation, "unknown"), PERMISSIONS.get(c.permission_type, "unknown"))


def _filter(f) -> AclFilter:
    return AclFilter(RESOURCE_TYPES.get(f.resource_type_filter, "unknown"), f.resource_name_filter,
                     PATTERN_TYPES.get(getattr(f, "pattern_type_filter", 3), "unknown"), f.principal_filter,
                     f.host_filter, OPERATIONS.get(f.operation, "unknown"),
                     PERMISSIONS.get(f.permission_type, "unknown"))


def _filter_problem(f: AclFilter) -> str | None:
    if "unknown" in (f.resource_type, f.pattern_type, f.operation, f.permission):
        return "invalid ACL filter"
    return None


def _wire(b: AclBinding) -> dict:
    return {"resource_type": code_of(RESOURCE_TYPES, b.resource_type), "resource_name": b.resource_name,
            "pattern_type": code_of(PATTERN_TYPES, b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": code_of(OPERATIONS, b.operation), "permission_type": code_of(PERMISSIONS, b.permission)}


@handles(30)
def create_acls(ctx, conn, h, req):
    authorizer = getattr(ctx, "authorizer", None)
    results = []
    if authorizer is None:
        results = [{"error_code": ErrorCode.security_disabled, "error_message": DISABLED} for _ in req.creations]
    elif not _allowed(ctx, conn, "alter"):
        results = [{"error_code": ErrorCode.cluster_authorization_failed,
                    "error_message": "Cluster authorization failed."} for _ in req.creations]
    else:
        valid = []
        for creation in req.creations:
            binding = _binding(creation)
            problem = validate(binding)
            results.append({"error_code": ErrorCode.invalid_request if problem else ErrorCode.none,
                            "error_message": problem})
            if problem is None:
                valid.append(binding)
        if valid:
            try:
                authorizer.create(valid)
            except OSError as exc:  # cluster mode: another broker changed the ACLs at the same moment
                for result in results:
                    if result["error_code"] == ErrorCode.none:
                        result.update(error_code=ErrorCode.unknown_server_error, error_message=str(exc))
                return respond(h, {"throttle_time": 0, "results": results})
            for b in valid:
                log.info("ACL created", extra=fields(principal=f"User:{conn.principal_name}", acl=str(_wire(b))))
    return respond(h, {"throttle_time": 0, "results": results})


@handles(29)
def describe_acls(ctx, conn, h, req):
    authorizer = getattr(ctx, "authorizer", None)
    base = {"throttle_time": 0, "error_message": None, "resources": []}
    if authorizer is None:
        return respond(h, {**base, "error_code": ErrorCode.security_disabled, "error_message": DISABLED})
    if not _allowed(ctx, conn, "describe"):
        return respond(h, {**base, "error_code": ErrorCode.cluster_authorization_failed,
                           "error_message": "Cluster authorization failed."})
    f = _filter(req)
    problem = _filter_problem(f)
    if problem:
        return respond(h, {**base, "error_code": ErrorCode.invalid_request, "error_message": problem})
    grouped: dict[tuple, list] = {}
    for b in authorizer.describe(f):
        grouped.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    resources = [{"resource_type": code_of(RESOURCE_TYPES, rt), "resource_name": name,
                  "pattern_type": code_of(PATTERN_TYPES, pt),
                  "acls": [{k: v for k, v in _wire(b).items() if k in ("principal", "host", "operation",
                                                                       "permission_type")} for b in bindings]}
                 for (rt, name, pt), bindings in grouped.items()]
    return respond(h, {**base, "error_code": ErrorCode.none, "resources": resources})


@handles(31)
def delete_acls(ctx, conn, h, req):
    authorizer = getattr(ctx, "authorizer", None)
    if authorizer is None or not _allowed(ctx, conn, "alter"):
        code = ErrorCode.security_disabled if authorizer is None else ErrorCode.cluster_authorization_failed
        message = DISABLED if authorizer is None else "Cluster authorization failed."
        return respond(h, {"throttle_time": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in req.filters]})
    filters = [_filter(f) for f in req.filters]
    problems = [_filter_problem(f) for f in filters]
    try:
        deleted = authorizer.delete([f for f, p in zip(filters, problems) if p is None])
    except OSError as exc:  # cluster mode: another broker changed the ACLs at the same moment
        return respond(h, {"throttle_time": 0, "filter_results": [
            {"error_code": ErrorCode.invalid_request if p else ErrorCode.unknown_server_error,
             "error_message": p or str(exc), "matching_acls": []} for p in problems]})
    results, it = [], iter(deleted)
    for problem in problems:
        if problem:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": problem, "matching_acls": []})
            continue
        gone = next(it)
        for b in gone:
            log.info("ACL deleted", extra=fields(principal=f"User:{conn.principal_name}", acl=str(_wire(b))))
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None, **_wire(b)} for b in gone]})
    return respond(h, {"throttle_time": 0, "filter_results": results})
