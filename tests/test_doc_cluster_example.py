"""The cluster page's "Starting a cluster" block runs as written and forms a three-broker cluster.

The block's ports are fixed (ZooKeeper 2181; Kafka 9092-9094, AMQP 5672-5674, HTTP
15672-15674, stream 5552-5554), so the test runs it exactly as written only when every one of
them is free, and otherwise fails naming the ports in use (stop whatever holds them, e.g. a
`gateway serve` on its defaults, and run again). A private ZooKeeper from Debian's package is
started on 127.0.0.1:2181 first (gateway/zookeeper_node.py), as the block assumes. The block is
run by bash in a temporary directory holding `.venv` (a link to the running virtual environment,
so `.venv/bin/gateway` is the one installed with the project) and the brokers' data directories
d1..d3; PYTHONPATH names this checkout so the code under test is this one.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.processes import NotListening, wait_for_listeners

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cluster.md"


def cluster_block() -> str:
    text = PAGE.read_text()
    section = text[text.index("## Starting a cluster"):]
    match = re.search(r"^```sh\n(.*?)^```", section, re.M | re.S)
    assert match, "docs/cluster.md: no sh block under 'Starting a cluster'"
    return match.group(1)


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def test_block_is_complete():
    block = cluster_block()
    assert "..." not in block, "the example must be complete, without placeholders"
    for node in (1, 2, 3):
        line = next(line for line in block.split("&\n") if f"--node-id {node} " in line)
        for listener in ("kafka", "amqp", "http", "stream"):
            assert f"--{listener}-listen 127.0.0.1:" in line, f"broker {node} has no --{listener}-listen"


@pytest.mark.timeout(240)
def test_cluster_block_runs_as_written(tmp_path):
    from gateway.zookeeper_node import SERVER_JAR, ZooKeeperNode

    block = cluster_block()
    ports = sorted({2181, *(int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", block))})
    busy = [p for p in ports if port_in_use(p)]
    assert not busy, (f"the cluster example uses fixed ports and {busy} are in use on this machine; free them "
                      f"(e.g. stop a broker running on its defaults) and run this test again")
    assert SERVER_JAR.exists(), "the cluster example needs ZooKeeper: apt-get install -y zookeeper"
    gateway_script = Path(sys.prefix) / "bin" / "gateway"
    assert gateway_script.exists(), f"{gateway_script} is missing: pip install -e '.[test]' into this environment"
    (tmp_path / ".venv").symlink_to(sys.prefix)

    zk = ZooKeeperNode(tmp_path / "zookeeper")
    zk.port = 2181  # the block's ZooKeeper address
    zk._write_config()
    zk.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    log = open(tmp_path / "brokers.log", "wb")
    shell = subprocess.Popen(["bash", "-c", block], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert shell.wait(30) == 0, (tmp_path / "brokers.log").read_text()
        addresses = {}
        for node in (1, 2, 3):
            try:
                addresses[node] = wait_for_listeners(tmp_path / f"d{node}" / "listeners.json", 90)
            except NotListening as exc:
                raise AssertionError(f"broker {node}: {exc}\n{(tmp_path / 'brokers.log').read_text()[-5000:]}")
        assert addresses[2]["stream"] == "127.0.0.1:5553" and addresses[3]["kafka"] == "127.0.0.1:9094"
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
        deadline, brokers = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            brokers = admin.list_topics(timeout=10).brokers
            if len(brokers) == 3:
                break
            time.sleep(0.5)
        assert sorted(brokers) == [1, 2, 3], f"brokers in the cluster's metadata: {sorted(brokers)}"
        _amqp_spreads()
    finally:
        try:
            os.killpg(shell.pid, signal.SIGTERM)  # the brokers kept the shell's process group
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any((tmp_path / f"d{n}" / "listeners.json").exists() for n in (1, 2, 3)):
            time.sleep(0.2)
        try:
            os.killpg(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
        zk.close()


def _amqp_spreads() -> None:
    """AMQP on the cluster the block started (its default mode, spread): a queue declared through
    a broker is led there (client-local), and a client of the next broker gets what was published
    to it."""
    import base64
    import json
    import urllib.request

    import pika
    import pika.exceptions

    def channel(port: int):
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, connection_attempts=120,
                                                                 retry_delay=0.5))  # AMQP opens with the model
        return conn, conn.channel()

    login = "Basic " + base64.b64encode(b"guest:guest").decode()
    for node in (1, 2, 3):
        conn, ch = channel(5671 + node)
        ch.queue_declare(f"doc-example-{node}", durable=True)
        ch.confirm_delivery()
        ch.basic_publish("", f"doc-example-{node}", f"hello from broker {node}".encode(),
                         pika.BasicProperties(delivery_mode=2))
        conn.close()
        request = urllib.request.Request(f"http://127.0.0.1:{15671 + node}/api/queues/%2F/doc-example-{node}",
                                         headers={"Authorization": login})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.load(answer)["node"] == f"gateway@{node}"
    for node in (1, 2, 3):
        conn, ch = channel(5672 + node % 3)
        deadline, body = time.monotonic() + 30, None
        while body is None and time.monotonic() < deadline:
            try:
                body = ch.basic_get(f"doc-example-{node}", auto_ack=True)[2]
            except pika.exceptions.ChannelClosedByBroker:  # 404 until this broker has learnt the declaration
                ch = conn.channel()
            if body is None:
                time.sleep(0.2)
        conn.close()
        assert body == f"hello from broker {node}".encode()
