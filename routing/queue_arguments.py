"""The ``x-`` arguments of a queue, validated as RabbitMQ validates them (406 PRECONDITION_FAILED
naming the argument and the bad value), and RabbitMQ's stream interval syntax."""
from __future__ import annotations

import copy
from typing import Any

from routing import dead_letter
from routing.errors import PRECONDITION_FAILED, ChannelError

QUEUE_TYPES = ("classic", "quorum", "stream")
_INTERVAL_UNITS = {"Y": 365 * 86400_000, "M": 30 * 86400_000, "D": 86400_000, "h": 3600_000, "m": 60_000,
                   "s": 1000}


def parse_interval(text: str) -> int | None:
    """RabbitMQ's stream intervals ("30m", "1h", "7D", "1Y") in milliseconds; None if not one."""
    if len(text) >= 2 and text[:-1].isdigit() and text[-1] in _INTERVAL_UNITS:
        return int(text[:-1]) * _INTERVAL_UNITS[text[-1]]
    return None


OVERFLOW = ("drop-head", "reject-publish", "reject-publish-dlx")
# x-stream-initial-offset: the offset of a stream's first message, 0 .. 2^62 - 1 (RabbitMQ 4.4's
# bound; its stream clients refuse anything above it too)
STREAM_INITIAL_OFFSET_MAX = (1 << 62) - 1


def _int_arg(args: dict, name: str, queue: str, vhost: str, minimum: int = 0) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ChannelError(PRECONDITION_FAILED, f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
                                                f"{{unacceptable_type,{type(value).__name__}}}")
    if value < minimum:
        raise ChannelError(PRECONDITION_FAILED, f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
                                                f"{{value_negative,{value}}}" if value < 0 else
                                                f"{{value_zero,{value}}}")
    return value


def _str_arg(args: dict, name: str, queue: str, vhost: str, allowed: tuple[str, ...] | None = None) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or (allowed is not None and value not in allowed):
        raise ChannelError(PRECONDITION_FAILED, f"invalid arg '{name}' for queue '{queue}' in vhost '{vhost}': "
                                                f"{{unacceptable_value,{value!r}}}")
    return value


class QueueArguments:
    """The ``x-`` arguments a queue honours, validated as RabbitMQ does (406 on a bad value)."""

    def __init__(self, args: dict[str, Any], queue: str, vhost: str):
        self.message_ttl = _int_arg(args, "x-message-ttl", queue, vhost)
        self.expires = _int_arg(args, "x-expires", queue, vhost, minimum=1)
        self.max_length = _int_arg(args, "x-max-length", queue, vhost)
        self.max_length_bytes = _int_arg(args, "x-max-length-bytes", queue, vhost)
        self.overflow = _str_arg(args, "x-overflow", queue, vhost, OVERFLOW) or "drop-head"
        self.overflow_given = args.get("x-overflow") is not None
        self.dead_letter_exchange = _str_arg(args, "x-dead-letter-exchange", queue, vhost)
        self.dead_letter_routing_key = _str_arg(args, "x-dead-letter-routing-key", queue, vhost)
        max_priority = _int_arg(args, "x-max-priority", queue, vhost)
        if max_priority is not None and max_priority > 255:
            raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-max-priority' for queue '{queue}' in vhost "
                                                    f"'{vhost}': {{value_too_large,{max_priority},255}}")
        self.max_priority = max_priority
        self.queue_type = _str_arg(args, "x-queue-type", queue, vhost, QUEUE_TYPES) or "classic"
        # checked strictly at declaration (routing.vhost); here a bad one counts as absent
        self.dead_letter_strategy = dead_letter.strategy_argument(args, queue, vhost, self.queue_type, strict=False)
        sac = args.get("x-single-active-consumer", False)
        if not isinstance(sac, bool):
            raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-single-active-consumer' for queue '{queue}' "
                                                    f"in vhost '{vhost}': {{unacceptable_type,{type(sac).__name__}}}")
        self.single_active_consumer = sac
        max_age = args.get("x-max-age")
        if max_age is not None and (not isinstance(max_age, (str, bytes)) or parse_interval(
                max_age.decode() if isinstance(max_age, bytes) else max_age) is None):
            raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-max-age' for queue '{queue}' in vhost "
                                                    f"'{vhost}': {{invalid_max_age,{max_age!r}}}")
        self.max_age_ms = None if max_age is None else parse_interval(
            max_age.decode() if isinstance(max_age, bytes) else max_age)
        # quorum queues: returns of a message before it is dead-lettered ("delivery_limit"); < 0: no limit
        self.delivery_limit = _int_arg(args, "x-delivery-limit", queue, vhost, minimum=-1)
        self.consumer_timeout = _int_arg(args, "x-consumer-timeout", queue, vhost, minimum=1)  # ms, RabbitMQ 3.12+
        initial = _int_arg(args, "x-stream-initial-offset", queue, vhost)
        if initial is not None and initial > STREAM_INITIAL_OFFSET_MAX:
            raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-stream-initial-offset' for queue '{queue}' in "
                                                    f"vhost '{vhost}': {{value_too_large,{initial},"
                                                    f"{STREAM_INITIAL_OFFSET_MAX}}}")
        self.stream_initial_offset = initial

    def merged(self, policy: dict | None, operator: dict | None) -> "QueueArguments":
        """These arguments as a queue's policy and operator policy make them, by RabbitMQ's rules:
        of a limit (message-ttl, expires, max-length, max-length-bytes) set in more than one of
        the three, the lowest holds; dead-lettering and overflow come from the policy only where
        the queue's own arguments do not set them. Values of the wrong type are ignored (the
        broker refuses them when a policy is set)."""
        if not policy and not operator:
            return self
        policy, operator = policy or {}, operator or {}
        out = copy.copy(self)
        for attr, key in _LIMIT_KEYS:
            values = [v for v in (getattr(self, attr), _int(policy.get(key)), _int(operator.get(key))) if v is not None]
            setattr(out, attr, min(values) if values else None)
        for attr, key in (("dead_letter_exchange", "dead-letter-exchange"),
                          ("dead_letter_routing_key", "dead-letter-routing-key")):
            if getattr(self, attr) is None and isinstance(policy.get(key), str):
                setattr(out, attr, policy[key])
        if not self.overflow_given and policy.get("overflow") in OVERFLOW:
            out.overflow = policy["overflow"]
        return out


_LIMIT_KEYS = (("message_ttl", "message-ttl"), ("expires", "expires"), ("max_length", "max-length"),
               ("max_length_bytes", "max-length-bytes"))


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def check_policy_definition(name: str, definition: dict) -> str | None:
    """What is wrong with a policy's queue keys (RabbitMQ refuses such a policy), or None."""
    for key in ("message-ttl", "max-length", "max-length-bytes", "expires"):
        if key in definition and _int(definition[key]) is None:
            return f"policy '{name}': {key} must be a non-negative whole number, not {definition[key]!r}"
    if definition.get("expires") == 0:
        return f"policy '{name}': expires must be at least 1 (milliseconds)"
    if "overflow" in definition and definition["overflow"] not in OVERFLOW:
        return f"policy '{name}': overflow must be one of {', '.join(OVERFLOW)}, not {definition['overflow']!r}"
    for key in ("dead-letter-exchange", "dead-letter-routing-key"):
        if key in definition and not isinstance(definition[key], str):
            return f"policy '{name}': {key} must be a string, not {definition[key]!r}"
    return None
