"""A consume-transform-produce loop with confluent-kafka, as an exactly-once application writes it.

The consumer subscribes (group protocol ``classic`` or ``consumer``, KIP-848) and reads
read_committed; each transaction writes ``transform(value)`` to the output and the consumer's
positions with ``send_offsets_to_transaction``, so output and input offsets commit together.
An abortable error aborts and rewinds to the committed offsets; a fatal one (fenced) starts a
new producer. Shared by the single-broker and the cluster tests.
"""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

COORDINATOR_MOVED = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                     KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
COMMON = {"socket.timeout.ms": 10000, "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 2000}
SEND_OFFSETS_S = 30
# librdkafka up to 2.16 can block in send_offsets_to_transaction past its timeout, for good, when
# the group coordinator it cached left the metadata (a killed broker) and came back: it waits for
# a state change of that broker's thread, which it already ended (librdkafka issues 5456, 5511;
# Apache Kafka's brokers also drop a dead broker from Metadata). An application can only give up
# on that producer and start another with the same transactional.id, which fences the stuck one.
STUCK_S = SEND_OFFSETS_S + 15


def transform(value: bytes) -> bytes:
    return b"out:" + value


class EosLoop:
    def __init__(self, bootstrap: str, source: str, sink: str, group: str, tid: str, protocol: str = "classic",
                 batch: int = 20):
        self.bootstrap, self.source, self.sink, self.tid, self.batch = bootstrap, source, sink, tid, batch
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                "isolation.level": "read_committed", "auto.offset.reset": "earliest", "group.protocol": protocol,
                **COMMON}
        if protocol == "classic":
            conf["session.timeout.ms"] = 10000
        self.consumer = Consumer(conf)
        self.consumer.subscribe([source])
        self.producer = self._new_producer()
        self.committed = 0  # transactions committed
        self.aborted = 0
        self.abandoned: list[Producer] = []  # stuck in librdkafka: kept, so nothing frees them under it

    def _new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.tid,
                             "transaction.timeout.ms": 20000, **COMMON})
        producer.init_transactions(60)
        return producer

    def step(self) -> int:
        """One transaction of up to ``batch`` input records; returns how many it committed."""
        messages = [m for m in self.consumer.consume(self.batch, timeout=0.5) if not m.error()]
        if not messages:
            return 0
        try:
            self.producer.begin_transaction()
            for m in messages:
                self.producer.produce(self.sink, key=m.key(), value=transform(m.value()))
            positions = self.consumer.position(self.consumer.assignment())
            if not self._send_offsets(positions):
                self.abandoned.append(self.producer)
                self.producer = self._new_producer()
                self._rewind()
                return 0
            self._commit()
            self.committed += 1
            return len(messages)
        except KafkaException as exc:
            self._recover(exc.args[0])
            return 0

    def _send_offsets(self, positions) -> bool:
        """The positions into the transaction; False if librdkafka is stuck in the call (see STUCK_S)."""
        outcome: list = []
        producer, group = self.producer, self.consumer.consumer_group_metadata()

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(positions, group, SEND_OFFSETS_S)
                outcome.append(None)
            except BaseException as exc:  # handed to the loop's thread
                outcome.append(exc)
        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        worker.join(STUCK_S)
        if not outcome:
            return False
        if outcome[0] is not None:
            raise outcome[0]
        return True

    def _commit(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                self.producer.commit_transaction(30)
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue  # the outcome is not known yet: commit again (Kafka's advice)
                raise

    def _recover(self, err: KafkaError) -> None:
        self.aborted += 1
        if err.txn_requires_abort():
            try:
                self.producer.abort_transaction(30)
            except KafkaException:
                self.producer = self._new_producer()
        else:
            self.producer = self._new_producer()  # fatal (fenced) or unknown outcome: a new producer
        self._rewind()

    def _rewind(self) -> None:
        """Back to the committed offsets: what the aborted transaction read is read again."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        deadline = time.monotonic() + 60
        while True:
            try:
                committed = self.consumer.committed(assignment, timeout=30)
                break
            except KafkaException as exc:  # the group coordinator moved (a kill): ask again, as an application would
                if exc.args[0].code() not in COORDINATOR_MOVED or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        for tp in committed:
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))

    def close(self) -> None:
        self.consumer.close()


def run_until_done(loop: EosLoop, total: int, timeout: float, between=lambda: None) -> None:
    """Step the loop until ``total`` input records were committed through it (``between`` runs after each step)."""
    done, deadline = 0, time.monotonic() + timeout
    while done < total:
        assert time.monotonic() < deadline, f"only {done} of {total} records went through in {timeout:.0f} s"
        done += loop.step()
        between()


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int, timeout: float = 60,
                idle_s: float = 3.0) -> list[bytes]:
    """Every value of the topic from the start: until ``expect`` and then ``idle_s`` without more."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.auto.commit": False, **COMMON})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, deadline, last = [], time.monotonic() + timeout, time.monotonic()
    try:
        while time.monotonic() < deadline and (len(values) < expect or time.monotonic() - last < idle_s):
            for m in consumer.consume(500, timeout=0.5):
                if m.error():
                    if m.error().retriable() or m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error: {m.error()}")
                values.append(m.value())
                last = time.monotonic()
    finally:
        consumer.close()
    return values


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **COMMON})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}
