"""What the group coordinator answers: small frozen values the gateway maps onto responses."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    # (member_id, group_instance_id, metadata) of every member; non-empty for the leader only
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False

    @classmethod
    def failed(cls, error: ErrorCode, member_id: str = "") -> "JoinResult":
        return cls(error, -1, None, None, "", member_id, [])


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes

    @classmethod
    def failed(cls, error: ErrorCode) -> "SyncResult":
        return cls(error, None, None, b"")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    errors: dict[tuple[str, int], ErrorCode]
    # (topic, partition, last offset) of the __consumer_offsets append; answer once it is durable
    durable_at: tuple[str, int, int] | None


@dataclass(frozen=True, slots=True)
class OffsetDeleteInfo:
    error: ErrorCode  # the group's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...); then errors is empty
    errors: dict[tuple[str, int], ErrorCode]
    durable_at: tuple[str, int, int] | None  # the tombstones' append, as in CommitInfo


class GroupListing(NamedTuple):
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # Kafka's GroupType: classic, or consumer (KIP-848)


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


class GroupDescription(NamedTuple):
    error: ErrorCode
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    group_id: str = ""
