"""Server-side partition assignors of KIP-848 consumer groups: ``uniform`` (the default) and ``range``.

An assignor is a pure function of the group's members and the topics they subscribe to::

    assign(members, topics, previous) -> {member_id: {topic: {partition, ...}}}

* ``members``: member id -> the topic names it subscribes to (regexes already resolved);
* ``topics``: topic name -> partition count, for every subscribed topic that exists;
* ``previous``: the group's current target assignment, so an assignor can be sticky.

``uniform`` (Kafka's UniformAssignor): every partition goes to one member subscribed to its
topic, partition counts per member differ by at most one among members with the same
subscriptions, and partitions stay where the previous target put them unless balance needs
them elsewhere. ``range`` (Kafka's server-side RangeAssignor): per topic, the subscribed
members sorted by id get consecutive ranges, the first ``partitions % members`` one more, so
members subscribed to co-partitioned topics get the same partition numbers of each.
"""
from __future__ import annotations

from typing import Mapping

Assignment = dict[str, dict[str, set[int]]]  # member id -> topic -> partitions


def uniform(members: Mapping[str, set[str] | list[str]], topics: Mapping[str, int],
            previous: Mapping[str, Mapping[str, set[int]]] | None = None) -> Assignment:
    previous = previous or {}
    order = sorted(members)
    subs = {m: {t for t in members[m] if t in topics} for m in order}
    owner: dict[tuple[str, int], str] = {}
    counts = {m: 0 for m in order}
    # 1. stickiness: keep what the previous target gave, when still subscribed and existing
    for m in order:
        for topic, parts in sorted((previous.get(m) or {}).items()):
            if topic not in subs[m]:
                continue
            for p in sorted(parts):
                if p < topics[topic] and (topic, p) not in owner:
                    owner[(topic, p)] = m
                    counts[m] += 1
    # 2. partitions nobody holds go to the least loaded subscribed member
    for topic in sorted(topics):
        eligible = [m for m in order if topic in subs[m]]
        if not eligible:
            continue
        for p in range(topics[topic]):
            if (topic, p) not in owner:
                m = min(eligible, key=lambda x: (counts[x], order.index(x)))
                owner[(topic, p)] = m
                counts[m] += 1
    # 3. balance: move a partition from a member to an eligible one holding two or more fewer
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner):
            src = owner[tp]
            eligible = [m for m in order if tp[0] in subs[m] and counts[m] < counts[src] - 1]
            if eligible:
                dst = min(eligible, key=lambda x: (counts[x], order.index(x)))
                owner[tp] = dst
                counts[src] -= 1
                counts[dst] += 1
                moved = True
    out: Assignment = {m: {} for m in order}
    for (topic, p), m in owner.items():
        out[m].setdefault(topic, set()).add(p)
    return out


def range_(members: Mapping[str, set[str] | list[str]], topics: Mapping[str, int],
           previous: Mapping[str, Mapping[str, set[int]]] | None = None) -> Assignment:
    out: Assignment = {m: {} for m in sorted(members)}
    for topic in sorted(topics):
        subscribed = sorted(m for m in members if topic in members[m])
        if not subscribed:
            continue
        count = topics[topic]
        base, extra = divmod(count, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            size = base + (1 if i < extra else 0)
            if size:
                out[m][topic] = set(range(start, start + size))
            start += size
    return out


ASSIGNORS = {"uniform": uniform, "range": range_}
DEFAULT_ASSIGNOR = "uniform"
