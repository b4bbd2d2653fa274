"""Helpers every compatibility suite uses."""
from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0, what: str = "a condition", interval: float = 0.02):
    """Poll ``predicate`` until it returns a true value (returned); fail the test naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
