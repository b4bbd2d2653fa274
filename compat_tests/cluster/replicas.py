"""Compare the replicas of a partition on disk, after every broker has stopped cleanly.

Each broker checkpoints its high watermarks to ``<data-dir>/high-watermarks.json``
(core/hw_checkpoint.py). Below the lowest of those among a partition's replicas, every
replica must hold the same batches, byte for byte: offsets, producer ids and sequences,
CRCs and the 4-byte partition leader epoch (stamped by the leader, outside the CRC, so a
follower that re-stamps it would still pass a CRC check but not this one).

The log files are read with core.log.PartitionLog from a copy of each partition directory,
so that opening a log (which may tidy leftovers or rebuild an index) never touches a
broker's own files.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from core.hw_checkpoint import read_high_watermarks
from core.log import PartitionLog
from core.log_manager import partition_dir_name
from wire.records import decode_batch, iter_batches

Batch = tuple[int, int, bytes]  # (base offset, last offset, stored bytes)


def stored_batches(data_dir: Path, topic: str, partition: int, below: int) -> list[Batch] | None:
    """The batches of one replica whose base offset is below ``below``; None if it has no log."""
    src = Path(data_dir) / partition_dir_name(topic, partition)
    if not src.is_dir():
        return None
    with tempfile.TemporaryDirectory(prefix="replica-") as tmp:
        copy = Path(tmp) / src.name
        shutil.copytree(src, copy)
        log = PartitionLog(copy)
        try:
            out: list[Batch] = []
            offset = log.log_start_offset
            while offset < min(below, log.next_offset):
                data = bytearray(log.read(offset, 1 << 20, max_offset=below).records)
                if not data:
                    break
                for pos, header in iter_batches(data):
                    last = header.base_offset + header.last_offset_delta
                    out.append((header.base_offset, last, bytes(data[pos:pos + header.size])))
                    offset = last + 1
            return out
        finally:
            log.close()


def copies_of(data_dir: Path, topic: str, partition: int, values: set[bytes]) -> dict[bytes, list[tuple]]:
    """Where each of ``values`` is stored in one replica: value -> [(offset, producer id, producer
    epoch, sequence)], from the batch headers (to tell a broker's duplicate from a client's re-send)."""
    found: dict[bytes, list[tuple]] = {v: [] for v in values}
    for base, _last, raw in stored_batches(data_dir, topic, partition, 1 << 62) or []:
        batch = decode_batch(raw)
        for i, record in enumerate(batch.records):
            if record.value in found:
                seq = batch.base_sequence + i if batch.base_sequence >= 0 else -1
                found[record.value].append((record.offset, batch.producer_id, batch.producer_epoch, seq))
    return found


def split_duplicates(data_dirs: dict[int, Path], replicas: dict[int, list[int]], topic: str,
                     values: set[bytes]) -> tuple[list, list]:
    """Duplicated ``values`` as (stored twice within one producer epoch: the broker's fault, sent
    again by the client under a new producer epoch). Idempotence holds within an epoch, in Kafka
    too; librdkafka may bump its epoch and send a cut-off batch again (OUT_OF_ORDER_SEQUENCE_NUMBER
    on a later batch: "skipped sequence numbers, recovering and retrying"), copies no broker can
    match. Read from the batch headers of each partition's first replica."""
    same_epoch, re_sent = [], []
    for p, nodes in replicas.items():
        for value, copies in copies_of(data_dirs[nodes[0]], topic, p, set(values)).items():
            if len(copies) > 1:
                epochs = {(pid, epoch) for _offset, pid, epoch, _seq in copies}
                (same_epoch if len(epochs) < len(copies) else re_sent).append((value.decode(), copies))
    return same_epoch, re_sent


def compare_replicas(data_dirs: dict[int, Path], topic: str, partition: int, replicas: list[int]) -> list[str]:
    """Problems found among ``replicas`` (broker ids) of one partition; [] if byte-identical."""
    hws = {}
    for node in replicas:
        checkpoint = read_high_watermarks(data_dirs[node]) or {}
        hws[node] = checkpoint.get(topic, {}).get(partition)
    missing = [n for n, hw in hws.items() if hw is None]
    if missing:
        return [f"{topic}-{partition}: brokers {missing} have no high watermark for it in high-watermarks.json"]
    below = min(hws.values())
    logs = {n: stored_batches(data_dirs[n], topic, partition, below) for n in replicas}
    problems = [f"{topic}-{partition}: broker {n} has no partition directory" for n, b in logs.items() if b is None]
    reference_node = replicas[0]
    reference = logs[reference_node]
    for node in replicas[1:]:
        batches = logs[node]
        if reference is None or batches is None or batches == reference:
            continue
        problems.append(f"{topic}-{partition} below HW {below}: broker {node} differs from broker "
                        f"{reference_node}: {first_difference(reference, batches)}")
    return problems


def first_difference(a: list[Batch], b: list[Batch]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            if x[:2] != y[:2]:
                return f"batch #{i}: offsets {x[0]}..{x[1]} vs {y[0]}..{y[1]}"
            at = next(k for k in range(min(len(x[2]), len(y[2]))) if x[2][k] != y[2][k]) \
                if len(x[2]) == len(y[2]) else None
            field = "partition leader epoch" if at is not None and 12 <= at < 16 else f"byte {at}"
            return f"batch #{i} (offsets {x[0]}..{x[1]}): {field} differs" if at is not None \
                else f"batch #{i} (offsets {x[0]}..{x[1]}): sizes {len(x[2])} vs {len(y[2])}"
    return f"{len(a)} vs {len(b)} batches (last offsets {a[-1][1] if a else None} vs {b[-1][1] if b else None})"


def high_watermarks(data_dirs: dict[int, Path], topic: str, partition: int) -> dict[int, int | None]:
    return {n: (read_high_watermarks(d) or {}).get(topic, {}).get(partition) for n, d in data_dirs.items()}
