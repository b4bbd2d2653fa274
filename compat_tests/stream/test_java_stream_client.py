"""RabbitMQ's Java stream client (``com.rabbitmq:stream-client`` 1.x from Maven Central), driven by
compat_tests/java/RabbitStreamClient.java: stream creation, publishing with confirms and
deduplication, consumers from first/offset/next, server-side offset tracking, single active
consumer and super streams.

One run of the Java program per target; each test below checks one stage of its JSON-lines report,
with RabbitMQ's answers as the expectations. RabbitMQ 3.10 (the [rabbitmq] target) predates single
active consumer and the super-stream commands (3.11; CreateSuperStream 3.13), so those stages run
against this broker only: the program is not asked for them there and their tests are deselected.
"""
from __future__ import annotations


import pytest

from compat_tests import tools
from compat_tests.java_steps import assert_completed, run_steps, stage
from compat_tests.stream.conftest import GATEWAY_ONLY

STREAM_CLIENT = "com.rabbitmq:stream-client:1.11.0"
JAVA_TIMEOUT = 150
SAC_REASON = "single active consumer came with RabbitMQ 3.11; the [rabbitmq] target is 3.10"
SUPER_REASON = "super streams' Partitions/Route came with RabbitMQ 3.11, CreateSuperStream with 3.13; the [rabbitmq] target is 3.10"
STAGES = {"basics": None, "tracking": None, "sac": SAC_REASON, "super": SUPER_REASON}


def stream_client_classpath() -> list[str]:
    return tools.maven_classpath("rabbitmq-stream-client", [STREAM_CLIENT])


@pytest.fixture(scope="module")
def run(target):
    argv, main = tools.compile_java("RabbitStreamClient.java", stream_client_classpath(), helpers=("JsonLines.java",))
    stages = [name for name, gateway_only in STAGES.items() if target.name == "gateway" or gateway_only is None]
    host, port = target.stream
    return run_steps(argv + [main, host, str(port), f"java-{target.name}", *stages], JAVA_TIMEOUT)


def test_program_completed(run):
    assert_completed(run)


def test_publish_with_confirms_dedup_and_offsets(run):
    basics = stage(run, "basics")
    # creating an existing stream with the same arguments: the client takes STREAM_ALREADY_EXISTS as done
    assert basics["create_again"] == "ok"
    # 100 then 20 more (90..109) under one producer name: all confirmed, 90..99 deduplicated, and
    # a new name's publishing id 0 is stored like any other
    assert basics["confirmed"] == 120
    assert (basics["last_publishing_id"], basics["last_publishing_id_again"]) == (99, 99)
    assert basics["first_offsets"] == list(range(110))
    assert basics["first_bodies"] == [f"m{i}" for i in range(110)]
    assert basics["from40_offsets"] == list(range(40, 110))
    assert basics["next"] == [[110 + i, f"late{i}"] for i in range(5)]
    assert (basics["exists"], basics["missing_exists"]) == (True, False)


def test_server_side_offset_tracking(run):
    tracking = stage(run, "tracking")
    assert (tracking["stored"], tracking["stored_again"]) == (59, 59)
    # a named consumer without an offset specification resumes after its stored offset
    assert (tracking["resumed_first"], tracking["resumed_count"]) == (60, 40)
    assert tracking["unknown"] == "no offset"


@pytest.mark.gateway_only(SAC_REASON)
def test_single_active_consumer_hands_over_at_the_stored_offset(run):
    sac = stage(run, "sac")
    assert (sac["a_count"], sac["b_before"]) == (100, 0)  # the second consumer got nothing while the first was active
    assert (sac["b_first"], sac["b_count"]) == (50, 50)
    # activations as the client's ConsumerUpdateListener saw them; the two deactivations come from closing
    assert sac["events"][:3] == ["a:sac:true", "a:sac:false", "b:sac:true"]


def murmur3_32(data: bytes, seed: int) -> int:
    """MurmurHash3 x86 32-bit, what the Java client's hash routing strategy applies to a routing key."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & mask  # noqa: E731
    full = len(data) // 4 * 4
    for i in range(0, full, 4):
        k = rotl(int.from_bytes(data[i:i + 4], "little") * c1 & mask, 15) * c2 & mask
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & mask
    tail = data[full:]
    if tail:
        h ^= rotl(int.from_bytes(tail, "little") * c1 & mask, 15) * c2 & mask
    h ^= len(data)
    for shift, mult in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = (h ^ (h >> shift)) * mult & mask
    return h ^ (h >> 16)


@pytest.mark.gateway_only(SUPER_REASON)
def test_super_stream_routing_and_single_active_consumers(run):
    sup = stage(run, "super")
    assert sup["confirmed"] == 120 and sup["first_90_consumed"] is True
    # the client hashes the message id over the partitions in the order Partitions lists them
    expected = {str(p): [f"s{i}" for i in range(90) if murmur3_32(f"id-{i}".encode(), 104729) % 3 == p]
                for p in range(3)}
    assert sup["partitions"] == expected
    # partition index mod group size picks the active consumer: a gets 0 and 2, b gets 1
    assert sup["before"] == {"a": {"0": expected["0"], "2": expected["2"]}, "b": {"1": expected["1"]}}
    # a closes: b takes 0 and 2 over after a's stored offsets, so it reads only the 30 new messages
    after = {str(p): [f"s{i}" for i in range(90, 120) if murmur3_32(f"id-{i}".encode(), 104729) % 3 == p]
             for p in range(3)}
    assert sup["after"] == {"a": {}, "b": after}
    events = sup["events"]
    assert set(events[:5]) == {"a:super-0:true", "a:super-1:true", "a:super-2:true", "a:super-1:false",
                               "b:super-1:true"}
    assert {"b:super-0:true", "b:super-2:true"} <= set(events[5:])
