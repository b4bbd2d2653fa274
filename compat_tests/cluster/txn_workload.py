"""A transactional workload for the fault suites and its check (confluent-kafka).

One transactional producer commits three transactions in four and aborts the fourth, each of
``PER_TXN`` records alternating over partitions 0 and 1 of a topic. Every transaction's outcome
is what the client was told: committed, aborted, or unknown (the call failed and the producer was
replaced; its successor's init_transactions completes or aborts it). :func:`check` then reads the
topic read_committed and read_uncommitted: every committed transaction whole and once, no record
of an aborted one, each unknown one whole or not at all, each partition in transaction order, and
aborted records really written (so the check is not empty).
"""
from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

PER_TXN = 6  # records per transaction, alternating over the two partitions


def _producer(bootstrap: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 2,
                         "transaction.timeout.ms": 20000, "message.timeout.ms": 15000,
                         "reconnect.backoff.max.ms": 500})
    producer.init_transactions(20)
    return producer


def _finish(call, deadline: float) -> None:
    """commit_transaction / abort_transaction, retried while librdkafka says it may be."""
    while True:
        try:
            call(5)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise


def _discard(producer: Producer | None) -> None:
    """Close a producer for good, in the background (close() may wait for a broker): left to the
    garbage collector, a transactional producer's handle went on retrying after the test."""
    if producer is not None:
        producer.purge()
        threading.Thread(target=_close, args=(producer,), daemon=True).start()


def _close(producer: Producer) -> None:
    try:
        producer.close()
    except KafkaException:
        pass  # a producer replaced after a fatal error raises it again here; the workload counted it


class TransactionalWorkload(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, tid: str):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.tid = bootstrap, topic, tid
        self.stopping = threading.Event()
        self.outcomes: dict[str, str] = {}  # "t00001" -> committed | aborted | unknown
        self.replaced = 0
        self.fatal: Counter = Counter()  # the fatal errors that replaced a producer, by name
        self.error: BaseException | None = None  # the workload itself failed: check() says so

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc
            raise

    def _run(self) -> None:
        producer, n = None, 0
        while not self.stopping.is_set():
            if producer is None:
                try:
                    producer = _producer(self.bootstrap, self.tid)
                except KafkaException:
                    time.sleep(0.3)
                    continue
            n += 1
            tx = f"t{n:05d}"
            commit = n % 4 != 0
            self.outcomes[tx] = "unknown"
            try:
                producer.begin_transaction()
                for i in range(PER_TXN):
                    producer.produce(self.topic, value=f"{tx}-{i}".encode(), partition=i % 2)
                if not commit:  # send them first: librdkafka would otherwise just drop them unsent
                    producer.flush(15)  # what is still unsent then is dropped by the abort (check allows it)
                _finish(producer.commit_transaction if commit else producer.abort_transaction, time.monotonic() + 30)
                self.outcomes[tx] = "committed" if commit else "aborted"
            except KafkaException as exc:
                if exc.args[0].txn_requires_abort():
                    try:
                        _finish(producer.abort_transaction, time.monotonic() + 30)
                        self.outcomes[tx] = "aborted"
                        continue
                    except KafkaException as again:
                        exc = again
                if exc.args[0].fatal():
                    self.fatal[exc.args[0].name()] += 1
                _discard(producer)
                producer, self.replaced = None, self.replaced + 1  # its successor's init settles tx
        # A last init_transactions settles whatever the previous producer left open.
        _discard(producer)
        deadline = time.monotonic() + 60
        while True:
            try:
                _discard(_producer(self.bootstrap, self.tid))
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def _ends(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, int]:
    """Both partitions' high watermarks, asked again while a leadership move answers an error."""
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-probe"})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return {p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in (0, 1)}
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        probe.close()


def _read(bootstrap: str, topic: str, isolation: str, ends: dict[int, int]) -> dict[int, list[str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: dict[int, list[str]] = {p: [] for p in ends}
    deadline, idle_since = time.monotonic() + 120, time.monotonic()
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(1000, timeout=0.5)
            for m in messages:
                if m.error() is not None:
                    continue  # a leader change on the way: the fetch goes on
                out[m.partition()].append(m.value().decode())
            if messages:
                idle_since = time.monotonic()
            positions = {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in ends])}
            if all(positions[p] >= ends[p] for p in ends) or time.monotonic() - idle_since > 10:
                break
    finally:
        consumer.close()
    return out


def check(bootstrap: str, workload: TransactionalWorkload) -> tuple[list[str], Counter, str]:
    """Read the workload's topic back; (problems, counts per outcome, a summary line)."""
    ends = _ends(bootstrap, workload.topic)
    committed_view = _read(bootstrap, workload.topic, "read_committed", ends)
    raw_view = _read(bootstrap, workload.topic, "read_uncommitted", ends)
    outcomes = workload.outcomes
    seen = Counter(v for values in committed_view.values() for v in values)
    raw = {v for values in raw_view.values() for v in values}
    problems = [f"{value} read {times} times" for value, times in seen.items() if times > 1]
    if workload.error is not None:
        problems.append(f"the workload stopped early: {workload.error!r}")
    by_tx = Counter(v.split("-")[0] for v in seen)
    counts: Counter = Counter()
    for tx, outcome in outcomes.items():
        visible = by_tx.get(tx, 0)
        counts[outcome] += 1
        if outcome == "committed" and visible != PER_TXN:
            problems.append(f"committed {tx}: {visible} of {PER_TXN} records visible")
        elif outcome == "aborted" and visible:
            problems.append(f"aborted {tx}: {visible} records visible to read_committed")
        elif outcome == "unknown":
            if visible not in (0, PER_TXN):
                problems.append(f"{tx} (outcome unknown): {visible} of {PER_TXN} records visible, not all or none")
            counts["unknown-committed" if visible else "unknown-aborted"] += 1
    strangers = set(by_tx) - set(outcomes)
    if strangers:
        problems.append(f"records of transactions never begun: {sorted(strangers)[:5]}")
    for partition, values in committed_view.items():
        keys = [(v.split("-")[0], int(v.split("-")[1])) for v in values]
        if keys != sorted(keys):
            problems.append(f"partition {partition} out of transaction order")
    counts["aborted-written"] = sum(1 for tx, o in outcomes.items()
                                    if o == "aborted" and any(f"{tx}-{i}" in raw for i in range(PER_TXN)))
    summary = (f"transactions committed {counts['committed']}, aborted {counts['aborted']} "
               f"({counts['aborted-written']} with records in the log), unknown {counts['unknown']} "
               f"(settled as committed {counts['unknown-committed']}, aborted {counts['unknown-aborted']}); "
               f"records read_committed {sum(seen.values())}, read_uncommitted {sum(len(v) for v in raw_view.values())}; "
               f"producers replaced {workload.replaced} (fatal errors {dict(workload.fatal)}); "
               f"problems {len(problems)}")
    return problems, counts, summary
