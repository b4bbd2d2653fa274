"""Fixtures for the compatibility suites: a running broker per test module.

By default each test module gets its own ``gateway serve`` process (port-0 listeners, a data
directory from ``tmp_path_factory``). With ``KAFKA_COMPAT_BOOTSTRAP=host:port`` set, the suites
run against that external Kafka-compatible broker instead (used to validate the tests against a
reference implementation); only then may tests that restart the broker be skipped.
"""
from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from tests.brokerproc import BrokerProcess, start_broker

EXTERNAL_ENV = "KAFKA_COMPAT_BOOTSTRAP"
BROKER_FIXTURES = ("kafka_broker", "amqp_broker", "cross_broker", "secure_broker")  # each has output(): its log


class KafkaBroker:
    """The broker under test, as the Kafka clients see it.

    ``bootstrap`` is ``"host:port"``; it changes on :meth:`restart` (port 0), so clients must be
    created again after a restart.
    """

    def __init__(self, data_dir: Path | None, external: str | None = None, args: tuple[str, ...] = ()):
        self.data_dir = data_dir
        self.external = external
        self.target = "external" if external else "gateway"
        self.args = tuple(args)  # extra ``gateway serve`` options, kept across restarts
        self.process: BrokerProcess | None = None
        self.restarts = 0
        if external is None:
            self.process = start_broker(data_dir, *self.args)

    @property
    def bootstrap(self) -> str:
        if self.external:
            return self.external
        return self.process.addresses["kafka"]

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.bootstrap.rpartition(":")
        return host.strip("[]"), int(port)

    def output(self) -> str:
        return "" if self.process is None else self.process.output()

    def restart(self) -> str:
        """Stop with SIGTERM (must exit 0), start again on the same data directory.

        Returns the new bootstrap address. Skips the test against an external broker.
        """
        if self.external:
            pytest.skip(f"cannot restart the external broker {self.external} ({EXTERNAL_ENV} is set)")
        code = self.process.stop(signal.SIGTERM)
        assert code == 0, f"broker exited with {code} on SIGTERM:\n{self.process.output()[-5000:]}"
        self.process = start_broker(self.data_dir, *self.args)
        self.restarts += 1
        return self.bootstrap

    def stop(self) -> None:
        if self.process is not None and self.process.proc.poll() is None:
            self.process.stop(signal.SIGTERM)


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory, request):
    """A running Kafka-speaking broker shared by the tests of one module."""
    external = os.environ.get(EXTERNAL_ENV, "").strip() or None
    if external:
        yield KafkaBroker(None, external=external)
        return
    name = request.module.__name__.rpartition(".")[2]
    broker = KafkaBroker(tmp_path_factory.mktemp(name) / "data")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def bootstrap(kafka_broker) -> str:
    return kafka_broker.bootstrap


@pytest.fixture
def restart(kafka_broker):
    """``restart()`` stops the broker with SIGTERM and starts it on the same data directory,
    returning the new bootstrap address (clients must be recreated)."""
    return kafka_broker.restart


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique to this test (the broker is shared by a module, or by a whole run)."""
    return unique_name(request.node.name)


def unique_name(prefix: str) -> str:
    clean = "".join(c if c.isalnum() or c in "._-" else "-" for c in prefix)[:80]
    return f"{clean}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, append the tail of the log of the broker the test used (any suite)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        funcargs = getattr(item, "funcargs", {})
        for fixture in BROKER_FIXTURES:
            broker = funcargs.get(fixture)
            if broker is None:
                continue
            try:
                text = broker.output()
            except OSError:
                continue
            if text:
                report.sections.append((f"{getattr(broker, 'target', 'broker')} log (tail)", text[-4000:]))


def pytest_sessionfinish(session, exitstatus):
    # As in tests/conftest.py: a skipped test is not a passing one, also when this suite runs alone.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.stats.get("skipped") and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_configure(config):
    # kafka-python loads its protocol schemas with a deprecated importlib.resources call
    config.addinivalue_line("filterwarnings", "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning")
