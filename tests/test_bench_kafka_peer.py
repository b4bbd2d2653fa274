"""The Kafka benchmark's peer plumbing, quickly: rows per peer, Apache Kafka's two views (default
flush settings, flush.messages=1) on one real node, and a clear note when java or Maven is
missing. The benchmark itself (minutes of load) is not run here."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from bench import peers

ROOT = Path(__file__).resolve().parent.parent


def test_samples_give_one_row_per_peer_with_its_own_ratio():
    samples = peers.Samples("kafka", None)
    for value in (100.0, 300.0, 200.0):
        samples.add("produce", "broker", value, size=1000)
    samples.add("produce", "tansu", 400.0, size=1000)
    samples.add("produce", "kafka", 50.0, size=1000)
    samples.add("latency", "broker", 2.0, unit="ms", better="lower")
    samples.add("latency", "kafka-fsync", 8.0, unit="ms", better="lower")
    samples.add("ours only", "broker", 1.0)
    rows = [(r["case"], r["peer_name"], r["broker"], r["peer"], r["ratio"]) for r in samples.rows()]
    assert rows == [("produce", "tansu", 200.0, 400.0, 0.5), ("produce", "kafka", 200.0, 50.0, 4.0),
                    ("latency", "kafka-fsync", 2.0, 8.0, 4.0), ("ours only", None, 1.0, None, None)]
    assert samples.values("produce", "kafka") == [50.0]
    assert samples.rows()[1]["peer_mb_s"] == 0.1
    # a suite with one peer still says "peer"
    single = peers.Samples("amqp", "rabbitmq")
    single.add("publish", "broker", 10.0)
    single.add("publish", "peer", 5.0)
    assert [(r["peer_name"], r["ratio"]) for r in single.rows()] == [("rabbitmq", 2.0)]
    assert single.values("publish", "peer") == [5.0]


def _start_peers_without(tmp_path: Path, tools: list[str]) -> dict:
    """``kafka_bench.start_peers`` for both Apache Kafka views in a process whose PATH holds only
    ``tools`` (and an empty tool cache, so no jar resolved before counts)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in tools:
        (bindir / tool).symlink_to(shutil.which(tool))
    code = ("import json; from bench import kafka_bench; "
            "targets, seen, notes = kafka_bench.start_peers(['kafka', 'kafka-fsync']); "
            "print(json.dumps({'targets': [t.name for t in targets], 'seen': seen, 'notes': notes}))")
    env = {**os.environ, "PATH": str(bindir), "COMPAT_TOOLS_CACHE": str(tmp_path / "tools"),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_missing_java_leaves_the_kafka_rows_out_and_says_so(tmp_path):
    got = _start_peers_without(tmp_path, [])
    assert got["targets"] == [] and got["seen"] == {}
    assert len(got["notes"]) == 1
    assert "Apache Kafka 4.4.0 unavailable" in got["notes"][0]
    assert "java is not installed" in got["notes"][0]


def test_missing_maven_leaves_the_kafka_rows_out_and_says_so(tmp_path):
    got = _start_peers_without(tmp_path, ["java"])
    assert got["targets"] == []
    assert len(got["notes"]) == 1
    assert "Apache Kafka 4.4.0 unavailable" in got["notes"][0]
    assert "Maven is needed" in got["notes"][0] and "apt-get install -y maven" in got["notes"][0]


@pytest.fixture
def kafka_views():
    from bench import apache_kafka, kafka_bench
    targets, seen, notes = kafka_bench.start_peers(["kafka", "kafka-fsync"])
    try:
        yield targets, seen, notes
    finally:
        apache_kafka.close()


def test_apache_kafka_views_share_one_node_and_differ_in_flush_setting(kafka_views):
    from bench import apache_kafka, kafka_bench
    targets, seen, notes = kafka_views
    assert notes == []
    assert [t.name for t in targets] == ["kafka", "kafka-fsync"]
    assert set(seen) == {"kafka", "kafka-fsync"} and "flush.messages=1" in seen["kafka-fsync"]
    default, fsync = targets
    assert default.pid == fsync.pid == apache_kafka.node().proc.pid  # one JVM for the run
    assert default.address("kafka") == fsync.address("kafka")
    data = apache_kafka.node().base
    assert data.parent == peers.CACHE / "data"  # on the disk our broker writes to
    for target, topic in ((default, "flush-default"), (fsync, "flush-each")):
        r = peers.run_load("bench.kafka_load", kafka_bench._spec(
            target, topic=topic, messages=200, size=1024, acks="all", consume=True, partitions=1,
            client="confluent", keep=True, pid=target.pid), timeout=120)
        assert r["produce_msgs_s"] > 0 and r["consume_msgs_s"] > 0
    admin = AdminClient({"bootstrap.servers": default.address("kafka")})
    configs = {}
    for topic in ("flush-default", "flush-each"):
        resource = ConfigResource("topic", topic)
        entry = admin.describe_configs([resource])[resource].result(30)["flush.messages"]
        configs[topic] = (entry.value, entry.is_default)
    assert configs["flush-each"] == ("1", False)
    assert configs["flush-default"] == ("9223372036854775807", True)  # Long.MAX_VALUE: never by count
    apache_kafka.close()
    assert not data.exists()
