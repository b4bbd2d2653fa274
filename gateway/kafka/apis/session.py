"""ApiVersions and SASL: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against the user store.

A failed authentication is answered with SASL_AUTHENTICATION_FAILED and the connection is
closed after that answer, as Kafka does. Only SaslHandshake v1 with SaslAuthenticate is
served (the v0 handshake's raw token framing is not).
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from gateway.kafka.apis import handles
from gateway.logs import fields
from gateway.security.scram import MECHANISMS, ScramError, ScramServer
from wire.kafka import ADVERTISED, RequestHeader, build, encode_response, respond, response_class

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("PLAIN", *MECHANISMS)

_API_LIST = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(ADVERTISED.items())]


@handles(18)
def api_versions(ctx, conn, h, req):
    return respond(h, {"error_code": ErrorCode.none, "api_keys": _API_LIST, "throttle_time": 0})


def api_versions_unsupported(h: RequestHeader) -> bytes:
    # KIP-511: answer in v0 (which every client can read) with the list, so it can pick a version.
    v0 = RequestHeader(h.api_key, 0, h.correlation_id, h.client_id, False)
    return encode_response(v0, build(response_class(18, 0), {"error_code": ErrorCode.unsupported_version,
                                                             "api_keys": _API_LIST}))


@handles(17)
def sasl_handshake(ctx, conn, h, req):
    mechanism = req.mechanism.upper()
    if conn.sasl_mechanism is not None:
        return respond(h, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": list(SASL_MECHANISMS)})
    ok = mechanism in SASL_MECHANISMS
    if ok:
        conn.sasl_mechanism = mechanism
    else:
        log.warning("Kafka SASL mechanism not supported", extra=fields(peer=conn.peer, conn=conn.conn_id, mechanism=req.mechanism))
    return respond(h, {"error_code": ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
                       "mechanisms": list(SASL_MECHANISMS)})


def _sasl_answer(h, token: bytes = b"", error: ErrorCode = ErrorCode.none, message: str | None = None) -> bytes:
    return respond(h, {"error_code": error, "error_message": message, "auth_bytes": token, "session_lifetime": 0})


def _sasl_failed(conn, h, user: str | None, reason: str) -> bytes:
    """Kafka's answer to a failed authentication: SASL_AUTHENTICATION_FAILED, then the connection closes."""
    log.warning("Kafka SASL authentication failed: %s", reason,
                extra=fields(peer=conn.peer, conn=conn.conn_id, user=user, mechanism=conn.sasl_mechanism))
    conn.close_after_response = True
    return _sasl_answer(h, error=ErrorCode.sasl_authentication_failed,
                        message=f"Authentication failed during authentication due to invalid credentials "
                                f"with SASL mechanism {conn.sasl_mechanism}")


def _authenticated(ctx, conn, h, user: str, token: bytes = b"") -> bytes:
    limit = ctx.max_connections_per_user
    if limit and sum(1 for c in ctx.connections if c.principal == user and c is not conn) >= limit:
        return _sasl_failed(conn, h, user, f"user connection limit ({limit}) is reached")
    conn.principal = user
    conn.sasl_state = None
    conn.sasl_done = True
    log.info("Kafka client authenticated", extra=fields(peer=conn.peer, conn=conn.conn_id, user=user, mechanism=conn.sasl_mechanism))
    return _sasl_answer(h, token)


@handles(36)
def sasl_authenticate(ctx, conn, h, req):
    token = bytes(req.auth_bytes)
    mechanism = conn.sasl_mechanism
    users = ctx.users
    if mechanism is None or conn.sasl_done:
        return _sasl_answer(h, error=ErrorCode.illegal_sasl_state,
                            message="SaslAuthenticate must follow one SaslHandshake naming a mechanism")
    users.maybe_reload()
    if mechanism == "PLAIN":
        parts = token.split(b"\0")
        if len(parts) != 3:
            return _sasl_failed(conn, h, None, "malformed PLAIN message")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            return _sasl_failed(conn, h, user, "authorization id differs from the user name")
        reason = users.authenticate(user, password, conn.peer_host)
        if reason is not None:
            return _sasl_failed(conn, h, user, reason)
        return _authenticated(ctx, conn, h, user)
    scram = conn.sasl_state
    try:
        if scram is None:
            scram = conn.sasl_state = ScramServer(mechanism, lambda name: users.scram_credential(name, mechanism))
            return _sasl_answer(h, scram.client_first(token))
        final = scram.client_final(token)
    except ScramError as exc:
        return _sasl_failed(conn, h, scram.username, str(exc))
    if users.loopback_refused(scram.username, conn.peer_host):
        return _sasl_failed(conn, h, scram.username, f"user '{scram.username}' can only connect via localhost")
    return _authenticated(ctx, conn, h, scram.username, final)
