"""The broker's periodic duties (gateway.duties): one timer, a shared grid, failures survived."""
from twisted.internet import defer, task

from gateway.duties import Duties


def _run(clock: task.Clock, seconds: float, step: float = 0.01) -> None:
    for _ in range(round(seconds / step)):
        clock.advance(step)


def test_duties_whose_intervals_divide_one_another_share_wake_ups():
    clock = task.Clock()
    clock.advance(1000.037)  # started off the grid
    duties = Duties(clock)
    seen: dict[str, list[float]] = {"fast": [], "slow": []}
    duties.every(0.25, lambda: seen["fast"].append(clock.seconds()))
    duties.every(1.0, lambda: seen["slow"].append(clock.seconds()))
    _run(clock, 2.0)
    assert len(seen["fast"]) == 8 and len(seen["slow"]) == 2
    assert set(seen["slow"]) <= set(seen["fast"])  # the slow duty ran in a wake-up of the fast one
    assert all(abs(t * 4 - round(t * 4)) < 0.05 for t in seen["fast"])  # on the 250 ms grid
    assert len(clock.getDelayedCalls()) == 1  # one timer for both


def test_an_interval_may_change_between_runs():
    clock = task.Clock()
    duties = Duties(clock)
    runs: list[float] = []
    fast = {"on": False}
    duties.every(lambda: 0.1 if fast["on"] else 0.5, lambda: runs.append(clock.seconds()))
    _run(clock, 1.0)
    assert len(runs) == 2
    fast["on"] = True  # heard at the next run (already due at the slow pace), then every 0.1 s
    _run(clock, 1.0)
    gaps = [round(b - a, 3) for a, b in zip(runs, runs[1:])]
    assert gaps[:2] == [0.5, 0.5] and set(gaps[2:]) == {0.1} and len(gaps) >= 6


def test_a_failing_duty_runs_again_and_does_not_stop_the_others():
    clock = task.Clock()
    duties = Duties(clock)
    calls = {"bad": 0, "good": 0}

    def bad():
        calls["bad"] += 1
        raise RuntimeError("boom")

    duties.every(0.1, bad)
    duties.every(0.1, lambda: calls.__setitem__("good", calls["good"] + 1))
    _run(clock, 0.5)
    assert calls["bad"] == 5 and calls["good"] == 5


def test_a_duty_that_returns_a_deferred_is_not_run_again_until_it_fires():
    clock = task.Clock()
    duties = Duties(clock)
    pending: list[defer.Deferred] = []

    def slow():
        d = defer.Deferred()
        pending.append(d)
        return d

    duties.every(0.1, slow)
    _run(clock, 0.5)
    assert len(pending) == 1
    pending[0].callback(None)
    _run(clock, 0.1)
    assert len(pending) == 2


def test_stop_cancels_the_timer():
    clock = task.Clock()
    duties = Duties(clock)
    runs: list[float] = []
    duties.every(0.1, lambda: runs.append(1))
    duties.stop()
    _run(clock, 1.0)
    assert runs == [] and clock.getDelayedCalls() == []
