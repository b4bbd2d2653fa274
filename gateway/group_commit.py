"""Group commit: appends share fsyncs, made on one worker thread, and what moves when they land.

Every append asks for a pass (``request``) and a timer asks too (``start``). One pass at a time
runs on the fsync thread; requests that arrive meanwhile only mark another pass due, so all
appends made during a pass share the next fsync. When a pass ends, high watermarks may have
moved: parked Kafka produces and fetches are woken, AMQP queues deliver and confirm.
"""
from __future__ import annotations

import logging
import time

from twisted.internet import defer

from gateway.fsync_thread import FsyncThread
from gateway.management import metrics

log = logging.getLogger("gateway")

IDLE_TICK_S = 1.0  # the timer's pace while nothing waits for a pass


class GroupCommit:
    def __init__(self, broker):
        self._broker = broker  # its logs, cluster node, Kafka waiters and AMQP service, set up later
        self._thread: FsyncThread | None = None  # started with the logs (``open``)
        self.running: defer.Deferred | None = None  # the pass on the fsync thread, if any
        self._again = False
        self._kick = None  # the pending start of a pass
        self._timer = None  # the timer's next tick
        self._interval = 0.005
        self._last_asked = 0.0  # when the timer last asked for a pass

    def open(self, reactor) -> None:
        self._reactor = reactor
        self._thread = FsyncThread(reactor)

    def request(self) -> None:
        """Ask for a pass; it starts at the end of this reactor turn, whose deliveries go out first."""
        if self._thread is None:
            return
        if self.running is not None:
            self._again = True
            return
        if self._kick is None:
            self._kick = self._reactor.callLater(0, self._start)

    def start(self, interval_ms: int) -> None:
        """The timer: a pass every ``interval_ms`` while logs were written since the last one (an
        append that did not ask, a flush.ms policy falling due), and once a second anyway (the HW
        checkpoint of replicated logs, whose HWs move without a write here). It ticks only while
        something waits: a written log wakes it (LogManager.on_dirty), so an idle broker's loop
        is not woken 200 times a second for nothing (about 1% of a core each)."""
        self._interval = interval_ms / 1000
        self._last_asked = self._reactor.seconds()
        self._broker.logs.on_dirty = self.wake
        self._arm(self._interval if self._broker.logs.has_dirty else IDLE_TICK_S)  # written while starting

    def wake(self) -> None:
        """A log was written: tick at the commit cadence again (the timer may be at its idle pace)."""
        timer = self._timer
        if timer is None or timer.getTime() - self._reactor.seconds() > self._interval:
            self._arm(self._interval)

    def _arm(self, delay: float) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self._reactor.callLater(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self._reactor.seconds()
        busy = self._broker.logs.has_dirty
        if busy or now - self._last_asked >= IDLE_TICK_S:
            self._last_asked = now
            self.request()
        self._arm(self._interval if busy or self.running is not None else IDLE_TICK_S)

    def _start(self) -> None:
        self._kick = None
        if self._thread is None:
            return
        if self.running is not None:
            self._again = True
            return
        logs = self._broker.logs
        written: list = []  # the logs the pass looked at, filled on the fsync thread
        self.running = self._thread.run(lambda: logs.flush_dirty(written))
        self.running.addErrback(lambda f: log.error("flush failed: %s", f.getErrorMessage()))
        self.running.addBoth(self._done, time.monotonic(), written)

    def _done(self, flushed, started: float, written: list):
        self.running = None
        broker = self._broker
        moved = bool(flushed)
        if flushed:
            metrics.timed(metrics.FSYNC, "group_commit", started)
        if broker.cluster is not None:
            # Leaders' own log ends moved (fsync'd, or merely written for a topic without sync flush,
            # such as a transient queue's, which no fsync reports): so may their high watermarks.
            # Only the logs written since the last pass: the 5 ms timer's passes over an idle
            # broker leading hundreds of queues otherwise cost a third of a core per broker.
            moved = broker.cluster.flushed(written) or moved
        if moved:
            broker.kafka.waiters.notify()  # high watermarks moved: parked produces and fetches may go
            broker.amqp.log_moved()  # queues deliver, publisher confirms go out
        if self._again and broker.ready:
            self._again = False
            self.request()
        elif broker.logs.has_dirty and self._timer is not None:
            self.wake()  # logs written during the pass (or due later) keep the timer at its cadence

    def close(self) -> defer.Deferred | None:
        """Stop asking; a Deferred for the pass still running, if any (logs.shutdown flushes the rest)."""
        if self._kick is not None and self._kick.active():
            self._kick.cancel()
        self._kick = None
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        self._broker.logs.on_dirty = None
        return self.running

    def stop_thread(self) -> None:
        if self._thread is not None:
            self._thread.stop()
