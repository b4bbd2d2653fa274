"""Log micro-benchmark: append and read MB/s against the disk's own limit.

For 1 KB records in batches of 16 KB to 1 MB it measures, on a fresh log each time:

* append, one fsync at the end (the group-commit case: many appends, one fsync);
* append with an fsync after every batch (the worst case for a synchronous producer);
* read of the whole log back in 1 MB fetches.

Beside them it runs dd on the same file system, as the peer of each row: for "fsync at end",
``dd if=/dev/zero bs=1M conv=fdatasync`` (the physical limit for sequential writes made
durable); for "fsync per batch", ``dd bs=<the batch size> oflag=dsync``, a synchronous write per
block of the same size, which is what a producer waiting for every batch costs the disk. Ratios
are ours / dd, both measured in this run (the machine is shared, so absolute numbers drift;
ratios drift less).

    python -m bench log [--mb 256] [--dir DIR] [--json .cache/bench/results/log.json]
"""
from __future__ import annotations

import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from core.config import TopicConfig
from core.log import PartitionLog
from wire.records import simple_batch

BATCH_SIZES = [16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024]
RECORD = 1024


def dd_limit(directory: Path, mb: int, block: int = 1024 * 1024, sync_each: bool = False) -> float:
    """MB/s of dd writing ``mb`` MiB in ``block``-byte writes (median of three), made durable at
    the end (``conv=fdatasync``) or after every block (``oflag=dsync``)."""
    target = directory / "dd.bin"
    rates = []
    for _ in range(3):
        done = subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", f"bs={block}", f"count={max(mb * 1024 * 1024 // block, 1)}",
             "oflag=dsync" if sync_each else "conv=fdatasync"],
            capture_output=True, text=True, check=True,
        )
        m = re.search(r"(\d+) bytes .* copied, ([\d.,]+) s", done.stderr)
        rates.append(int(m.group(1)) / float(m.group(2).replace(",", ".")) / 1e6)
        target.unlink()
    return statistics.median(rates)


def one_run(directory: Path, batch_bytes: int, total_mb: int, fsync_each: bool) -> tuple[float, float]:
    """(append MB/s, read MB/s) for one batch size."""
    per_batch = max(batch_bytes // RECORD, 1)
    batch = simple_batch([b"x" * (RECORD - 20)] * per_batch, timestamp_ms=int(time.time() * 1000))
    count = max(total_mb * 1024 * 1024 // len(batch), 1)
    config = TopicConfig.from_strings({"flush.messages": "1" if fsync_each else str(2**62)})
    log = PartitionLog(directory / f"b{batch_bytes}-{int(fsync_each)}", config)
    start = time.perf_counter()
    for _ in range(count):
        log.append(batch)
        if fsync_each:
            log.flush()
    log.flush()
    append_s = time.perf_counter() - start
    written = count * len(batch) / 1e6
    start = time.perf_counter()
    offset, read = 0, 0
    while offset < log.next_offset:
        info = log.read(offset, 1024 * 1024)
        read += len(info.records)
        offset = _next_offset(info.records)
    read_s = time.perf_counter() - start
    log.delete()
    return written / append_s, read / 1e6 / read_s


def _next_offset(data: bytes) -> int:
    """One past the last offset in a run of whole batches."""
    pos, last = 0, 0
    while pos + 27 <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big")
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        delta = int.from_bytes(data[pos + 23:pos + 27], "big")
        last = base + delta + 1
        pos += 12 + length
    return last


def add_arguments(parser) -> None:
    parser.add_argument("--mb", type=int, default=256, help="MiB written per measurement (default 256)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir under .cache/bench)")


def run(args):
    from bench import peers
    samples = peers.Samples("log", "dd")
    base = args.dir or peers.CACHE
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="logbench-", dir=base) as tmp:
        directory = Path(tmp)
        print(f"measuring dd conv=fdatasync ({args.mb} MiB x3) ...", flush=True)
        limit = dd_limit(directory, args.mb)
        synced: dict[int, float] = {}  # batch size -> dd oflag=dsync MB/s
        for size in BATCH_SIZES:
            for fsync_each in (False, True):
                mb = args.mb if not fsync_each else min(args.mb, 64 if size < 256 * 1024 else args.mb)
                how = "fsync per batch" if fsync_each else "fsync at end"
                print(f"  batch {size // 1024} KiB, {how} ({mb} MiB) ...", flush=True)
                append, read = one_run(directory, size, mb, fsync_each)
                peer = dd_limit(directory, mb, size, sync_each=True) if fsync_each else limit
                if fsync_each:
                    synced[size] = peer
                samples.add(f"append {size // 1024} KiB batches, {how}", "broker", append, unit="MB/s")
                samples.add(f"append {size // 1024} KiB batches, {how}", "peer", peer, unit="MB/s")
                if not fsync_each:
                    samples.add(f"read {size // 1024} KiB batches", "broker", read, unit="MB/s")
    notes = [f"peer of the fsync-at-end rows: dd if=/dev/zero bs=1M conv=fdatasync on the same file system, "
             f"{limit:.1f} MB/s (the physical limit for durable sequential writes); peer of the fsync-per-batch "
             "rows: dd bs=<batch> oflag=dsync (one synchronous write per block), "
             + ", ".join(f"{k // 1024} KiB {v:.1f} MB/s" for k, v in synced.items())
             + "; log rows are one run each"]
    return peers.SuiteResult("log", samples.rows(), notes,
                             {"dd": "dd bs=1M conv=fdatasync (fsync at end) / dd bs=<batch> oflag=dsync "
                                    "(fsync per batch), same disk"},
                             {"dd_mb_s": round(limit, 1), "dd_dsync_mb_s": {str(k): round(v, 1) for k, v in synced.items()},
                              "mb": args.mb})


def main(argv=None) -> int:
    from bench import peers
    return peers.suite_main("log", __doc__, add_arguments, run, argv)
