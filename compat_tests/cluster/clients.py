"""confluent-kafka clients for the cluster suites: one-shot produce, acked-id producers, full reads."""
from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes, timeout: float = 20, **conf):
    """Produce one record and wait for its delivery report: None on success, else the KafkaError."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": int(timeout * 1000) - 1000,
                         **conf})
    result = []
    producer.produce(topic, value, partition=partition, on_delivery=lambda err, msg: result.append(err))
    producer.flush(timeout)
    if not result:
        raise AssertionError(f"no delivery report for {value!r} within {timeout}s")
    return result[0]


class AckedProducer(threading.Thread):
    """Produces unique ids (``<name>-<n>``) round-robin over partitions until stopped.

    acks=all with idempotence: only ids whose delivery report succeeded count as acknowledged
    (``acked``: id -> partition). A producer that hits a fatal error (librdkafka's idempotence
    guard) is replaced by a new one, and the event is counted, so the run keeps going.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, name: str, rate: float = 200,
                 extra: dict | None = None):
        super().__init__(name=f"producer-{name}", daemon=True)
        self.conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 5, "message.timeout.ms": 60000, "socket.timeout.ms": 10000,
                     "topic.metadata.refresh.interval.ms": 1000, **(extra or {})}
        self.topic, self.partitions, self.label, self.rate = topic, partitions, name, rate
        self.acked: dict[str, int] = {}
        self.failed = Counter()  # delivery error name -> count
        self.errors = Counter()  # client-level (error_cb) error name -> count
        self.replaced = 0
        self.fatal_reasons = Counter()  # why producers were replaced: with a sound broker, none
        self.sent = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self._fatal = threading.Event()
        self.exception: BaseException | None = None

    def _on_delivery(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.value().decode()] = msg.partition()
            else:
                self.failed[err.name()] += 1
        if err is not None and err.fatal():
            self._fatal.set()

    def _on_error(self, err) -> None:
        with self.lock:
            self.errors[err.name()] += 1
            if err.fatal():
                self.fatal_reasons[err.str()] += 1
        if err.fatal():
            self._fatal.set()

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test through .exception
            self.exception = exc

    def _new_producer(self) -> Producer:
        return Producer({**self.conf, "error_cb": self._on_error})

    def _run(self) -> None:
        producer, gen, seq, interval = self._new_producer(), 0, 0, 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stopping.is_set():
            if self._fatal.is_set():
                producer.flush(10)  # a fatal producer fails whatever it still holds
                self._fatal.clear()
                producer, gen = self._new_producer(), gen + 1
                self.replaced += 1
            value = f"{self.label}.{gen}-{seq}".encode()
            try:
                producer.produce(self.topic, value, partition=seq % self.partitions, on_delivery=self._on_delivery)
            except BufferError:  # queue full while the cluster is down: wait for reports
                producer.poll(0.1)
                continue
            except KafkaException as exc:  # the producer went fatal before error_cb told us
                if not (exc.args[0].fatal() or exc.args[0].code() == KafkaError._FATAL):
                    raise
                self._fatal.set()
                try:
                    producer.poll(0)  # runs error_cb, which records why
                except KafkaException as fatal:  # or raises the fatal error itself
                    with self.lock:
                        self.fatal_reasons[fatal.args[0].str()] += 1
                continue
            seq += 1
            self.sent += 1
            try:
                producer.poll(0)
            except KafkaException as fatal:
                with self.lock:
                    self.fatal_reasons[fatal.args[0].str()] += 1
                self._fatal.set()
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_at = time.monotonic()
        left = producer.flush(90)
        if left:
            self.failed["still queued at the end"] += left

    def stop(self, timeout: float = 120) -> None:
        self.stopping.set()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"{self.name} did not finish flushing within {timeout}s")
        if self.exception is not None:
            raise AssertionError(f"{self.name} failed: {self.exception!r}") from self.exception


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 120):
    """Read every partition from its start to its high watermark (as listed now).

    Returns (Counter of values, {partition: high watermark}).
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 8 << 20})
    try:
        highs = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
                 for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values, remaining = Counter(), {p for p, hw in highs.items() if hw > 0}
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read partitions {sorted(remaining)} of {topic} up to "
                                     f"their high watermarks {highs} within {timeout}s")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= highs[msg.partition()]:
                        remaining.discard(msg.partition())
                    continue
                if msg.error().fatal():
                    raise AssertionError(f"consumer error: {msg.error()}")
                continue  # transient (a leader moving): librdkafka retries
            values[msg.value().decode()] += 1
            if msg.offset() + 1 >= highs[msg.partition()]:
                remaining.discard(msg.partition())
        return values, highs
    finally:
        consumer.close()
