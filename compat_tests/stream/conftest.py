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
from tests.brokerproc import start_broker

GATEWAY_ONLY = "gateway_only"
_gateway_only: list[tuple[str, str]] = []


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{GATEWAY_ONLY}(reason): a stream feature the [rabbitmq] target's RabbitMQ lacks; that case is "
        "deselected, not skipped")


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        mark = item.get_closest_marker(GATEWAY_ONLY)
        if mark is not None and callspec is not None and callspec.params.get("target") == "rabbitmq":
            if not (mark.args and str(mark.args[0]).strip()):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{GATEWAY_ONLY} needs a reason")
            drop.append(item)
            _gateway_only.append((item.nodeid, mark.args[0]))
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    if _gateway_only:
        terminalreporter.write_sep("-", f"{len(_gateway_only)} stream case(s) deselected: gateway only")
        for nodeid, reason in _gateway_only:
            terminalreporter.write_line(f"  {nodeid}: {reason}")


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
