"""Byte-rate quotas on Produce and Fetch, measured as Kafka's ClientQuotaManager measures them.

Bytes are counted per bucket (see :meth:`core.quotas.ClientQuotaStore.byte_rate`) in samples of
one second, eleven kept (Kafka's ``quota.window.size.seconds`` and ``quota.window.num``). The
rate is their sum over the time they span, counted as at least ten whole windows so a burst
right after a quiet spell is not divided by a sliver of time. Over the quota, the throttle is
Kafka's: ``(rate - quota) / quota * span``; the response carries it as ``throttle_time_ms`` and
is held back that long, so the client (which also waits that long before its next request to
this broker) slows down to the quota. Unlike Kafka's, the throttle time (and so the hold) is
bounded by the window span, 11 s: a held response must arrive inside a client's request timeout
(30 s by default), and an excess left over still shows in the window, so the next request is
throttled again.

A Fetch over the quota gets no records (its bytes are not counted), as Kafka answers it; a
Produce over the quota is appended and acknowledged late. Replica fetches are not throttled.

``request_percentage`` (Kafka's request quota) is measured the same way over the time the broker
spends handling a client's requests on its one event-loop thread: 100 is the whole of that
thread for the client, 50 half of it. Over it, any response (but ApiVersions and the SASL
handshake, which Kafka exempts too) carries the throttle in its ``throttle_time_ms`` and is
held back that long; with a byte-rate throttle as well, the longer one applies.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Callable

from twisted.internet import task

from core.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ClientQuotaStore
from gateway.cluster import shared_docs

WINDOW_S = 1.0
SAMPLES = 11
MAX_THROTTLE_MS = int(SAMPLES * WINDOW_S * 1000)


class Rate:
    """Kafka's sampled Rate: bytes per second over the last ``SAMPLES`` windows."""

    __slots__ = ("samples",)

    def __init__(self):
        self.samples: deque[list[float]] = deque()  # [window start, bytes]

    def record(self, value: float, now: float) -> None:
        if not self.samples or now - self.samples[-1][0] >= WINDOW_S:
            self.samples.append([now, 0.0])
            while len(self.samples) > SAMPLES:
                self.samples.popleft()
        self.samples[-1][1] += value

    def measure(self, now: float) -> tuple[float, float]:
        """(bytes per second, span in seconds)."""
        while self.samples and now - self.samples[0][0] >= SAMPLES * WINDOW_S:
            self.samples.popleft()
        if not self.samples:
            return 0.0, (SAMPLES - 1) * WINDOW_S
        span = now - self.samples[0][0]
        full = int(span // WINDOW_S)
        if full < SAMPLES - 1:
            span += (SAMPLES - 1 - full) * WINDOW_S
        return sum(v for _, v in self.samples) / span, span


class Quotas:
    def __init__(self, store: ClientQuotaStore, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.clock = clock
        self._rates: dict[tuple, Rate] = {}

    def record(self, key: str, user: str, client_id: str, size: int, *, take_back: bool = False) -> int:
        """Count ``size`` bytes; the throttle (ms) if that puts the bucket over its quota.
        ``take_back``: a throttled request's bytes are not counted (its answer is empty)."""
        if not self.store.has(key):
            return 0
        quota = self.store.byte_rate(key, user, client_id)
        if quota is None:
            return 0
        limit, bucket = quota
        now = self.clock()
        rate = self._rates.get((key, *bucket))
        if rate is None:
            if len(self._rates) > 10_000:  # forget buckets that have been quiet for a whole window span
                self._rates = {k: r for k, r in self._rates.items() if r.measure(now)[0] > 0}
            rate = self._rates[(key, *bucket)] = Rate()
        rate.record(size, now)
        observed, span = rate.measure(now)
        if limit <= 0:
            throttle = MAX_THROTTLE_MS if size else 0
        elif observed <= limit:
            return 0
        else:
            throttle = min(MAX_THROTTLE_MS, round((observed - limit) / limit * span * 1000))
        if throttle and take_back:
            rate.record(-size, now)
        return throttle


def quotas_of(ctx) -> Quotas:
    """The broker's quotas, loaded on first use from the data directory (cluster mode: ZooKeeper)."""
    q = ctx.quotas
    if q is None:
        q = ctx.quotas = Quotas(ClientQuotaStore(ctx.logs.data_dir, shared_docs.document(ctx, shared_docs.QUOTAS)))
    return q


def _client(conn, h) -> tuple[str, str]:
    return conn.principal_name, h.client_id or ""


def produce_throttle_ms(ctx, conn, h, size: int) -> int:
    return quotas_of(ctx).record(PRODUCER_BYTE_RATE, *_client(conn, h), size)


def fetch_throttle_ms(ctx, conn, h, size: int) -> int:
    return quotas_of(ctx).record(CONSUMER_BYTE_RATE, *_client(conn, h), size, take_back=True)


def fetch_max_bytes(ctx, conn, h) -> int:
    """The most a consumer's fetch may return: Kafka's getMaxValueInQuotaWindow, quota x 10 s (a
    larger answer would be throttled even after a quiet spell); no limit without a quota."""
    q = quotas_of(ctx)
    if not q.store.has(CONSUMER_BYTE_RATE):
        return 0x7FFFFFFF
    quota = q.store.byte_rate(CONSUMER_BYTE_RATE, *_client(conn, h))
    return 0x7FFFFFFF if quota is None else max(int(quota[0] * (SAMPLES - 1) * WINDOW_S), 1)


EXEMPT_FROM_REQUEST_QUOTA = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


def request_throttle_ms(ctx, conn, request, busy_s: float) -> int:
    """Count ``busy_s`` seconds of handling for this client; the throttle (ms) once that puts it
    over its ``request_percentage``. Followers' fetches are not counted."""
    h = request.header
    if h.api_key in EXEMPT_FROM_REQUEST_QUOTA or _from_replica(h.api_key, request.body):
        return 0
    q = quotas_of(ctx)
    if not q.store.has(REQUEST_PERCENTAGE):
        return 0
    return q.record(REQUEST_PERCENTAGE, *_client(conn, h), busy_s * 100)


def _from_replica(api_key: int, body) -> bool:
    if api_key != 1 or body is None:
        return False
    state = getattr(body, "replica_state", None)  # Fetch v15+
    return (state.replica_id if state is not None else getattr(body, "replica_id", -1)) >= 0


def hold(ctx, data: bytes, throttle_ms: int):
    """The response now, or a Deferred firing with it after the throttle time."""
    if throttle_ms <= 0:
        return data
    return task.deferLater(ctx.reactor, throttle_ms / 1000, lambda: data)
