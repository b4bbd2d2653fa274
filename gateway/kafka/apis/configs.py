"""DescribeConfigs and ListConfigResources: the config resources this broker has and their entries.

Resources: topics (2), brokers (4, read only: start-up settings; the empty name is the
cluster-level defaults, as in Kafka) and groups (32, core.group_configs; a group need not exist
to have configs, as in Kafka). Client metrics (16): this broker keeps no subscriptions (see
``telemetry``), so ListConfigResources lists none and any name describes Kafka's defaults, which
are what ``telemetry`` hands out. Broker loggers (8) are not served.

Every entry carries Kafka's ``config_type`` for its name (DescribeConfigs v3+) and, when asked
for, its synonyms: what a Kafka 4.1 broker answers for the same names, observed on one.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from core.config import default_configs
from core.group_configs import INT, GroupConfigFileError, type_of
from gateway.kafka.apis.metadata import broker_list
from gateway.kafka.apis.registry import handles
from gateway.kafka.apis.telemetry import PUSH_INTERVAL_MS
from gateway.kafka.context import group_configs
from wire.kafka import respond

log = logging.getLogger(__name__)

TOPIC, BROKER_LOGGER, BROKER, CLIENT_METRICS, GROUP = 2, 8, 4, 16, 32  # config resource types
# config sources (DescribeConfigs v1+)
DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 3, 4, 5
DYNAMIC_GROUP_CONFIG = 8
# config types (DescribeConfigs v3+)
BOOLEAN, STRING, INT_TYPE, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7

# Kafka's type of each topic config (LogConfig's definitions, as a 4.1 broker describes them).
TOPIC_TYPES: dict[str, int] = {
    "cleanup.policy": LIST, "leader.replication.throttled.replicas": LIST,
    "follower.replication.throttled.replicas": LIST,
    "compression.type": STRING, "message.timestamp.type": STRING,
    "min.insync.replicas": INT_TYPE, "segment.bytes": INT_TYPE, "max.message.bytes": INT_TYPE,
    "index.interval.bytes": INT_TYPE, "segment.index.bytes": INT_TYPE, "compression.gzip.level": INT_TYPE,
    "compression.lz4.level": INT_TYPE, "compression.zstd.level": INT_TYPE,
    "min.cleanable.dirty.ratio": DOUBLE,
    "unclean.leader.election.enable": BOOLEAN, "preallocate": BOOLEAN, "remote.storage.enable": BOOLEAN,
    "remote.log.copy.disable": BOOLEAN, "remote.log.delete.on.disable": BOOLEAN,
    "message.downconversion.enable": BOOLEAN,  # Kafka 3.x's (gone in 4.0); kept here, so typed as it was
}  # every other topic config is a LONG (times, byte counts, flush.messages)

# The broker-level name behind a topic config, listed (with its default) in the topic's synonyms.
# Kafka lists none for the names whose broker setting has no default value (retention.ms,
# segment.ms, segment.jitter.ms, flush.ms: log.*.ms are unset, log.*.hours stand in).
TOPIC_SYNONYMS: dict[str, str] = {
    "cleanup.policy": "log.cleanup.policy", "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level", "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level", "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms", "flush.messages": "log.flush.interval.messages",
    "index.interval.bytes": "log.index.interval.bytes", "local.retention.bytes": "log.local.retention.bytes",
    "local.retention.ms": "log.local.retention.ms", "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "max.message.bytes": "message.max.bytes", "message.downconversion.enable": "log.message.downconversion.enable",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.timestamp.type": "log.message.timestamp.type",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms", "preallocate": "log.preallocate",
    "retention.bytes": "log.retention.bytes", "segment.bytes": "log.segment.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Kafka's type of each broker config this broker describes (KafkaConfig's definitions).
BROKER_TYPES: dict[str, int] = {
    "auto.create.topics.enable": BOOLEAN, "advertised.listeners": STRING, "listeners": STRING,
    "offsets.topic.replication.factor": SHORT, "offsets.retention.check.interval.ms": LONG,
    "log.retention.ms": LONG,
}  # the others (num.partitions, broker.id, node.id, group.*, message.max.bytes...) are INTs

MIN_ISR = "min.insync.replicas"


def topic_type(name: str) -> int:
    return TOPIC_TYPES.get(name, LONG)


def _min_isr_synonyms(explicit: str | None) -> list[dict]:
    """KIP-966: with eligible leader replicas on (Kafka 4.1's default), the controller keeps a
    cluster-level min.insync.replicas, so every topic's value comes from the topic or from that
    cluster default (source DYNAMIC_DEFAULT_BROKER_CONFIG), and the static default follows it.
    Here the cluster-wide value is the broker default (there is no way to change it)."""
    cluster = default_configs()[MIN_ISR]
    out = [{"name": MIN_ISR, "value": cluster, "source": DYNAMIC_DEFAULT_BROKER_CONFIG},
           {"name": MIN_ISR, "value": cluster, "source": DEFAULT_CONFIG}]
    if explicit is not None:
        out.insert(0, {"name": MIN_ISR, "value": explicit, "source": DYNAMIC_TOPIC_CONFIG})
    return out


def topic_entries(configs: dict[str, str], synonyms: bool = False) -> list[dict]:
    """Every topic config with its value: the topic's own, or the default. Also what CreateTopics
    returns per created topic (its schema has no type or synonyms; build() drops them)."""
    out = []
    for key, default in sorted(default_configs().items()):
        explicit = key in configs
        source = DYNAMIC_TOPIC_CONFIG if explicit else DEFAULT_CONFIG
        chain = []
        if key == MIN_ISR:
            source = source if explicit else DYNAMIC_DEFAULT_BROKER_CONFIG
            chain = _min_isr_synonyms(configs.get(key))
        elif synonyms:
            if explicit:
                chain.append({"name": key, "value": configs[key], "source": DYNAMIC_TOPIC_CONFIG})
            if key in TOPIC_SYNONYMS:
                chain.append({"name": TOPIC_SYNONYMS[key], "value": default, "source": DEFAULT_CONFIG})
        out.append({"name": key, "value": configs.get(key, default), "read_only": False,
                    "config_source": source, "is_sensitive": False, "is_default": source == DEFAULT_CONFIG,
                    "synonyms": chain if synonyms else [], "config_type": topic_type(key),
                    "documentation": None})
    return out


def broker_configs(ctx) -> dict[str, str]:
    """The broker keys clients and tools read (Kafka's names), from this broker's settings."""
    me = next((b for b in broker_list(ctx) if b["node_id"] == ctx.node_id), None)
    advertised = f"PLAINTEXT://{me['host']}:{me['port']}" if me is not None else ""
    groups = ctx.groups
    replication = str(ctx.cluster.store.default_replication_factor) if ctx.cluster is not None else "1"
    return {"auto.create.topics.enable": str(ctx.auto_create_topics).lower(), "num.partitions": str(ctx.num_partitions),
            "socket.request.max.bytes": str(ctx.max_request_bytes), "broker.id": str(ctx.node_id),
            "node.id": str(ctx.node_id), "default.replication.factor": replication,
            "offsets.topic.replication.factor": replication, "advertised.listeners": advertised,
            "listeners": advertised, "group.min.session.timeout.ms": str(groups.min_session_timeout_ms),
            "group.max.session.timeout.ms": str(groups.max_session_timeout_ms),
            "group.initial.rebalance.delay.ms": str(groups.initial_rebalance_delay_ms),
            "offsets.retention.minutes": str(groups.retention.retention_ms // 60_000),
            "offsets.retention.check.interval.ms": str(groups.retention.check_interval_ms),
            "group.consumer.session.timeout.ms": str(groups.consumer.session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(groups.consumer.heartbeat_interval_ms),
            "group.share.delivery.count.limit": str(ctx.share_delivery_count_limit),
            **{f"group.{name}": str(value) for name, value in ctx.group_defaults.items()},
            "message.max.bytes": default_configs()["max.message.bytes"],
            "log.retention.ms": default_configs()["retention.ms"]}


def _broker_entries(ctx, synonyms: bool) -> list[dict]:
    out = []
    for name, value in sorted(broker_configs(ctx).items()):
        out.append({"name": name, "value": value, "read_only": True, "config_source": STATIC_BROKER_CONFIG,
                    "is_sensitive": False, "is_default": False, "config_type": BROKER_TYPES.get(name, INT_TYPE),
                    "synonyms": [{"name": name, "value": value, "source": STATIC_BROKER_CONFIG}] if synonyms else [],
                    "documentation": None})
    # The cluster-level min.insync.replicas of KIP-966 (see _min_isr_synonyms), as Kafka lists it
    # among a broker's configs. Read only here, unlike Kafka: no broker config can be changed.
    isr = _min_isr_synonyms(None)
    out.append({"name": MIN_ISR, "value": isr[0]["value"], "read_only": True,
                "config_source": DYNAMIC_DEFAULT_BROKER_CONFIG, "is_sensitive": False, "is_default": False,
                "config_type": INT_TYPE, "synonyms": isr if synonyms else [], "documentation": None})
    return sorted(out, key=lambda c: c["name"])


def _cluster_entries(synonyms: bool) -> list[dict]:
    """The broker resource with the empty name: the cluster-level dynamic configs. KIP-966's
    min.insync.replicas is the one Kafka 4.1 has (its synonyms: that level only)."""
    isr = _min_isr_synonyms(None)[:1]
    return [{"name": MIN_ISR, "value": isr[0]["value"], "read_only": True,
             "config_source": DYNAMIC_DEFAULT_BROKER_CONFIG, "is_sensitive": False, "is_default": False,
             "config_type": INT_TYPE, "synonyms": isr if synonyms else [], "documentation": None}]


def _broker_error(ctx, name: str) -> str | None:
    """Kafka's INVALID_REQUEST message for a broker resource that is not this broker (clients send
    a broker's config requests to that broker) or the cluster (the empty name)."""
    if name == "":
        return None
    try:
        node = int(name)
    except ValueError:
        return f"Broker id must be an integer, but it is: {name}"
    if node != ctx.node_id:
        return f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {name}"
    return None


# A client metrics resource with no subscription: Kafka's defaults (ClientMetricsConfigs).
_CLIENT_METRICS_DEFAULTS = (("interval.ms", str(PUSH_INTERVAL_MS), INT_TYPE), ("match", "", LIST), ("metrics", "", LIST))


def _client_metrics_entries() -> list[dict]:
    return [{"name": name, "value": value, "read_only": False, "config_source": DEFAULT_CONFIG,
             "is_sensitive": False, "is_default": True, "config_type": kind, "synonyms": [], "documentation": None}
            for name, value, kind in _CLIENT_METRICS_DEFAULTS]


def _group_entries(ctx, group_id: str, synonyms: bool) -> list[dict]:
    out = []
    for name, value, is_default in group_configs(ctx).describe(group_id):
        source = DEFAULT_CONFIG if is_default else DYNAMIC_GROUP_CONFIG
        out.append({"name": name, "value": value, "read_only": False, "config_source": source,
                    "is_sensitive": False, "is_default": is_default,
                    "config_type": INT_TYPE if type_of(name) == INT else STRING,
                    # Kafka lists the one value in effect, override or default, as the synonym
                    "synonyms": [{"name": name, "value": value, "source": source}] if synonyms else [],
                    "documentation": None})
    return out


@handles(32)
def describe_configs(ctx, conn, h, req):
    synonyms = getattr(req, "include_synonyms", False)
    results = []
    for r in req.resources:
        entry = {"error_code": ErrorCode.none, "error_message": None, "resource_type": r.resource_type,
                 "resource_name": r.resource_name, "configs": []}
        if r.resource_type == TOPIC:
            topic = ctx.logs.store.get_topic(r.resource_name)
            if topic is None:
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                entry["error_message"] = f"topic {r.resource_name!r} does not exist"
            else:
                entry["configs"] = topic_entries(dict(topic.configs), synonyms)
        elif r.resource_type == BROKER:
            error = _broker_error(ctx, r.resource_name)
            if error is not None:
                entry["error_code"], entry["error_message"] = ErrorCode.invalid_request, error
            else:
                entry["configs"] = _broker_entries(ctx, synonyms) if r.resource_name else _cluster_entries(synonyms)
        elif r.resource_type == CLIENT_METRICS:
            entry["configs"] = _client_metrics_entries()
        elif r.resource_type == GROUP:
            if not r.resource_name:
                entry["error_code"], entry["error_message"] = ErrorCode.invalid_request, "Group name must not be empty"
            else:
                try:
                    entry["configs"] = _group_entries(ctx, r.resource_name, synonyms)
                except GroupConfigFileError as exc:
                    log.error("%s", exc)
                    entry["error_code"], entry["error_message"] = ErrorCode.unknown_server_error, str(exc)
        else:
            entry["error_code"] = ErrorCode.invalid_request
            entry["error_message"] = (f"resource type {r.resource_type} has no configs here "
                                      "(topics: 2, brokers: 4, client metrics: 16, groups: 32)")
        if r.configuration_keys:  # null or empty: every config
            wanted = set(r.configuration_keys)
            entry["configs"] = [c for c in entry["configs"] if c["name"] in wanted]
        results.append(entry)
    return respond(h, {"throttle_time": 0, "results": results})


# ListConfigResources answers an empty type list with every type it serves; Kafka's order.
_LISTED_TYPES = (GROUP, CLIENT_METRICS, BROKER, TOPIC)


@handles(74)
def list_config_resources(ctx, conn, h, req):
    """v0 (ListClientMetricsResources) lists client metrics resources only; v1 (Kafka 4.1) the
    requested types, and answers UNSUPPORTED_VERSION for a type it does not list, as Kafka does.
    Groups are those with a config override (a group with none has no config resource), as in Kafka."""
    types = list(getattr(req, "resource_types", ())) if h.api_version >= 1 else [CLIENT_METRICS]
    wanted = types or list(_LISTED_TYPES)
    if any(t not in _LISTED_TYPES for t in wanted):
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.unsupported_version, "config_resources": []})
    found = []
    for kind in _LISTED_TYPES:
        if kind not in wanted:
            continue
        if kind == GROUP:
            names = group_configs(ctx).configured_groups()
        elif kind == BROKER:
            names = [str(b["node_id"]) for b in broker_list(ctx)]
        elif kind == TOPIC:
            names = sorted(ctx.logs.store.topics())
        else:  # CLIENT_METRICS: this broker keeps no client metrics subscriptions
            names = []
        found += [{"resource_name": name, "resource_type": kind} for name in names]
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": found})
