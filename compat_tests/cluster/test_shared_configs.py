"""Group configs and client quotas are the cluster's: altered through one broker, they hold on all.

Each request goes to one chosen broker over a plain socket (encoded with ``kio`` from Kafka's
schemas), since admin clients pick a broker themselves. The effect is checked too: a share
group's ``share.auto.offset.reset=earliest`` set through broker 1 decides where the share
partition led by another broker starts.
"""
from __future__ import annotations

import time

from confluent_kafka import Producer, ShareConsumer
from kio.schema.alter_client_quotas.v1 import request as aq, response as aqr
from kio.schema.describe_client_quotas.v1 import request as dq, response as dqr
from kio.schema.describe_configs.v4 import request as dc, response as dcr
from kio.schema.incremental_alter_configs.v1 import request as ia, response as iar
from kio.static.primitive import f64, i8

from compat_tests.cluster.cluster import create_topic, partition_view
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.kio_call import kio_call

GROUP_RESOURCE, SET = 32, 0


def _address(broker) -> tuple[str, int]:
    host, port = broker.bootstrap.rsplit(":", 1)
    return host, int(port)


def _set_group_config(broker, group: str, name: str, value: str) -> None:
    request = ia.IncrementalAlterConfigsRequest(resources=(ia.AlterConfigsResource(
        resource_type=i8(GROUP_RESOURCE), resource_name=group,
        configs=(ia.AlterableConfig(name=name, config_operation=i8(SET), value=value),)),), validate_only=False)
    [answer] = kio_call(_address(broker), 44, request, iar.IncrementalAlterConfigsResponse, api_version=1).responses
    assert answer.error_code == 0, answer.error_message


def _group_config(broker, group: str, name: str) -> str | None:
    request = dc.DescribeConfigsRequest(resources=(dc.DescribeConfigsResource(
        resource_type=i8(GROUP_RESOURCE), resource_name=group, configuration_keys=(name,)),),
        include_synonyms=False, include_documentation=False)
    [result] = kio_call(_address(broker), 32, request, dcr.DescribeConfigsResponse, api_version=4).results
    assert result.error_code == 0, result.error_message
    return next((c.value for c in result.configs if c.name == name), None)


def _set_quota(broker, client_id: str, key: str, value: float) -> None:
    request = aq.AlterClientQuotasRequest(entries=(aq.EntryData(
        entity=(aq.EntityData(entity_type="client-id", entity_name=client_id),),
        ops=(aq.OpData(key=key, value=f64(float(value)), remove=False),)),), validate_only=False)
    [entry] = kio_call(_address(broker), 49, request, aqr.AlterClientQuotasResponse, api_version=1).entries
    assert entry.error_code == 0, entry.error_message


def _quotas(broker, client_id: str) -> dict[str, float]:
    request = dq.DescribeClientQuotasRequest(components=(dq.ComponentData(
        entity_type="client-id", match_type=i8(0), match=client_id),), strict=False)
    answer = kio_call(_address(broker), 48, request, dqr.DescribeClientQuotasResponse, api_version=1)
    assert answer.error_code == 0, answer.error_message
    return {v.key: float(v.value) for entry in (answer.entries or ()) for v in entry.values}


def test_group_configs_and_quotas_altered_on_one_broker_hold_on_every_broker(cluster):
    b1, b2, b3 = cluster.brokers
    _set_group_config(b1, "shared-cfg", "share.record.lock.duration.ms", "15000")
    _set_quota(b2, "shared-app", "producer_byte_rate", 1048576)
    for broker in cluster.brokers:
        wait_until(lambda: _group_config(broker, "shared-cfg", "share.record.lock.duration.ms") == "15000", 10,
                   f"broker {broker.node_id} describing the group config")
        wait_until(lambda: _quotas(broker, "shared-app") == {"producer_byte_rate": 1048576.0}, 10,
                   f"broker {broker.node_id} describing the quota")
    # a broker that restarts reads them back from the cluster, not from its data directory
    b3.restart()
    assert _group_config(b3, "shared-cfg", "share.record.lock.duration.ms") == "15000"
    assert _quotas(b3, "shared-app") == {"producer_byte_rate": 1048576.0}


def test_a_share_groups_offset_reset_set_on_one_broker_applies_where_its_partition_is_led(cluster):
    topic, group = "cfg-shared-topic", "cfg-share-group"
    create_topic(cluster.bootstrap(), topic, 1, 3)
    md = cluster.wait_isr_full(topic)
    leader = partition_view(md, topic)[0][0]
    elsewhere = next(b for b in cluster.brokers if b.node_id != leader)
    _set_group_config(elsewhere, group, "share.auto.offset.reset", "earliest")
    wait_until(lambda: _group_config(cluster.by_id(leader), group, "share.auto.offset.reset") == "earliest", 10,
               "the leader knowing the group config")
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=b"early-%d" % i)
    assert producer.flush(30) == 0
    consumer = ShareConsumer({"bootstrap.servers": elsewhere.bootstrap, "group.id": group,
                              "socket.timeout.ms": 15000})
    consumer.subscribe([topic])
    got = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(m.value() for m in consumer.poll(0.5) if m.error() is None)
    finally:
        consumer.close()
    assert sorted(got) == sorted(b"early-%d" % i for i in range(10)), got  # latest would give nothing
