"""Consume-transform-produce with ``send_offsets_to_transaction`` for both group protocols.

A KIP-848 member (``group.protocol=consumer``) sends its member epoch in TxnOffsetCommit's
generation field: the current epoch commits, a stale one is refused with ILLEGAL_GENERATION
(Kafka's ConsumerGroup.validateOffsetCommit says STALE_MEMBER_EPOCH, which TxnOffsetCommit answers
as ILLEGAL_GENERATION), an unknown member with UNKNOWN_MEMBER_ID; all of that only once the
producer's transaction passed its check.
"""
from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from compat_tests.conftest import unique_name
from compat_tests.kafka.eos_loop import EosLoop, committed_offsets, read_values, run_until_done, transform
from compat_tests.kafka.test_transaction_v2 import call_retrying, end_txn

PARTITIONS, RECORDS = 3, 300


# our broker's group heartbeat at 1 s keeps these tests short; the Kafka node keeps Kafka's 5 s
GATEWAY_ARGS = ("--group-consumer-heartbeat-interval-ms", "1000")


def produce_input(bootstrap: str, topic: str, count: int, partitions: int) -> list[bytes]:
    values = [f"in-{i}".encode() for i in range(count)]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, partition=i % partitions)
    assert producer.flush(30) == 0
    return values


def check_pipeline(bootstrap: str, source: str, sink: str, group: str, values: list[bytes], partitions: int):
    """Exactly once: each input once in the committed output; offsets committed = input ends."""
    output = read_values(bootstrap, sink, partitions, "read_committed", len(values))
    assert sorted(output) == sorted(transform(v) for v in values)
    per_partition = {p: len(values[p::partitions]) for p in range(partitions)}
    assert committed_offsets(bootstrap, group, source, partitions) == per_partition


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_consume_transform_produce(bootstrap, protocol):
    source, sink, group = unique_name("in"), unique_name("out"), unique_name(f"eos-{protocol}")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name in (source, sink):
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    values = produce_input(bootstrap, source, RECORDS, PARTITIONS)
    loop = EosLoop(bootstrap, source, sink, group, unique_name("tid"), protocol)
    try:
        run_until_done(loop, RECORDS, timeout=90)
        assert loop.aborted == 0  # on a quiet broker nothing is refused (was ILLEGAL_GENERATION for KIP-848)
    finally:
        loop.close()
    check_pipeline(bootstrap, source, sink, group, values, PARTITIONS)


def test_stale_member_epoch_refused(bootstrap):
    """The transaction is checked first (Kafka verifies it before its group coordinator looks at
    the member): without one the answer is INVALID_PRODUCER_ID_MAPPING whatever the epoch; inside
    one, a KIP-848 member's wrong epoch is ILLEGAL_GENERATION (TxnOffsetCommit has no
    STALE_MEMBER_EPOCH: Kafka's group coordinator answers that instead)."""
    topic, group, tid = unique_name("stale"), unique_name("stale-group"), unique_name("stale-txn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    joined = call_retrying(bootstrap, 68, 0, {
        "group_id": group, "member_id": "", "member_epoch": 0, "instance_id": None, "rack_id": None,
        "rebalance_timeout": datetime.timedelta(seconds=30), "subscribed_topic_names": [topic],
        "server_assignor": None, "topic_partitions": []}, lambda a: a.error_code)
    assert joined.error_code == ErrorCode.none and joined.member_epoch > 0
    # FindCoordinator first, as clients do: Apache Kafka creates __transaction_state on it
    found = call_retrying(bootstrap, 10, 4, {"key_type": 1, "coordinator_keys": [tid]},
                          lambda a: a.coordinators[0].error_code).coordinators[0]
    assert found.error_code == ErrorCode.none
    producer = call_retrying(bootstrap, 22, 5, {"transactional_id": tid, "transaction_timeout": 60_000,
                                                "producer_id": -1, "producer_epoch": -1}, lambda a: a.error_code)
    assert producer.error_code == ErrorCode.none

    def txn_commit(member_id: str, epoch: int, txn: str = tid, version: int = 5) -> ErrorCode:
        answer = call_retrying(bootstrap, 28, version, {
            "transactional_id": txn, "group_id": group, "producer_id": producer.producer_id,
            "producer_epoch": producer.producer_epoch, "generation_id": epoch, "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
            lambda a: a.topics[0].partitions[0].error_code)
        return answer.topics[0].partitions[0].error_code

    # no such transaction: refused as such, before the (stale) member epoch is looked at
    assert txn_commit(joined.member_id, joined.member_epoch - 1, txn="no-such-txn", version=3) == \
        ErrorCode.invalid_producer_id_mapping
    # v5 adds the group's partition to the producer's transaction; then the member is checked
    assert txn_commit(joined.member_id, joined.member_epoch - 1) == ErrorCode.illegal_generation
    assert txn_commit(joined.member_id, joined.member_epoch + 1) == ErrorCode.illegal_generation
    assert txn_commit("someone-else", joined.member_epoch) == ErrorCode.unknown_member_id
    assert txn_commit(joined.member_id, joined.member_epoch) == ErrorCode.none
    assert end_txn(bootstrap, tid, producer.producer_id, producer.producer_epoch, commit=False).error_code == \
        ErrorCode.none
