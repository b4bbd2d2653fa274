"""ApiVersions, SASL (PLAIN) and InitProducerId."""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from gateway.kafka.apis import handles
from gateway.logs import fields
from wire.kafka import ADVERTISED, RequestHeader, build, encode_response, respond, response_class

log = logging.getLogger(__name__)

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
    ok = req.mechanism.upper() == "PLAIN"
    conn.sasl_mechanism = "PLAIN" if ok else None
    return respond(h, {"error_code": ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
                       "mechanisms": ["PLAIN"]})


@handles(36)
def sasl_authenticate(ctx, conn, h, req):
    parts = bytes(req.auth_bytes).split(b"\0")
    if getattr(conn, "sasl_mechanism", None) != "PLAIN" or len(parts) != 3:
        return respond(h, {"error_code": ErrorCode.illegal_sasl_state, "error_message": "send SaslHandshake PLAIN first",
                           "auth_bytes": b"", "session_lifetime": 0})
    user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if ctx.users and ctx.users.get(user) != password:
        log.warning("Kafka SASL authentication failed", extra=fields(peer=conn.peer, user=user))
        return respond(h, {"error_code": ErrorCode.sasl_authentication_failed,
                           "error_message": f"authentication failed for user {user!r}",
                           "auth_bytes": b"", "session_lifetime": 0})
    conn.principal = user
    return respond(h, {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": b"", "session_lifetime": 0})
