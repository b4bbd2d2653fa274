"""A test cluster: N ``gateway serve`` processes in cluster mode on one private ZooKeeper.

Each broker is started through ``tests/brokerproc.py`` as::

    python -m gateway serve --data-dir <dir>/data --node-id N
        --zookeeper 127.0.0.1:<zk port>/<chroot> --replica-lag-time-max-ms 3000
        --kafka-listen 127.0.0.1:<p> --amqp-listen 127.0.0.1:<p> --http-listen 127.0.0.1:<p>

with ports picked free once and kept across restarts (clients and other brokers keep using
the registered addresses; the advertised addresses default to the listen addresses). A
:class:`ClusterBroker` can be crashed (SIGKILL), frozen and thawed (SIGSTOP/SIGCONT: our
stand-in for cutting a broker off the network, since the tests stay on loopback without
iptables), stopped cleanly and restarted on the same data directory and ports.

Cluster state is read the way clients read it: a Kafka Metadata request through
confluent-kafka's AdminClient (:func:`metadata`), never from the brokers' internals.
"""
from __future__ import annotations

import atexit
import signal
from dataclasses import dataclass
from pathlib import Path

from compat_tests.support import kept_port, wait_until
from tests.brokerproc import BrokerProcess, start_broker

LISTENERS = ("kafka", "amqp", "http")  # each kept across restarts; brokerproc gives the others port 0
USUAL_PORTS = {"kafka": 9092, "amqp": 5672, "http": 15672, "stream": 5552}
LAG_MS = 3000  # --replica-lag-time-max-ms for every test broker: ISR changes within seconds
_live: set["ClusterBroker"] = set()


def free_port() -> int:
    """A port kept by one broker across its kills and restarts (compat_tests.support.kept_port)."""
    return kept_port()


class ClusterBroker:
    """One broker node; its ports and data directory survive kills and restarts."""

    def __init__(self, node_id: int, base: Path, zk_connect: str, extra_args: tuple[str, ...] = (),
                 host=None, listeners: tuple[str, ...] = LISTENERS):
        self.node_id = node_id
        self.host = host  # a netns.Host: the broker runs in that namespace on its address
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.base / "data"
        self.zk_connect = zk_connect
        self.ip = host.ip if host is not None else "127.0.0.1"
        # in a namespace of its own the broker has the whole port space: the usual ports
        self.ports = {name: USUAL_PORTS[name] if host is not None else free_port() for name in listeners}
        self.extra_args = tuple(extra_args)
        self.process: BrokerProcess | None = None
        self.paused = False
        self.generation = 0  # how many times it has been started: old logs are kept per run

    @property
    def bootstrap(self) -> str:
        return f"{self.ip}:{self.ports['kafka']}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    def argv(self) -> list[str]:
        args = ["--node-id", str(self.node_id), "--zookeeper", self.zk_connect,
                "--replica-lag-time-max-ms", str(LAG_MS)]
        for name, port in self.ports.items():
            args += [f"--{name}-listen", f"{self.ip}:{port}"]
        return args + list(self.extra_args)

    def start(self, timeout: float = 60) -> None:  # a loaded CI machine starts Python slowly
        assert not self.alive, f"broker {self.node_id} is already running"
        log = Path(str(self.data_dir) + ".log")
        if log.exists():  # brokerproc truncates it: keep the previous run's log for post-mortems
            log.rename(log.with_name(f"{log.name}.{self.generation}"))
        self.generation += 1
        self.paused = False
        self.process = start_broker(self.data_dir, *self.argv(), timeout=timeout,
                                    prefix=self.host.prefix() if self.host is not None else None)
        _live.add(self)

    def kill(self) -> None:
        """kill -9 (works on a frozen process too)."""
        if self.alive:
            self.process.proc.send_signal(signal.SIGKILL)
            self.process.proc.wait(15)
        self.paused = False

    def pause(self) -> None:
        assert self.alive and not self.paused
        self.process.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.alive and self.paused:
            self.process.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 30) -> int:
        """Graceful stop (SIGTERM); returns the exit code (0 expected)."""
        if not self.alive:
            return self.process.proc.returncode if self.process else 0
        self.resume()
        return self.process.stop(signal.SIGTERM, timeout=timeout)

    def restart(self, timeout: float = 30) -> None:
        if self.alive:
            self.kill()
        self.start(timeout=timeout)

    def output(self, tail: int = 4000) -> str:
        """The tail of the current (or last) run's log, also when start-up failed."""
        try:
            return Path(str(self.data_dir) + ".log").read_text(errors="replace")[-tail:]
        except FileNotFoundError:
            return ""


@dataclass
class Cluster:
    brokers: list[ClusterBroker]
    zk_connect: str

    def by_id(self, node_id: int) -> ClusterBroker:
        return next(b for b in self.brokers if b.node_id == node_id)

    def live(self) -> list[ClusterBroker]:
        """Running, not frozen: the brokers a client can talk to."""
        return [b for b in self.brokers if b.alive and not b.paused]

    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.live())

    def expected_brokers(self, brokers: list[ClusterBroker] | None = None) -> dict[int, tuple[str, int]]:
        return {b.node_id: (b.ip, b.ports["kafka"]) for b in (brokers or self.brokers)}

    def start(self) -> None:
        for broker in self.brokers:
            broker.start()
        self.wait_registered()

    def wait_registered(self, timeout: float = 30) -> None:
        """Until every live broker's Metadata lists exactly the live brokers and a controller."""
        want = self.expected_brokers(self.live())

        def ok():
            for b in self.live():
                md = metadata(b.bootstrap, timeout=2)
                if md is None or brokers_of(md) != want or md.controller_id not in want:
                    return False
            return True
        self._wait(ok, timeout, f"brokers {sorted(want)} to be registered with a controller")

    def wait_isr_full(self, topic: str, timeout: float = 30) -> object:
        """Until every partition of ``topic`` has a live leader and ISR == replicas."""
        def ok():
            md = metadata(self.bootstrap(), timeout=2)
            if md is None or topic not in md.topics or md.topics[topic].error is not None:
                return None
            parts = md.topics[topic].partitions
            good = all(p.leader in brokers_of(md) and sorted(p.isrs) == sorted(p.replicas) and p.replicas
                       for p in parts.values())
            return md if good and parts else None
        return self._wait(ok, timeout, f"every ISR of {topic} to be full")

    def _wait(self, predicate, timeout: float, what: str):
        try:
            return wait_until(predicate, timeout=timeout, what=what, interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe()}") from None

    def describe(self) -> str:
        """What each broker looks like now, and the tail of its log: for failure messages."""
        lines = []
        for b in self.brokers:
            state = "frozen" if b.paused else ("running" if b.alive else "down")
            lines.append(f"--- broker {b.node_id} ({state}, {b.bootstrap}), log tail:\n{b.output(2500)}")
        return "\n".join(lines)

    def close(self) -> None:
        for b in self.brokers:
            try:
                if b.alive:
                    b.stop(timeout=10)
            except Exception:
                b.kill()
            _live.discard(b)


def running(c: Cluster, request):
    """A fixture's body: start the cluster, hand it over, close it (``request.node.cluster``: on
    failure conftest's report hook adds the brokers' log tails)."""
    request.node.cluster = c
    try:
        c.start()
        yield c
    finally:
        c.close()


def make_cluster(base: Path, zk_connect: str, n: int = 3, extra_args: tuple[str, ...] = (),
                 hosts: list | None = None, listeners: tuple[str, ...] = LISTENERS) -> Cluster:
    """``hosts`` (netns.Host per broker) puts each broker in its own network namespace; ``listeners``
    names those whose ports are kept across restarts (add "stream" for stream clients)."""
    brokers = [ClusterBroker(i, Path(base) / f"broker{i}", zk_connect, extra_args,
                             host=hosts[i - 1] if hosts else None, listeners=listeners) for i in range(1, n + 1)]
    return Cluster(brokers, zk_connect)


# ---------------------------------------------------------------------- client-side views

def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    # A fresh client per call: its first request can only go to the bootstrap broker(s), so
    # the answer is that broker's view, and a frozen broker learnt earlier is never asked.
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000,
                        "topic.metadata.refresh.interval.ms": -1})


def metadata(bootstrap: str, timeout: float = 5):
    """A Metadata response (confluent_kafka ClusterMetadata) from ``bootstrap``; None on error."""
    from confluent_kafka import KafkaException
    try:
        return admin(bootstrap).list_topics(timeout=timeout)
    except KafkaException:
        return None


def brokers_of(md) -> dict[int, tuple[str, int]]:
    return {b.id: (b.host, b.port) for b in md.brokers.values()}


def partition_view(md, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """{partition: (leader, replicas, sorted isr)} of ``topic`` in a Metadata response."""
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in md.topics[topic].partitions.values()}


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, config: dict | None = None,
                 timeout: float = 30) -> None:
    from confluent_kafka.admin import NewTopic
    client = admin(bootstrap)  # kept referenced: a collected client fails its futures (_DESTROY)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})],
        operation_timeout=timeout, request_timeout=timeout)
    futures[name].result(timeout)


@atexit.register
def _kill_leftovers() -> None:
    for b in list(_live):  # a run that dies without finalizers must not leave brokers behind
        try:
            b.kill()
        except Exception:
            pass
