"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) over the user store.

Alter sends ``SaltedPassword`` (the client ran PBKDF2); the broker derives StoredKey and
ServerKey from it and keeps those with the salt and iteration count, never the salted
password itself. A user that does not exist yet is created (with no AMQP permissions).
Errors are Kafka's: an empty name or an iteration count outside 4096-16384 is
UNACCEPTABLE_CREDENTIAL, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, a user altered twice
for one mechanism DUPLICATE_RESOURCE, deleting or describing a missing credential
RESOURCE_NOT_FOUND. Both need the Cluster resource's DESCRIBE / ALTER permission when an
authorizer is on.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from gateway.logs import fields
from gateway.security.scram import (
    MAX_ITERATIONS, MECHANISM_BY_ID, MECHANISMS, MIN_ITERATIONS, credential_from_salted_password,
)
from gateway.security.acl import CLUSTER_NAME
from gateway.security.users import User, UserStoreError
from wire.kafka import respond

log = logging.getLogger(__name__)


def _cluster_allowed(ctx, conn, operation: str) -> bool:
    authorizer = getattr(ctx, "authorizer", None)
    if authorizer is None:
        return True
    principal = f"User:{conn.principal_name}"
    if authorizer.authorize(principal, conn.peer_host, operation, "cluster", CLUSTER_NAME):
        return True
    log.warning("Kafka request denied", extra=fields(peer=conn.peer, conn=conn.conn_id, principal=principal, operation=operation,
                                                    resource=f"cluster:{CLUSTER_NAME}"))
    return False


@handles(50)
def describe_user_scram_credentials(ctx, conn, h, req):
    if not _cluster_allowed(ctx, conn, "describe"):
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                           "error_message": "Cluster authorization failed.", "results": []})
    users = ctx.users
    users.maybe_reload()
    names = [u.name for u in req.users or ()]
    results = []
    if not names:
        for name, user in sorted(users.users.items()):
            if user.scram:
                results.append(_describe(name, user))
    else:
        seen, duplicates = set(), {n for n in names if names.count(n) > 1}
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            user = users.get(name)
            if name in duplicates:
                results.append(_user_error(name, ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials "
                                                                               "for the same user twice in a single request"))
            elif user is None or not user.scram:
                results.append(_user_error(name, ErrorCode.resource_not_found,
                                           "Attempt to describe a user credential that does not exist"))
            else:
                results.append(_describe(name, user))
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "results": results})


def _describe(name: str, user: User) -> dict:
    infos = [{"mechanism": MECHANISMS[m][1], "iterations": c.iterations} for m, c in sorted(user.scram.items())]
    return {"user": name, "error_code": ErrorCode.none, "error_message": None, "credential_infos": infos}


def _user_error(name: str, code: ErrorCode, message: str) -> dict:
    return {"user": name, "error_code": code, "error_message": message, "credential_infos": []}


@handles(51)
def alter_user_scram_credentials(ctx, conn, h, req):
    order: list[str] = []
    changes: dict[str, list] = {}
    for item in list(req.deletions) + list(req.upsertions):
        if item.name not in changes:
            order.append(item.name)
            changes[item.name] = []
        changes[item.name].append(item)
    if not _cluster_allowed(ctx, conn, "alter"):
        return respond(h, {"throttle_time": 0, "results": [
            {"user": name, "error_code": ErrorCode.cluster_authorization_failed,
             "error_message": "Cluster authorization failed."} for name in order]})
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for name in order:
        error = _check(name, changes[name])
        if error is not None:
            errors[name] = error
    valid = [name for name in order if name not in errors]
    if valid:
        try:
            with ctx.users.editing() as users:
                for name in valid:
                    error = _apply(users, name, changes[name])
                    if error is not None:
                        errors[name] = error
        except (OSError, UserStoreError) as exc:
            log.error("SCRAM credentials not saved: %s", exc)
            for name in valid:
                errors.setdefault(name, (ErrorCode.unknown_server_error, "the user store could not be written"))
    results = []
    for name in order:
        code, message = errors.get(name, (ErrorCode.none, None))
        results.append({"user": name, "error_code": code, "error_message": message})
        if code == ErrorCode.none:
            log.info("SCRAM credentials altered", extra=fields(peer=conn.peer, conn=conn.conn_id, principal=conn.principal_name,
                                                                user=name))
    return respond(h, {"throttle_time": 0, "results": results})


def _is_upsertion(item) -> bool:
    return hasattr(item, "salted_password")


def _check(name: str, items: list) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    mechanisms = [item.mechanism for item in items]
    if len(set(mechanisms)) != len(mechanisms):
        return ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
    for item in items:
        if item.mechanism not in MECHANISM_BY_ID:
            return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
        if _is_upsertion(item):
            if item.iterations < MIN_ITERATIONS:
                return ErrorCode.unacceptable_credential, "Too few iterations"
            if item.iterations > MAX_ITERATIONS:
                return ErrorCode.unacceptable_credential, "Too many iterations"
            if not item.salt or not item.salted_password:
                return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None


def _apply(users: dict[str, User], name: str, items: list) -> tuple[ErrorCode, str] | None:
    user = users.get(name)
    for item in items:
        if not _is_upsertion(item) and (user is None or MECHANISM_BY_ID[item.mechanism] not in user.scram):
            return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
    if user is None:
        user = users[name] = User(name)
    for item in items:
        mechanism = MECHANISM_BY_ID[item.mechanism]
        if _is_upsertion(item):
            user.scram[mechanism] = credential_from_salted_password(
                mechanism, bytes(item.salt), item.iterations, bytes(item.salted_password))
        else:
            del user.scram[mechanism]
    return None
