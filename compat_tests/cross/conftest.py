"""Fixtures of the cross-protocol suite: ONE ``gateway serve`` process per test module, spoken
to by real Kafka clients (kafka-python, confluent-kafka) and a real AMQP client (pika) at once.

There is no RabbitMQ target here: a queue that is also a Kafka topic is this broker's own
feature. ``cross_broker.restart()`` stops the broker with SIGTERM (which must exit 0) and starts
it again on the same data directory and the same two ports, so clients reconnect to the same
addresses (but must be created again).
"""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.brokerproc import BrokerProcess, start_broker

from .helpers import unique


class CrossBroker:
    """One broker process: ``bootstrap`` (Kafka ``host:port``), ``host``/``port`` (AMQP)."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.restarts = 0
        self.process: BrokerProcess = start_broker(data_dir)
        self.bootstrap = self.process.addresses["kafka"]
        self.host, self.port = self.process.address("amqp")

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def restart(self) -> None:
        code = self.process.stop(signal.SIGTERM)
        assert code == 0, f"broker exited with {code} on SIGTERM:\n{self.process.output()[-5000:]}"
        self.process = start_broker(self.data_dir, "--kafka-listen", self.bootstrap,
                                    "--amqp-listen", f"{self.host}:{self.port}")
        assert self.process.addresses["kafka"] == self.bootstrap
        self.restarts += 1

    def stop(self) -> None:
        if self.process.proc.poll() is None:
            self.process.stop(signal.SIGTERM)

    def output(self) -> str:
        return self.process.output()


@pytest.fixture(scope="module")
def cross_broker(tmp_path_factory, request):
    """The broker under test, shared by the tests of one module."""
    name = request.module.__name__.rpartition(".")[2]
    broker = CrossBroker(tmp_path_factory.mktemp(f"cross-{name}") / "data")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def name(request) -> str:
    """A queue/topic name unique to this test (legal as a Kafka topic name)."""
    return unique(request.node.originalname)
