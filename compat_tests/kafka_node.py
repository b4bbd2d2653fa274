"""Run a private Apache Kafka as a child process: the reference peer of the Kafka suites (and of
the Kafka benchmarks, ``bench/apache_kafka.py``).

Apache Kafka's own jars (``org.apache.kafka:kafka_2.13``, :data:`KAFKA_VERSION`) come from Maven
Central through :func:`compat_tests.tools.maven_classpath`, cached under ``.cache/tools/maven``.
A node is one JVM in KRaft *combined* mode (``process.roles=broker,controller``), started as
``java -cp <jars> kafka.Kafka server.properties``. Everything it owns lives under one base
directory:

    <base>/server.properties   listeners on 127.0.0.1, the settings below
    <base>/log4j2.xml          console logging at INFO (Kafka's noisy loggers at WARN)
    <base>/data/               log.dirs and the KRaft metadata log
    <base>/node.log            the JVM's console output (appended across restarts)

The storage is formatted once, at construction (``kafka.tools.StorageTool format``, what
``kafka-storage.sh format`` runs), with a random cluster id and the release's default feature
levels. For 4.4 those include ``share.version=2`` (``StorageTool version-mapping --release-version
4.4-IV2`` lists them), so KIP-932 share groups are on with no flag; listing ``share`` in
``group.coordinator.rebalance.protocols`` is deprecated in 4.4 (the broker logs a warning), and
the ``consumer`` protocol (KIP-848) is on by default.

Ports (client listener, controller listener) are picked free at construction and kept across
restarts, so a client can reconnect to the same address. Start-up is ready when a real
Metadata round-trip on the client port lists every broker of the cluster and FindCoordinator
answers (the first one creates ``__consumer_offsets``).
:meth:`KafkaNode.stop` sends SIGTERM (a controlled shutdown; exit code 143 or 0),
:meth:`KafkaNode.kill` SIGKILL. Nothing outlives the test run (an ``atexit`` hook kills what
is left).

:class:`KafkaCluster` is three such nodes, each a voter of one KRaft quorum, for tests that
compare cluster behaviour.
"""
from __future__ import annotations

import atexit
import base64
import concurrent.futures
import itertools
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

from compat_tests.support import kept_port
from compat_tests.tools import ToolUnavailable, maven_classpath

KAFKA_VERSION = "4.4.0"
# log4j-slf4j-impl binds Kafka's slf4j 1.7 logging to log4j2 (the Maven runtime scope of
# kafka_2.13 brings the API only, which would drop every log line).
COORDINATES = [f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5"]
JAVA_HINT = "apt-get install -y openjdk-17-jdk-headless"
HEAP = ["-Xms64m", "-Xmx512m"]
# The tests' JVM: a small heap and the serial collector (many nodes share two cores). A benchmark
# passes Kafka's own start-script defaults instead (bench/apache_kafka.py).
TEST_JVM = [*HEAP, "-XX:+UseSerialGC"]
_counter = itertools.count(1)
_live: set["KafkaNode"] = set()

# Settings of every node: what a single-node test cluster needs (replication factor 1 for the
# internal topics, min ISR 1), no initial rebalance delay (a classic group would otherwise wait
# 3 s for more members), and internal topics of a few partitions, created on first use in
# well under a second instead of 50. The group heartbeat intervals stay at Kafka's defaults:
# the suite reads them back as defaults through DescribeConfigs of a GROUP resource. The
# transaction timeout checker runs every second (Kafka's default, 10 s, is longer than the
# suite's 2 s transaction timeouts are meant to wait).
SETTINGS = {
    # num.partitions, default.replication.factor and min.insync.replicas are 1 by default; not set
    # here, so DescribeConfigs shows them as Kafka's defaults (the cluster-level min ISR included)
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "5",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    # lower bounds only (the defaults stay Kafka's): a streams group's config may ask for a 6 s
    # session and 1 s heartbeats, as compat_tests/kafka/test_kafka_streams.py does
    "group.streams.min.session.timeout.ms": "6000",
    "group.streams.min.heartbeat.interval.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "log.dir.failure.timeout.ms": "30000",
}
# --feature NAME=LEVEL arguments of the format command: none, the 4.4 defaults are what we want
FEATURES: list[str] = []


class KafkaUnavailable(RuntimeError):
    """Java, Maven or Kafka's jars are missing, or a node could not be started; the message says why."""


def kafka_classpath() -> list[str]:
    if shutil.which("java") is None:
        raise KafkaUnavailable(f"java is not installed (Apache Kafka {KAFKA_VERSION} needs Java 17+): `{JAVA_HINT}`")
    try:
        return maven_classpath(f"kafka-{KAFKA_VERSION}", COORDINATES)
    except ToolUnavailable as e:
        raise KafkaUnavailable(str(e)) from None


def _free_port() -> int:
    return kept_port()  # kept across restarts: from outside the ephemeral range


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters). Never
    one starting with '-' (Kafka's own Uuid.randomUuid skips those too): kafka-storage's argument
    parser would read it as an option and refuse to format (1 run in 64 failed so)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


# ------------------------------------------------------------------------- readiness probe

def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def _call(s: socket.socket, api_key: int, version: int, body: bytes, correlation: int) -> bytes:
    client = b"compat-probe"
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    size = struct.unpack(">i", _recv(s, 4))[0]
    data = _recv(s, size)
    if struct.unpack_from(">i", data)[0] != correlation:
        raise OSError("correlation id mismatch")
    return data[4:]


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> set[int] | None:
    """The broker ids a real ApiVersions v0 + Metadata v1 exchange reports, or None if it fails.

    ApiVersions first, as clients do; then Metadata for no topics (an empty array in v1),
    whose broker list is the registered, unfenced brokers.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            versions = _call(s, 18, 0, b"", 1)
            if struct.unpack_from(">h", versions)[0] != 0:
                return None
            data = _call(s, 3, 1, struct.pack(">i", 0), 2)
            count = struct.unpack_from(">i", data)[0]
            pos, ids = 4, set()
            for _ in range(count):
                node_id, host_len = struct.unpack_from(">ih", data, pos)
                pos += 6 + host_len + 4  # host, port
                rack_len = struct.unpack_from(">h", data, pos)[0]
                pos += 2 + max(rack_len, 0)
                ids.add(node_id)
            return ids
    except (OSError, struct.error):
        return None


def group_coordinator_ready(host: str, port: int, timeout: float = 2.0) -> bool:
    """True once FindCoordinator v0 for a probe group answers NONE.

    On a new cluster the first FindCoordinator creates ``__consumer_offsets`` and answers
    COORDINATOR_NOT_AVAILABLE until its partitions are led; clients that do not retry that
    (kafka-python's admin) would fail the first group test of a run.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            key = b"compat-probe"
            data = _call(s, 10, 0, struct.pack(">h", len(key)) + key, 3)
            return struct.unpack_from(">h", data)[0] == 0
    except (OSError, struct.error):
        return False


# ------------------------------------------------------------------------------------ node

class KafkaNode:
    """One Apache Kafka JVM (broker + controller) under ``base_dir``; see the module docstring.

    ``voters`` (node id -> controller port) and ``cluster_id`` are shared by the nodes of a
    :class:`KafkaCluster`; a lone node is its own single voter.  A lone node's id is 0, as our single
    node's broker id is, so tests can name the leader and replicas the same way on both targets.
    """

    def __init__(self, base_dir: Path, *, node_id: int = 0, cluster_id: str | None = None,
                 voters: dict[int, int] | None = None, port: int | None = None,
                 controller_port: int | None = None, settings: dict[str, str] | None = None,
                 jvm: list[str] | None = None):
        """``jvm``: the server JVM's heap and collector options (default :data:`TEST_JVM`)."""
        self.classpath = kafka_classpath()
        self.java = shutil.which("java")
        self.base = Path(base_dir)
        self.base.mkdir(parents=True, exist_ok=True)
        self.name = f"kafka-compat-{os.getpid()}-{next(_counter)}"
        self.host = "127.0.0.1"
        self.node_id = node_id
        self.port = port or _free_port()
        self.controller_port = controller_port or _free_port()
        self.voters = voters or {node_id: self.controller_port}
        self.cluster_id = cluster_id or new_cluster_id()
        self.settings = {**SETTINGS, **(settings or {})}
        self.jvm = list(TEST_JVM if jvm is None else jvm)
        self.expected_brokers = set(self.voters)
        self.data_dir = self.base / "data"
        self.log_path = self.base / "node.log"
        self.proc: subprocess.Popen | None = None
        self.start_seconds: list[float] = []
        self._write_config()
        self._format()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------------ configuration

    def _write_config(self) -> None:
        voters = ",".join(f"{i}@{self.host}:{p}" for i, p in sorted(self.voters.items()))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        (self.base / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.base / "log4j2.xml").write_text(_LOG4J2)

    def _java(self, main: str, *args: str, jvm: list[str] | None = None) -> list[str]:
        return [self.java, *(self.jvm if jvm is None else jvm), "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.base / 'log4j2.xml'}",
                "-cp", os.pathsep.join(self.classpath), main, *args]

    def _format(self) -> None:
        argv = self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                          "-c", str(self.base / "server.properties"), "--ignore-formatted",
                          *itertools.chain.from_iterable(("--feature", f) for f in FEATURES),
                          jvm=["-Xmx256m", "-XX:+UseSerialGC"])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise KafkaUnavailable(f"formatting {self.data_dir} failed ({r.returncode}):\n"
                                   f"{r.stdout[-3000:]}{r.stderr[-3000:]}")

    # ------------------------------------------------------------------ life cycle

    def launch(self) -> None:
        """Start the JVM without waiting (a cluster starts all voters before any is ready)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== starting {self.name} (node {self.node_id}) on port {self.port}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self._java("kafka.Kafka", str(self.base / "server.properties")),
                                         cwd=self.base, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        _live.add(self)
        self._launched = time.monotonic()

    def wait_ready(self, timeout: float = 120) -> float:
        """Wait until Metadata lists every broker of the cluster and a group coordinator
        answers; return seconds since launch."""
        deadline = self._launched + timeout
        while True:
            if self.proc.poll() is not None:
                raise KafkaUnavailable(f"{self.name} exited with {self.proc.returncode} during start-up:\n"
                                       + self.output()[-5000:])
            brokers = metadata_brokers(self.host, self.port)
            if (brokers is not None and self.expected_brokers <= brokers
                    and group_coordinator_ready(self.host, self.port)):
                break
            if time.monotonic() > deadline:
                self.kill()
                raise KafkaUnavailable(f"{self.name} did not serve Metadata with brokers "
                                       f"{sorted(self.expected_brokers)} on port {self.port} within "
                                       f"{timeout}s:\n" + self.output()[-5000:])
            time.sleep(0.1)
        took = time.monotonic() - self._launched
        self.start_seconds.append(took)
        return took

    def start(self, timeout: float = 120) -> float:
        """Start on the kept data directory and ports; return once it serves Metadata."""
        self.launch()
        return self.wait_ready(timeout)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (controlled shutdown); return the exit code (143 or 0: both are clean)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop within {timeout}s of SIGTERM:\n"
                                 + self.output()[-5000:])
        finally:
            if self.proc.poll() is not None:
                _live.discard(self)

    def kill(self) -> None:
        """Crash the node: SIGKILL to the JVM."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        _live.discard(self)

    def restart(self) -> float:
        code = self.stop()
        if code not in (0, 143):
            raise AssertionError(f"{self.name} exited with {code} on SIGTERM:\n" + self.output()[-5000:])
        return self.start()

    def close(self) -> None:
        """Stop (cleanly if it can); keep the files."""
        try:
            if self.running:
                self.stop()
        finally:
            if self.running:
                self.kill()
            _live.discard(self)


class KafkaCluster:
    """Three combined KRaft nodes, each a controller voter, sharing one cluster id."""

    def __init__(self, base_dir: Path, size: int = 3, settings: dict[str, str] | None = None):
        ports = {i: (_free_port(), _free_port()) for i in range(1, size + 1)}
        voters = {i: c for i, (_, c) in ports.items()}
        cluster_id = new_cluster_id()
        defaults = {"offsets.topic.replication.factor": str(min(3, size)),
                    "transaction.state.log.replication.factor": str(min(3, size)),
                    "share.coordinator.state.topic.replication.factor": str(min(3, size)),
                    "default.replication.factor": str(min(3, size))}
        def make(i: int) -> KafkaNode:
            p, c = ports[i]
            return KafkaNode(Path(base_dir) / f"node{i}", node_id=i, cluster_id=cluster_id, voters=voters,
                             port=p, controller_port=c, settings={**defaults, **(settings or {})})
        # each node formats its storage in a JVM of its own: in parallel, not one after another
        with concurrent.futures.ThreadPoolExecutor(size) as pool:
            self.nodes = list(pool.map(make, ports))

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def start(self, timeout: float = 180) -> float:
        # all voters must be up before any can elect a controller, so launch all, then wait
        began = time.monotonic()
        for n in self.nodes:
            n.launch()
        for n in self.nodes:
            n.wait_ready(timeout)
        return time.monotonic() - began

    def close(self) -> None:
        for n in self.nodes:
            n.close()


_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.common.config" level="WARN"/>
    <Logger name="org.apache.kafka.common.utils.AppInfoParser" level="WARN"/>
    <Logger name="kafka.server.KafkaConfig" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log" level="WARN"/>
    <Logger name="kafka.log" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


@atexit.register
def _kill_leftovers() -> None:
    # A test run that dies without finalizers must not leave JVMs behind.
    for node in list(_live):
        try:
            node.kill()
        except Exception:
            pass
