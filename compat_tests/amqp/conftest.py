"""Fixtures of the AMQP suite: the same tests against our broker and against a real RabbitMQ.

``amqp_broker`` is module-scoped and parametrized over the targets, so one plain
``python -m pytest`` runs every test once per target, with ids ending ``[gateway]``, ``[rabbitmq]`` and ``[cluster]``:

* ``gateway``: a ``python -m gateway serve`` process per test module (port-0 listeners, its own
  data directory). Its AMQP port is kept across :meth:`restart` and :meth:`kill`/:meth:`start`.
* ``rabbitmq``: Debian's ``rabbitmq-server`` as a private node (``compat_tests/rabbitmq.py``),
  started once per run and shared by the modules (a start costs ~4-5 s; every test uses its own
  unique names). If RabbitMQ is not installed these tests fail, naming the package to install.

* ``cluster``: three brokers in cluster mode ``spread`` (RabbitMQ's cluster model), started once
  per run and shared by the modules; the clients are on a broker that leads none of their
  durable, non-exclusive queues (how, and how that is checked: ``cluster_target.py``). Tests
  marked ``restarts_broker`` are deselected for it at collection (listed in the summary): one
  broker's restart or crash is another test against a cluster (compat_tests/cluster/).

``AMQP_COMPAT_TARGETS=gateway`` (a comma list) limits the targets; ``AMQP_COMPAT_URL=amqp://...``
runs the suite against that external broker instead (target ``external``), where the tests that
restart or kill the broker are skipped, as nothing else can restart it.
"""
from __future__ import annotations

import os
import signal
import urllib.parse
from pathlib import Path

import pytest

from compat_tests import support
from compat_tests.amqp.cluster_target import ClusterTarget, start_cluster
from compat_tests.rabbitmq import INSTALL_HINT, RabbitMQNode, RabbitMQUnavailable, installed_version
from tests.brokerproc import BrokerProcess, start_broker

from .helpers import connect, unique

TARGETS = ("gateway", "rabbitmq", "cluster")
TARGETS_ENV = "AMQP_COMPAT_TARGETS"
URL_ENV = "AMQP_COMPAT_URL"


def selected_targets() -> list[str]:
    return support.selected_targets(TARGETS, TARGETS_ENV, URL_ENV)


MIN_VERSION_MARK = "rabbitmq_min_version"
RESTARTS_MARK = "restarts_broker"
CLUSTER_DIFFERS_MARK = "cluster_differs"
_too_new: list[str] = []
_restarts: list[str] = []
_differs: list[tuple[str, str]] = []


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{MIN_VERSION_MARK}(major, minor): a RabbitMQ feature newer than some releases; the "
        "[rabbitmq] case is deselected (not skipped) when the installed RabbitMQ is older")
    config.addinivalue_line(
        "markers", f"{RESTARTS_MARK}: the test restarts or kills the broker; its [cluster] case is deselected "
        "(not skipped): one broker of a cluster going away is what compat_tests/cluster/ tests")
    config.addinivalue_line(
        "markers", f"{CLUSTER_DIFFERS_MARK}(reason): our cluster does not yet behave as RabbitMQ's here; the "
        "[cluster] case is deselected (not skipped) and the reason printed in the summary")


def pytest_collection_modifyitems(config, items):
    # The installed RabbitMQ's version is known from its files, so a [rabbitmq] case of a feature
    # it predates is left out at collection and named in the summary: a skip would fail the run.
    # A [cluster] case of a test that restarts "the broker" is left out the same way.
    installed = installed_version()
    keep, drop = [], []
    for item in items:
        mark = item.get_closest_marker(MIN_VERSION_MARK)
        callspec = getattr(item, "callspec", None)
        target = callspec.params.get("amqp_broker") if callspec else None
        if mark and target == "rabbitmq" and installed is not None and installed < tuple(mark.args):
            _too_new.append(item.nodeid)
        elif target == "cluster" and item.get_closest_marker(RESTARTS_MARK):
            _restarts.append(item.nodeid)
        elif target == "cluster" and item.get_closest_marker(CLUSTER_DIFFERS_MARK):
            _differs.append((item.nodeid, item.get_closest_marker(CLUSTER_DIFFERS_MARK).args[0]))
        else:
            keep.append(item)
            continue
        drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    if _too_new:
        version = ".".join(map(str, installed_version() or ()))
        terminalreporter.write_sep("-", f"{len(_too_new)} [rabbitmq] test(s) deselected, not run")
        terminalreporter.write_line(
            f"the installed RabbitMQ is {version}, older than these features; their [gateway] cases ran:")
        for nodeid in _too_new:
            terminalreporter.write_line(f"  {nodeid}")
    if _restarts:
        terminalreporter.write_sep("-", f"{len(_restarts)} [cluster] test(s) deselected, not run")
        terminalreporter.write_line("they restart or kill the broker, which a cluster target cannot mean "
                                    "(compat_tests/cluster/ tests broker failures); their other cases ran:")
        for nodeid in _restarts:
            terminalreporter.write_line(f"  {nodeid}")
    if _differs:
        terminalreporter.write_sep("-", f"{len(_differs)} [cluster] test(s) deselected: a known difference")
        for nodeid, reason in _differs:
            terminalreporter.write_line(f"  {nodeid}: {reason}")


class AmqpBroker:
    """The broker under test as AMQP clients see it: ``url``, ``host``, ``port``, ``target``.

    ``restart()`` stops it cleanly and starts it on the same data; ``kill()`` crashes it
    (SIGKILL) and ``start()`` brings it back. The address stays the same across both.
    """
    target = "?"
    host = "127.0.0.1"
    port = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def restart(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def ensure_running(self) -> None:
        """Start again if an earlier test crashed the broker and failed before starting it."""

    def output(self) -> str:
        return ""

    def __repr__(self) -> str:
        return f"<{self.target} AMQP broker {self.host}:{self.port}>"


class GatewayBroker(AmqpBroker):
    target = "gateway"

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.process: BrokerProcess = start_broker(data_dir)
        self.host, self.port = self.process.address("amqp")

    def start(self) -> None:
        assert self.process.proc.poll() is not None, "the broker is already running"
        self.process = start_broker(self.data_dir, "--amqp-listen", f"{self.host}:{self.port}")

    def restart(self) -> None:
        code = self.process.stop(signal.SIGTERM)
        assert code == 0, f"broker exited with {code} on SIGTERM:\n{self.process.output()[-5000:]}"
        self.start()

    def kill(self) -> None:
        self.process.stop(signal.SIGKILL)

    def ensure_running(self) -> None:
        if self.process.proc.poll() is not None:
            self.start()

    def stop(self) -> None:
        if self.process.proc.poll() is None:
            self.process.stop(signal.SIGTERM)

    def output(self) -> str:
        return self.process.output()


class RabbitMQBroker(AmqpBroker):
    target = "rabbitmq"

    def __init__(self, node: RabbitMQNode):
        self.node = node
        self.host, self.port = node.host, node.port

    def start(self) -> None:
        self.node.start()

    def restart(self) -> None:
        self.node.restart()

    def kill(self) -> None:
        self.node.kill()

    def ensure_running(self) -> None:
        if not self.node.running:
            self.node.start()

    def output(self) -> str:
        return self.node.output()


class _NotRestartable:
    """A target the tests cannot restart or kill; ``_cannot(what)`` says what happens instead."""

    def restart(self) -> None:
        self._cannot("restart")

    def kill(self) -> None:
        self._cannot("kill")

    def start(self) -> None:
        self._cannot("start")


class ClusterBroker(_NotRestartable, ClusterTarget, AmqpBroker):
    def _cannot(self, what: str):
        pytest.fail(f"cannot {what} a cluster target: mark the test {RESTARTS_MARK}", pytrace=False)


class ExternalBroker(_NotRestartable, AmqpBroker):
    target = "external"

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        self._url = url
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 5672

    @property
    def url(self) -> str:
        return self._url

    def _cannot(self, what: str):
        pytest.skip(f"cannot {what} the external broker {self._url} ({URL_ENV} is set)")


@pytest.fixture(scope="session")
def rabbitmq_node(tmp_path_factory):
    """One private RabbitMQ node for the whole run (started on first use)."""
    problem, node = None, None
    try:
        node = RabbitMQNode(tmp_path_factory.mktemp("rabbitmq"))
        node.start()
    except RabbitMQUnavailable as e:
        problem = str(e)
        if node is not None:
            node.close()
    if problem:
        pytest.fail(f"the rabbitmq target needs a RabbitMQ node: {problem}\n(install: {INSTALL_HINT})",
                    pytrace=False)
    try:
        yield node
    finally:
        node.close()


@pytest.fixture(scope="session")
def amqp_cluster(tmp_path_factory):
    """One 3-broker spread cluster for the whole run (started on first use), on its own ZooKeeper."""
    from gateway.zookeeper_node import ZooKeeperNode, ensure_chroot
    zookeeper = ZooKeeperNode(tmp_path_factory.mktemp("amqp-zookeeper"))
    zookeeper.start()
    try:
        ensure_chroot(zookeeper.hosts, "/amqp-suite")
        cluster = start_cluster(tmp_path_factory.mktemp("amqp-cluster"), zookeeper.hosts + "/amqp-suite")
        try:
            yield ClusterBroker(cluster)
        finally:
            cluster.close()
    finally:
        zookeeper.close()


@pytest.fixture(scope="module", params=selected_targets())
def amqp_broker(request, tmp_path_factory):
    """The broker under test (see the module docstring), shared by one test module."""
    target = request.param
    if target == "rabbitmq":
        yield RabbitMQBroker(request.getfixturevalue("rabbitmq_node"))
    elif target == "cluster":
        yield request.getfixturevalue("amqp_cluster")
    elif target == "external":
        yield ExternalBroker(os.environ[URL_ENV].strip())
    else:
        name = request.module.__name__.rpartition(".")[2]
        broker = GatewayBroker(tmp_path_factory.mktemp(f"amqp-{name}") / "data")
        try:
            yield broker
        finally:
            broker.stop()


@pytest.fixture(autouse=True)
def _broker_running(request):
    if "amqp_broker" in request.fixturenames:
        broker = request.getfixturevalue("amqp_broker")
        broker.ensure_running()
        yield
        if broker.target == "cluster":  # the target's premise: see cluster_target.py
            misplaced = broker.misplaced()
            assert not misplaced, f"queues led by the client's broker, not another: {misplaced}"
    else:
        yield


@pytest.fixture
def connection(amqp_broker):
    """A pika BlockingConnection to the broker under test, closed after the test."""
    conn = connect(amqp_broker)
    yield conn
    if conn.is_open:
        try:
            conn.close()
        except Exception:
            pass


@pytest.fixture
def channel(connection):
    return connection.channel()


@pytest.fixture
def confirm_channel(connection):
    """A channel in publisher-confirm mode."""
    ch = connection.channel()
    ch.confirm_delivery()
    return ch


@pytest.fixture
def name(request) -> str:
    """A queue/exchange name unique to this test."""
    return unique(request.node.originalname)
