"""A consume-transform-produce loop with exactly-once output, run as its own process.

``python -m compat_tests.kafka.txn_pipeline CLIENT BOOTSTRAP INPUT OUTPUT GROUP TXN_ID PARTITIONS``

CLIENT is ``confluent`` or ``kafka-python``. Reads INPUT (read_committed, its partitions
assigned by hand, the group used to store offsets), writes ``b"out:" + value`` with the same
key to OUTPUT and commits the input offsets inside the same transaction. Exits 0 once every
input partition's committed position reaches its end; the test kills it with SIGKILL at
random moments before that. Prints one line per committed transaction.
"""
from __future__ import annotations

import sys
import time

BATCH = 20
PAUSE_S = 0.1  # between transactions, so that a run lasts long enough to be killed many times


def transform(value: bytes) -> bytes:
    return b"out:" + value


def run_confluent(bootstrap, source, sink, group, tid, partitions) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 30000})
    producer.init_transactions(30)  # before reading: aborts what a killed predecessor left open
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    tps = [TopicPartition(source, p) for p in range(partitions)]
    committed = consumer.committed(tps, timeout=30)
    consumer.assign([TopicPartition(source, p, tp.offset if tp.offset >= 0 else 0) for p, tp in enumerate(committed)])
    ends = [consumer.get_watermark_offsets(TopicPartition(source, p), timeout=30)[1] for p in range(partitions)]
    positions = {p: max(tp.offset, 0) for p, tp in enumerate(committed)}
    while any(positions[p] < ends[p] for p in range(partitions)):
        messages = [m for m in consumer.consume(BATCH, timeout=1.0) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce(sink, key=m.key(), value=transform(m.value()))
            positions[m.partition()] = m.offset() + 1
        offsets = [TopicPartition(source, p, o) for p, o in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        print("committed", sorted(positions.items()), flush=True)
        time.sleep(PAUSE_S)
    consumer.close()


def run_kafka_python(bootstrap, source, sink, group, tid, partitions) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, transaction_timeout_ms=30000,
                             request_timeout_ms=15000, max_block_ms=30000)
    producer.init_transactions()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             request_timeout_ms=15000)
    tps = [TopicPartition(source, p) for p in range(partitions)]
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    positions = {tp.partition: consumer.position(tp) for tp in tps}
    while any(positions[tp.partition] < ends[tp] for tp in tps):
        batches = consumer.poll(timeout_ms=1000, max_records=BATCH)
        messages = [m for records in batches.values() for m in records]
        if not messages:
            continue
        producer.begin_transaction()
        for m in messages:
            producer.send(sink, key=m.key, value=transform(m.value))
            positions[m.partition] = m.offset + 1
        offsets = {TopicPartition(source, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()}
        producer.send_offsets_to_transaction(offsets, group)
        producer.commit_transaction()
        print("committed", sorted(positions.items()), flush=True)
        time.sleep(PAUSE_S)
    consumer.close()
    producer.close()


def main(argv: list[str]) -> int:
    client, bootstrap, source, sink, group, tid, partitions = argv
    runner = {"confluent": run_confluent, "kafka-python": run_kafka_python}[client]
    started = time.monotonic()
    runner(bootstrap, source, sink, group, tid, int(partitions))
    print(f"done in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
