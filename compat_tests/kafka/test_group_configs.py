"""Group configs (Kafka's GROUP config resource, type 32: KIP-848/KIP-932), driven by real admin
clients over real sockets: confluent-kafka's AdminClient (librdkafka sends its GROUP resource as
type 32) and kafka-python's KafkaAdminClient (ConfigResourceType.GROUP), with DescribeConfigs,
IncrementalAlterConfigs and the legacy AlterConfigs. The group need not exist."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource, ConfigResourceType

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until

COMMON = {"socket.timeout.ms": 15000, "reconnect.backoff.max.ms": 1000}
# The keys both brokers describe for a GROUP resource. Apache Kafka 4.4 lists more (the
# streams.* group configs, consumer.assignment.interval.ms, share.delivery.count.limit and
# others), so the tests check that these are there with these values, not that they are all.
KEYS = {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "5000",
        "share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "5000",
        "share.record.lock.duration.ms": "30000", "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted"}


def _admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **COMMON})


def _describe(admin: AdminClient, group: str) -> dict:
    res = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([res])[res].result(30)


def _describe_settled(admin: AdminClient, group: str, name: str, value: str) -> dict:
    """The group's configs once ``name`` reads ``value``: Apache Kafka applies an alter through its
    controller, and the broker answering DescribeConfigs sees it a moment after the alter returned."""
    return wait_until(lambda: (c := _describe(admin, group))[name].value == value and c, 15, f"{name}={value}")


def _alter(admin: AdminClient, group: str, *entries: tuple[str, str | None, AlterConfigOpType], validate_only=False):
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries])
    return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)


def _refused(admin: AdminClient, group: str, name: str, value: str) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        _alter(admin, group, (name, value, AlterConfigOpType.SET))
    return info.value.args[0]


def test_confluent_kafka_sets_describes_and_deletes_group_configs(bootstrap):
    admin, group = _admin(bootstrap), unique_name("ck-share")
    configs = _describe(admin, group)  # a group that does not exist has every key, at its default
    assert KEYS.items() <= {name: entry.value for name, entry in configs.items()}.items()
    assert {entry.source for entry in configs.values()} == {ConfigSource.DEFAULT_CONFIG.value}
    assert not any(entry.is_read_only or entry.is_sensitive for entry in configs.values())

    _alter(admin, group, ("share.auto.offset.reset", "earliest", AlterConfigOpType.SET), validate_only=True)
    assert _describe(admin, group)["share.auto.offset.reset"].value == "latest"  # validate_only changed nothing
    _alter(admin, group, ("share.auto.offset.reset", "earliest", AlterConfigOpType.SET),
           ("share.record.lock.duration.ms", "15000", AlterConfigOpType.SET))
    configs = _describe_settled(admin, group, "share.auto.offset.reset", "earliest")
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.auto.offset.reset"].source == ConfigSource.GROUP_CONFIG.value  # DYNAMIC_GROUP_CONFIG, 8
    assert configs["share.record.lock.duration.ms"].value == "15000"
    assert configs["share.isolation.level"].source == ConfigSource.DEFAULT_CONFIG.value
    assert _describe(admin, unique_name("other"))["share.auto.offset.reset"].value == "latest"  # per group

    _alter(admin, group, ("share.auto.offset.reset", None, AlterConfigOpType.DELETE))
    configs = _describe_settled(admin, group, "share.auto.offset.reset", "latest")
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["share.record.lock.duration.ms"].value == "15000"


def test_confluent_kafka_gets_invalid_config_for_bad_group_configs(bootstrap):
    admin, group = _admin(bootstrap), unique_name("ck-bad")
    error = _refused(admin, group, "share.auto.offset.reset", "sometimes")
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "share.auto.offset.reset" in error.str() and "by_duration" in error.str()
    error = _refused(admin, group, "share.record.lock.duration.ms", "10")
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "share.record.lock.duration.ms" in error.str() and "1000" in error.str()
    assert _refused(admin, group, "share.auto.offset.reset", "by_duration:yesterday").code() == \
        KafkaError.INVALID_CONFIG
    assert _refused(admin, group, "no.such.config", "1").code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as info:
        _alter(admin, group, ("share.auto.offset.reset", "earliest", AlterConfigOpType.APPEND))
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    with pytest.raises(KafkaException) as info:  # one bad entry: none of the resource's entries apply
        _alter(admin, group, ("share.isolation.level", "read_committed", AlterConfigOpType.SET),
               ("share.session.timeout.ms", "1000", AlterConfigOpType.SET))  # not above the 5000 ms heartbeat
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    _alter(admin, group, ("share.auto.offset.reset", "by_duration:PT1H", AlterConfigOpType.SET))
    configs = _describe_settled(admin, group, "share.auto.offset.reset", "by_duration:PT1H")
    assert configs["share.auto.offset.reset"].value == "by_duration:PT1H"
    assert configs["share.isolation.level"].value == "read_uncommitted"
    assert configs["share.record.lock.duration.ms"].value == "30000"


def test_kafka_python_admin_handles_group_configs(bootstrap):
    admin, group = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000), unique_name("kp-share")
    try:
        def described(config_filter="all"):
            found = admin.describe_configs([KpConfigResource(ConfigResourceType.GROUP, group)],
                                           config_filter=config_filter)
            return {name: (c["value"], c["config_source"]) for name, c in found["group"][group].items()}

        def settles(expected):  # Apache Kafka's brokers see an alter a moment after it returned
            wait_until(lambda: described("modified") == expected, 15, f"the group's modified configs {expected}")

        assert {name: (value, "DEFAULT_CONFIG") for name, value in KEYS.items()}.items() <= described().items()
        assert described("modified") == {}

        result = admin.alter_configs([KpConfigResource(ConfigResourceType.GROUP, group, {
            "share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"})])
        assert result == {"group": {group: "OK"}}
        settles({"share.auto.offset.reset": ("earliest", "DYNAMIC_GROUP_CONFIG"),
                 "share.isolation.level": ("read_committed", "DYNAMIC_GROUP_CONFIG")})
        result = admin.alter_configs([KpConfigResource(ConfigResourceType.GROUP, group, {
            "share.record.lock.duration.ms": "10"})])
        assert "InvalidConfigurationError" in result["group"][group]
        assert "share.record.lock.duration.ms" in result["group"][group]
        result = admin.alter_configs([KpConfigResource(ConfigResourceType.GROUP, group, {
            "share.auto.offset.reset": "sometimes"})])
        assert "InvalidConfigurationError" in result["group"][group]

        result = admin.reset_configs([KpConfigResource(ConfigResourceType.GROUP, group, ["share.isolation.level"])])
        assert result == {"group": {group: "OK"}}
        settles({"share.auto.offset.reset": ("earliest", "DYNAMIC_GROUP_CONFIG")})

        # the legacy AlterConfigs (api 33) replaces the group's whole set: kafka-python first reads the
        # modified keys back and sends them along, so only the key it names changes
        result = admin.alter_configs([KpConfigResource(ConfigResourceType.GROUP, group, {
            "share.heartbeat.interval.ms": "6000"})], incremental=False)  # Kafka's range: 5000-15000
        assert result == {"group": {group: "OK"}}
        settles({"share.auto.offset.reset": ("earliest", "DYNAMIC_GROUP_CONFIG"),
                 "share.heartbeat.interval.ms": ("6000", "DYNAMIC_GROUP_CONFIG")})
        result = admin.reset_configs([KpConfigResource(ConfigResourceType.GROUP, group)], incremental=False)
        assert result == {"group": {group: "OK"}}
        settles({})
    finally:
        admin.close()


def test_group_configs_survive_a_restart(bootstrap, restart):
    group = unique_name("kept")
    admin = _admin(bootstrap)
    _alter(admin, group, ("share.auto.offset.reset", "earliest", AlterConfigOpType.SET),
           ("share.record.lock.duration.ms", "45000", AlterConfigOpType.SET))
    bootstrap = restart()  # kept in <data-dir>/group-configs.json
    admin = _admin(bootstrap)
    configs = _describe(admin, group)
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.auto.offset.reset"].source == ConfigSource.GROUP_CONFIG.value
    assert configs["share.record.lock.duration.ms"].value == "45000"
    _alter(admin, group, ("share.auto.offset.reset", None, AlterConfigOpType.DELETE))
    # Kafka applies a config change through its controller: the broker answering DescribeConfigs
    # sees it once the metadata record reaches it, a moment after the alter returned
    wait_until(lambda: _describe(admin, group)["share.auto.offset.reset"].value == "latest", 15,
               "the deleted group config back at its default")
