"""The Java kafka-clients library (3.9.1, the client inside Spark 4's Kafka source and sink),
driven through Spark's sequence of calls by compat_tests/java/SparkLikeClient.java.

One run of the Java program per module; each test below checks one stage of its JSON-lines report.
"""
from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict

import pytest

from compat_tests import tools
from compat_tests.conftest import unique_name

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 40
PARTITIONS = 3
# an hour ago, not a fixed date: records older than the broker's retention (7 days) may be deleted by
# its retention pass while the program runs, as Kafka would
BASE_TS = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def java_run(kafka_broker):
    argv, main = tools.compile_java("SparkLikeClient.java")
    topic, group = unique_name("spark-like"), unique_name("spark-like-group")
    cmd = argv + [main, kafka_broker.bootstrap, topic, group, str(PER_CODEC), str(BASE_TS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    steps = defaultdict(list)
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        steps[event["step"]].append(event)
    return dict(topic=topic, group=group, steps=steps, returncode=proc.returncode,
                stderr=proc.stderr[-6000:], stdout=proc.stdout[-3000:])


def stage(run, name):
    """The events of one stage; fails with the Java program's error output if it never got there."""
    events = run["steps"].get(name)
    if not events:
        errors = run["steps"].get("error")
        raise AssertionError(f"the Java client reported no {name!r} events (exit {run['returncode']}); "
                             f"error: {errors}\nstderr:\n{run['stderr']}")
    return events


def expected_records():
    """index -> (key, value, headers, timestamp) exactly as SparkLikeClient builds them."""
    out = {}
    index = 0
    for codec in CODECS:
        for i in range(PER_CODEC):
            key = f"key-{codec}-{i}".encode()
            value = "".join(f"spark-like value {codec} {i};" for _ in range(i % 7 + 1)).encode()
            headers = [["codec", codec.encode().hex()], ["index", str(index).encode().hex()]]
            out[index] = (key.hex(), value.hex(), headers, BASE_TS + index * 10)
            index += 1
    return out


def produced_positions(run):
    """index -> (partition, offset), after checking the producer's acknowledgements."""
    events = stage(run, "produce")
    assert len(events) == PER_CODEC * len(CODECS)
    pos = {}
    per_partition = defaultdict(list)
    for e in events:
        assert e["timestamp"] == BASE_TS + e["index"] * 10
        pos[e["index"]] = (e["partition"], e["offset"])
        per_partition[e["partition"]].append((e["index"], e["offset"]))
    for p, recs in per_partition.items():
        recs.sort()
        assert [o for _, o in recs] == list(range(len(recs))), f"partition {p}: offsets not dense in send order"
    return pos


def partition_ends(run):
    ends = defaultdict(int)
    for p, _ in produced_positions(run).values():
        ends[p] += 1
    return {p: ends.get(p, 0) for p in range(PARTITIONS)}


def test_java_program_completed(java_run):
    assert java_run["returncode"] == 0 and "done" in java_run["steps"], (
        f"exit {java_run['returncode']}; error: {java_run['steps'].get('error')}\n{java_run['stderr']}")


def test_admin_create_and_default_producer(java_run):
    assert stage(java_run, "create") == [{"step": "create", "topic": java_run["topic"], "partitions": PARTITIONS}]
    positions = produced_positions(java_run)
    assert sorted(positions) == list(range(PER_CODEC * len(CODECS)))


def test_admin_describe_topics(java_run):
    [desc] = stage(java_run, "describe")
    assert desc["topic"] == java_run["topic"] and desc["internal"] is False
    assert [p["partition"] for p in desc["partitions"]] == list(range(PARTITIONS))
    for p in desc["partitions"]:
        assert p["leader"] >= 0 and p["replicas"] == 1 and p["isr"] == 1


def test_admin_list_offsets(java_run):
    ends = partition_ends(java_run)
    positions = produced_positions(java_run)
    got = {(e["spec"], e["partition"]): e for e in stage(java_run, "list_offsets")}
    query = BASE_TS + (PER_CODEC * 2) * 10 + 5
    for p in range(PARTITIONS):
        assert got[("earliest", p)]["offset"] == 0
        assert got[("latest", p)]["offset"] == ends[p]
        # first record of the partition with timestamp >= query
        later = sorted((o, BASE_TS + i * 10) for i, (pp, o) in positions.items()
                       if pp == p and BASE_TS + i * 10 >= query)
        want = later[0] if later else (-1, -1)
        e = got[("timestamp", p)]
        assert (e["offset"], e["timestamp"]) == want, f"partition {p}: forTimestamp({query})"
        assert got[("after_last", p)]["offset"] == -1, f"partition {p}: timestamp after every record"


def test_assign_seek_poll(java_run):
    ends = partition_ends(java_run)
    ranges = {e["partition"]: (e["earliest"], e["latest"]) for e in stage(java_run, "range")}
    assert ranges == {p: (0, ends[p]) for p in range(PARTITIONS)}
    expect = expected_records()
    at = {pos: i for i, pos in produced_positions(java_run).items()}
    fetched = stage(java_run, "fetch")
    assert sorted((e["partition"], e["offset"]) for e in fetched) == sorted(at)
    for e in fetched:
        key, value, headers, ts = expect[at[(e["partition"], e["offset"])]]
        assert (e["key"], e["value"], e["headers"], e["timestamp"], e["timestamp_type"]) == \
            (key, value, headers, ts, "CreateTime"), f"record at {(e['partition'], e['offset'])}"


def test_group_subscribe_and_commit(java_run):
    ends = partition_ends(java_run)
    records = stage(java_run, "group_record")
    assert sorted((e["partition"], e["offset"]) for e in records) == \
        sorted((p, o) for p in range(PARTITIONS) for o in range(ends[p]))
    for p in range(PARTITIONS):
        offsets = [e["offset"] for e in records if e["partition"] == p]
        assert offsets == sorted(offsets)
    [assignment] = stage(java_run, "group_assignment")
    assert sorted(assignment["partitions"]) == list(range(PARTITIONS))
    committed = {e["partition"]: e["offset"] for e in stage(java_run, "committed")}
    assert committed == ends


# 3.9 uses transactions v1 (AddPartitionsToTxn, one epoch per producer); 4.x uses v2 (KIP-890:
# partitions added by its Produce v12, the epoch bumped by every EndTxn v5) wherever the broker
# finalizes transaction.version 2, as Kafka 4 brokers and this one do
@pytest.fixture(scope="module", params=["3.9", "4.x"])
def java_txn_run(kafka_broker, request):
    argv, main = tools.compile_java("TxnClient.java", None if request.param == "3.9" else tools.kafka_clients4_classpath())
    topic, tid, group = unique_name("java-txn"), unique_name("java-tid"), unique_name("java-txn-group")
    proc = subprocess.run(argv + [main, kafka_broker.bootstrap, topic, tid, group], capture_output=True, text=True,
                          timeout=240)
    steps = defaultdict(list)
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        steps[event["step"]].append(event)
    return dict(steps=steps, returncode=proc.returncode, stderr=proc.stderr[-6000:], stdout=proc.stdout[-3000:],
                client=request.param)


def test_java_transactions_commit_abort_and_offsets(java_txn_run):
    stage(java_txn_run, "txns")
    assert stage(java_txn_run, "offsets")[0]["committed"] == 10


def test_java_admin_sees_the_open_transaction(java_txn_run):
    admin = stage(java_txn_run, "admin")[0]
    # c-0..c-9 at 0..9, commit marker 10, a-0..a-4 at 11..15, abort marker 16, c-10 at 17, marker 18:
    # the open transaction starts at 19.
    assert admin == {"step": "admin", "listed": True, "state": "Ongoing", "partitions": 1,
                     "producer_matches": True, "txn_start_offset": 19}


def test_java_second_producer_fences_the_first(java_txn_run):
    outcome = stage(java_txn_run, "fenced")[0]["outcome"]
    if java_txn_run["client"] == "3.9":
        assert "Fenced" in outcome  # InitProducerId's new epoch fences it at AddPartitionsToTxn
    else:  # v2: its next batch is refused for the old epoch, as Apache Kafka 4 answers
        assert outcome.startswith("InvalidProducerEpochException"), outcome


def test_java_read_committed_and_uncommitted(java_txn_run):
    reads = {e["isolation"]: e["values"] for e in stage(java_txn_run, "read")}
    committed = [f"c-{i}" for i in range(11)] + ["open-1", "successor"]
    assert reads["read_committed"] == committed
    assert sorted(reads["read_uncommitted"]) == sorted(committed + [f"a-{i}" for i in range(5)])
    assert stage(java_txn_run, "done") and java_txn_run["returncode"] == 0
