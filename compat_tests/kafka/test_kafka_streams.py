"""Kafka Streams with exactly_once_v2 (compat_tests/java/StreamsWordCount.java), killed mid-run.

A stateful count (a repartition topic and a changelog topic, both made by Kafka Streams through
CreateTopics) runs as its own JVM against the broker; after part of the input it is killed with
SIGKILL and started again. Read committed, the output must hold, for each word, the counts
1, 2, ..., n exactly once each: an aborted transaction of the killed instance must stay
invisible, and the restarted one must resume from the committed offsets and the changelog.

Kafka Streams 4.1 comes from Maven Central (``compat_tests.tools.maven_classpath``).
"""
from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import defaultdict

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import tools
from compat_tests.conftest import unique_name

STREAMS = ["org.apache.kafka:kafka-streams:4.1.1", "org.slf4j:slf4j-simple:1.7.36"]
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
        self.consumer.subscribe([topic])

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


def _produce(bootstrap: str, topic: str, words: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i, word in enumerate(words):
        p.produce(topic, key=str(i).encode(), value=word.encode())
    assert p.flush(30) == 0


def test_exactly_once_v2_count_survives_kill_9(bootstrap, tmp_path):
    cp = tools.maven_classpath("kafka-streams", STREAMS)
    argv, main = tools.compile_java("StreamsWordCount.java", cp)
    source, sink, app_id = unique_name("words"), unique_name("counts"), unique_name("wordcount")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
                                  for t in (source, sink)]).values():
        f.result(30)
    words = [w for _ in range(PER_WORD) for w in WORDS]
    half = len(words) // 2
    _produce(bootstrap, source, words[:half])

    app = StreamsApp([argv[0], "-Xmx256m", *argv[1:], main, bootstrap, app_id, source, sink,
                      str(tmp_path / "state"), "classic"])
    reader = OutputReader(bootstrap, sink)
    reader.start()
    try:
        app.start()
        app.wait_running(120)
        deadline = time.monotonic() + 120
        while reader.total() < half // 3:  # part of the first half is through: kill it mid-run
            assert time.monotonic() < deadline, f"only {reader.total()} outputs:\n" + "\n".join(app.lines[-40:])
            time.sleep(0.1)
        app.kill()
        _produce(bootstrap, source, words[half:])
        app.start()
        app.wait_running(120)
        deadline = time.monotonic() + 180
        while not reader.complete():
            assert time.monotonic() < deadline, \
                f"{reader.total()} outputs of {len(words)}:\n" + "\n".join(app.lines[-40:])
            time.sleep(0.2)
        time.sleep(1.0)  # anything more (a repeat) would arrive now
    finally:
        app.stop()
        reader.stopping.set()
        reader.join(30)
    wrong = {w: c for w, c in reader.counts.items() if c != list(range(1, PER_WORD + 1))}
    assert not wrong, f"counts not exactly once for {len(wrong)} word(s), e.g. {next(iter(wrong.items()))}"
    assert set(reader.counts) == set(WORDS)
