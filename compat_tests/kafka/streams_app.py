"""Kafka Streams as a child JVM for the exactly-once tests (compat_tests/java/StreamsWordCount.java):
the application, a read_committed reader of its output, and the input producer."""
from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import defaultdict

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from compat_tests.conftest import unique_name

STREAMS = ["org.apache.kafka:kafka-streams:4.1.1", "org.slf4j:slf4j-simple:1.7.36"]
# group.protocol=streams (KIP-1071, generally available from Kafka Streams 4.2)
STREAMS_PROTOCOL = ["org.apache.kafka:kafka-streams:4.4.0", "org.slf4j:slf4j-simple:1.7.36"]
WORDS = [f"w{i:02d}" for i in range(20)]
PER_WORD = 100
PARTITIONS = 3


class StreamsApp:
    """The Java application as a child process; its stdout lines are kept."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.lines: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.started_at = 0

    def start(self) -> None:
        self.started_at = len(self.lines)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()

    def _pump(self, proc) -> None:
        for line in proc.stdout:
            self.lines.append(line.rstrip())

    def wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "state RUNNING" in self.lines[self.started_at:]:
                return
            assert self.proc.poll() is None, "Kafka Streams exited:\n" + "\n".join(self.lines[-60:])
            time.sleep(0.2)
        raise AssertionError("Kafka Streams did not reach RUNNING:\n" + "\n".join(self.lines[-60:]))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


class OutputReader(threading.Thread):
    """Reads the output topic read_committed from the start, keeping each word's counts in order."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.counts: dict[str, list[int]] = defaultdict(list)
        self.stopping = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("reader"),
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
        # assigned, not subscribed: a group member that rejoins (its coordinator killed) would
        # start again from the earliest offset, as it commits nothing, and count everything twice
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                for m in self.consumer.consume(500, timeout=0.5):
                    if m.error() is None:
                        self.counts[m.key().decode()].append(int(m.value()))
        finally:
            self.consumer.close()

    def total(self) -> int:
        return sum(len(v) for v in list(self.counts.values()))

    def complete(self) -> bool:
        return all(self.counts.get(w, [0])[-1] >= PER_WORD for w in WORDS)

    def wait_total(self, at_least: int, app: StreamsApp, timeout: float, what: str) -> None:
        """Until ``at_least`` outputs were read; fail with the app's last lines after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.total() < at_least:
            assert time.monotonic() < deadline, \
                f"only {self.total()} outputs {what}:\n" + "\n".join(app.lines[-40:])
            time.sleep(0.1)

    def wait_complete(self, app: StreamsApp, timeout: float, what: str) -> None:
        """Until every word reached its last count, then a second more: a repeat would arrive now."""
        deadline = time.monotonic() + timeout
        while not self.complete():
            assert time.monotonic() < deadline, \
                f"{self.total()} outputs of {len(WORDS) * PER_WORD}{what}:\n" + "\n".join(app.lines[-40:])
            time.sleep(0.2)
        time.sleep(1.0)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)

    def assert_exactly_once(self, what: str = "") -> None:
        """Each word's counts are 1, 2, ..., PER_WORD: none lost, none repeated, none aborted visible."""
        wrong = {w: c for w, c in self.counts.items() if c != list(range(1, PER_WORD + 1))}
        assert not wrong, f"counts not exactly once for {len(wrong)} word(s){what}, e.g. {next(iter(wrong.items()))}"
        assert set(self.counts) == set(WORDS)


def produce(bootstrap: str, topic: str, words: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i, word in enumerate(words):
        p.produce(topic, key=str(i).encode(), value=word.encode())
    assert p.flush(30) == 0
