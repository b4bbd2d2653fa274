"""Per-group configs (Kafka's GROUP config resource, type 32): the store in core.group_configs,
and the DescribeConfigs/AlterConfigs/IncrementalAlterConfigs handlers and ACL rule over it,
called in process."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from core.group_configs import (APPEND, DELETE, KEYS, SET, SUBTRACT, GroupConfigFileError, GroupConfigs,
                                InvalidGroupConfig, auto_offset_reset_ms, duration_ns)
from gateway.kafka.apis.admin import alter_configs, incremental_alter_configs
from gateway.kafka.apis.configs import describe_configs
from gateway.kafka.authz import apply_post, authorize
from wire.kafka import Request, RequestHeader, request_class, response_class

DEFAULTS = {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "5000",
            "share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "5000",
            "share.record.lock.duration.ms": "30000", "share.auto.offset.reset": "latest",
            "share.isolation.level": "read_uncommitted", "streams.session.timeout.ms": "45000",
            "streams.heartbeat.interval.ms": "5000", "streams.num.standby.replicas": "0"}


# --- the store -----------------------------------------------------------------------------------

def test_every_key_has_kafkas_default_until_overridden(tmp_path):
    gc = GroupConfigs(tmp_path)
    assert set(KEYS) == set(DEFAULTS)
    assert gc.describe("g") == [(name, DEFAULTS[name], True) for name in sorted(DEFAULTS)]
    assert gc.get("g", "share.auto.offset.reset") == "latest"
    assert gc.get_int("g", "share.record.lock.duration.ms") == 30000
    gc.set("g", "share.auto.offset.reset", "earliest")
    gc.set("g", "share.record.lock.duration.ms", " 1000 ")  # trimmed, as Kafka's ConfigDef parses it
    assert gc.get("g", "share.auto.offset.reset") == "earliest"
    assert gc.get_int("g", "share.record.lock.duration.ms") == 1000
    assert gc.get("other", "share.auto.offset.reset") == "latest"  # per group
    assert gc.describe("g", ["share.auto.offset.reset", "no.such.key"]) == [("share.auto.offset.reset", "earliest",
                                                                              False)]
    gc.delete("g", "share.auto.offset.reset")
    assert gc.get("g", "share.auto.offset.reset") == "latest"
    assert gc.overrides("g") == {"share.record.lock.duration.ms": "1000"}
    gc.forget("g")
    assert gc.overrides("g") == {} and gc.describe("g")[0][2]
    with pytest.raises(InvalidGroupConfig, match="not an integer config"):
        gc.get_int("g", "share.isolation.level")


def test_broker_settings_replace_the_defaults(tmp_path):
    gc = GroupConfigs(tmp_path, {"consumer.session.timeout.ms": 10_000, "share.auto.offset.reset": "earliest"})
    assert gc.get_int("g", "consumer.session.timeout.ms") == 10_000
    assert ("share.auto.offset.reset", "earliest", True) in gc.describe("g")


@pytest.mark.parametrize("name, value, message", [
    ("no.such.key", "1", "Unknown group config name: no.such.key"),
    ("share.auto.offset.reset", "sometimes", "Invalid value `sometimes` for configuration share.auto.offset.reset. "
     "The value must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'."),
    ("share.auto.offset.reset", "EARLIEST", "share.auto.offset.reset"),  # Kafka compares case-sensitively
    ("share.auto.offset.reset", "none", "'earliest', 'latest'"),  # the consumer's "none" is not a share option
    ("share.auto.offset.reset", "by_duration", "by_duration:<PnDTnHnMn.nS.>"),
    ("share.auto.offset.reset", "by_duration:PT", "by_duration:<PnDTnHnMn.nS.>"),
    ("share.auto.offset.reset", "by_duration:-PT1H", "by_duration:<PnDTnHnMn.nS.>"),
    ("share.auto.offset.reset", "by_duration:P1W", "by_duration:<PnDTnHnMn.nS.>"),
    ("share.record.lock.duration.ms", "10",
     "Invalid value 10 for configuration share.record.lock.duration.ms: Value must be a whole number between "
     "1000 and 3600000"),
    ("share.record.lock.duration.ms", "3600001", "between 1000 and 3600000"),
    ("share.record.lock.duration.ms", "1e4", "share.record.lock.duration.ms: Value must be a whole number"),
    ("consumer.heartbeat.interval.ms", "0", "consumer.heartbeat.interval.ms: Value must be a whole number at least 1"),
    ("consumer.session.timeout.ms", "2147483648", "at least 1"),
    ("share.isolation.level", "serializable", "Invalid value serializable for configuration share.isolation.level: "
     "String must be one of: read_committed, read_uncommitted"),
    ("share.session.timeout.ms", "5000", "share.session.timeout.ms must be greater than share.heartbeat.interval.ms"),
    ("share.isolation.level", None, "Null value not supported for group config: share.isolation.level"),
])
def test_invalid_values_are_refused_with_the_key_and_what_it_takes(tmp_path, name, value, message):
    gc = GroupConfigs(tmp_path)
    with pytest.raises(InvalidGroupConfig) as info:
        gc.set("g", name, value)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)
    assert gc.overrides("g") == {} and not (tmp_path / GroupConfigs.FILE).exists()


def test_valid_values(tmp_path):
    gc = GroupConfigs(tmp_path)
    for name, value in [("share.auto.offset.reset", "by_duration:PT1H"), ("share.auto.offset.reset", "by_duration:P0D"),
                        ("share.isolation.level", "read_committed"), ("share.record.lock.duration.ms", "3600000"),
                        ("consumer.session.timeout.ms", "+6000"), ("share.heartbeat.interval.ms", "1")]:
        gc.set("g", name, value)
    assert gc.overrides("g") == {"share.auto.offset.reset": "by_duration:P0D",
                                 "share.isolation.level": "read_committed",
                                 "share.record.lock.duration.ms": "3600000", "consumer.session.timeout.ms": "6000",
                                 "share.heartbeat.interval.ms": "1"}


def test_by_duration_is_javas_iso_8601_duration():
    assert duration_ns("PT1H") == 3600 * 10**9
    assert duration_ns("P1DT2H3M4.5S") == ((24 + 2) * 3600 + 3 * 60 + 4) * 10**9 + 500_000_000
    assert duration_ns("pt0,25s") == 250_000_000  # case-insensitive, a comma before the fraction
    assert duration_ns("PT1H-30M") == 1800 * 10**9  # components carry signs; only the total may not be negative
    assert duration_ns("P0D") == 0
    for bad in ("", "P", "PT", "P1DT", "1H", "PT1.1234567891S", "P1Y", "PT-1S", "-P1D", "PT1H 2M"):
        with pytest.raises(ValueError):
            duration_ns(bad)


def test_auto_offset_reset_gives_a_mode_or_the_timestamp_to_start_at():
    now = 1_700_000_000_123
    assert auto_offset_reset_ms("earliest", now) == "earliest"
    assert auto_offset_reset_ms("latest", now) == "latest"
    assert auto_offset_reset_ms("by_duration:PT1H", now) == now - 3_600_000
    assert auto_offset_reset_ms("by_duration:PT0.0005S", now) == now - 1  # rounded down, as toEpochMilli
    assert auto_offset_reset_ms("by_duration:P100000D", now) == 0  # never before the epoch
    with pytest.raises(InvalidGroupConfig, match="share.auto.offset.reset"):
        auto_offset_reset_ms("sometimes", now)


def test_alter_is_all_or_nothing(tmp_path):
    gc = GroupConfigs(tmp_path)
    gc.set("g", "share.isolation.level", "read_committed")
    for ops in ([("share.auto.offset.reset", SET, "earliest"), ("share.record.lock.duration.ms", SET, "10")],
                [("share.auto.offset.reset", SET, "earliest"), ("share.isolation.level", DELETE, None),
                 ("nope", DELETE, None)],
                [("share.auto.offset.reset", SET, "earliest"), ("share.auto.offset.reset", APPEND, "x")],
                [("share.auto.offset.reset", SUBTRACT, "x")],
                [("share.auto.offset.reset", 7, "x")]):
        with pytest.raises(InvalidGroupConfig):
            gc.alter("g", ops)
        assert gc.overrides("g") == {"share.isolation.level": "read_committed"}
        assert GroupConfigs(tmp_path).overrides("g") == {"share.isolation.level": "read_committed"}
    with pytest.raises(InvalidGroupConfig, match="Config value append is not allowed for config key: "
                                                 "share.auto.offset.reset"):
        gc.alter("g", [("share.auto.offset.reset", APPEND, "earliest")])
    # a session timeout and heartbeat interval changed together are checked together
    gc.alter("g", [("consumer.heartbeat.interval.ms", SET, "1000"), ("consumer.session.timeout.ms", SET, "2000")])
    with pytest.raises(InvalidGroupConfig, match="consumer.session.timeout.ms must be greater"):
        gc.delete("g", "consumer.heartbeat.interval.ms")  # back to 5000, above the 2000 session timeout
    gc.alter("g", [("share.isolation.level", DELETE, None), ("share.auto.offset.reset", SET, "earliest")],
             validate_only=True)
    assert gc.get("g", "share.auto.offset.reset") == "latest"  # validate_only changes nothing
    gc.alter("g", [("share.isolation.level", DELETE, None), ("share.auto.offset.reset", SET, "earliest")])
    assert gc.overrides("g") == {"share.auto.offset.reset": "earliest", "consumer.heartbeat.interval.ms": "1000",
                                 "consumer.session.timeout.ms": "2000"}


def test_replace_sets_the_whole_set(tmp_path):
    gc = GroupConfigs(tmp_path)
    gc.set("g", "share.isolation.level", "read_committed")
    gc.replace("g", {"share.auto.offset.reset": "earliest"})
    assert gc.overrides("g") == {"share.auto.offset.reset": "earliest"}
    with pytest.raises(InvalidGroupConfig, match="Unknown group config name: x"):
        gc.replace("g", {"share.auto.offset.reset": "latest", "x": "1"})
    assert gc.overrides("g") == {"share.auto.offset.reset": "earliest"}
    gc.replace("g", {})
    assert gc.overrides("g") == {}


def test_overrides_survive_a_new_instance_and_are_written_atomically(tmp_path):
    gc = GroupConfigs(tmp_path)
    gc.set("orders", "share.auto.offset.reset", "by_duration:PT30M")
    gc.set("billing", "share.record.lock.duration.ms", "60000")
    again = GroupConfigs(tmp_path)
    assert again.get("orders", "share.auto.offset.reset") == "by_duration:PT30M"
    assert again.get_int("billing", "share.record.lock.duration.ms") == 60000
    assert json.loads((tmp_path / "group-configs.json").read_text()) == {"version": 1, "groups": {
        "billing": {"share.record.lock.duration.ms": "60000"},
        "orders": {"share.auto.offset.reset": "by_duration:PT30M"}}}
    assert os.listdir(tmp_path) == ["group-configs.json"]  # the temporary file was renamed over it
    again.forget("orders")
    again.forget("billing")
    assert GroupConfigs(tmp_path).describe("orders") == GroupConfigs(tmp_path / "missing").describe("orders")


@pytest.mark.parametrize("text", ["{not json", "[]", '{"version": 1}', '{"groups": {"g": {"x.y": "1"}}}',
                                  '{"groups": {"g": {"share.auto.offset.reset": "sometimes"}}}',
                                  '{"groups": {"g": ["share.auto.offset.reset"]}}'])
def test_a_damaged_file_is_an_error_naming_it(tmp_path, text):
    (tmp_path / "group-configs.json").write_text(text)
    with pytest.raises(GroupConfigFileError, match=str(tmp_path / "group-configs.json")):
        GroupConfigs(tmp_path)


def test_a_failed_write_changes_nothing(tmp_path):
    gc = GroupConfigs(tmp_path / "gone")  # its directory does not exist: the write fails
    with pytest.raises(OSError):
        gc.set("g", "share.auto.offset.reset", "earliest")
    assert gc.get("g", "share.auto.offset.reset") == "latest"


# --- the Kafka handlers, in process ----------------------------------------------------------------

def _ctx(tmp_path):
    consumer = SimpleNamespace(session_timeout_ms=30_000, heartbeat_interval_ms=3_000)
    return SimpleNamespace(logs=SimpleNamespace(data_dir=tmp_path), groups=SimpleNamespace(consumer=consumer),
                           group_configs=None)


def _call(handler, ctx, api_key: int, version: int, body: dict):
    cls = request_class(api_key, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    req = _build(cls, mod, body)
    h = RequestHeader(api_key, version, 1, "test", version >= {32: 4, 33: 2, 44: 1}[api_key])
    data = handler(ctx, None, h, req)
    return entity_reader(response_class(api_key, version))(data, 9 if h.flexible else 8)[0]


def _build(cls, mod, body):
    """A kio request from plain dicts (nested lists of dicts become the module's entity classes)."""
    kwargs = {}
    for name, value in body.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            item_cls = {"resources": {32: "DescribeConfigsResource", 33: "AlterConfigsResource",
                                      44: "AlterConfigsResource"}[cls.__api_key__],
                        "configs": {33: "AlterableConfig", 44: "AlterableConfig"}.get(cls.__api_key__)}[name]
            value = tuple(_build(getattr(mod, item_cls), mod, v) for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


def _describe(ctx, name="g", keys=None, version=4, synonyms=False):
    body = {"resources": [{"resource_type": 32, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": synonyms}
    if version >= 3:
        body["include_documentation"] = False
    return _call(describe_configs, ctx, 32, version, body).results[0]


def _incremental(ctx, name, *ops, validate_only=False):
    body = {"resources": [{"resource_type": 32, "resource_name": name, "configs": [
        {"name": n, "config_operation": op, "value": v} for n, op, v in ops]}], "validate_only": validate_only}
    return _call(incremental_alter_configs, ctx, 44, 1, body).responses[0]


def test_describe_configs_of_a_group_that_does_not_exist(tmp_path):
    result = _describe(_ctx(tmp_path))
    assert result.error_code == ErrorCode.none and result.resource_type == 32 and result.resource_name == "g"
    entries = {c.name: c for c in result.configs}
    assert {n: c.value for n, c in entries.items()} == {**DEFAULTS, "consumer.session.timeout.ms": "30000",
                                                        "consumer.heartbeat.interval.ms": "3000"}  # the broker's
    assert {c.config_source for c in result.configs} == {5}  # DEFAULT_CONFIG
    assert entries["share.record.lock.duration.ms"].config_type == 3  # INT
    assert entries["share.auto.offset.reset"].config_type == 2  # STRING
    assert not any(c.read_only or c.is_sensitive or c.synonyms or c.documentation for c in result.configs)
    assert [c.name for c in _describe(_ctx(tmp_path), keys=["share.isolation.level"]).configs] == \
        ["share.isolation.level"]
    assert _describe(_ctx(tmp_path), name="").error_code == ErrorCode.invalid_request


def test_incremental_alter_then_describe(tmp_path):
    ctx = _ctx(tmp_path)
    assert _incremental(ctx, "g", ("share.auto.offset.reset", SET, "earliest"),
                        validate_only=True).error_code == ErrorCode.none
    assert ctx.group_configs.overrides("g") == {}
    assert _incremental(ctx, "g", ("share.auto.offset.reset", SET, "earliest")).error_code == ErrorCode.none
    entry = {c.name: c for c in _describe(ctx, synonyms=True).configs}["share.auto.offset.reset"]
    assert (entry.value, entry.config_source) == ("earliest", 8)  # DYNAMIC_GROUP_CONFIG
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [("share.auto.offset.reset", "earliest", 8)]
    old = {c.name: c for c in _describe(ctx, version=1).configs}["share.auto.offset.reset"]  # no config_type in v1
    assert (old.value, old.config_source) == ("earliest", 8)

    bad = _incremental(ctx, "g", ("share.isolation.level", SET, "read_committed"),
                       ("share.auto.offset.reset", SET, "sometimes"))
    assert bad.error_code == ErrorCode.invalid_config and "sometimes" in bad.error_message
    bad = _incremental(ctx, "g", ("share.record.lock.duration.ms", SET, "10"))
    assert bad.error_code == ErrorCode.invalid_config and "share.record.lock.duration.ms" in bad.error_message
    bad = _incremental(ctx, "g", ("share.auto.offset.reset", APPEND, "latest"))
    assert bad.error_code == ErrorCode.invalid_config and "append is not allowed" in bad.error_message
    dup = _incremental(ctx, "g", ("share.auto.offset.reset", SET, "latest"), ("share.auto.offset.reset", DELETE, None))
    assert dup.error_code == ErrorCode.invalid_request
    assert ctx.group_configs.overrides("g") == {"share.auto.offset.reset": "earliest"}  # none of those applied

    assert _incremental(ctx, "g", ("share.auto.offset.reset", DELETE, None)).error_code == ErrorCode.none
    entry = {c.name: c for c in _describe(ctx).configs}["share.auto.offset.reset"]
    assert (entry.value, entry.config_source) == ("latest", 5)


def test_legacy_alter_configs_replaces_the_groups_set(tmp_path):
    ctx = _ctx(tmp_path)
    _incremental(ctx, "g", ("share.isolation.level", SET, "read_committed"))

    def alter(configs, validate_only=False):
        body = {"resources": [{"resource_type": 32, "resource_name": "g", "configs": [
            {"name": n, "value": v} for n, v in configs.items()]}], "validate_only": validate_only}
        return _call(alter_configs, ctx, 33, 2, body).responses[0]
    assert alter({"share.auto.offset.reset": "earliest"}, validate_only=True).error_code == ErrorCode.none
    assert ctx.group_configs.overrides("g") == {"share.isolation.level": "read_committed"}
    assert alter({"share.auto.offset.reset": "earliest"}).error_code == ErrorCode.none
    assert ctx.group_configs.overrides("g") == {"share.auto.offset.reset": "earliest"}
    assert alter({"share.auto.offset.reset": "sometimes"}).error_code == ErrorCode.invalid_config
    assert GroupConfigs(tmp_path).overrides("g") == {"share.auto.offset.reset": "earliest"}


def test_a_damaged_file_is_reported_to_the_client(tmp_path):
    (tmp_path / "group-configs.json").write_text("{not json")
    ctx = _ctx(tmp_path)
    result = _describe(ctx)
    assert result.error_code == ErrorCode.unknown_server_error and "group-configs.json" in result.error_message
    assert _incremental(ctx, "g", ("share.auto.offset.reset", SET, "earliest")).error_code == \
        ErrorCode.unknown_server_error
    assert (tmp_path / "group-configs.json").read_text() == "{not json"  # left for the operator to look at


def test_group_configs_need_the_groups_acls(tmp_path):
    asked = []

    class Authorizer:
        def authorize(self, principal, host, operation, resource_type, name):
            asked.append((operation, resource_type, name))
            return name != "secret"

    ctx = _ctx(tmp_path)
    conn = SimpleNamespace(principal_name="alice", peer_host="127.0.0.1", peer="127.0.0.1:1", ctx=ctx)
    cls = request_class(32, 4)
    mod = __import__(cls.__module__, fromlist=["x"])
    req = _build(cls, mod, {"resources": [{"resource_type": 32, "resource_name": n, "configuration_keys": None}
                                          for n in ("open", "secret")],
                            "include_synonyms": False, "include_documentation": False})
    h = RequestHeader(32, 4, 1, "test", True)
    verdict = authorize(Authorizer(), conn, Request(h, req))
    assert asked == [("describe_configs", "group", "open"), ("describe_configs", "group", "secret")]
    assert [r.resource_name for r in verdict.body.resources] == ["open"]
    data = apply_post(h, describe_configs(ctx, conn, h, verdict.body), verdict.post)
    results = {r.resource_name: r for r in entity_reader(response_class(32, 4))(data, 9)[0].results}
    assert results["open"].error_code == ErrorCode.none and len(results["open"].configs) == len(DEFAULTS)
    assert results["secret"].error_code == ErrorCode.group_authorization_failed and not results["secret"].configs
