"""Quorum queues' delayed retry (RabbitMQ 4.3): a returned message waits before it is ready again.

Configured by the queue arguments ``x-delayed-retry-type``, ``x-delayed-retry-min`` and
``x-delayed-retry-max`` (milliseconds) or the policy keys ``delayed-retry-type``, ``-min`` and
``-max``; as RabbitMQ resolves them, the policy's type wins over the argument, and of a minimum
(or maximum) given both ways the smaller counts. Without a type, with type ``disabled`` or an
unknown one, or without a positive minimum, returns are not delayed; a missing maximum is the
minimum.

Which returns wait depends on the type, in RabbitMQ's AMQP 0-9-1 terms: ``failed`` delays
``basic.reject`` with requeue (a failed delivery), ``returned`` delays ``basic.nack`` with
requeue, ``basic.recover`` and the unacknowledged messages of a closing channel, ``all`` both.
The wait is ``min(minimum * failures, maximum)``, ``failures`` being the times the message was
rejected so far (at least 1). A waiting message is neither ready nor unacknowledged; once due it
comes back as a returned message (before every priority level), at the next AMQP tick (a
quarter of a second). Waits are kept in memory: after a restart a waiting message is ready at
once.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable

TYPES = ("all", "failed", "returned")  # and "disabled"


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def resolve(args: dict, policy: Callable[[str], Any]) -> tuple[str, int, int] | None:
    """(type, minimum ms, maximum ms) from a queue's arguments and policy, or None (disabled)."""
    kind = policy("delayed-retry-type", str)
    if kind is None:
        kind = args.get("x-delayed-retry-type")
    if isinstance(kind, bytes):
        kind = kind.decode("utf-8", "replace")
    if kind not in TYPES:
        return None
    low = _smaller(_positive(args.get("x-delayed-retry-min")), _positive(policy("delayed-retry-min")))
    if low is None:
        return None
    high = _smaller(_positive(args.get("x-delayed-retry-max")), _positive(policy("delayed-retry-max")))
    return kind, low, low if high is None else high


class _Waiting:
    """Cursor owner of offsets waiting for their retry."""

    def __repr__(self) -> str:
        return "<delayed retry>"


WAITING = _Waiting()


class DelayedRetries:
    """One quorum queue's waiting messages and their rejection counts."""

    def __init__(self) -> None:
        self._due: list[tuple[int, int]] = []  # heap of (ready at ms, offset)
        self.failures: dict[int, int] = {}  # offset -> basic.reject requeues so far

    def __len__(self) -> int:
        return len(self._due)

    def returned(self, offset: int, failed: bool) -> None:
        """Count a return (before :meth:`delay` is asked)."""
        if failed:
            self.failures[offset] = self.failures.get(offset, 0) + 1

    def delay(self, config: tuple[str, int, int] | None, offset: int, failed: bool) -> int | None:
        """How long this return waits (ms), or None if it does not."""
        if config is None:
            return None
        kind, low, high = config
        if kind != "all" and (kind == "failed") != failed:
            return None
        return min(low * max(1, self.failures.get(offset, 0)), high)

    def hold(self, cursor, offset: int, ready_at_ms: int) -> None:
        cursor.unacked[offset] = WAITING
        heapq.heappush(self._due, (ready_at_ms, offset))

    def release_due(self, cursor, now_ms: float) -> int:
        """Return what came due to the cursor as returned messages; how many."""
        due = self._due
        back = []
        while due and due[0][0] <= now_ms:
            _, offset = heapq.heappop(due)
            if cursor.owner_of(offset) is WAITING:
                back.append(offset)
        cursor.requeue(back)
        return len(back)

    def forget_settled(self, floor: int) -> None:
        for offset in [o for o in self.failures if o < floor]:
            del self.failures[offset]
