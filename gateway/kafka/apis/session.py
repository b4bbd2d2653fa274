"""ApiVersions and SASL: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against the user store, and
OAUTHBEARER (KIP-255) with a JWT checked by :mod:`gateway.security.oauth` when OAuth is configured.

A failed authentication is answered with SASL_AUTHENTICATION_FAILED and the connection is
closed after that answer, as Kafka does. Only SaslHandshake v1 with SaslAuthenticate is
served (the v0 handshake's raw token framing is not).

Re-authentication (KIP-368): an OAUTHBEARER login answers with the token's remaining lifetime
as ``session_lifetime_ms``; the client then authenticates again on the same connection (a new
SaslHandshake and SaslAuthenticate with the same mechanism and principal) before it runs out,
and :class:`gateway.kafka.connection.KafkaConnection` closes a connection whose session has
expired at its next other request.
"""
from __future__ import annotations

import logging
import time

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.registry import handles
from gateway.logs import fields
from gateway.security.oauth import TokenError, parse_oauthbearer
from gateway.security.scram import MECHANISMS, ScramError, ScramServer
from wire.kafka import ADVERTISED, KRAFT_ONLY, RequestHeader, build, encode_response, respond, response_class

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("PLAIN", *MECHANISMS)
OAUTHBEARER = "OAUTHBEARER"


def mechanisms(ctx) -> list[str]:
    """What SaslHandshake offers: OAUTHBEARER only when OAuth is configured (--oauth-jwks)."""
    return [*SASL_MECHANISMS, OAUTHBEARER] if getattr(ctx, "oauth", None) is not None else list(SASL_MECHANISMS)


_API_LIST = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(ADVERTISED.items())]
_CLUSTER_API_LIST = [api for api in _API_LIST if api["api_key"] not in KRAFT_ONLY]


# Feature flags (KIP-584), as Kafka 4 brokers list them: transaction.version 2 makes Kafka 4
# clients use transactions v2 (KIP-890: partitions added by producing, an epoch per transaction).
# Kafka leaves a feature whose lowest level is 0 out of the supported list below ApiVersions v4
# (older clients cannot read a 0 there); a finalized level is listed at every version from v3.
# streams.version 1 says KIP-1071 streams groups are served (StreamsGroupHeartbeat, Kafka 4.2+).
SUPPORTED_FEATURES = {"transaction.version": (0, 2), "streams.version": (0, 1)}
FINALIZED_FEATURES = {"transaction.version": 2, "streams.version": 1}
FEATURES_EPOCH = 1  # the finalized levels never change while a broker runs


@handles(18)
def api_versions(ctx, conn, h, req):
    listed = _API_LIST if ctx.cluster is None else _CLUSTER_API_LIST
    supported = [{"name": name, "min_version": low, "max_version": high}
                 for name, (low, high) in SUPPORTED_FEATURES.items() if low > 0 or h.api_version >= 4]
    finalized = [{"name": name, "min_version_level": level, "max_version_level": level}
                 for name, level in FINALIZED_FEATURES.items()]
    return respond(h, {"error_code": ErrorCode.none, "api_keys": listed, "throttle_time": 0,
                       "supported_features": supported, "finalized_features_epoch": FEATURES_EPOCH,
                       "finalized_features": finalized})


def api_versions_unsupported(h: RequestHeader) -> bytes:
    # KIP-511: answer in v0 (which every client can read) with the list, so it can pick a version.
    v0 = RequestHeader(h.api_key, 0, h.correlation_id, h.client_id, False)
    return encode_response(v0, build(response_class(18, 0), {"error_code": ErrorCode.unsupported_version,
                                                             "api_keys": _API_LIST}))


@handles(17)
def sasl_handshake(ctx, conn, h, req):
    mechanism = req.mechanism.upper()
    offered = mechanisms(ctx)
    if conn.sasl_mechanism is not None:
        # KIP-368: after a login, a second handshake starts a re-authentication, which must
        # keep the mechanism (Kafka's rule); anything else is out of order.
        if not conn.sasl_done or mechanism != conn.sasl_mechanism:
            return respond(h, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": offered})
        conn.sasl_done = False
        conn.sasl_state = None
        conn.reauthenticating = True
        return respond(h, {"error_code": ErrorCode.none, "mechanisms": offered})
    ok = mechanism in offered
    if ok:
        conn.sasl_mechanism = mechanism
    else:
        log.warning("Kafka SASL mechanism not supported", extra=fields(peer=conn.peer, conn=conn.conn_id, mechanism=req.mechanism))
    return respond(h, {"error_code": ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
                       "mechanisms": offered})


def _sasl_answer(h, token: bytes = b"", error: ErrorCode = ErrorCode.none, message: str | None = None,
                 lifetime_ms: int = 0) -> bytes:
    return respond(h, {"error_code": error, "error_message": message, "auth_bytes": token,
                       "session_lifetime": lifetime_ms})


def _sasl_failed(conn, h, user: str | None, reason: str, detail: str | None = None) -> bytes:
    """Kafka's answer to a failed authentication: SASL_AUTHENTICATION_FAILED, then the connection
    closes. ``detail`` is told to the client too (why a token was refused); ``reason`` only to the log."""
    log.warning("Kafka SASL authentication failed: %s", reason,
                extra=fields(peer=conn.peer, conn=conn.conn_id, user=user, mechanism=conn.sasl_mechanism))
    conn.close_after_response = True
    message = (f"Authentication failed during authentication due to invalid credentials "
               f"with SASL mechanism {conn.sasl_mechanism}")
    return _sasl_answer(h, error=ErrorCode.sasl_authentication_failed,
                        message=f"{message}: {detail}" if detail else message)


def _authenticated(ctx, conn, h, user: str, token: bytes = b"", deadline: float | None = None) -> bytes:
    if getattr(conn, "reauthenticating", False):
        conn.reauthenticating = False
        if user != conn.principal:  # Kafka: a re-authentication may not change the principal
            return _sasl_failed(conn, h, user, f"re-authentication changed the principal from {conn.principal!r}")
    else:
        limit = ctx.max_connections_per_user
        if limit and sum(1 for c in ctx.connections if c.principal == user and c is not conn) >= limit:
            return _sasl_failed(conn, h, user, f"user connection limit ({limit}) is reached")
    conn.principal = user
    conn.sasl_state = None
    conn.sasl_done = True
    conn.session_deadline = deadline
    lifetime_ms = 0 if deadline is None else max(1, int((deadline - time.time()) * 1000))
    log.info("Kafka client authenticated", extra=fields(peer=conn.peer, conn=conn.conn_id, user=user,
                                                         mechanism=conn.sasl_mechanism,
                                                         session_lifetime_ms=lifetime_ms))
    return _sasl_answer(h, token, lifetime_ms=lifetime_ms)


def _oauthbearer(ctx, conn, h, message: bytes) -> bytes:
    """One round, RFC 7628 as Kafka's clients use it: the token in, an empty answer out. A
    refused token fails at once with the reason in the error message (Kafka itself first sends
    the RFC's JSON error status and waits for the client's 0x01 byte)."""
    try:
        authzid, token = parse_oauthbearer(message)
    except ValueError as exc:
        return _sasl_failed(conn, h, None, f"malformed OAUTHBEARER message: {exc}", "malformed OAUTHBEARER message")
    try:
        grant = ctx.oauth.validate(token)
    except TokenError as exc:
        return _sasl_failed(conn, h, None, f"OAuth 2 token refused: {exc}", f"invalid token: {exc}")
    if authzid and authzid != grant.username:
        return _sasl_failed(conn, h, grant.username, f"authorization id {authzid!r} is not the token's user",
                            "the authorization id differs from the token's principal")
    if ctx.users.loopback_refused(grant.username, conn.peer_host):
        return _sasl_failed(conn, h, grant.username, f"user '{grant.username}' can only connect via localhost")
    return _authenticated(ctx, conn, h, grant.username, deadline=grant.deadline)


@handles(36)
def sasl_authenticate(ctx, conn, h, req):
    token = bytes(req.auth_bytes)
    mechanism = conn.sasl_mechanism
    users = ctx.users
    if mechanism is None or conn.sasl_done:
        return _sasl_answer(h, error=ErrorCode.illegal_sasl_state,
                            message="SaslAuthenticate must follow one SaslHandshake naming a mechanism")
    users.maybe_reload()
    if mechanism == OAUTHBEARER:
        return _oauthbearer(ctx, conn, h, token)
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
