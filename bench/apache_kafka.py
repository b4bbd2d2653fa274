"""Apache Kafka as a benchmark peer: the tests' launcher (``compat_tests.kafka_node.KafkaNode``),
one node per bench process.

The node is a KRaft single node (broker and controller in one JVM) on free ports, its data in a
temporary directory under ``.cache/bench/data`` (the disk our broker writes to, not a tmpfs). It
starts on first use and stays up until :func:`close` (the scale suite's partitions rows, the
last to use it, call it; ``python -m bench all`` does after the last suite that needs it; an
exit hook otherwise), so ``python -m bench all`` pays the JVM's start-up once for the Kafka
and scale suites.

The JVM gets Kafka's own start-script defaults (``kafka-server-start.sh``: a 1 GB heap, G1 with
20 ms pause goal), not the tests' small heap and serial collector.

Two views of the one node, each a peer of its own in the tables:

* ``kafka``: topics with Kafka's default flush settings. Kafka acknowledges a produce once the
  records are in the page cache; the operating system writes them back later (no fsync on the
  produce path). Our broker acknowledges only after its group-commit fsync.
* ``kafka-fsync``: topics created with ``flush.messages=1`` (the per-topic form of
  ``log.flush.interval.messages=1``): Kafka fsyncs the partition after every append (one produce
  request's batch) before it acknowledges: the setting closest to ours.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from bench.peers import CACHE
from compat_tests.kafka_node import KAFKA_VERSION, KafkaNode, KafkaUnavailable

# kafka-server-start.sh's KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS defaults
JVM = ["-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
       "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15"]
FSYNC_TOPIC_CONFIG = {"flush.messages": "1"}
LABELS = {
    "kafka": f"Apache Kafka {KAFKA_VERSION} (KRaft single node, default flush settings: acknowledges "
             "before fsync, the OS writes the page cache back later)",
    "kafka-fsync": f"Apache Kafka {KAFKA_VERSION}, the same node, topics with flush.messages=1 "
                   "(log.flush.interval.messages=1): fsync after every append, before the acknowledgement",
}

_node: KafkaNode | None = None
_base: Path | None = None


def node() -> KafkaNode:
    """The bench process's Apache Kafka node, started on first call.

    Raises :class:`KafkaUnavailable` naming what is missing (java, Maven, Kafka's jars) or why
    the node did not start."""
    global _node, _base
    if _node is not None and _node.running:
        return _node
    close()
    print(f"starting Apache Kafka {KAFKA_VERSION} ...", flush=True)
    (CACHE / "data").mkdir(parents=True, exist_ok=True)
    _base = Path(tempfile.mkdtemp(prefix="apache-kafka-", dir=CACHE / "data"))
    try:
        _node = KafkaNode(_base, jvm=JVM)
        _node.start(timeout=180)
    except BaseException:
        close()
        raise
    return _node


def close() -> None:
    """Stop the node (if one runs) and remove its data."""
    global _node, _base
    try:
        if _node is not None:
            _node.close()
    finally:
        _node = None
        if _base is not None:
            shutil.rmtree(_base, ignore_errors=True)
            _base = None


atexit.register(close)


class ApacheKafka:
    """One view of :func:`node` as a bench target: ``fsync`` picks the topics' flush setting."""

    version = KAFKA_VERSION

    def __init__(self, fsync: bool = False):
        self.node = node()
        self.name = "kafka-fsync" if fsync else "kafka"
        self.label = LABELS[self.name]
        # kafka_load creates each run's topic with this configuration
        self.topic_config = dict(FSYNC_TOPIC_CONFIG) if fsync else {}

    @property
    def pid(self) -> int:
        return self.node.proc.pid

    def address(self, proto: str) -> str:
        return self.node.bootstrap

    def close(self) -> None:
        """Nothing: the node serves the whole bench run (:func:`close` stops it)."""


def start(names: list[str]) -> tuple[list[ApacheKafka], str | None]:
    """The views in ``names`` ("kafka", "kafka-fsync"), or ([], why not) when Kafka cannot run."""
    if not names:
        return [], None
    try:
        return [ApacheKafka(fsync=name == "kafka-fsync") for name in names], None
    except (KafkaUnavailable, OSError) as exc:
        return [], f"Apache Kafka {KAFKA_VERSION} unavailable, its rows are left out: {exc}"
