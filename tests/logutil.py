"""Helpers for the log tests: a settable clock and batch makers."""
from __future__ import annotations

from wire.records import Record, encode_batch, simple_batch


class FakeClock:
    """A clock the test moves by hand (seconds, like time.time)."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def batch(n: int = 1, *, size: int = 10, ts: int = 1_700_000_000_000, prefix: bytes = b"v", compression: int = 0) -> bytes:
    values = [(prefix + b"%d-" % i).ljust(size, b".") for i in range(n)]
    return simple_batch(values, timestamp_ms=ts, compression=compression)


def keyed_batch(pairs, *, ts: int = 1_700_000_000_000) -> bytes:
    """A batch from (key, value) pairs; value None is a tombstone."""
    records = [Record(offset=i, timestamp=ts, key=k, value=v) for i, (k, v) in enumerate(pairs)]
    return encode_batch(records)
