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
