"""The load test: one pika publisher with confirms, five pika consumer processes (prefetch 50,
manual acks), N persistent messages through a topic exchange into three durable queues, and one
consumer SIGKILLed halfway. Nothing may be lost; a message may be seen twice only if the later
delivery says ``redelivered``.

Routing (each message reaches known queues)::

    key                  order.*.eu (A)  order.# (B)  *.priority.* (C)
    order.std.eu         yes             yes          -
    order.priority.us    -               yes          yes
    stock.priority.eu    -               -            yes

``AMQP_COMPAT_LOAD_MESSAGES`` sets N (default 20000; the issue asks for 100,000 by hand).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from .helpers import connect, declare_ok, unique, wait_until
from .load_clients import KEYS, routing_key

N = int(os.environ.get("AMQP_COMPAT_LOAD_MESSAGES", "20000"))
CONSUMERS = 5
PREFETCH = 50
BINDINGS = {"A": "order.*.eu", "B": "order.#", "C": "*.priority.*"}
ROUTES = {"order.std.eu": ("A", "B"), "order.priority.us": ("B", "C"), "stock.priority.eu": ("C",)}
ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 120 + N / 100  # seconds for the whole flow; RabbitMQ needs a small fraction of it


def _expected(queues: dict[str, str]) -> set[tuple[str, str]]:
    assert set(ROUTES) == set(KEYS)
    return {(queues[label], str(i)) for i in range(N) for label in ROUTES[routing_key(i)]}


class ConsumerOutput:
    """Reads the consumers' output files incrementally: ``queue message_id redelivered`` lines."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self.offsets = [0] * len(paths)
        self.deliveries: list[list[tuple[str, str, bool]]] = [[] for _ in paths]

    def poll(self) -> int:
        for k, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[k])
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1
            self.offsets[k] += end
            for line in data[:end].decode().splitlines():
                q, mid, redelivered = line.split(" ")
                self.deliveries[k].append((q, mid, redelivered == "1"))
        return self.total

    @property
    def total(self) -> int:
        return sum(map(len, self.deliveries))

    def seen(self) -> set[tuple[str, str]]:
        return {(q, m) for d in self.deliveries for q, m, _ in d}


@pytest.mark.timeout(int(DEADLINE + 180))
def test_load_topic_confirms_consumers_with_a_kill(amqp_broker, tmp_path):
    name = unique("load")
    queues = {label: f"{name}-{label}" for label in BINDINGS}
    conn = connect(amqp_broker)
    ch = conn.channel()
    ch.exchange_declare(name, "topic", durable=True)
    for label, pattern in BINDINGS.items():
        ch.queue_declare(queues[label], durable=True)
        ch.queue_bind(queues[label], name, pattern)
    expected = _expected(queues)
    url = amqp_broker.url + "?heartbeat=30&connection_attempts=1"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    outs = [tmp_path / f"consumer-{k}.txt" for k in range(CONSUMERS)]
    logs = [tmp_path / f"consumer-{k}.log" for k in range(CONSUMERS)]
    # consumer 0, the one to be killed, acks only every half second: it dies holding deliveries
    # it has already recorded, which must come back to the others flagged redelivered
    consumers = [subprocess.Popen([sys.executable, "-m", "compat_tests.amqp.load_clients", "consume", url, str(out),
                                   *queues.values(), "--prefetch", str(PREFETCH),
                                   "--ack-interval", "0.5" if k == 0 else "0"],
                                  cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=open(log, "wb"),
                                  stderr=subprocess.STDOUT)
                 for k, (out, log) in enumerate(zip(outs, logs))]
    publisher = None
    try:
        for k, (proc, log) in enumerate(zip(consumers, logs)):
            wait_until(lambda: proc.poll() is not None or b"ready" in log.read_bytes(), 30,
                       f"consumer {k} to start")
            assert proc.poll() is None, f"consumer {k} exited: {log.read_text()}"
        began = time.monotonic()
        pub_log = tmp_path / "publisher.log"
        publisher = subprocess.Popen([sys.executable, "-m", "compat_tests.amqp.load_clients", "publish", url, name,
                                      str(N)], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=open(pub_log, "wb"), stderr=subprocess.STDOUT)
        output = ConsumerOutput(outs)
        victim = consumers[0]
        wait_until(lambda: output.poll() >= len(expected) // 2 and output.deliveries[0], DEADLINE,
                   f"half of the {len(expected)} deliveries (seen {output.total}) with some at consumer 0",
                   interval=0.05)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = output.poll()

        assert publisher.wait(DEADLINE) == 0, f"publisher failed: {pub_log.read_text()[-3000:]}"
        result = json.loads(pub_log.read_text().strip().splitlines()[-1])
        assert result["error"] is None and result["nacked"] == [] and result["acked"] == N, result

        def complete():
            output.poll()
            return expected <= output.seen()
        wait_until(complete, DEADLINE, f"every (queue, message) delivered at least once "
                                       f"({len(expected - output.seen())} of {len(expected)} missing)", interval=0.1)
        wait_until(lambda: all(declare_ok(ch, q).message_count == 0 for q in queues.values()), 60,
                   "the queues to be drained")
        took = time.monotonic() - began
        for k, proc in enumerate(consumers[1:], 1):
            proc.send_signal(signal.SIGTERM)
        for k, proc in enumerate(consumers[1:], 1):
            assert proc.wait(30) == 0, f"consumer {k} exited with {proc.returncode}: {logs[k].read_text()[-2000:]}"
        output.poll()
    finally:
        for proc in consumers + ([publisher] if publisher else []):
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    # Every delivery was expected; every expected one came; repeats only as redeliveries.
    seen = output.seen()
    assert seen - expected == set(), f"unexpected deliveries, e.g. {sorted(seen - expected)[:5]}"
    assert expected - seen == set(), f"lost: {len(expected - seen)}, e.g. {sorted(expected - seen)[:5]}"
    first_deliveries = Counter((q, m) for d in output.deliveries for q, m, r in d if not r)
    twice = [k for k, c in first_deliveries.items() if c > 1]
    assert not twice, f"{len(twice)} messages delivered twice without redelivered=True, e.g. {twice[:5]}"
    redelivered = [(q, m) for d in output.deliveries for q, m, r in d if r]
    # the kill left the victim's unacked messages to be redelivered to the others
    assert redelivered, "a consumer was killed with messages in flight, yet nothing was redelivered"
    per_queue = defaultdict(int)
    for q, _ in seen:
        per_queue[q] += 1
    assert dict(per_queue) == {queues["A"]: len([i for i in range(N) if i % 3 == 0]),
                               queues["B"]: len([i for i in range(N) if i % 3 in (0, 1)]),
                               queues["C"]: len([i for i in range(N) if i % 3 in (1, 2)])}
    # nothing left behind once the survivors have acked and gone
    assert all(declare_ok(ch, q).message_count == 0 for q in queues.values())
    for q in queues.values():
        ch.queue_delete(q)
    ch.exchange_delete(name)
    conn.close()
    print(f"\nload[{amqp_broker.target}]: {N} messages, {len(expected)} deliveries + {len(redelivered)} "
          f"redelivered in {took:.1f}s (publisher {result['seconds']}s); kill at {killed_at} deliveries")
