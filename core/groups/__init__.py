"""Consumer groups: Kafka's classic group coordinator and the committed offsets behind it.

``core.groups.coordinator`` runs the join/sync/heartbeat/leave protocol, ``core.groups.offset_commits``
the offset commit rules, ``core.groups.retention`` offset expiry (offsets.retention.minutes);
``core.groups.group`` keeps one group's books; ``core.offsets`` stores offsets in the compacted
``__consumer_offsets`` topic. Beside the classic groups: KIP-848 consumer groups
(``consumer_group``), KIP-932 share groups (``share_group``), KIP-1071 streams groups
(``streams_group``); ``group_admin`` lists, describes and deletes them all.
"""
from core.groups.coordinator import GroupCoordinator
from core.groups.group import GroupState
from core.groups.results import (
    CommitInfo, GroupDescription, GroupListing, JoinResult, MemberDescription, SyncResult,
)

__all__ = [
    "GroupCoordinator", "GroupState", "JoinResult", "SyncResult", "CommitInfo",
    "GroupListing", "GroupDescription", "MemberDescription",
]
