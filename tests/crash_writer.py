"""The victim of test_crash_recovery: appends batches to a log until it is killed.

Batch i is a pure function of i (see ``generated_batch``), so the test can say exactly
which bytes must be in the log. After every fsync the writer prints one line
``flushed <batches> <active segment base> <active segment size>`` and flushes stdout:
that line is a promise that those batches survive any kill. The first line,
``ready <batches> <base> <size>``, is the same promise for what recovery left (fsync'd).
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from wire.records import iter_batches, simple_batch

TOPIC = "crash"
CONFIGS = {"segment.bytes": str(64 * 1024), "index.interval.bytes": "1024"}
TS = 1_700_000_000_000


def generated_batch(i: int) -> bytes:
    rng = random.Random(i)
    values = [rng.randbytes(rng.randint(0, 400)) for _ in range(rng.randint(1, 12))]
    return simple_batch(values, timestamp_ms=TS + i, compression=rng.choice([0, 2, 3, 4]))


def count_batches(plog) -> int:
    return sum(1 for s in plog.segments for _ in s.iter_positions())


def open_log(data_dir: Path):
    store = LocalMetadataStore(data_dir)
    manager = LogManager(data_dir, store)
    manager.startup()
    if store.get_topic(TOPIC) is None:
        manager.create_topic(TOPIC, 1, CONFIGS)
    return manager, manager.get_log(TOPIC, 0)


def main() -> None:
    data_dir, seed = Path(sys.argv[1]), int(sys.argv[2])
    _manager, plog = open_log(data_dir)
    i = count_batches(plog)
    rng = random.Random(seed)
    print("ready", i, plog.active.base_offset, plog.active.size, flush=True)
    while True:
        for _ in range(rng.randint(1, 6)):
            plog.append(generated_batch(i))
            i += 1
        plog.flush()
        print("flushed", i, plog.active.base_offset, plog.active.size, flush=True)


if __name__ == "__main__":
    main()
