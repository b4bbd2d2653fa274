"""Broker settings: one table of options, read from the command line, GATEWAY_* environment
variables and a TOML file, in that order of precedence, over the embedded defaults.

Every option is declared once in OPTIONS; the CLI, the environment and the TOML reader are
all generated from it, so the three ways of setting a value cannot drift apart.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping


class ConfigError(ValueError):
    """A setting has a bad value or name; the message names the setting and what is allowed."""


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_host_port(text: str) -> HostPort:
    host, sep, port = str(text).rpartition(":")
    if not sep or not host:
        raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:9092 (port 0 picks a free port)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"port {port!r} is not a number from 0 to 65535")
    return HostPort(host, int(port))


def _int_at_least(low: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not str(value).strip().lstrip("-").isdigit():
            raise ValueError(f"{value!r} is not a whole number")
        number = int(value)
        if number < low:
            raise ValueError(f"{number} is below the minimum {low}")
        return number
    return parse


def _bool(value: Any) -> bool:
    text = str(value).lower()
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"{value!r} is not true or false")
    return text in ("true", "1", "yes")


def _choice(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).lower()
        if text not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return text
    return parse


def _optional_host_port(value: Any) -> HostPort | None:
    return None if value is None or str(value).strip() == "" else parse_host_port(value)


def _optional_path(value: Any) -> Path | None:
    return None if value is None or str(value).strip() == "" else Path(value)


def _names(value: Any) -> tuple[str, ...]:
    """A comma-separated list (or a TOML array) of names; "" is the empty list."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return tuple(str(item).strip() for item in items if str(item).strip())


@dataclass(frozen=True)
class Option:
    name: str                    # the dataclass field; CLI --name-with-dashes, env GATEWAY_NAME
    parse: Callable[[Any], Any]
    default: Any
    metavar: str
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "GATEWAY_" + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("data_dir", Path, "./gateway-data", "DIR", "directory for logs and metadata"),
    Option("kafka_listen", parse_host_port, "127.0.0.1:9092", "HOST:PORT", "Kafka protocol listener"),
    Option("amqp_listen", parse_host_port, "127.0.0.1:5672", "HOST:PORT", "AMQP 0-9-1 listener"),
    Option("http_listen", parse_host_port, "127.0.0.1:15672", "HOST:PORT",
           "HTTP listener: /healthz, management API /api/, /metrics, dashboard"),
    Option("stream_listen", parse_host_port, "127.0.0.1:5552", "HOST:PORT", "RabbitMQ stream protocol listener"),
    Option("node_id", _int_at_least(0), 0, "N", "this broker's id"),
    Option("log_level", _choice("debug", "info", "warning", "error"), "info", "LEVEL",
           "debug, info, warning or error"),
    Option("log_format", _choice("text", "json"), "text", "FORMAT", "text, or json for one object per line"),
    Option("flush_interval_ms", _int_at_least(1), 5, "MS", "group-commit cadence: fsync due logs this often"),
    Option("auto_create_topics", _bool, True, "BOOL",
           "create a topic when a client produces to or asks metadata for one that does not exist"),
    Option("num_partitions", _int_at_least(1), 1, "N", "partitions of an auto-created topic"),
    Option("kafka_idle_ms", _int_at_least(0), 600000, "MS",
           "close a Kafka connection on which no whole request arrived for this long (Kafka's "
           "connections.max.idle.ms); also ends one that trickles a request in byte by byte; 0: never"),
    Option("max_partitions", _int_at_least(0), 0, "N",
           "partitions this broker holds at most (each keeps a file open); creating more is refused with "
           "INVALID_PARTITIONS; 0 means half the open-file limit, which the broker raises to its hard limit"),
    Option("maintenance_interval_ms", _int_at_least(100), 30000, "MS",
           "how often retention, segment roll by age and compaction run"),
    Option("disk_free_limit_mb", _int_at_least(0), 50, "MB",
           "below this much free space in the data directory, publishers are blocked (disk alarm)"),
    Option("memory_limit_mb", _int_at_least(0), 0, "MB",
           "above this resident memory, publishers are blocked (memory alarm); 0 means 40 percent of RAM"),
    Option("max_connections", _int_at_least(0), 0, "N",
           "open client connections (both protocols) above which new ones are closed at once; 0: no limit"),
    Option("max_connections_per_user", _int_at_least(0), 0, "N",
           "connections one user may hold (AMQP at connection.open, Kafka at SASL login); 0: no limit"),
    Option("channel_max", _int_at_least(1), 2047, "N", "AMQP channels per connection (offered in connection.tune)"),
    Option("group_min_session_timeout_ms", _int_at_least(1), 6000, "MS",
           "Kafka: the shortest session.timeout.ms a group member may ask for (INVALID_SESSION_TIMEOUT below)"),
    Option("group_max_session_timeout_ms", _int_at_least(1), 1800000, "MS",
           "Kafka: the longest session.timeout.ms a group member may ask for"),
    Option("group_initial_rebalance_delay_ms", _int_at_least(0), 3000, "MS",
           "Kafka: the first JoinGroup of an empty classic group waits this long for more members, again "
           "while new ones arrive, up to the rebalance timeout (group.initial.rebalance.delay.ms; 0: no wait)"),
    Option("offsets_retention_minutes", _int_at_least(1), 10080, "N",
           "Kafka: committed offsets of a group empty this long are deleted; offsets committed outside any "
           "group, this long after their commit (offsets.retention.minutes)"),
    Option("offsets_retention_check_interval_ms", _int_at_least(1), 600000, "MS",
           "Kafka: how often expired offsets are looked for (offsets.retention.check.interval.ms)"),
    Option("group_consumer_session_timeout_ms", _int_at_least(1), 45000, "MS",
           "Kafka KIP-848 groups (group.protocol=consumer): a member silent this long is removed "
           "(Kafka's group.consumer.session.timeout.ms)"),
    Option("group_consumer_heartbeat_interval_ms", _int_at_least(1), 5000, "MS",
           "Kafka KIP-848 groups: the heartbeat interval given to members (group.consumer.heartbeat.interval.ms)"),
    Option("group_share_session_timeout_ms", _int_at_least(1), 45000, "MS",
           "Kafka share groups (KIP-932): a member silent this long is removed and its records are released "
           "(group.share.session.timeout.ms; the group config share.session.timeout.ms wins)"),
    Option("group_share_heartbeat_interval_ms", _int_at_least(1), 5000, "MS",
           "Kafka share groups: the heartbeat interval given to members (group.share.heartbeat.interval.ms)"),
    Option("group_share_record_lock_duration_ms", _int_at_least(1000), 30000, "MS",
           "Kafka share groups: how long an acquired record stays locked to its member before it is released "
           "(group.share.record.lock.duration.ms; the group config share.record.lock.duration.ms wins)"),
    Option("group_share_delivery_count_limit", _int_at_least(2), 5, "N",
           "Kafka share groups over a plain topic: deliveries of a record before it is archived "
           "(group.share.delivery.count.limit; a group named like an AMQP queue uses the queue's delivery limit)"),
    Option("group_streams_session_timeout_ms", _int_at_least(1), 45000, "MS",
           "Kafka Streams groups (KIP-1071, group.protocol=streams): a member silent this long is removed "
           "(group.streams.session.timeout.ms; the group config streams.session.timeout.ms wins)"),
    Option("group_streams_heartbeat_interval_ms", _int_at_least(1), 5000, "MS",
           "Kafka Streams groups: the heartbeat interval given to members (group.streams.heartbeat.interval.ms; "
           "the group config streams.heartbeat.interval.ms wins)"),
    Option("group_streams_num_standby_replicas", _int_at_least(0), 0, "N",
           "Kafka Streams groups: standby replicas of each stateful task, on other processes than its active "
           "one (group.streams.num.standby.replicas; the group config streams.num.standby.replicas wins)"),
    Option("consumer_timeout_ms", _int_at_least(0), 1800000, "MS",
           "AMQP: close a channel whose delivery stays unacknowledged this long (406; RabbitMQ's "
           "consumer_timeout; 0: never; a queue's x-consumer-timeout wins)"),
    Option("deprecated_features_permit_transient_nonexcl_queues", _bool, True, "BOOL",
           "AMQP: permit non-durable, non-exclusive queues (RabbitMQ's deprecated_features.permit."
           "transient_nonexcl_queues; false: declaring one closes the connection with 541, as RabbitMQ 4.3)"),
    Option("deprecated_features_permit_global_qos", _bool, True, "BOOL",
           "AMQP: permit basic.qos global=true (RabbitMQ's deprecated_features.permit.global_qos; "
           "false: it is taken as a per-consumer qos, as RabbitMQ 4.3)"),
    Option("deprecated_features_permit_queue_master_locator", _bool, True, "BOOL",
           "AMQP: permit the classic-queue argument x-queue-master-locator (RabbitMQ's deprecated_features."
           "permit.queue_master_locator; false: declaring one closes the connection with 541, as RabbitMQ 4.3)"),
    Option("delayed_messages_max", _int_at_least(1), 100000, "N",
           "messages an x-delayed-message exchange may hold (more: 406 PRECONDITION_FAILED)"),
    Option("definitions", _optional_path, "", "FILE",
           "import this definitions file (RabbitMQ's JSON format) at start-up, as load_definitions"),
    Option("max_message_bytes", _int_at_least(1), 134217728, "BYTES",
           "largest AMQP message body accepted (406 PRECONDITION_FAILED above it, as RabbitMQ's max_message_size)"),
    Option("kafka_throttle_ms", _int_at_least(0), 1000, "MS",
           "while a disk or memory alarm is on, Produce answers are held this long and carry it as throttle_time_ms"),
    Option("kafka_tls_listen", _optional_host_port, "", "HOST:PORT",
           "Kafka listener over TLS (security.protocol SSL and SASL_SSL); off unless set"),
    Option("amqp_tls_listen", _optional_host_port, "", "HOST:PORT", "AMQP 0-9-1 over TLS (amqps); off unless set"),
    Option("stream_tls_listen", _optional_host_port, "", "HOST:PORT",
           "RabbitMQ stream protocol over TLS (rabbitmq-stream+tls); off unless set"),
    Option("tls_cert", _optional_path, "", "FILE", "PEM certificate (and chain) of the TLS listeners"),
    Option("tls_key", _optional_path, "", "FILE", "PEM private key of --tls-cert"),
    Option("tls_client_ca", _optional_path, "", "FILE",
           "PEM CA bundle: ask TLS clients for a certificate and verify it (mutual TLS)"),
    Option("tls_client_auth", _choice("requested", "required"), "requested", "MODE",
           "with --tls-client-ca: requested (a client may send no certificate) or required"),
    Option("loopback_users", _names, "guest", "NAMES",
           "users who may log in only from a loopback address (comma list; empty for none)"),
    Option("kafka_require_auth", _bool, False, "BOOL",
           "Kafka clients must authenticate (SASL, or a verified client certificate) before other requests"),
    Option("authorizer", _choice("none", "acl"), "none", "NAME",
           "acl: enforce Kafka ACLs (CreateAcls/DeleteAcls); none: every Kafka client may do everything"),
    Option("super_users", _names, "", "NAMES", "Kafka principals the ACLs do not restrict (User:admin,...)"),
    Option("allow_everyone_if_no_acl_found", _bool, False, "BOOL",
           "with --authorizer acl: allow access to a resource that no ACL names (Kafka's default: false)"),
    Option("oauth_jwks", str, "", "JWKS",
           "OAuth 2: the token issuer's public keys, a JWKS file or an https:// URL; set, it turns on JWT login "
           "(AMQP password, Kafka OAUTHBEARER, HTTP Bearer)"),
    Option("oauth_issuer", str, "", "URL", "OAuth 2: a token's iss claim must be this (unset: not checked)"),
    Option("oauth_audience", str, "rabbitmq", "ID",
           "OAuth 2: the resource server id (RabbitMQ's resource_server_id): required in a token's aud, "
           "and the prefix of the scopes that count (rabbitmq.read:...)"),
    Option("oauth_username_claims", _names, "sub,client_id", "CLAIMS",
           "OAuth 2: the claims tried in turn for the user name (comma list)"),
    Option("oauth_clock_skew_s", _int_at_least(0), 60, "S",
           "OAuth 2: seconds of clock difference allowed on exp and nbf; a token is honoured until exp plus this"),
    Option("zookeeper", str, "", "HOST:PORT[/CHROOT]",
           "cluster mode: join the cluster kept in this ZooKeeper ensemble (comma list of servers); "
           "unset: single node, metadata in the data directory"),
    Option("kafka_advertised", _optional_host_port, "", "HOST:PORT",
           "the Kafka address other brokers and clients are told (default: the Kafka listener)"),
    Option("amqp_advertised", _optional_host_port, "", "HOST:PORT",
           "the AMQP address other brokers are told (default: the AMQP listener)"),
    Option("stream_advertised", _optional_host_port, "", "HOST:PORT",
           "the RabbitMQ stream address clients are told (Open, and Metadata in a cluster; default: the stream "
           "listener)"),
    Option("stream_tls_advertised", _optional_host_port, "", "HOST:PORT",
           "the RabbitMQ stream-over-TLS address clients are told (Open on the TLS listener, and Metadata to "
           "TLS clients in a cluster; default: the --stream-tls-listen listener)"),
    Option("rack", str, "", "NAME", "cluster mode: this broker's rack; replicas of a partition go to different racks"),
    Option("default_replication_factor", _int_at_least(1), 3, "N",
           "cluster mode: replicas of a topic created without a replication factor (capped at the live brokers; "
           "1 under --processes unless set)"),
    Option("transaction_state_partitions", _int_at_least(1), 1, "N",
           "partitions of __transaction_state when it is created (Kafka's transaction.state.log.num.partitions); "
           "in a cluster each partition's leader coordinates the transactional ids that hash to it, so more "
           "partitions spread that work over the brokers; an existing topic keeps its count"),
    Option("processes", _int_at_least(1), 1, "N",
           "run N broker processes on this machine as one cluster, one per core (node ids 1..N, listener ports "
           "+0..N-1, data in DIR/node-I, a private ZooKeeper in DIR/zookeeper unless --zookeeper is given)"),
    Option("replica_lag_time_max_ms", _int_at_least(100), 30000, "MS",
           "cluster mode: a follower that has not caught up for this long leaves the in-sync replicas"),
    Option("zookeeper_session_timeout_ms", _int_at_least(1000), 6000, "MS",
           "cluster mode: a broker silent this long loses its ZooKeeper session and its partitions move"),
    Option("amqp_cluster_mode", _choice("home", "spread"), "spread", "MODE",
           "cluster mode: 'spread' leads each queue where its placement puts it and serves every AMQP client on "
           "the broker it connected to, as RabbitMQ's cluster does; 'home' runs every AMQP queue on one broker and "
           "relays AMQP connections to it. Every broker of a cluster must run the same mode"),
    Option("queue_leader_locator", _choice("client-local", "balanced"), "client-local", "NAME",
           "cluster mode 'spread': where a new queue is led unless its x-queue-leader-locator argument or a "
           "queue-leader-locator policy says otherwise: the broker the client is connected to, or the one "
           "leading the fewest partitions"),
    Option("departed_broker_after_ms", _int_at_least(1000), 60000, "MS",
           "cluster mode 'spread': a broker gone from the cluster this long has its non-durable queues, exchanges "
           "and bindings removed by the other brokers, and its non-durable queues' topics deleted (RabbitMQ "
           "deletes a node's transient queues when it goes down); a broker that starts again removes its own"),
)


REFERENCE_BEGIN = "<!-- settings reference: generated by `python -m gateway.config`; do not edit -->"
REFERENCE_END = "<!-- end of settings reference -->"


def reference_markdown() -> str:
    """The table of settings (docs/reference/settings.md), generated from OPTIONS so it cannot drift from the code."""
    lines = [REFERENCE_BEGIN, "", "| option | env var | default | |", "|---|---|---|---|"]
    for o in OPTIONS:
        default = f"`{o.default}`" if o.default not in ("", None) else ""
        lines.append(f"| `{o.flag} {o.metavar}` | `{o.env}` | {default} | {o.help.replace('|', '/')} |")
    lines.append("| `--config FILE` | `GATEWAY_CONFIG` | | a TOML file with the same keys (`data_dir = \"...\"`) |")
    return "\n".join(lines + ["", REFERENCE_END])


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    kafka_listen: HostPort
    amqp_listen: HostPort
    http_listen: HostPort
    stream_listen: HostPort
    node_id: int
    log_level: str
    log_format: str
    flush_interval_ms: int
    auto_create_topics: bool
    num_partitions: int
    kafka_idle_ms: int
    max_partitions: int
    maintenance_interval_ms: int
    disk_free_limit_mb: int
    memory_limit_mb: int
    max_connections: int
    max_connections_per_user: int
    channel_max: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    group_consumer_session_timeout_ms: int
    group_consumer_heartbeat_interval_ms: int
    group_share_session_timeout_ms: int
    group_share_heartbeat_interval_ms: int
    group_share_record_lock_duration_ms: int
    group_share_delivery_count_limit: int
    group_streams_session_timeout_ms: int
    group_streams_heartbeat_interval_ms: int
    group_streams_num_standby_replicas: int
    consumer_timeout_ms: int
    deprecated_features_permit_transient_nonexcl_queues: bool
    deprecated_features_permit_global_qos: bool
    deprecated_features_permit_queue_master_locator: bool
    delayed_messages_max: int
    definitions: Path | None
    max_message_bytes: int
    kafka_throttle_ms: int
    kafka_tls_listen: HostPort | None
    amqp_tls_listen: HostPort | None
    stream_tls_listen: HostPort | None
    tls_cert: Path | None
    tls_key: Path | None
    tls_client_ca: Path | None
    tls_client_auth: str
    loopback_users: tuple[str, ...]
    kafka_require_auth: bool
    authorizer: str
    super_users: tuple[str, ...]
    allow_everyone_if_no_acl_found: bool
    oauth_jwks: str
    oauth_issuer: str
    oauth_audience: str
    oauth_username_claims: tuple[str, ...]
    oauth_clock_skew_s: int
    zookeeper: str
    kafka_advertised: HostPort | None
    amqp_advertised: HostPort | None
    stream_advertised: HostPort | None
    stream_tls_advertised: HostPort | None
    rack: str
    default_replication_factor: int
    transaction_state_partitions: int
    processes: int
    replica_lag_time_max_ms: int
    zookeeper_session_timeout_ms: int
    amqp_cluster_mode: str
    queue_leader_locator: str
    departed_broker_after_ms: int

    @property
    def listeners(self) -> dict[str, HostPort]:
        out = {"kafka": self.kafka_listen, "amqp": self.amqp_listen, "http": self.http_listen,
               "stream": self.stream_listen}
        for name in ("kafka_tls", "amqp_tls", "stream_tls"):
            if getattr(self, f"{name}_listen") is not None:
                out[name] = getattr(self, f"{name}_listen")
        return out


assert [o.name for o in OPTIONS] == [f.name for f in fields(Settings)]


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    known = {o.name for o in OPTIONS}
    values = {}
    for key, value in doc.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"config file {path}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        values[name] = value
    return values


def load_settings(cli: Mapping[str, Any], environ: Mapping[str, str], config_file: str | None = None) -> Settings:
    """Resolve every option: ``cli`` (None = not given) > ``environ`` > the TOML file > default."""
    config_file = config_file or environ.get("GATEWAY_CONFIG") or None
    from_file = read_toml(Path(config_file)) if config_file else {}
    values = {}
    for option in OPTIONS:
        if cli.get(option.name) is not None:
            raw, source = cli[option.name], option.flag
        elif environ.get(option.env):
            raw, source = environ[option.env], option.env
        elif option.name in from_file:
            raw, source = from_file[option.name], f"{option.name} in {config_file}"
        else:
            raw, source = option.default, f"default of {option.flag}"
        try:
            values[option.name] = option.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: {exc}") from None
    if (values["kafka_tls_listen"] or values["amqp_tls_listen"] or values["stream_tls_listen"]) and \
            not (values["tls_cert"] and values["tls_key"]):
        raise ConfigError("a TLS listener (--kafka-tls-listen, --amqp-tls-listen, --stream-tls-listen) needs "
                          "--tls-cert and --tls-key")
    if values["zookeeper"] and values["node_id"] >= 1024:
        raise ConfigError(f"--node-id {values['node_id']}: in cluster mode (--zookeeper) node ids must be below 1024 "
                          "(producer ids are made unique across brokers with them)")
    return Settings(**values)


if __name__ == "__main__":
    print(reference_markdown())
