"""Clients for the cluster suites: one-shot produce, acked-id producers, full reads (confluent-kafka);
confirming publishers and acking consumers that follow live brokers (pika)."""
from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pika
from pika.adapters.utils.connection_workflow import AMQPConnectorException
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat_tests.cluster.cluster import metadata
from compat_tests.support import wait_until


def amqp_connection(broker, timeout: float = 60) -> pika.BlockingConnection:
    """A pika connection to one cluster broker, retried until it accepts (it may be starting)."""
    def attempt():
        try:
            return pika.BlockingConnection(pika.ConnectionParameters(
                broker.ip, broker.ports["amqp"], connection_attempts=1, blocked_connection_timeout=30))
        except pika.exceptions.AMQPConnectionError:
            return None
    return wait_until(attempt, timeout=timeout, what=f"an AMQP connection to broker {broker.node_id}")


def amqp_knows(broker, passive_declare) -> bool:
    """Whether ``passive_declare(channel)`` succeeds on the broker (it knows the queue or exchange)."""
    connection = amqp_connection(broker)
    try:
        passive_declare(connection.channel())
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False
    finally:
        if connection.is_open:
            connection.close()


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


# What a pika client sees when its broker is cut off, killed or moving: reconnect and go on.
# (A handshake that times out raises pika's connector errors, which are not AMQPErrors.)
AMQP_DISCONNECTS = (pika.exceptions.AMQPError, AMQPConnectorException, OSError)


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
    in_order, highs = read_in_order(bootstrap, topic, partitions, timeout)
    return Counter(v for values in in_order.values() for v in values), highs


def read_in_order(bootstrap: str, topic: str, partitions: int, timeout: float = 120, **conf):
    """({partition: [values in offset order]}, {partition: high watermark}) read from the start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 8 << 20, **conf})
    try:
        highs = {p: high_watermark(consumer, topic, p, timeout) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values, remaining = {p: [] for p in range(partitions)}, {p for p, hw in highs.items() if hw > 0}
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
            if msg.offset() < highs[msg.partition()]:
                values[msg.partition()].append(msg.value().decode())
            if msg.offset() + 1 >= highs[msg.partition()]:
                remaining.discard(msg.partition())
        return values, highs
    finally:
        consumer.close()


def high_watermark(consumer: Consumer, topic: str, partition: int, timeout: float = 60) -> int:
    """The partition's high watermark, asked again while leadership moves: a broker that just
    handed the partition to another answers NOT_LEADER_OR_FOLLOWER, which is right of it, and
    librdkafka refreshes its metadata; a checker that gave up there would check nothing."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1]
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            retriable = error is not None and (error.retriable() or error.code() in _LEADERSHIP_ERRORS)
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


_LEADERSHIP_ERRORS = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
                      KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError._TRANSPORT)


class ConfirmingPublisher(threading.Thread):
    """pika, confirms on, persistent messages to one queue through any live broker; reconnects
    elsewhere when its connection drops. ``confirmed``: ids the broker confirmed."""

    def __init__(self, cluster, queue: str, arguments: dict | None = None, label: str = "m"):
        super().__init__(name=f"amqp-publisher-{queue}", daemon=True)
        self.cluster, self.queue, self.arguments, self.label = cluster, queue, arguments or {}, label
        self.confirmed: list[str] = []
        self.sent = 0
        self.reconnects = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            brokers = self.cluster.live()
            if not brokers:
                time.sleep(0.2)
                continue
            broker = random.choice(brokers)
            try:
                conn = pika.BlockingConnection(pika.ConnectionParameters(
                    broker.ip, broker.ports["amqp"], socket_timeout=5, blocked_connection_timeout=10,
                    heartbeat=5))
                ch = conn.channel()
                ch.confirm_delivery()
                ch.queue_declare(self.queue, durable=True, arguments=self.arguments)
                while not self.stopping.is_set():
                    body = f"{self.label}{n}"
                    self.sent += 1
                    ch.basic_publish("", self.queue, body.encode(), pika.BasicProperties(delivery_mode=2),
                                     mandatory=True)
                    self.confirmed.append(body)  # basic_publish returned: the broker confirmed it
                    n += 1
                conn.close()
            except AMQP_DISCONNECTS:
                self.reconnects += 1
                n += 1  # the unconfirmed one may or may not be stored: never reuse its id
                time.sleep(0.2)
            except BaseException as exc:  # reported by the test
                self.error = exc
                return


class AckingConsumer(threading.Thread):
    """pika consumer of one queue through any live broker, acking each message after recording
    it (``consumed``: body -> times seen); reconnects elsewhere when its connection drops."""

    def __init__(self, cluster, queue: str, arguments: dict | None = None):
        super().__init__(name=f"amqp-consumer-{queue}", daemon=True)
        self.cluster, self.queue, self.arguments = cluster, queue, arguments or {}
        self.consumed: Counter = Counter()
        self.reconnects = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            brokers = self.cluster.live()
            if not brokers:
                time.sleep(0.2)
                continue
            broker = random.choice(brokers)
            try:
                conn = pika.BlockingConnection(pika.ConnectionParameters(
                    broker.ip, broker.ports["amqp"], socket_timeout=5, heartbeat=5))
                ch = conn.channel()
                ch.queue_declare(self.queue, durable=True, arguments=self.arguments)
                ch.basic_qos(prefetch_count=50)
                for method, _props, body in ch.consume(self.queue, inactivity_timeout=0.5):
                    if self.stopping.is_set():
                        break
                    if method is None:
                        continue
                    self.consumed[body.decode()] += 1
                    ch.basic_ack(method.delivery_tag)
                conn.close()
            except AMQP_DISCONNECTS:
                self.reconnects += 1
                time.sleep(0.2)
            except BaseException as exc:  # reported by the test
                self.error = exc
                return


class CommittingConsumer(threading.Thread):
    """A consumer-group member (confluent-kafka) that commits synchronously every ``every``
    records and, once a second, reads the group's committed offsets back.

    ``backwards`` lists every observation of a partition's committed offset below one that an
    earlier commit had been acknowledged for: committed offsets must never go back."""

    def __init__(self, bootstrap: str, topic: str, group: str, every: int = 50):
        super().__init__(name=f"committer-{group}", daemon=True)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                     "topic.metadata.refresh.interval.ms": 1000}
        self.topic, self.every = topic, every
        self.acked: dict[int, int] = {}  # partition -> highest offset a commit was acknowledged for
        self.commits = 0
        self.commit_failures = Counter()
        self.backwards: list[tuple[int, int, int]] = []  # (partition, observed, acknowledged before)
        self.stopping = threading.Event()
        self.exception: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.exception = exc

    def _check(self, consumer, before: dict[int, int]) -> None:
        try:
            parts = consumer.committed([TopicPartition(self.topic, p) for p in before], timeout=5)
        except KafkaException:
            return
        for tp in parts:
            if tp.error is None and tp.offset >= 0 and tp.offset < before[tp.partition]:
                self.backwards.append((tp.partition, tp.offset, before[tp.partition]))

    def _run(self) -> None:
        consumer = Consumer(self.conf)
        consumer.subscribe([self.topic])
        since, next_check = 0, time.monotonic() + 1
        try:
            while not self.stopping.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    since += 1
                if since >= self.every:
                    since = 0
                    try:
                        done = consumer.commit(asynchronous=False)
                    except KafkaException as exc:
                        self.commit_failures[exc.args[0].name()] += 1
                    else:
                        self.commits += 1
                        for tp in done or ():
                            if tp.error is None and tp.offset >= 0:
                                self.acked[tp.partition] = max(self.acked.get(tp.partition, 0), tp.offset)
                if time.monotonic() >= next_check and self.acked:
                    next_check = time.monotonic() + 1
                    self._check(consumer, dict(self.acked))
        finally:
            if self.acked:
                self._check(consumer, dict(self.acked))
            consumer.close()

    def stop(self, timeout: float = 60) -> None:
        self.stopping.set()
        self.join(timeout)
        if self.exception is not None:
            raise AssertionError(f"{self.name} failed: {self.exception!r}") from self.exception


def amqp_home(cluster) -> int | None:
    """The live broker that leads ``__amqp_state`` (where AMQP work runs), or None."""
    md = metadata(cluster.bootstrap(), timeout=3)
    if md is None or "__amqp_state" not in md.topics:
        return None
    leader = md.topics["__amqp_state"].partitions[0].leader
    return leader if leader in {b.node_id for b in cluster.live()} else None


def drain_queue(cluster, queue: str, arguments: dict, timeout: float = 120) -> Counter:
    """Consume and ack everything left in ``queue`` (body -> times read) through any live broker,
    reconnecting while the AMQP home moves (acked messages stay counted, the rest come back)."""
    got, deadline = Counter(), time.monotonic() + timeout
    while True:
        wait_until(lambda: amqp_home(cluster), timeout=60, what="an AMQP home")
        entry = random.choice(cluster.live())
        try:
            conn = pika.BlockingConnection(pika.ConnectionParameters(
                entry.ip, entry.ports["amqp"], connection_attempts=20, retry_delay=0.5))
            ch = conn.channel()
            ch.queue_declare(queue, durable=True, arguments=arguments)
            ch.basic_qos(prefetch_count=500)
            for method, _props, body in ch.consume(queue, inactivity_timeout=5):
                if method is None:
                    break
                got[body.decode()] += 1
                ch.basic_ack(method.delivery_tag)
            conn.close()
            return got
        except AMQP_DISCONNECTS:
            if time.monotonic() > deadline:
                raise
