"""Shared bookkeeping for the Kafka client suites: what was produced, what each consumer saw.

Nothing here talks to the broker; the suites drive the real client libraries and hand their
observations to these checks.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field

from compat_tests.support import wait_until  # noqa: F401 (the suites import it from here)

GROUP_MESSAGES = 100_000
GROUP_PARTITIONS = 6
GROUP_KEYS = 1000




def group_message(i: int) -> tuple[bytes, bytes]:
    """Key and value of the i-th message of the group test; the value names key and sequence."""
    k = i % GROUP_KEYS
    seq = i // GROUP_KEYS
    return f"key-{k:04d}".encode(), f"key-{k:04d}:seq-{seq:06d}:msg-{i:06d}".encode()


@dataclass
class Produced:
    """(partition, offset) -> (key, value) as acknowledged to the producer, in send order."""
    records: dict = field(default_factory=dict)
    order: list = field(default_factory=list)  # (partition, offset) in send order

    def add(self, partition: int, offset: int, key: bytes, value: bytes) -> None:
        assert offset >= 0, f"acknowledged offset {offset} for partition {partition}"
        pos = (partition, offset)
        assert pos not in self.records, f"two sends acknowledged at the same position {pos}"
        self.records[pos] = (key, value)
        self.order.append(pos)

    def check_dense_and_ordered(self, partitions: int) -> dict:
        """Offsets per partition are exactly 0..n-1 and, per key, grow in send order."""
        per_partition = defaultdict(list)
        for p, o in self.records:
            per_partition[p].append(o)
        ends = {}
        for p in range(partitions):
            offsets = sorted(per_partition.get(p, []))
            assert offsets == list(range(len(offsets))), \
                f"partition {p}: acknowledged offsets are not 0..{len(offsets) - 1}"
            ends[p] = len(offsets)
        assert set(per_partition) <= set(range(partitions)), f"unknown partitions {set(per_partition)}"
        last_by_key = {}
        for pos in self.order:
            key = self.records[pos][0]
            prev = last_by_key.get(key)
            if prev is not None:
                assert prev[0] == pos[0], f"key {key!r} went to partitions {prev[0]} and {pos[0]}"
                assert pos[1] > prev[1], f"key {key!r}: sent later but stored earlier ({prev} then {pos})"
            last_by_key[key] = pos
        return ends


class ConsumerLog:
    """What one group member saw, cut into assignment sessions.

    A session is one continuous ownership of a partition by one consumer (from an assignment to
    the next revocation). Within a session offsets must be consecutive; across sessions a record
    may be seen again (at-least-once across a rebalance) but never skipped overall.
    """

    def __init__(self, name: str):
        self.name = name
        self.lock = threading.Lock()
        self.generation = 0
        self.assigned: set[int] = set()
        self.assignments: list[tuple[int, ...]] = []
        self.sessions: dict[tuple[int, int], list] = {}  # (generation, partition) -> [(offset, key, value)]
        self.count = 0
        self.positions: set[tuple[int, int]] = set()
        self.errors: list[str] = []

    def on_assign(self, partitions) -> None:
        partitions = list(partitions)
        with self.lock:
            self.generation += 1
            self.assigned = set(partitions)
            self.assignments.append(tuple(sorted(partitions)))

    def on_revoke(self, partitions) -> None:
        partitions = list(partitions)
        with self.lock:
            self.generation += 1
            self.assigned -= set(partitions)

    def owned(self) -> set[int]:
        with self.lock:
            return set(self.assigned)

    def record(self, partition: int, offset: int, key: bytes, value: bytes) -> None:
        with self.lock:
            self.sessions.setdefault((self.generation, partition), []).append((offset, key, value))
            self.count += 1
            self.positions.add((partition, offset))


def covered(logs: list[ConsumerLog]) -> set:
    """The (partition, offset) positions consumed by any member so far."""
    out = set()
    for log in logs:
        with log.lock:
            out |= log.positions
    return out


def check_group_consumption(produced: Produced, logs: list[ConsumerLog], partitions: int) -> dict:
    """Every produced record consumed byte-exact, in order within each session, none lost."""
    ends = produced.check_dense_and_ordered(partitions)
    # per key, offsets follow the order the messages were handed to the producer
    last_index = {}
    for (p, o) in sorted(produced.records):
        key, value = produced.records[(p, o)]
        index = int(value.rpartition(b"msg-")[2])
        assert last_index.get(key, -1) < index, f"key {key!r}: message {index} stored after a later one"
        last_index[key] = index
    seen = defaultdict(int)
    for log in logs:
        assert not log.errors, f"{log.name}: {log.errors[:5]}"
        for (gen, p), recs in log.sessions.items():
            offsets = [o for o, _, _ in recs]
            first = offsets[0]
            assert offsets == list(range(first, first + len(offsets))), (
                f"{log.name} partition {p} (assignment {gen}): offsets not consecutive/in order: "
                f"{_first_break(offsets)}")
            for o, k, v in recs:
                want = produced.records.get((p, o))
                assert want is not None, f"{log.name} consumed ({p}, {o}), which was never produced"
                assert (k, v) == want, f"({p}, {o}): consumed {(k, v)!r}, produced {want!r}"
                seen[(p, o)] += 1
    missing = set(produced.records) - set(seen)
    assert not missing, f"{len(missing)} produced records never consumed, e.g. {sorted(missing)[:10]}"
    return {"ends": ends, "duplicates": sum(n - 1 for n in seen.values()), "consumed": sum(seen.values())}


def _first_break(offsets: list[int]) -> str:
    for a, b in zip(offsets, offsets[1:]):
        if b != a + 1:
            return f"... {a} then {b} ..."
    return "?"
