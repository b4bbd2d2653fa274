"""``gateway serve --processes N``: N brokers on this machine as one cluster with a private
ZooKeeper, one command, clients bootstrapping from any of them, and one SIGTERM stopping all."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pika
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.config import load_settings
from gateway.processes import NotListening, listeners_path, node_args, wait_for_listeners

ROOT = Path(__file__).resolve().parent.parent


def test_node_arguments_shift_ports_and_keep_the_rest():
    settings = load_settings({"data_dir": "/d", "kafka_listen": "127.0.0.1:9092", "amqp_listen": "0.0.0.0:5672",
                              "http_listen": "127.0.0.1:0", "processes": "3"}, {})
    args = node_args(settings, ["--processes", "3", "--log-level", "debug", "--processes=3"], 3, "zk:2181/gw")
    assert "--processes=3" not in args and args[:2] == ["--log-level", "debug"]
    tail = dict(zip(args[2::2], args[3::2]))
    assert tail["--processes"] == "1" and tail["--node-id"] == "3" and tail["--zookeeper"] == "zk:2181/gw"
    assert tail["--data-dir"] == "/d/node-3"
    assert tail["--kafka-listen"] == "127.0.0.1:9094" and tail["--amqp-listen"] == "0.0.0.0:5674"
    assert tail["--http-listen"] == "127.0.0.1:0"  # a free port stays a free port
    # AMQP spreads over the processes unless the user chose otherwise
    assert tail["--amqp-cluster-mode"] == "spread" and tail["--queue-leader-locator"] == "balanced"
    chosen = node_args(settings, ["--amqp-cluster-mode", "home", "--queue-leader-locator=client-local"], 1, "zk")
    assert chosen.count("--amqp-cluster-mode") == 1 and "--queue-leader-locator" not in chosen


def _listeners(data_dir: Path, index: int, proc: subprocess.Popen, timeout: float = 60) -> dict:
    try:
        return wait_for_listeners(listeners_path(data_dir, index), timeout, alive=lambda: proc.poll() is None)
    except NotListening as exc:
        raise AssertionError(f"launcher exited with {proc.returncode}" if exc.exited
                             else f"node {index} never listened") from None


def test_two_processes_form_one_cluster_and_stop_together(tmp_path):
    data_dir = tmp_path / "data"
    log = open(tmp_path / "launcher.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--processes", "2", "--data-dir", str(data_dir),
                             *(arg for name in ("kafka", "amqp", "http", "stream")
                               for arg in (f"--{name}-listen", "127.0.0.1:0"))],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        nodes = [_listeners(data_dir, i, proc) for i in (1, 2)]
        admin = AdminClient({"bootstrap.servers": nodes[1]["kafka"]})
        admin.create_topics([NewTopic("spread", 8)])["spread"].result(30)
        deadline = time.monotonic() + 30
        while True:
            topic = admin.list_topics(timeout=10).topics.get("spread")  # None: not yet in this broker's metadata
            leaders = {p.leader for p in topic.partitions.values()} if topic is not None else set()
            if leaders == {1, 2} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert leaders == {1, 2}, "partition leadership is not spread over both processes"
        assert {len(p.replicas) for p in topic.partitions.values()} == {1}  # one machine: one copy by default

        producer = Producer({"bootstrap.servers": nodes[0]["kafka"]})
        for i in range(400):
            producer.produce("spread", b"m%d" % i, partition=i % 8)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": nodes[1]["kafka"], "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe(["spread"])
        got = set()
        deadline = time.monotonic() + 60
        while len(got) < 400 and time.monotonic() < deadline:
            got |= {m.value() for m in consumer.consume(100, 1.0) if m.error() is None}
        consumer.close()
        assert got == {b"m%d" % i for i in range(400)}

        for node in nodes:  # AMQP from either door reaches the one AMQP model
            host, port = node["amqp"].rsplit(":", 1)
            connection = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
            channel = connection.channel()
            channel.queue_declare("shared")
            channel.basic_publish("", "shared", node["amqp"].encode())
            connection.close()
        host, port = nodes[0]["amqp"].rsplit(":", 1)
        connection = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
        channel = connection.channel()
        bodies = {channel.basic_get("shared", auto_ack=True)[2] for _ in range(2)}
        connection.close()
        assert bodies == {n["amqp"].encode() for n in nodes}

        # Publisher confirms on a transient (exclusive) queue, whose topic is never fsync'd: its
        # high watermark must still move, though no flush reports it (it used to hang here).
        confirmed = []

        def publish_confirmed():
            connection = pika.BlockingConnection(pika.ConnectionParameters(host, int(port)))
            channel = connection.channel()
            channel.confirm_delivery()
            queue = channel.queue_declare("", exclusive=True).method.queue
            for i in range(3):
                channel.basic_publish("", queue, b"c%d" % i)  # returns once confirmed
                confirmed.append(i)
            connection.close()
        publisher = threading.Thread(target=publish_confirmed, daemon=True)
        publisher.start()
        publisher.join(30)
        assert confirmed == [0, 1, 2], f"confirmed only {confirmed} of 3 publishes to a transient queue"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        log.close()
    assert code == 0, (tmp_path / "launcher.log").read_text()[-3000:]
    assert not listeners_path(data_dir, 1).exists() and not listeners_path(data_dir, 2).exists()
    zk_alive = subprocess.run(["pgrep", "-f", str(data_dir / "zookeeper")], capture_output=True).returncode == 0
    assert not zk_alive, "the private ZooKeeper outlived the launcher"


def test_three_processes_serve_transactions(tmp_path):
    """``init_transactions()`` on ``--processes 3`` (it timed out: FindCoordinator refused transactional ids
    in cluster mode), and a committed transaction spread over the three nodes' partitions."""
    data_dir = tmp_path / "data"
    log = open(tmp_path / "launcher.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", "--processes", "3", "--data-dir", str(data_dir),
                             *(arg for name in ("kafka", "amqp", "http", "stream")
                               for arg in (f"--{name}-listen", "127.0.0.1:0"))],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        nodes = [_listeners(data_dir, i, proc) for i in (1, 2, 3)]
        bootstrap = ",".join(n["kafka"] for n in nodes)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("txns", 6)])["txns"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t1"})
        producer.init_transactions(30)
        for commit in (True, False):
            producer.begin_transaction()
            for i in range(60):
                producer.produce("txns", b"%s-%d" % (b"c" if commit else b"a", i), partition=i % 6)
            producer.flush(30)
            producer.commit_transaction(30) if commit else producer.abort_transaction(30)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
        consumer.subscribe(["txns"])
        got, deadline = [], time.monotonic() + 60
        while len(got) < 60 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(100, 1.0) if m.error() is None]
        got += [m.value() for m in consumer.consume(100, 2.0) if m.error() is None]  # nothing aborted follows
        consumer.close()
        assert sorted(got) == sorted(b"c-%d" % i for i in range(60))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
        log.close()
    assert code == 0, (tmp_path / "launcher.log").read_text()[-3000:]
