"""Twisted's global reactor on a daemon thread, for tests of code that runs in a reactor.

Started once per test process on first use (no other test uses the global reactor, and a
reactor cannot be restarted); a test drives it with :func:`run`, so the code under test runs
on the reactor's thread as it does inside a broker.
"""
from __future__ import annotations

import threading
import time

from twisted.internet import defer, reactor
from twisted.internet.threads import blockingCallFromThread

_thread: threading.Thread | None = None


def start() -> None:
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False},
                                   name="test-reactor", daemon=True)
        _thread.start()
        while not reactor.running:
            time.sleep(0.01)


def run(fn, *args, timeout: float = 30, **kwargs):
    """Call ``fn`` in the reactor and wait for its Deferred (or value); fails after ``timeout``."""
    start()

    def go():
        return defer.maybeDeferred(fn, *args, **kwargs).addTimeout(timeout, reactor)
    return blockingCallFromThread(reactor, go)


def outcome(d: defer.Deferred) -> defer.Deferred:
    """A Deferred of ('ok', value) or ('error', exception): for calls expected to fail."""
    return d.addCallbacks(lambda v: ("ok", v), lambda f: ("error", f.value))
