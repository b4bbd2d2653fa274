"""The table of Kafka API handlers by api key, filled by the ``@handles`` decorator of each
handler module (imported by :mod:`gateway.kafka.apis`, which dispatches from the table)."""
from __future__ import annotations

HANDLERS: dict[int, object] = {}


def handles(api_key: int):
    def register(fn):
        HANDLERS[api_key] = fn
        return fn
    return register
