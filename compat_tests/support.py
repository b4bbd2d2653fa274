"""Helpers every compatibility suite uses."""
from __future__ import annotations

import os
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


# Ports that a test keeps across a broker's kill and restart come from below the kernel's
# ephemeral range (32768-60999 by default), where no client connection's local port can take
# one while its broker is down; each xdist worker draws from its own slice, so two workers never
# hand out the same port.
_KEPT_FIRST, _KEPT_SLICE = 20000, 3000
_handed_out: set[int] = set()


def kept_port() -> int:
    """A port free now, not handed out before by this process, and no other worker's."""
    import os
    import random
    import socket

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    first = _KEPT_FIRST + (index % 4) * _KEPT_SLICE
    for _ in range(2000):
        port = random.randrange(first, first + _KEPT_SLICE)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port left in {first}-{first + _KEPT_SLICE - 1}")


def deselect_marked(config, items, marker: str, is_reference, found: list[tuple[str, str]]) -> None:
    """Deselect (not skip) the reference-broker cases of tests marked ``marker(reason)``: those
    for which ``is_reference(callspec_params)`` holds. ``found`` collects (node id, reason) for
    the summary; a mark without a reason is a usage error."""
    import pytest
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        mark = item.get_closest_marker(marker)
        if mark is not None and callspec is not None and is_reference(callspec.params):
            if not (mark.args and str(mark.args[0]).strip()):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{marker} needs a reason")
            drop.append(item)
            found.append((item.nodeid, mark.args[0]))
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def summarize_deselected(terminalreporter, found: list[tuple[str, str]], what: str) -> None:
    if found:
        terminalreporter.write_sep("-", f"{len(found)} {what} deselected: gateway only")
        for nodeid, reason in found:
            terminalreporter.write_line(f"  {nodeid}: {reason}")


def selected_targets(targets: tuple[str, ...], env: str, external_env: str) -> list[str]:
    """The targets a differential suite runs against: ``external`` when ``external_env`` names a
    broker, else those listed in ``env`` (comma-separated), else all of ``targets``."""
    import pytest
    if os.environ.get(external_env, "").strip():
        return ["external"]
    names = [t.strip() for t in os.environ.get(env, "").split(",") if t.strip()]
    unknown = sorted(set(names) - set(targets))
    if unknown:
        raise pytest.UsageError(f"{env}: unknown target(s) {unknown}; choose from {list(targets)}")
    return names or list(targets)
