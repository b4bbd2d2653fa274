"""The group commit's timer: at the commit cadence while logs wait for a pass, once a second when idle."""
from __future__ import annotations

from types import SimpleNamespace

from twisted.internet import task

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from gateway.group_commit import IDLE_TICK_S, GroupCommit
from tests.logutil import batch


def _commit(tmp_path, written_first: bool = False):
    manager = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    manager.startup()
    manager.create_topic("t", 1)
    if written_first:
        manager.get_log("t", 0).append(batch(1))  # while the broker starts: before the timer (no one is told)
    clock = task.Clock()
    commit = GroupCommit(SimpleNamespace(logs=manager))
    commit._reactor = clock  # no fsync thread: the passes the timer asks for are counted instead
    asked = []
    commit.request = lambda: asked.append(clock.seconds())
    commit.start(5)
    return manager, clock, commit, asked


def test_an_idle_broker_is_woken_once_a_second_not_at_the_commit_cadence(tmp_path):
    manager, clock, commit, asked = _commit(tmp_path)
    ticks = []
    real = commit._tick
    commit._tick = lambda: (ticks.append(clock.seconds()), real())
    commit._arm(IDLE_TICK_S)  # (re-armed so that the counting tick is the one scheduled)
    clock.pump([0.005] * 2010)  # 10 s and a little (each tick lands on the next step of 5 ms)
    assert len(ticks) == 10 and len(asked) == 10  # the heartbeat pass (HW checkpoint) only
    manager.shutdown()


def test_a_write_brings_the_commit_cadence_back_until_nothing_waits(tmp_path):
    manager, clock, commit, asked = _commit(tmp_path)
    clock.advance(0.5)
    manager.get_log("t", 0).append(batch(1))  # an append that does not ask for a pass itself
    clock.advance(0.005)
    assert asked == [0.505]  # at the cadence, not at the next idle tick (1 s)
    clock.pump([0.005] * 4)
    assert len(asked) == 5  # still dirty (no pass ran here): a pass asked for at every tick
    manager.flush_dirty()  # the pass
    clock.pump([0.005] * 300)
    # the next tick finds nothing waiting and the timer slows to its idle pace: the heartbeat
    # comes a second after the last pass the timer asked for, and nothing in between
    assert len(asked) == 6 and abs(asked[-1] - (asked[-2] + IDLE_TICK_S)) < 0.011
    manager.shutdown()


def test_logs_written_while_the_broker_started_are_flushed_at_the_cadence(tmp_path):
    manager, clock, commit, asked = _commit(tmp_path, written_first=True)
    clock.advance(0.005)
    assert asked == [0.005]
    manager.shutdown()
