"""kcat (the command-line client on librdkafka) against the broker: produce, consume, metadata.

kcat cannot create topics, so topics are created with confluent-kafka's AdminClient first.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import tools
from compat_tests.kafka.helpers import wait_until


@pytest.fixture(scope="module")
def kcat():
    path = tools.kcat_path()
    env = tools.kcat_env()

    def run(bootstrap, *args, input: bytes | None = None, timeout: float = 60) -> bytes:
        argv = [path, "-b", bootstrap, "-m", "15", *args]
        r = subprocess.run(argv, input=input, capture_output=True, env=env, timeout=timeout)
        assert r.returncode == 0, f"{argv} exited {r.returncode}:\n{r.stderr.decode(errors='replace')}"
        return r.stdout

    return run


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 15000})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    wait_until(lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == partitions, 15,
               f"topic {name} in metadata")


def test_produce_then_consume_with_format(kcat, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 2)
    lines = [f"key-{i}:value number {i}" for i in range(10)]
    kcat(bootstrap, "-P", "-t", topic_name, "-p", "1", "-K", ":", "-H", "origin=kcat", "-H", "n=1",
         "-z", "snappy", input=("\n".join(lines) + "\n").encode())
    kcat(bootstrap, "-P", "-t", topic_name, "-p", "0", "-z", "zstd", input=b"no key here\nsecond\n")

    out = kcat(bootstrap, "-C", "-t", topic_name, "-p", "1", "-o", "beginning", "-e", "-q",
               "-f", "%p|%o|%k|%s|%h\n")
    assert out.decode().splitlines() == [f"1|{i}|key-{i}|value number {i}|origin=kcat,n=1" for i in range(10)]

    out = kcat(bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o|%K|%s\n")
    assert out.decode().splitlines() == ["0|-1|no key here", "1|-1|second"]

    # a window: from offset 3, three messages
    out = kcat(bootstrap, "-C", "-t", topic_name, "-p", "1", "-o", "3", "-c", "3", "-q", "-f", "%o %s\n")
    assert out.decode().splitlines() == [f"{i} value number {i}" for i in range(3, 6)]


def test_consume_json(kcat, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 1)
    kcat(bootstrap, "-P", "-t", topic_name, "-p", "0", "-K", "=", "-z", "lz4", "-H", "h=v",
         input=b"a=1\nb=2\nc=3\n")
    out = kcat(bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q", "-J")
    msgs = [json.loads(line) for line in out.decode().splitlines()]
    assert [(m["topic"], m["partition"], m["offset"], m["key"], m["payload"]) for m in msgs] == [
        (topic_name, 0, 0, "a", "1"), (topic_name, 0, 1, "b", "2"), (topic_name, 0, 2, "c", "3")]
    for m in msgs:
        assert m["headers"] == ["h", "v"]
        assert m["tstype"] == "create" and m["ts"] > 1_600_000_000_000


def test_keyed_messages_stay_in_one_partition(kcat, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 3)
    data = "".join(f"k{i % 4}:m{i}\n" for i in range(40))
    # idempotent: librdkafka keeps a partition's order across retries only so (a just-made topic's
    # first sends may be retried while its leaders settle, as Apache Kafka showed)
    kcat(bootstrap, "-P", "-t", topic_name, "-K", ":", "-z", "gzip", "-X", "enable.idempotence=true",
         input=data.encode())
    out = kcat(bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q", "-f", "%p %o %k %s\n")
    rows = [line.split(" ") for line in out.decode().splitlines()]
    assert len(rows) == 40
    partition_of, per_partition = {}, {}
    for p, o, k, v in rows:
        assert partition_of.setdefault(k, p) == p, f"key {k} in partitions {partition_of[k]} and {p}"
        per_partition.setdefault(p, []).append((int(o), int(v[1:])))
    for p, recs in per_partition.items():
        assert [o for o, _ in recs] == list(range(len(recs)))
        assert [i for _, i in recs] == sorted(i for _, i in recs), f"partition {p} out of order"


def test_metadata_json(kcat, bootstrap, topic_name):
    create_topic(bootstrap, topic_name, 3)
    md = json.loads(kcat(bootstrap, "-L", "-J", "-t", topic_name))
    host, port = bootstrap.rsplit(":", 1)
    assert md["brokers"], md
    names = {b["name"] for b in md["brokers"]}
    ids = {b["id"] for b in md["brokers"]}
    assert f"{host}:{port}" in names
    [topic] = md["topics"]
    assert topic["topic"] == topic_name and "error" not in topic
    parts = sorted(topic["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert p["leader"] in ids and "error" not in p
        assert [r["id"] for r in p["replicas"]] == [p["leader"]]
        assert [r["id"] for r in p["isrs"]] == [p["leader"]]

    everything = json.loads(kcat(bootstrap, "-L", "-J"))
    assert topic_name in {t["topic"] for t in everything["topics"]}
