"""Java test programs that report their stages as JSON lines (compat_tests/java/JsonLines.java):
run one, collect its events by stage, and fail a test naming what the program printed."""
from __future__ import annotations

import json
import subprocess
from collections import defaultdict


def run_steps(argv: list[str], timeout: float, broker=None) -> dict:
    """Run the program; its events by ``step``, exit code, stderr tail (and ``broker``, whose log
    a missing stage reports)."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout)
        stdout, stderr, returncode = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:  # a stalled run: keep what it printed for the tests to report
        stdout, stderr, returncode = e.stdout or b"", e.stderr or b"", f"killed after {timeout}s"
    steps = defaultdict(list)
    for line in stdout.decode(errors="replace").splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            steps[event["step"]].append(event)
    return dict(steps=steps, returncode=returncode, stderr=stderr.decode(errors="replace")[-6000:], broker=broker)


def stage(run: dict, name: str) -> dict:
    """The one event of a stage; fails with the Java program's errors if it never got there."""
    events = run["steps"].get(name)
    if not events:
        broker = run.get("broker")
        log = f"\nbroker log (end):\n{broker.output()[-4000:]}" if broker is not None else ""
        raise AssertionError(f"the Java client reported no {name!r} event (exit {run['returncode']}); "
                             f"errors: {run['steps'].get('error')}\nstderr:\n{run['stderr']}{log}")
    [event] = events
    return event


def assert_completed(run: dict) -> None:
    """Exit 0, a ``done`` event and no ``error`` event."""
    assert run["returncode"] == 0 and run["steps"].get("done") and not run["steps"].get("error"), (
        f"exit {run['returncode']}; steps reported: {list(run['steps'])}; errors: {run['steps'].get('error')}\n"
        f"stderr:\n{run['stderr']}")
