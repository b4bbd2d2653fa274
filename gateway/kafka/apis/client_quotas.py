"""DescribeClientQuotas and AlterClientQuotas (KIP-546) over core.quotas; enforcement of the
byte rates is gateway.kafka.quotas. A filter or alteration Kafka refuses gets INVALID_REQUEST
with Kafka's message (an unknown entity type in a filter: UNSUPPORTED_VERSION)."""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from core.quotas import QuotaError
from gateway.kafka.apis.registry import handles
from gateway.kafka.quotas import quotas_of
from gateway.logs import fields
from wire.kafka import respond

log = logging.getLogger(__name__)


def _entity(components) -> list[dict]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in components]


@handles(48)
def describe_client_quotas(ctx, conn, h, req):
    store = quotas_of(ctx).store
    try:
        found = store.describe([(c.entity_type, c.match_type, c.match) for c in req.components], req.strict)
    except QuotaError as exc:
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.unsupported_version if exc.unsupported
                           else ErrorCode.invalid_request, "error_message": str(exc), "entries": None})
    entries = [{"entity": _entity(entity), "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
               for entity, values in found]
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": entries})


@handles(49)
def alter_client_quotas(ctx, conn, h, req):
    store = quotas_of(ctx).store
    alterations = [([(e.entity_type, e.entity_name) for e in entry.entity],
                    [(op.key, op.value, op.remove) for op in entry.ops]) for entry in req.entries]
    try:
        answers = store.alter(alterations, req.validate_only)
    except OSError as exc:  # the file could not be written: nothing changed for good
        log.error("client quotas not saved: %s", exc)
        answers = [(components, f"the quotas could not be saved: {exc}") for components, _ops in alterations]
        failed = ErrorCode.unknown_server_error
    else:
        failed = ErrorCode.invalid_request
        if not req.validate_only and any(m is None for _c, m in answers):
            log.info("client quotas altered", extra=fields(entities=[
                dict(components) for components, m in answers if m is None]))
    out = [{"error_code": ErrorCode.none if m is None else failed, "error_message": m, "entity": _entity(components)}
           for components, m in answers]
    return respond(h, {"throttle_time": 0, "entries": out})
