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
    Option("http_listen", parse_host_port, "127.0.0.1:15672", "HOST:PORT", "HTTP listener (/healthz)"),
    Option("node_id", _int_at_least(0), 0, "N", "this broker's id"),
    Option("log_level", _choice("debug", "info", "warning", "error"), "info", "LEVEL",
           "debug, info, warning or error"),
    Option("log_format", _choice("text", "json"), "text", "FORMAT", "text, or json for one object per line"),
    Option("flush_interval_ms", _int_at_least(1), 5, "MS", "group-commit cadence: fsync due logs this often"),
    Option("auto_create_topics", _bool, True, "BOOL",
           "create a topic when a client produces to or asks metadata for one that does not exist"),
    Option("num_partitions", _int_at_least(1), 1, "N", "partitions of an auto-created topic"),
    Option("maintenance_interval_ms", _int_at_least(100), 30000, "MS",
           "how often retention, segment roll by age and compaction run"),
    Option("disk_free_limit_mb", _int_at_least(0), 50, "MB",
           "below this much free space in the data directory, publishers are blocked (disk alarm)"),
    Option("memory_limit_mb", _int_at_least(0), 0, "MB",
           "above this resident memory, publishers are blocked (memory alarm); 0 means 40 percent of RAM"),
)


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    kafka_listen: HostPort
    amqp_listen: HostPort
    http_listen: HostPort
    node_id: int
    log_level: str
    log_format: str
    flush_interval_ms: int
    auto_create_topics: bool
    num_partitions: int
    maintenance_interval_ms: int
    disk_free_limit_mb: int
    memory_limit_mb: int

    @property
    def listeners(self) -> dict[str, HostPort]:
        return {"kafka": self.kafka_listen, "amqp": self.amqp_listen, "http": self.http_listen}


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
    return Settings(**values)
