"""Requests parked until the log moves: produce waiting for its fsync, fetch long-polls.

Kafka calls this the purgatory. A waiter is a condition and a deadline; every time a
partition's high watermark may have moved (after an append, after a group-commit fsync)
:meth:`Waiters.notify` re-checks the parked conditions. Nothing blocks the reactor.
"""
from __future__ import annotations

from typing import Callable

from twisted.internet import defer


class _Waiter:
    __slots__ = ("check", "deferred", "timer")

    def __init__(self, check, deferred, timer):
        self.check, self.deferred, self.timer = check, deferred, timer


class Waiters:
    def __init__(self, reactor):
        self.reactor = reactor
        self._parked: list[_Waiter] = []

    def wait(self, check: Callable[[], bool], timeout_s: float) -> defer.Deferred:
        """Fires True as soon as ``check()`` holds (tested now and at every notify), False at the deadline."""
        if check():
            return defer.succeed(True)
        d = defer.Deferred()
        waiter = _Waiter(check, d, None)
        waiter.timer = self.reactor.callLater(max(timeout_s, 0), self._expire, waiter)
        self._parked.append(waiter)
        return d

    def _expire(self, waiter: _Waiter) -> None:
        self._parked.remove(waiter)
        waiter.deferred.callback(False)

    def notify(self) -> None:
        if not self._parked:
            return
        still, done = [], []
        for waiter in self._parked:
            (done if waiter.check() else still).append(waiter)
        self._parked = still
        for waiter in done:
            waiter.timer.cancel()
            waiter.deferred.callback(True)

    def __len__(self) -> int:
        return len(self._parked)
