"""The Java kafka-clients 4.x (4.3.0, the current generation), driven by
compat_tests/java/Kafka4Clients.java: an idempotent producer and a plain consumer, KIP-848's
``group.protocol=consumer``, KIP-932's KafkaShareConsumer (implicit and explicit acknowledgement)
and the 4.x Admin calls for groups (GROUP configs, describeConsumerGroups, describeShareGroups,
listShareGroupOffsets, listGroups).

One run of the Java program per module against a broker of its own (1 s consumer and share group
heartbeats, so joining takes a second or two); each test below checks one stage of its JSON-lines
report. The 3.9.1 client is tested by test_java_clients.py.
"""
from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict

import pytest

from compat_tests import tools
from compat_tests.conftest import unique_name

UNSUPPORTED = "unsupported API or version"  # what the broker logs when it drops such a request
JAVA_TIMEOUT = 150  # a whole run takes about 10 s


# our broker's group heartbeats at 1 s keep the run short; the Kafka node keeps Kafka's 5 s
GATEWAY_ARGS = ("--group-consumer-heartbeat-interval-ms", "1000", "--group-share-heartbeat-interval-ms", "1000")


@pytest.fixture(scope="module")
def run(kafka_broker):
    broker = kafka_broker
    argv, main = tools.compile_java("Kafka4Clients.java", tools.kafka_clients4_classpath(), helpers=("JsonLines.java",))
    prefix = unique_name("java4")
    try:
        proc = subprocess.run(argv + [main, broker.bootstrap, prefix], capture_output=True,
                              timeout=JAVA_TIMEOUT)
        stdout, stderr, returncode = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:  # a stalled run: keep what it printed for the tests to report
        stdout, stderr, returncode = e.stdout or b"", e.stderr or b"", f"killed after {JAVA_TIMEOUT}s"
    steps = defaultdict(list)
    for line in stdout.decode(errors="replace").splitlines():
        event = json.loads(line)
        steps[event["step"]].append(event)
    return dict(prefix=prefix, steps=steps, returncode=returncode,
                stderr=stderr.decode(errors="replace")[-6000:], broker=broker)


def stage(run, name):
    """The events of one stage; fails with the Java program's errors if it never got there."""
    events = run["steps"].get(name)
    if not events:
        raise AssertionError(f"the Java client reported no {name!r} events (exit {run['returncode']}); "
                             f"errors: {run['steps'].get('error')}\nstderr:\n{run['stderr']}\n"
                             f"broker log (end):\n{run['broker'].output()[-4000:]}")
    return events


def test_java4_program_completed(run):
    assert run["returncode"] == 0 and run["steps"].get("done") and not run["steps"].get("error"), (
        f"exit {run['returncode']}; steps reported: {list(run['steps'])}; errors: {run['steps'].get('error')}\n"
        f"stderr:\n{run['stderr']}\nbroker log (end):\n{run['broker'].output()[-4000:]}")


@pytest.mark.gateway_only("reads our broker's log for the requests it dropped as unsupported")
def test_every_api_version_the_client_chose_is_served(run):
    # describeFeatures is an ApiVersions round trip; every later stage negotiates from it
    stage(run, "features")
    stage(run, "done")
    dropped = [line for line in run["broker"].output().splitlines() if UNSUPPORTED in line]
    assert not dropped, "the broker dropped requests of the 4.x client:\n" + "\n".join(dropped)


def test_idempotent_producer_and_plain_consumer(run):
    # five idempotent acks=all producers (none/gzip/snappy/lz4/zstd) send v-0..v-999 in turn,
    # v-i to partition i % 3: offsets are dense per partition, in send order
    [produced] = stage(run, "produced")
    assert produced["offsets"] == {str(p): list(range(len(range(p, 1000, 3)))) for p in range(3)}
    # idempotence was on: five producer ids on every partition, each with its last sequence
    [producers] = stage(run, "producers")
    for p in range(3):
        states = producers["partitions"][str(p)]
        assert len({pid for pid, _, _ in states}) == 5 and all(pid >= 0 and epoch >= 0 for pid, epoch, _ in states)
        per_codec = [len([i for i in range(c * 200, c * 200 + 200) if i % 3 == p]) for c in range(5)]
        assert sorted(seq for _, _, seq in states) == sorted(n - 1 for n in per_codec), f"partition {p}: {states}"
    [read] = stage(run, "read")
    records = read["records"]
    assert sorted(map(tuple, records)) == sorted((i % 3, i // 3, f"k-{i}", f"v-{i}") for i in range(1000))
    for p in range(3):
        offsets = [o for part, o, _, _ in records if part == p]
        assert offsets == sorted(offsets), f"partition {p} read out of order"


def test_kip848_consumers_split_partitions_and_commit(run):
    [before] = stage(run, "cg_assignment")
    a, b = before["before_produce"]
    assert len(a) == len(b) == 2 and sorted(a + b) == [0, 1, 2, 3], f"assignment never became 2/2: {a} {b}"

    [described] = stage(run, "cg_describe")
    assert described["type"] == "Consumer" and described["state"] == "Stable"
    members = described["members"]
    assert sorted(m["client_id"] for m in members) == ["kip848-a", "kip848-b"]
    assert [len(m["partitions"]) for m in members] == [2, 2]
    assert sorted(p for m in members for p in m["partitions"]) == [0, 1, 2, 3]

    [consumed] = stage(run, "cg_consumed")
    assert consumed["errors"] == ["null", "null"]
    every = Counter(consumed["values"][0] + consumed["values"][1])
    assert set(every) == {f"g-{i}" for i in range(1000)}
    assert max(every.values()) == 1, f"read twice: {[v for v, n in every.items() if n > 1][:10]}"
    for values, owned in zip(consumed["values"], consumed["assignments"]):
        assert {int(v[2:]) % 4 for v in values} <= set(owned)

    [offsets] = stage(run, "cg_offsets")
    assert offsets["committed"] == {str(p): 250 for p in range(4)}


def test_group_config_share_auto_offset_reset(run):
    configs = stage(run, "group_config")
    assert [(c["group"], c["value"], c["error"]) for c in configs] == [
        (run["prefix"] + "-sg", "earliest", None), (run["prefix"] + "-sgx", "earliest", None)], (
        "IncrementalAlterConfigs / DescribeConfigs on a GROUP resource (type 32) failed")


def test_share_consumers_deliver_every_record_once(run):
    [described] = stage(run, "share_describe")
    assert described["state"] == "Stable"
    assert sorted(m["client_id"] for m in described["members"]) == ["share-a", "share-b"]
    assert {p for m in described["members"] for p in m["partitions"]} == {0, 1}

    [consumed] = stage(run, "share_consumed")
    assert consumed["errors"] == ["null", "null"] and consumed["commit_errors"] == [[], []]
    deliveries = consumed["deliveries"][0] + consumed["deliveries"][1]
    every = Counter(value for value, _ in deliveries)
    assert set(every) == {f"s-{i}" for i in range(200)}
    assert max(every.values()) == 1, f"delivered (and accepted) twice: {[v for v, n in every.items() if n > 1]}"
    assert {count for _, count in deliveries} == {1}


def test_share_explicit_release_redelivers_and_reject_never(run):
    [explicit] = stage(run, "share_explicit")
    assert explicit["commit_errors"] == []
    assert Counter(map(tuple, explicit["deliveries"])) == Counter(
        [("e-0", 1, "release"), ("e-1", 1, "reject"), ("e-0", 2, "accept")]
        + [(f"e-{i}", 1, "accept") for i in range(2, 6)]), (
        "expected e-0 again with deliveryCount 2 after RELEASE, e-1 never again after REJECT")


def test_list_share_group_offsets(run):
    """Every record settled: nothing lags. The start offset is what Kafka's share coordinator
    holds: each state write carries the start offset as it stood before that write moved it, so
    it trails by one write (0 when one write settled everything) and is below the log's end."""
    offsets = {e["group"]: e["offsets"] for e in stage(run, "share_offsets")}
    prefix = run["prefix"]
    for group, partitions, end in ((prefix + "-sg", [f"{prefix}-share:{p}" for p in range(2)], 100),
                                   (prefix + "-sgx", [f"{prefix}-explicit:0"], 6)):
        assert set(offsets[group]) == set(partitions), offsets
        for where in partitions:
            got = offsets[group][where]
            assert got["lag"] == 0 and 0 <= got["start"] < end, (group, where, got)


def test_list_groups_reports_types(run):
    [groups] = stage(run, "groups")
    prefix = run["prefix"]
    got = {g["group"]: (g["type"], g["protocol"]) for g in groups["groups"]}
    assert got == {prefix + "-cg": ("Consumer", "consumer"), prefix + "-sg": ("Share", "share"),
                   prefix + "-sgx": ("Share", "share")}, groups
