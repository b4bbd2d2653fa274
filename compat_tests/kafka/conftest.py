"""Fixtures of the Kafka suite: the same tests against our broker and against Apache Kafka.

Every test here is parametrized by the module-scoped, autouse fixture ``kafka_target``, so one
plain ``python -m pytest`` runs each test twice, with ids ending ``gateway]`` and ``kafka]``:

* ``gateway``: a ``python -m gateway serve`` process per test module (``kafka_broker``), started
  with the module's ``GATEWAY_ARGS`` (extra ``serve`` options) if it defines them.
* ``kafka``: Apache Kafka in KRaft combined mode (``compat_tests/kafka_node.py``), started once
  per run and shared by the modules: a start costs ~10 s of JVM and KRaft start-up, and every
  test uses its own unique topic and group names.

``KAFKA_COMPAT_TARGETS=gateway`` (a comma list) limits the targets. ``KAFKA_COMPAT_BOOTSTRAP=
host:port`` runs the suite against that external broker instead (target ``external``).

A test of something Kafka does not have, or that needs our process (its CLI options, data
directory, metrics or log), carries ``@pytest.mark.gateway_only("why")``: its ``kafka`` case (and
its ``external`` one) is deselected at collection and listed in the summary with the reason, so
each intended difference is stated in the code.
"""
from __future__ import annotations

import os

import pytest

from compat_tests import support
from compat_tests.conftest import EXTERNAL_ENV, KafkaBroker
from compat_tests.kafka_node import JAVA_HINT, KafkaNode, KafkaUnavailable
from compat_tests.support import deselect_marked, summarize_deselected

TARGETS = ("gateway", "kafka")
TARGETS_ENV = "KAFKA_COMPAT_TARGETS"
GATEWAY_ONLY = "gateway_only"


def selected_targets() -> list[str]:
    return support.selected_targets(TARGETS, TARGETS_ENV, EXTERNAL_ENV)


_gateway_only: list[tuple[str, str]] = []


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{GATEWAY_ONLY}(reason): the test needs our broker (a behaviour Apache Kafka does not have, "
        "or our CLI options, data directory, metrics or log); its [kafka] and [external] cases are deselected, "
        "not skipped")


def pytest_collection_modifyitems(config, items):
    deselect_marked(config, items, GATEWAY_ONLY, lambda params: params.get("kafka_target") in ("kafka", "external"),
                    _gateway_only)


def pytest_terminal_summary(terminalreporter):
    summarize_deselected(terminalreporter, _gateway_only, "case(s)")


class KafkaNodeBroker:
    """The shared Apache Kafka node as the tests see a broker (see ``KafkaBroker``).

    Its address stays the same across :meth:`restart`. ``data_dir`` is Kafka's ``log.dirs``
    (the same ``<topic>-<partition>/*.log`` layout as ours); there is no process of ours
    (``process`` is None: no /metrics, no HTTP API).
    """
    target = "kafka"
    process = None
    external = None

    def __init__(self, node: KafkaNode):
        self.node = node
        self.data_dir = node.data_dir
        self.restarts = 0

    @property
    def bootstrap(self) -> str:
        return self.node.bootstrap

    @property
    def address(self) -> tuple[str, int]:
        return self.node.host, self.node.port

    def output(self) -> str:
        return self.node.output()

    def restart(self) -> str:
        self.node.restart()
        self.restarts += 1
        return self.bootstrap

    def ensure_running(self) -> None:
        if not self.node.running:
            self.node.start()

    def stop(self) -> None:
        """The node outlives the module: other modules share it."""


@pytest.fixture(scope="session")
def kafka_node(tmp_path_factory):
    """One private Apache Kafka node for the whole run (started on first use)."""
    problem, node = None, None
    try:
        node = KafkaNode(tmp_path_factory.mktemp("apache-kafka"))
        node.start()
    except KafkaUnavailable as e:
        problem = str(e)
        if node is not None:
            node.close()
    if problem:
        pytest.fail(f"the kafka target needs Apache Kafka: {problem}\n(java: {JAVA_HINT}; "
                    f"or {TARGETS_ENV}=gateway to leave it out)", pytrace=False)
    try:
        yield node
    finally:
        node.close()


@pytest.fixture(scope="module", params=selected_targets(), autouse=True)
def kafka_target(request) -> str:
    """Which broker this module's tests run against: ``gateway``, ``kafka`` or ``external``."""
    return request.param


@pytest.fixture(scope="module")
def kafka_broker(kafka_target, tmp_path_factory, request):
    """The broker under test (see the module docstring), shared by one test module."""
    if kafka_target == "kafka":
        yield KafkaNodeBroker(request.getfixturevalue("kafka_node"))
        return
    if kafka_target == "external":
        yield KafkaBroker(None, external=os.environ[EXTERNAL_ENV].strip())
        return
    name = request.module.__name__.rpartition(".")[2]
    broker = KafkaBroker(tmp_path_factory.mktemp(name) / "data", args=getattr(request.module, "GATEWAY_ARGS", ()))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(autouse=True)
def _broker_running(request):
    # a test that crashed the shared Kafka node and failed before starting it must not fail the rest
    if "kafka_broker" in request.fixturenames:
        broker = request.getfixturevalue("kafka_broker")
        if isinstance(broker, KafkaNodeBroker):
            broker.ensure_running()
