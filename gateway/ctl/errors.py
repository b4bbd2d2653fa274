"""The CLI's refusals: a command the broker refused, named with the object and the error code."""
from __future__ import annotations

from kio.schema.errors import ErrorCode


class CommandError(RuntimeError):
    """A command that the broker refused; the message names the object and the error."""


def check(error, what: str, message: str | None = None) -> None:
    """Raise CommandError unless a Kafka answer's ``error`` code is NONE."""
    code = ErrorCode(int(error))
    if code != ErrorCode.none:
        raise CommandError(f"{what}: {code.name.upper()}" + (f" ({message})" if message else ""))
