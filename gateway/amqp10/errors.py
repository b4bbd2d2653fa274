"""The three scopes of an AMQP 1.0 error: a link (detach), a session (end), the connection (close)."""
from __future__ import annotations


class Amqp10DoorError(Exception):
    def __init__(self, condition: str, description: str):
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description


class LinkError(Amqp10DoorError):
    def __init__(self, handle: int, condition: str, description: str):
        super().__init__(condition, description)
        self.handle = handle


class SessionError(Amqp10DoorError):
    pass


class ConnError(Amqp10DoorError):
    pass


# AMQP 0-9-1 reply codes the routing model raises -> AMQP 1.0 error conditions
_CONDITIONS = {403: "amqp:unauthorized-access", 404: "amqp:not-found", 405: "amqp:resource-locked",
               406: "amqp:precondition-failed", 320: "amqp:connection:forced", 530: "amqp:not-allowed",
               540: "amqp:not-implemented", 506: "amqp:resource-limit-exceeded"}


def condition_of(exc) -> str:
    """The AMQP 1.0 condition of a routing error (:class:`routing.errors.AmqpError`)."""
    return _CONDITIONS.get(exc.reply_code, "amqp:internal-error")
