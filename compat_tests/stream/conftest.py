"""Fixtures of the stream-protocol suite: a ``gateway serve`` process per test module (port-0
listeners), and for the differential tests the same broker or a private RabbitMQ node with
its stream plugin (Debian's rabbitmq-server 3.10: no super-stream commands, filtering or
single active consumer there, so those are tested against this broker only: a differential test
marked ``gateway_only(reason)`` has its [rabbitmq] case deselected, not skipped, and the reason
printed in the summary)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from compat_tests.rabbitmq import RabbitMQNode, RabbitMQUnavailable
from compat_tests.support import deselect_marked, summarize_deselected
from tests.brokerproc import start_broker

GATEWAY_ONLY = "gateway_only"
_gateway_only: list[tuple[str, str]] = []


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{GATEWAY_ONLY}(reason): a stream feature the [rabbitmq] target's RabbitMQ lacks; that case is "
        "deselected, not skipped")


def pytest_collection_modifyitems(config, items):
    deselect_marked(config, items, GATEWAY_ONLY, lambda params: params.get("target") == "rabbitmq", _gateway_only)


def pytest_terminal_summary(terminalreporter):
    summarize_deselected(terminalreporter, _gateway_only, "stream case(s)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("stream") / "data")
    yield process
    assert process.stop() == 0, process.output()


@dataclass
class StreamTarget:
    """A broker with a stream listener and an AMQP listener: ours, or RabbitMQ with its stream plugin."""

    name: str
    stream: tuple[str, int]
    amqp: tuple[str, int]
    node: object = None  # the RabbitMQNode, for rabbitmq-streams / rabbitmqctl


@pytest.fixture(scope="module", params=["gateway", "rabbitmq"])
def target(request, tmp_path_factory):
    """Each differential test runs against this broker and against RabbitMQ's stream plugin."""
    if request.param == "gateway":
        process = start_broker(tmp_path_factory.mktemp("stream-diff") / "data")
        yield StreamTarget("gateway", process.address("stream"), process.address("amqp"))
        assert process.stop() == 0, process.output()
        return
    try:
        node = RabbitMQNode(tmp_path_factory.mktemp("rabbitmq-stream"), stream=True)
        node.start()
    except RabbitMQUnavailable as exc:
        pytest.fail(f"the rabbitmq target needs Debian's rabbitmq-server: {exc}", pytrace=False)
    try:
        yield StreamTarget("rabbitmq", (node.host, node.stream_port), (node.host, node.port), node)
    finally:
        node.close()
