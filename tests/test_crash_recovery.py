"""kill -9 a real writer process at random moments, many times; nothing flushed may be lost.

Each round starts tests/crash_writer.py on the same data directory, lets it append and
fsync for a random while, kills it with SIGKILL, sometimes damages the unflushed tail
the way a power cut would (cut at a random byte, or garbage appended), then recovers the
log in this process and checks:

* every batch the writer reported as flushed is there, byte for byte (apart from the
  base offset and leader epoch the log writes in place), at the right offsets;
* whatever else survived is a clean continuation (the next generated batches, whole);
  nothing past a torn write is served.

Rounds: GATEWAY_CRASH_ROUNDS (default 100; run 1000 by hand for a soak).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.crash_writer import TOPIC, count_batches, generated_batch, open_log
from wire.records import decode_batch, iter_batches

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("GATEWAY_CRASH_ROUNDS", "100"))


def run_writer(data_dir: Path, seed: int, rng: random.Random) -> tuple[int, int, int]:
    """Start the writer, kill it after a random time; return its last flush promise."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.crash_writer", str(data_dir), str(seed)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    first = proc.stdout.readline().split()
    assert first and first[0] == "ready", proc.stderr.read()
    # Recovery fsync'd what it kept: a writer killed before its first flush still promised that.
    promise = (int(first[1]), int(first[2]), int(first[3]))
    time.sleep(rng.uniform(0.0, 0.25))
    proc.send_signal(signal.SIGKILL)
    out, _err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "flushed":
            promise = (int(parts[1]), int(parts[2]), int(parts[3]))
    return promise


def damage_unflushed_tail(data_dir: Path, promise, rng: random.Random) -> str:
    """Mimic a power cut: lose or garble bytes past what was fsync'd (never before it)."""
    _count, base, flushed_size = promise
    segments = sorted((data_dir / f"{TOPIC}-0").glob("*.log"))
    if not segments:
        return "none"
    last = segments[-1]
    floor = flushed_size if base >= 0 and int(last.stem) == base else 0
    size = last.stat().st_size
    choice = rng.choice(["none", "cut", "garbage", "zeros"])
    if choice == "cut" and size > floor:
        os.truncate(last, rng.randint(floor, size - 1))
    elif choice == "garbage":
        with open(last, "ab") as f:
            f.write(rng.randbytes(rng.randint(1, 300)))
    elif choice == "zeros":
        with open(last, "ab") as f:
            f.write(bytes(rng.randint(1, 100)))
    return choice


_FIRST_OFFSETS = [0]


def first_offset_of(i: int) -> int:
    """Where generated batch ``i`` must start: the records of every batch before it."""
    while len(_FIRST_OFFSETS) <= i:
        n = len(_FIRST_OFFSETS) - 1
        _FIRST_OFFSETS.append(_FIRST_OFFSETS[-1] + decode_batch(generated_batch(n)).last_offset + 1)
    return _FIRST_OFFSETS[i]


def check_log(data_dir: Path, promised: int, start: int = 0) -> int:
    """Recover the log and check batches ``start``.. to its end (all of them: start=0)."""
    manager, plog = open_log(data_dir)
    try:
        stored = count_batches(plog)
        assert stored >= promised, f"{promised} batches were flushed but only {stored} survived"
        start = min(start, stored)
        offset = first_offset_of(start)
        for i in range(start, stored):
            data = plog.read(offset, 1).records
            batches = list(iter_batches(bytearray(data)))
            assert len(batches) == 1
            pos, header = batches[0]
            expected = generated_batch(i)
            assert header.base_offset == offset, f"batch {i} at offset {header.base_offset}, expected {offset}"
            assert data[16:] == expected[16:], f"batch {i} differs from what was written"
            offset = header.last_offset + 1
        assert plog.next_offset == offset == first_offset_of(stored)
        assert plog.high_watermark == offset
        return stored
    finally:
        for p in manager.logs.values():  # leave no clean-shutdown marker: the next writer recovers too
            for segment in p.segments:
                segment.close()


def test_kill_9_at_random_moments_loses_nothing_flushed(tmp_path):
    rng = random.Random(20261122)
    for i in range(5):  # the generator itself is deterministic, or byte checks mean nothing
        assert generated_batch(i) == generated_batch(i)
    stored = 0
    damages = {}
    for round_ in range(ROUNDS):
        promise = run_writer(tmp_path, round_, rng)
        assert promise[0] >= stored, "the writer must resume after what was recovered"
        kind = damage_unflushed_tail(tmp_path, promise, rng)
        damages[kind] = damages.get(kind, 0) + 1
        # The tail is what a kill can harm: check from a little before the last round's end.
        stored = check_log(tmp_path, promise[0], start=max(stored - 50, 0))
    assert stored > ROUNDS  # the rounds did real work
    assert check_log(tmp_path, stored) == stored  # and one full pass over everything
    print(f"{ROUNDS} kill -9 rounds, {stored} batches in the log, damage: {damages}")
