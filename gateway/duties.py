"""The broker's periodic duties, run from one reactor timer on a shared grid.

Each wake-up of an idle process costs CPU of its own (measured on a small VM: about half a
millisecond, most of it the interpreter running with cold caches), so duties on separate
timers (a LoopingCall each, started at slightly different moments) wake an idle broker once
per duty. Here a duty of interval T runs at the multiples of T on the reactor's clock: duties
whose intervals divide one another fall due together and share one wake-up. A duty's interval
may change from run to run (a callable, asked after each run), so a duty with nothing to watch
ticks slowly and speeds up from its next run on.
"""
from __future__ import annotations

import logging
import math
from typing import Callable

from twisted.internet import defer

log = logging.getLogger(__name__)

SLACK_S = 0.002  # duties due this close after the earliest run in the same turn


class _Duty:
    __slots__ = ("fn", "interval", "due", "busy")

    def __init__(self, fn: Callable[[], object], interval: Callable[[], float]):
        self.fn, self.interval = fn, interval
        self.due = 0.0
        self.busy = False  # its last run returned a Deferred that has not fired yet


class Duties:
    def __init__(self, reactor):
        self.reactor = reactor
        self._duties: list[_Duty] = []
        self._timer = None
        self._next = math.inf
        self.running = True

    def every(self, interval: float | Callable[[], float], fn: Callable[[], object]) -> None:
        """Run ``fn`` every ``interval`` seconds (or what the callable says after each run) from the
        next grid point on, until :meth:`stop`."""
        duty = _Duty(fn, interval if callable(interval) else (lambda: interval))
        duty.due = self._grid(duty.interval())
        self._duties.append(duty)
        self._arm()

    def stop(self) -> None:
        self.running = False
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _grid(self, interval: float) -> float:
        now = self.reactor.seconds()
        return (math.floor(now / interval) + 1) * interval

    def _arm(self) -> None:
        if not self.running or not self._duties:
            return
        due = min(d.due for d in self._duties)
        if self._timer is not None and self._timer.active():
            if due >= self._next:
                return
            self._timer.cancel()
        self._next = due
        self._timer = self.reactor.callLater(max(0.0, due - self.reactor.seconds()), self._run)

    def _run(self) -> None:
        self._timer, self._next = None, math.inf
        limit = self.reactor.seconds() + SLACK_S
        for duty in list(self._duties):
            if not self.running:
                return
            if duty.due > limit:
                continue
            if not duty.busy:
                self._call(duty)
            duty.due = self._grid(duty.interval())
        self._arm()

    def _call(self, duty: _Duty) -> None:
        try:
            result = duty.fn()
        except Exception:  # logged, and the duty runs again at its next time
            log.exception("background task %s failed; it runs again at its next interval",
                          getattr(duty.fn, "__name__", duty.fn))
            return
        if isinstance(result, defer.Deferred):
            duty.busy = True

            def settled(_) -> None:
                duty.busy = False

            def failed(failure) -> None:
                duty.busy = False
                log.error("background task %s failed: %s", getattr(duty.fn, "__name__", duty.fn),
                          failure.getErrorMessage())
            result.addCallbacks(settled, failed)
