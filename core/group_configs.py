"""Per-group configs: Kafka's GROUP config resource (KIP-848, KIP-932), kept in the data directory.

The keys are those of Kafka 4.1's ``GroupConfig`` (of its ``streams.*`` keys, the three streams
groups use here), with its
defaults and checks: every value is optional, and a group without an override gets the default
(the broker's own setting where it has one, given as ``defaults``). The group need not exist.

=================================  ======  =================  =============================
key                                type    default            allowed
=================================  ======  =================  =============================
consumer.session.timeout.ms        int     45000              >= 1, > the heartbeat interval
consumer.heartbeat.interval.ms     int     5000               >= 1
share.session.timeout.ms           int     45000              >= 1, > the heartbeat interval
share.heartbeat.interval.ms        int     5000               >= 1
share.record.lock.duration.ms      int     30000              1000 .. 3600000
share.auto.offset.reset            string  latest             earliest, latest, by_duration:<ISO-8601>
share.isolation.level              string  read_uncommitted   read_committed, read_uncommitted
streams.session.timeout.ms         int     45000              >= 1, > the heartbeat interval
streams.heartbeat.interval.ms      int     5000               >= 1
streams.num.standby.replicas       int     0                  >= 0
=================================  ======  =================  =============================

The integer ranges are the widest a Kafka broker can be set to accept (it also bounds them by
its ``group.*.min/max.*`` settings, 45000..60000 for session timeouts, 5000..15000 for
heartbeat intervals and 15000..60000 for the lock duration by default; this broker has no such
settings). ``by_duration:`` takes a duration as Java's ``Duration.parse`` reads it
(``PnDTnHnMn.nS``, not negative).

File ``<data-dir>/group-configs.json``, rewritten whole (temporary file, fsync, rename)::

    {"version": 1, "groups": {"orders": {"share.auto.offset.reset": "earliest"}}}

Thread-safety: none; the owner's thread only.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Mapping

from core.checkpoint import write_atomic

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
INT, STRING = "int", "string"
INT_MAX = 2**31 - 1

# name -> (type, default, lowest, highest)
KEYS: dict[str, tuple[str, str, int, int]] = {
    "consumer.session.timeout.ms": (INT, "45000", 1, INT_MAX),
    "consumer.heartbeat.interval.ms": (INT, "5000", 1, INT_MAX),
    "share.session.timeout.ms": (INT, "45000", 1, INT_MAX),
    "share.heartbeat.interval.ms": (INT, "5000", 1, INT_MAX),
    "share.record.lock.duration.ms": (INT, "30000", 1000, 3_600_000),
    "share.auto.offset.reset": (STRING, "latest", 0, 0),
    "share.isolation.level": (STRING, "read_uncommitted", 0, 0),
    "streams.session.timeout.ms": (INT, "45000", 1, INT_MAX),
    "streams.heartbeat.interval.ms": (INT, "5000", 1, INT_MAX),
    "streams.num.standby.replicas": (INT, "0", 0, INT_MAX),
}
_SESSIONS = (("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
             ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
             ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"))
_ISOLATION = ("read_committed", "read_uncommitted")
# java.time.Duration.parse's grammar (case-insensitive); a "T" needs a time part after it
_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
                       r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE | re.ASCII)
_INTEGER = re.compile(r"[-+]?[0-9]+", re.ASCII)


class InvalidGroupConfig(ValueError):
    """A group config Kafka refuses with INVALID_CONFIG; the message names the key and what it takes."""


class GroupConfigFileError(Exception):
    """``group-configs.json`` cannot be read; the message names the file."""


def type_of(name: str) -> str:
    return _key(name)[0]


def _key(name: str) -> tuple[str, str, int, int]:
    key = KEYS.get(name)
    if key is None:
        raise InvalidGroupConfig(f"Unknown group config name: {name}")
    return key


def duration_ns(text: str) -> int:
    """A Java ISO-8601 duration (``PT1H``, ``P1DT30M``, ``PT0.5S``) in nanoseconds; ValueError if
    it does not parse or is negative."""
    m = _DURATION.fullmatch(text)
    if m is None or m.group(3) in ("T", "t") or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = int((m.group(7) or "").ljust(9, "0"))
    if m.group(6) and m.group(6).startswith("-"):
        fraction = -fraction
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if abs(total) > 2**63 - 1:
        raise ValueError(f"{text!r} is too long a duration")
    ns = total * 1_000_000_000 + fraction
    if m.group(1) == "-":
        ns = -ns
    if ns < 0:
        raise ValueError("Negative duration is not supported in by_duration offset reset strategy.")
    return ns


def auto_offset_reset_ms(value: str, now_ms: int) -> str | int:
    """``"earliest"``, ``"latest"``, or for ``by_duration:<d>`` the timestamp (ms) to start at:
    ``now_ms`` minus the duration (as Kafka's ``Instant.now().minus(d).toEpochMilli()``), never
    below 0."""
    if value in ("earliest", "latest"):
        return value
    if value.startswith("by_duration:"):
        return max(0, (now_ms * 1_000_000 - duration_ns(value[len("by_duration:"):])) // 1_000_000)
    raise InvalidGroupConfig(_reset_error(value))


def _reset_error(value: str) -> str:
    return (f"Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")


def check(name: str, value: str | None) -> str:
    """``value`` as stored for ``name`` (trimmed, an int written plainly); InvalidGroupConfig if
    Kafka would refuse it."""
    kind, _default, low, high = _key(name)
    if value is None:
        raise InvalidGroupConfig(f"Null value not supported for group config: {name}")
    value = value.strip()
    if kind == INT:
        number = int(value) if _INTEGER.fullmatch(value) else None
        if number is None or not low <= number <= high:
            allowed = f"at least {low}" if high == INT_MAX else f"between {low} and {high}"
            raise InvalidGroupConfig(f"Invalid value {value} for configuration {name}: "
                                     f"Value must be a whole number {allowed}")
        return str(number)
    if name == "share.isolation.level":
        if value not in _ISOLATION:
            raise InvalidGroupConfig(f"Invalid value {value} for configuration {name}: "
                                     f"String must be one of: {', '.join(_ISOLATION)}")
        return value
    try:  # share.auto.offset.reset
        auto_offset_reset_ms(value, 0)
    except ValueError:
        raise InvalidGroupConfig(_reset_error(value)) from None
    return value


class GroupConfigs:
    FILE = "group-configs.json"
    VERSION = 1

    def __init__(self, data_dir: Path, defaults: Mapping[str, str | int] | None = None, document=None):
        """``defaults``: the broker's own settings for some keys (e.g. its
        group.consumer.session.timeout.ms), used where a group has no override. ``document``:
        cluster mode's copy every broker shares (read() -> dict | None, write(dict), name),
        instead of the file in the data directory."""
        self.path = Path(data_dir) / self.FILE
        self.document = document
        self.defaults = {name: key[1] for name, key in KEYS.items()}
        for name, value in (defaults or {}).items():
            self.defaults[name] = str(int(value)) if type_of(name) == INT else check(name, str(value))
        self._groups: dict[str, dict[str, str]] = self._read()

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            if self.document is None:
                doc = json.loads(self.path.read_text())
            else:
                doc = self.document.read() or {"groups": {}}
            groups = doc["groups"]
            if not isinstance(groups, dict) or not all(isinstance(c, dict) for c in groups.values()):
                raise TypeError("'groups' must map each group id to an object of configs")
            return {g: {n: check(n, v) for n, v in c.items()} for g, c in groups.items() if c}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            where = f"file {self.path}" if self.document is None else self.document.name
            raise GroupConfigFileError(f"group configs {where} is damaged ({exc}); fix it, or remove it "
                                       "to drop every group config override") from exc

    def reload(self) -> None:
        """Cluster mode: another broker rewrote the shared document."""
        self._groups = self._read()

    def _write(self, groups: dict[str, dict[str, str]]) -> None:
        doc = {"version": self.VERSION, "groups": {g: dict(sorted(c.items())) for g, c in sorted(groups.items())}}
        if self.document is not None:
            self.document.write(doc)
            return
        write_atomic(self.path, json.dumps(doc, indent=1).encode())

    # --- reading ------------------------------------------------------------------------------
    @staticmethod
    def default(name: str) -> str:
        """Kafka's default of a group config (without broker settings)."""
        return KEYS[name][1]

    def configured_groups(self) -> list[str]:
        """The groups with at least one override: those that are a config resource (ListConfigResources)."""
        return sorted(self._groups)

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._groups.get(group_id, {}))

    def get(self, group_id: str, name: str) -> str:
        """The group's value of ``name``: its override, or the default."""
        _key(name)
        return self._groups.get(group_id, {}).get(name, self.defaults[name])

    def get_int(self, group_id: str, name: str) -> int:
        if type_of(name) != INT:
            raise InvalidGroupConfig(f"{name} is not an integer config")
        return int(self.get(group_id, name))

    def describe(self, group_id: str, names: Iterable[str] | None = None) -> list[tuple[str, str, bool]]:
        """(name, value, is_default) of every key (or of those of ``names`` that exist), by name."""
        wanted = None if names is None else set(names)
        own = self._groups.get(group_id, {})
        return [(name, own.get(name, self.defaults[name]), name not in own)
                for name in sorted(KEYS) if wanted is None or name in wanted]

    # --- changing -----------------------------------------------------------------------------
    def alter(self, group_id: str, ops: Iterable[tuple[str, int, str | None]], validate_only: bool = False) -> None:
        """Apply (name, SET/DELETE, value) ops, all or none: every op is checked first.
        Raises InvalidGroupConfig (nothing changes) or OSError (the file; nothing changes)."""
        new = dict(self._groups.get(group_id, {}))
        for name, op, value in ops:
            _key(name)
            if op == SET:
                new[name] = check(name, value)
            elif op == DELETE:
                new.pop(name, None)
            elif op in (APPEND, SUBTRACT):
                verb = "append" if op == APPEND else "subtract"
                raise InvalidGroupConfig(f"Config value {verb} is not allowed for config key: {name}")
            else:
                raise InvalidGroupConfig(f"Unknown alter config operation {op} for config key: {name}")
        self._store(group_id, new, validate_only)

    def replace(self, group_id: str, configs: Mapping[str, str | None], validate_only: bool = False) -> None:
        """The legacy AlterConfigs: ``configs`` becomes the group's whole set of overrides."""
        self._store(group_id, {name: check(name, value) for name, value in configs.items()}, validate_only)

    def set(self, group_id: str, name: str, value: str) -> None:
        self.alter(group_id, [(name, SET, value)])

    def delete(self, group_id: str, name: str) -> None:
        self.alter(group_id, [(name, DELETE, None)])

    def forget(self, group_id: str) -> None:
        """Drop every override of a deleted group."""
        if group_id in self._groups:
            self._store(group_id, {}, False)

    def _store(self, group_id: str, new: dict[str, str], validate_only: bool) -> None:
        for session, heartbeat in _SESSIONS:  # Kafka's rule, on the values the group would have
            if session in new or heartbeat in new:
                if int(new.get(session, self.defaults[session])) <= int(new.get(heartbeat, self.defaults[heartbeat])):
                    raise InvalidGroupConfig(f"{session} must be greater than {heartbeat}")
        if validate_only or new == self._groups.get(group_id, {}):
            return
        groups = dict(self._groups)
        if new:
            groups[group_id] = new
        else:
            groups.pop(group_id, None)
        self._write(groups)  # first: if it fails (OSError) nothing has changed
        self._groups = groups
