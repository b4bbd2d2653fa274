"""Transaction version 2 (KIP-890) on the wire, request by request, as a Kafka 4 producer sends
it, against this broker and Apache Kafka (same expectations for both):

- ApiVersions finalizes ``transaction.version`` at 2, which is what makes Kafka 4 clients use it;
- a v2 producer's first Produce (v12) to a partition adds it to the transaction: no
  AddPartitionsToTxn is sent, and read_committed sees the records once the transaction commits;
- a v1 producer's (Produce v11) transactional batch for a partition it never added is refused:
  the partition leader checks with the coordinator before the batch could open a transaction
  there that no marker would ever close (the hanging transaction KIP-890 prevents);
- EndTxn v5 bumps the epoch and answers it; the same EndTxn sent again with the old epoch (a
  producer that never got the answer) gets the same answer; a batch of the old epoch is refused;
- TxnOffsetCommit v5 adds the group's offsets partition itself: no AddOffsetsToTxn.

The Java kafka-clients 4.x run over the same path in test_java_clients.py (its ``4.x`` runs).
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from compat_tests.conftest import unique_name
from compat_tests.kafka.kio_call import kio_call
from compat_tests.kafka.test_confluent_kafka import create_topic
from wire.kafka import build, request_class, response_class
from wire.records import Record, encode_batch


def _address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def call(bootstrap: str, api_key: int, version: int, data: dict, header_tags: bool = True):
    request = build(request_class(api_key, version), data)
    return kio_call(_address(bootstrap), api_key, request, response_class(api_key, version), api_version=version,
                    header_tags=header_tags)


def call_retrying(bootstrap: str, api_key: int, version: int, data: dict, error_of, seconds: float = 30.0):
    """Retry while the answer is a retriable coordinator error (a new coordinator loads its log)."""
    deadline = time.monotonic() + seconds
    while True:
        answer = call(bootstrap, api_key, version, data)
        if error_of(answer) not in (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                    ErrorCode.not_coordinator, ErrorCode.concurrent_transactions) \
                or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def produce(bootstrap: str, version: int, tid: str, topic: str, partition: int, pid: int, epoch: int,
            sequence: int, values: list[bytes]) -> ErrorCode:
    now = int(time.time() * 1000)
    batch = encode_batch([Record(i, now, None, v) for i, v in enumerate(values)], producer_id=pid,
                         producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    request = {"transactional_id": tid, "acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
    # a new topic's leader may not have taken its partitions up yet (Apache Kafka answers
    # NOT_LEADER_OR_FOLLOWER then): retriable, nothing was appended, so retry as clients do
    deadline = time.monotonic() + 20
    while True:
        error = call(bootstrap, 0, version, request).responses[0].partition_responses[0].error_code
        if error not in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition) \
                or time.monotonic() > deadline:
            return error
        time.sleep(0.2)


def end_txn(bootstrap: str, tid: str, pid: int, epoch: int, commit: bool = True):
    return call_retrying(bootstrap, 26, 5, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                            "committed": commit}, lambda a: a.error_code)


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("v2-reader"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, quiet_since = [], time.monotonic()
    while time.monotonic() - quiet_since < 3:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
            quiet_since = time.monotonic()
    consumer.close()
    return sorted(values)


@pytest.fixture
def producer(kafka_broker):
    """(bootstrap, topic, transactional id, producer id, epoch) of a fresh transactional producer."""
    bootstrap = kafka_broker.bootstrap
    topic, tid = unique_name("txn-v2"), unique_name("txn-v2-id")
    create_topic(bootstrap, topic, partitions=2)
    # FindCoordinator first, as clients do: Apache Kafka creates __transaction_state on it
    found = call_retrying(bootstrap, 10, 4, {"key_type": 1, "coordinator_keys": [tid]},
                          lambda a: a.coordinators[0].error_code).coordinators[0]
    assert found.error_code == ErrorCode.none
    answer = call_retrying(bootstrap, 22, 5, {"transactional_id": tid, "transaction_timeout": 60_000,
                                              "producer_id": -1, "producer_epoch": -1}, lambda a: a.error_code)
    assert answer.error_code == ErrorCode.none
    return bootstrap, topic, tid, answer.producer_id, answer.producer_epoch


def test_transaction_version_2_is_finalized(kafka_broker):
    # ApiVersions answers with a v0 response header (no tagged fields), whatever its version
    answer = call(kafka_broker.bootstrap, 18, 4, {"client_software_name": "kio-test",
                                                  "client_software_version": "1"}, header_tags=False)
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features}
    assert finalized.get("transaction.version") == (2, 2), finalized
    assert answer.finalized_features_epoch >= 0
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    assert supported.get("transaction.version", (0, 0))[1] >= 2, supported
    versions = {k.api_key: k.max_version for k in answer.api_keys}
    assert versions[0] >= 12 and versions[26] >= 5 and versions[28] >= 5, versions


def test_first_produce_adds_the_partition_and_end_bumps_the_epoch(producer):
    bootstrap, topic, tid, pid, epoch = producer
    assert produce(bootstrap, 12, tid, topic, 0, pid, epoch, 0, [b"v2-a", b"v2-b"]) == ErrorCode.none
    assert produce(bootstrap, 12, tid, topic, 0, pid, epoch, 2, [b"v2-c"]) == ErrorCode.none

    ended = end_txn(bootstrap, tid, pid, epoch)
    assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    again = end_txn(bootstrap, tid, pid, epoch)  # the answer was lost: the same end, sent again
    assert (again.error_code, again.producer_id, again.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    # a late batch of the finished transaction's epoch is refused
    assert produce(bootstrap, 12, tid, topic, 0, pid, epoch, 3, [b"late"]) == ErrorCode.invalid_producer_epoch

    # the next transaction, at the new epoch, over both partitions; then aborted
    assert produce(bootstrap, 12, tid, topic, 1, pid, epoch + 1, 0, [b"aborted"]) == ErrorCode.none
    aborted = end_txn(bootstrap, tid, pid, epoch + 1, commit=False)
    assert (aborted.error_code, aborted.producer_epoch) == (ErrorCode.none, epoch + 2)
    assert read_committed(bootstrap, topic, 2) == [b"v2-a", b"v2-b", b"v2-c"]


def test_a_v1_batch_for_a_partition_never_added_is_refused(producer):
    bootstrap, topic, tid, pid, epoch = producer
    error = produce(bootstrap, 11, tid, topic, 0, pid, epoch, 0, [b"never-added"])
    assert error != ErrorCode.none
    assert read_committed(bootstrap, topic, 2) == []
    # the producer is not left with an open transaction there: a v2 transaction still commits
    assert produce(bootstrap, 12, tid, topic, 1, pid, epoch, 0, [b"v2"]) == ErrorCode.none
    assert end_txn(bootstrap, tid, pid, epoch).error_code == ErrorCode.none
    assert read_committed(bootstrap, topic, 2) == [b"v2"]


def test_txn_offset_commit_v5_adds_the_offsets_partition(producer):
    bootstrap, topic, tid, pid, epoch = producer
    group = unique_name("txn-v2-group")
    assert produce(bootstrap, 12, tid, topic, 0, pid, epoch, 0, [b"with-offsets"]) == ErrorCode.none
    coordinator = call_retrying(bootstrap, 10, 4, {"key_type": 0, "coordinator_keys": [group]},
                                lambda a: a.coordinators[0].error_code).coordinators[0]
    assert coordinator.error_code == ErrorCode.none
    answer = call_retrying(f"{coordinator.host}:{coordinator.port}", 28, 5, {
        "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
        lambda a: a.topics[0].partitions[0].error_code)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    assert end_txn(bootstrap, tid, pid, epoch).error_code == ErrorCode.none
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 20
    while True:  # offsets committed in a transaction apply once its marker is written
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        if committed.offset == 7 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    consumer.close()
    assert committed.offset == 7
