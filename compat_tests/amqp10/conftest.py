"""Fixtures of the AMQP 1.0 suite: one ``gateway serve`` process per module, and for the
differential cases Debian's RabbitMQ 3.10 with its ``rabbitmq_amqp1_0`` plugin.

RabbitMQ 3.10's plugin is the pre-4.0 one: no v2 addresses (``/queues/q``), no ``/management``
node, no quorum delivery-count in outcomes. The ``target`` fixture runs a case on both brokers
with the addresses both know (``/amq/queue/:q``, ``/exchange/:x/:key``); cases that need
RabbitMQ 4 behaviour use ``broker`` (ours only) and say why.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from compat_tests.rabbitmq import RabbitMQNode, RabbitMQUnavailable
from tests.brokerproc import start_broker


@dataclass
class Target:
    name: str
    amqp: tuple[str, int]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("amqp10") / "data")
    yield process
    assert process.stop() == 0, process.output()


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    try:
        node = RabbitMQNode(tmp_path_factory.mktemp("rabbitmq-amqp10"), amqp10=True)
        node.start()
    except RabbitMQUnavailable as exc:
        pytest.fail(f"the rabbitmq target needs Debian's rabbitmq-server: {exc}", pytrace=False)
    yield node
    node.close()


@pytest.fixture(params=["gateway", "rabbitmq"])
def target(request, broker) -> Target:
    if request.param == "gateway":
        return Target("gateway", broker.address("amqp"))
    node = request.getfixturevalue("rabbitmq")
    return Target("rabbitmq", (node.host, node.port))
