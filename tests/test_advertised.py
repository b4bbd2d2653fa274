"""--kafka-advertised is what Metadata tells clients, in single-node mode too (a broker behind NAT
or in a container is reached at an address other than the one it listens on)."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient

from tests.brokerproc import start_broker


def test_single_node_metadata_names_the_advertised_address(tmp_path):
    broker = start_broker(tmp_path / "data", "--kafka-advertised", "kafka.example.test:19092")
    try:
        host, port = broker.address("kafka")
        md = AdminClient({"bootstrap.servers": f"{host}:{port}"}).list_topics(timeout=15)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("kafka.example.test", 19092)]
    finally:
        broker.stop()
