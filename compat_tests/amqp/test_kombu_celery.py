"""kombu (py-amqp transport) and a real celery worker process against the broker."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import kombu
import pytest
from kombu.simple import SimpleQueue

from .celery_tasks import BROKER_ENV, QUEUE_ENV, make_app
from .helpers import unique, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _kombu_url(amqp_broker) -> str:
    return f"pyamqp://guest:guest@{amqp_broker.host}:{amqp_broker.port}//"


@pytest.fixture
def kconn(amqp_broker):
    conn = kombu.Connection(_kombu_url(amqp_broker), connect_timeout=5, transport_options={"confirm_publish": True})
    conn.connect()
    assert conn.transport.driver_name == "py-amqp"
    yield conn
    conn.release()


def _drain(conn, consumer_messages: list, n: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while len(consumer_messages) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"received {len(consumer_messages)} of {n} messages within {timeout}s")
        try:
            conn.drain_events(timeout=min(remaining, 0.5))
        except TimeoutError:
            pass
        except OSError as e:  # socket.timeout on older py-amqp
            if "timed out" not in str(e):
                raise


def test_kombu_producer_consumer_direct_exchange(kconn, name):
    exchange = kombu.Exchange(name + "-x", type="direct", durable=False, auto_delete=True)
    queue = kombu.Queue(name, exchange=exchange, routing_key="tasks.k", durable=False, auto_delete=True)
    received = []

    def on_message(body, message):
        received.append((body, message.headers, message.properties.get("content_type"),
                         message.delivery_info["routing_key"]))
        message.ack()

    with kombu.Consumer(kconn, queues=[queue], callbacks=[on_message], accept=["json"]):
        producer = kombu.Producer(kconn)
        for i in range(5):
            producer.publish({"i": i, "text": "hé"}, exchange=exchange, routing_key="tasks.k",
                             serializer="json", headers={"seq": i}, declare=[queue], retry=False)
        producer.publish({"i": "wrong key"}, exchange=exchange, routing_key="other", serializer="json")
        _drain(kconn, received, 5)
    assert [r[0] for r in received] == [{"i": i, "text": "hé"} for i in range(5)]
    assert [r[1]["seq"] for r in received] == list(range(5))
    assert all(r[2] == "application/json" and r[3] == "tasks.k" for r in received)


def test_kombu_simple_queue(kconn, name):
    q: SimpleQueue = kconn.SimpleQueue(name, queue_opts={"durable": False, "auto_delete": False})
    try:
        for i in range(3):
            q.put({"n": i}, serializer="json")
        wait_until(lambda: q.qsize() == 3, what="qsize 3")
        got = []
        for _ in range(3):
            msg = q.get(block=True, timeout=5)
            got.append(msg.payload)
            msg.ack()
        assert got == [{"n": 0}, {"n": 1}, {"n": 2}]
        with pytest.raises(q.Empty):
            q.get(block=True, timeout=0.3)
        q.put({"n": "last"})
        assert q.get(timeout=5).payload == {"n": "last"}  # unacked: back in the queue on close
    finally:
        q.close()
        ch = kconn.channel()
        kombu.Queue(name, durable=False)(ch).delete()
        ch.close()


def test_kombu_fanout_broadcast(amqp_broker, kconn, name):
    exchange = kombu.Exchange(name + "-fan", type="fanout", durable=False, auto_delete=True)
    conns = [kombu.Connection(_kombu_url(amqp_broker), connect_timeout=5) for _ in range(3)]
    received = {i: [] for i in range(3)}
    consumers = []
    try:
        for i, c in enumerate(conns):
            q = kombu.Queue(f"{name}-{i}", exchange=exchange, exclusive=True, auto_delete=True)
            cons = kombu.Consumer(c, queues=[q], accept=["json"],
                                  callbacks=[lambda body, msg, i=i: (received[i].append(body), msg.ack())])
            cons.consume()
            consumers.append(cons)
        producer = kombu.Producer(kconn, exchange=exchange)
        for n in range(4):
            producer.publish({"n": n}, serializer="json", retry=False)
        for i, c in enumerate(conns):
            _drain(c, received[i], 4)
        assert all(received[i] == [{"n": n} for n in range(4)] for i in range(3)), received
    finally:
        for cons in consumers:
            cons.cancel()
        for c in conns:
            c.release()


@pytest.fixture
def celery_worker(amqp_broker, tmp_path):
    """A real ``celery worker`` subprocess (solo pool) on a queue of its own."""
    queue = unique("celery")
    url = f"amqp://guest:guest@{amqp_broker.host}:{amqp_broker.port}//"
    env = {**os.environ, BROKER_ENV: url, QUEUE_ENV: queue, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "worker.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "compat_tests.amqp.celery_tasks", "worker", "--pool=solo",
         "--concurrency=1", "--without-gossip", "--without-mingle",
         "-Q", queue, "-n", f"{queue}@%h", "--loglevel=INFO"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or " ready." in log.read_text(errors="replace"),
                   timeout=60, what="the celery worker to be ready", interval=0.1)
        assert proc.poll() is None, f"celery worker exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
        app = make_app(url, queue)
        yield app, proc, log
        app.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_celery_worker_runs_tasks_and_retries(celery_worker):
    app, proc, log = celery_worker
    add = app.signature("compat.add")
    assert add.delay(2, 3).get(timeout=20) == 5
    results = [app.signature("compat.add").delay(i, i) for i in range(10)]
    assert [r.get(timeout=20) for r in results] == [2 * i for i in range(10)]
    flaky = app.signature("compat.flaky").delay("x")
    assert flaky.get(timeout=30) == {"value": "x", "retries": 1}
    text = log.read_text(errors="replace")
    assert "Retry in" in text, text[-3000:]
    # a clean (warm) shutdown
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    assert code == 0, f"celery worker exited with {code} on SIGTERM:\n{log.read_text()[-4000:]}"
