"""Per-topic configuration: Kafka's key names, typed, validated, with our defaults.

Configs are stored as strings (as Kafka's admin APIs carry them) and parsed into a
frozen :class:`TopicConfig` once, when a log is opened or its configs change.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

from core.errors import InvalidConfigError

_MAX_LONG = 2**63 - 1

# key -> (attribute, type, default, minimum). -1 means "unlimited" where Kafka allows it.
_SPEC: dict[str, tuple[str, type, object, int | None]] = {
    "retention.ms": ("retention_ms", int, 7 * 24 * 3600 * 1000, -1),
    "retention.bytes": ("retention_bytes", int, -1, -1),
    "segment.bytes": ("segment_bytes", int, 1024 * 1024 * 1024, 1024),
    "segment.ms": ("segment_ms", int, 7 * 24 * 3600 * 1000, 1),
    "index.interval.bytes": ("index_interval_bytes", int, 4096, 0),
    "cleanup.policy": ("cleanup_policy", str, "delete", None),
    "delete.retention.ms": ("delete_retention_ms", int, 24 * 3600 * 1000, 0),
    "min.insync.replicas": ("min_insync_replicas", int, 1, 1),
    "max.message.bytes": ("max_message_bytes", int, 1048588, 0),
    # flush.messages=1 (our default) means "fsync before acknowledging"; the broker
    # batches those fsyncs across requests (group commit), so it costs one fsync per
    # flush interval, not one per message. Larger values flush every N messages or
    # flush.ms, and acknowledge without waiting (Kafka's own default behaviour).
    "flush.messages": ("flush_messages", int, 1, 1),
    "flush.ms": ("flush_ms", int, 1000, 0),
    "message.timestamp.type": ("message_timestamp_type", str, "CreateTime", None),
    "unclean.leader.election.enable": ("unclean_leader_election", bool, False, None),
    "compression.type": ("compression_type", str, "producer", None),
}

# Kafka's other topic configs: checked and kept (DescribeConfigs shows them), not acted on here.
# key -> (type, default, minimum); "list" is a comma-separated list (APPEND/SUBTRACT apply).
_ACCEPTED: dict[str, tuple[str, object, float | None]] = {
    "file.delete.delay.ms": ("long", 60000, 0),
    "follower.replication.throttled.replicas": ("list", "", None),
    "leader.replication.throttled.replicas": ("list", "", None),
    "local.retention.bytes": ("long", -2, -2),
    "local.retention.ms": ("long", -2, -2),
    "max.compaction.lag.ms": ("long", _MAX_LONG, 1),
    "min.cleanable.dirty.ratio": ("double", 0.5, 0.0),
    "min.compaction.lag.ms": ("long", 0, 0),
    "message.timestamp.after.max.ms": ("long", _MAX_LONG, 0),
    "message.timestamp.before.max.ms": ("long", _MAX_LONG, 0),
    "message.timestamp.difference.max.ms": ("long", _MAX_LONG, 0),
    "message.downconversion.enable": ("bool", True, None),
    "preallocate": ("bool", False, None),
    "remote.storage.enable": ("bool", False, None),
    "remote.log.copy.disable": ("bool", False, None),
    "remote.log.delete.on.disable": ("bool", False, None),
    "segment.index.bytes": ("int", 10485760, 4),
    "segment.jitter.ms": ("long", 0, 0),
    "compression.gzip.level": ("int", -1, -1),
    "compression.lz4.level": ("int", 9, 1),
    "compression.zstd.level": ("int", 3, -131072),
}
_NEVER = 2**61  # flush.messages / flush.ms from here on: never due by count or age
LIST_CONFIGS = frozenset({"cleanup.policy", "follower.replication.throttled.replicas",
                          "leader.replication.throttled.replicas"})

_CHOICES = {
    "cleanup.policy": {"delete", "compact", "compact,delete", "delete,compact"},
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "compression.type": {"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"},
}


@dataclass(frozen=True, slots=True)
class TopicConfig:
    retention_ms: int = _SPEC["retention.ms"][2]
    retention_bytes: int = _SPEC["retention.bytes"][2]
    segment_bytes: int = _SPEC["segment.bytes"][2]
    segment_ms: int = _SPEC["segment.ms"][2]
    index_interval_bytes: int = _SPEC["index.interval.bytes"][2]
    cleanup_policy: str = _SPEC["cleanup.policy"][2]
    delete_retention_ms: int = _SPEC["delete.retention.ms"][2]
    min_insync_replicas: int = _SPEC["min.insync.replicas"][2]
    max_message_bytes: int = _SPEC["max.message.bytes"][2]
    flush_messages: int = _SPEC["flush.messages"][2]
    flush_ms: int = _SPEC["flush.ms"][2]
    message_timestamp_type: str = _SPEC["message.timestamp.type"][2]
    unclean_leader_election: bool = _SPEC["unclean.leader.election.enable"][2]
    compression_type: str = _SPEC["compression.type"][2]

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def sync_flush(self) -> bool:
        """True when every append must reach the disk before it is acknowledged or served."""
        return self.flush_messages == 1

    @property
    def flushes_by_itself(self) -> bool:
        """Whether unflushed records ever fall due without another append: False for values so
        large they mean never (a transient queue's topic sets both to 2^62)."""
        return self.flush_ms < _NEVER or self.flush_messages < _NEVER

    @classmethod
    def from_strings(cls, configs: Mapping[str, str | None]) -> "TopicConfig":
        values = {}
        for key, raw in configs.items():
            if raw is None:
                continue
            attr, value = parse_config(key, raw)
            if attr is not None:
                values[attr] = value
        return cls(**values)


def parse_config(key: str, raw: str) -> tuple[str | None, object]:
    """Parse one ``key=value``; raise InvalidConfigError naming the key and the accepted values.
    A config this broker keeps but does not act on comes back with attribute None."""
    spec = _SPEC.get(key)
    if spec is None:
        if key in _ACCEPTED:
            return None, _parse_accepted(key, raw)
        raise InvalidConfigError(f"unknown topic config {key!r}; known keys: {', '.join(sorted({*_SPEC, *_ACCEPTED}))}")
    attr, typ, _default, minimum = spec
    text = str(raw).strip()
    if typ is bool:
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"config {key} must be true or false, not {raw!r}")
        return attr, text.lower() == "true"
    if typ is int:
        try:
            value = int(text)
        except ValueError:
            raise InvalidConfigError(f"config {key} must be an integer, not {raw!r}") from None
        if minimum is not None and value < minimum or value > _MAX_LONG:
            raise InvalidConfigError(f"config {key}={value} is out of range (minimum {minimum})")
        return attr, value
    if key in _CHOICES and text not in _CHOICES[key]:
        raise InvalidConfigError(f"config {key}={raw!r} is not one of {sorted(_CHOICES[key])}")
    return attr, text.replace("delete,compact", "compact,delete")


def _parse_accepted(key: str, raw: str) -> object:
    kind, _default, minimum = _ACCEPTED[key]
    text = str(raw).strip()
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise InvalidConfigError(f"config {key} must be true or false, not {raw!r}")
        return text.lower() == "true"
    if kind == "list":
        return text
    try:
        value = float(text) if kind == "double" else int(text)
    except ValueError:
        raise InvalidConfigError(f"config {key} must be {'a number' if kind == 'double' else 'an integer'}, "
                                 f"not {raw!r}") from None
    top = 1.0 if kind == "double" else (2**31 - 1 if kind == "int" else _MAX_LONG)
    if minimum is not None and value < minimum or value > top:
        raise InvalidConfigError(f"config {key}={value} is out of range ({minimum}..{top})")
    return value


def validate_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check every entry and return them as a plain dict of strings (None entries dropped)."""
    out = {}
    for key, raw in configs.items():
        if raw is None:
            continue
        parse_config(key, raw)
        out[key] = str(raw)
    return out


def default_configs() -> dict[str, str]:
    """Every known key with its default, as strings (what DescribeConfigs shows)."""
    out = {}
    for key, (_attr, typ, default, _min) in _SPEC.items():
        out[key] = str(default).lower() if typ is bool else str(default)
    for key, (kind, default, _min) in _ACCEPTED.items():
        out[key] = str(default).lower() if kind == "bool" else str(default)
    return out


assert {f.name for f in fields(TopicConfig)} == {s[0] for s in _SPEC.values()}
