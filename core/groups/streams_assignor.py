"""The task assignor of streams groups: sticky and balanced, active tasks first, then standbys.

A task is (subtopology id, partition). Active tasks are spread as the consumer groups' ``uniform``
assignor spreads partitions (core.groups.assignors.uniform, reused with each subtopology as a
"topic" every member subscribes to): each task on one member, counts per member differing by at
most one, a task staying with the member the previous target gave it to unless balance needs it
elsewhere. So a member that restarts under the same id, or a group that grows by one, moves as
few tasks (and their state stores) as possible.

Standby tasks (``num_standby``, the group's streams.num.standby.replicas) go, per task, to that
many members of *other processes* than the one running it actively (a standby beside its active
task protects nothing), never two to one process, the previous holder first, then the member
with the fewest standbys. Where there are too few processes, fewer standbys are placed.
Warm-up tasks (Kafka's HighAvailabilityTaskAssignor moves state ahead of an active task) are not
made: the assignment never contains any.
"""
from __future__ import annotations

from typing import Mapping

from core.groups.assignors import uniform

Tasks = dict[str, set[int]]  # subtopology id -> partitions


def assign(members: Mapping[str, str], tasks: Mapping[str, int], previous_active: Mapping[str, Tasks],
           previous_standby: Mapping[str, Tasks], num_standby: int) -> dict[str, tuple[Tasks, Tasks]]:
    """``members``: member id -> process id; ``tasks``: subtopology id -> task count.
    Returns member id -> (active tasks, standby tasks)."""
    subs = set(tasks)
    active = uniform({m: subs for m in members}, dict(tasks), previous_active)
    standby: dict[str, Tasks] = {m: {} for m in members}
    if num_standby > 0 and members:
        runner = {(s, p): m for m, ts in active.items() for s, ps in ts.items() for p in ps}
        load = {m: 0 for m in members}
        order = sorted(members)
        for (sub, p), owner in sorted(runner.items()):
            used = {members[owner]}
            before = [m for m in order if p in (previous_standby.get(m) or {}).get(sub, ())]
            for _ in range(num_standby):
                candidates = [m for m in order if members[m] not in used]
                if not candidates:
                    break
                sticky = [m for m in before if m in candidates]
                chosen = sticky[0] if sticky else min(candidates, key=lambda m: (load[m], order.index(m)))
                standby[chosen].setdefault(sub, set()).add(p)
                load[chosen] += 1
                used.add(members[chosen])
    return {m: (active.get(m, {}), standby[m]) for m in members}
