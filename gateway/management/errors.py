"""The management API's refusals, as RabbitMQ words them: ``{"error": ..., "reason": ...}``."""
from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, error: str, reason: str):
        super().__init__(reason)
        self.status, self.error, self.reason = status, error, reason


def not_found(what: str) -> ApiError:
    return ApiError(404, "Object Not Found", f"{what} not found")


def bad(reason: str) -> ApiError:
    return ApiError(400, "bad_request", reason)


def truthy(value: Any, default: bool) -> bool:
    """A JSON flag as RabbitMQ's API takes it: true/false, or the strings rabbitmqadmin sends."""
    if value is None:
        return default
    if isinstance(value, str):
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad(f"{value!r} is not a boolean (true or false)")
    return bool(value)
