"""Cluster mode: share partitions' start offsets kept by their group's coordinator.

A plain share partition (routing.share) lives with its topic partition's leader, which changes on
a failover; its start offset must outlive that broker. Kafka sends it to a share coordinator;
here the group's own coordinator keeps it, as the committed offsets of the key
``__share-state:<group>`` in the group's ``__consumer_offsets`` partition (so it is replicated and
moves with the coordinator). The leader writes the offsets that moved (every AMQP tick, a
quarter second) and reads them when it starts serving a partition. A coordinator elsewhere is
reached with OffsetCommit/OffsetFetch over the blocking admin client on a worker thread, so the
reactor never waits; until a read is back the share partition serves nothing (PENDING).

What is written is the partition's snapshot (routing.share.snapshot): the start offset as the
committed offset, and the delivery counts and archived ranges above it as the commit's metadata
(JSON, within Kafka's 4,096-byte metadata limit: the lowest offsets' entries are kept when it
would not fit). After a failover the new leader starts where the last snapshot says: a record
delivered four times is delivered the fifth time next, an archived one never again; what was
accepted after the last write comes again (at least once), and acquisition locks start afresh.
"""
from __future__ import annotations

import json
import logging

from twisted.internet import threads

from core.offsets import MAX_METADATA_BYTES, OffsetAndMetadata, share_state_key
from gateway.cluster import coordination
from gateway.ctl.kafka_client import KafkaAdmin, KafkaClientError
from routing.share import PENDING

log = logging.getLogger(__name__)


class RemoteShareState:
    def __init__(self, ctx, on_read=lambda: None):
        self.ctx = ctx
        self.on_read = on_read  # a read came back: parked share fetches may go on
        self._known: dict[tuple[str, str, int], int | None] = {}
        self._reading: set[tuple[str, str, int]] = set()

    # --- reads ----------------------------------------------------------------------------------
    def start(self, group: str, topic: str, index: int):
        """The stored snapshot ({"floor", "deliveries", "settled"}), None if there is none, or
        PENDING while it is being read."""
        key = (group, topic, index)
        if key in self._known:
            return self._known.pop(key)
        if key in self._reading:
            return PENDING
        node = coordination.coordinator(self.ctx, share_state_key(group), 0)
        if node is None:
            return PENDING  # no coordinator right now: try again at the next fetch
        if node == self.ctx.node_id:
            found = self.ctx.groups.offsets.fetch(share_state_key(group)).get((topic, index))
            return None if found is None else _snapshot(found.offset, found.metadata)
        address = self._address(node)
        if address is None:
            return PENDING
        self._reading.add(key)
        threads.deferToThread(_fetch_offset, address, share_state_key(group), topic, index).addCallbacks(
            lambda offset: self._read(key, offset), lambda failure: self._failed(key, failure))
        return PENDING

    def _read(self, key, offset: int | None) -> None:
        self._reading.discard(key)
        self._known[key] = offset
        self.on_read()

    def _failed(self, key, failure) -> None:
        self._reading.discard(key)
        log.warning("share state of %s not read from its coordinator: %s (retried at the next fetch)", key,
                    failure.getErrorMessage())

    def forget(self, topic: str, index: int) -> None:
        for key in [k for k in self._known if k[1] == topic and k[2] == index]:
            del self._known[key]

    # --- writes ---------------------------------------------------------------------------------
    def write(self, moved: dict[tuple[str, str, int], dict]) -> None:
        """``moved``: each share partition's snapshot (routing.share.snapshot) that changed."""
        by_group: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        for (group, topic, index), state in moved.items():
            by_group.setdefault(group, {})[(topic, index)] = OffsetAndMetadata(state["floor"], metadata=_metadata(state))
        for group, offsets in by_group.items():
            key = share_state_key(group)
            node = coordination.coordinator(self.ctx, key, 0)
            if node == self.ctx.node_id:
                self.ctx.groups.offsets.commit(key, offsets)
                continue
            address = None if node is None else self._address(node)
            if address is None:
                log.warning("share state of group %s not written: its coordinator is unknown", group)
                continue
            threads.deferToThread(_commit_offsets, address, key, offsets).addErrback(
                lambda failure, g=group: log.warning("share state of group %s not written: %s", g,
                                                     failure.getErrorMessage()))

    def delete(self, group: str, topic: str) -> None:
        """DeleteShareGroupOffsets (run on the group's coordinator): its copy of the topic goes."""
        key = share_state_key(group)
        if coordination.coordinator(self.ctx, key, 0) != self.ctx.node_id:
            log.warning("share state of group %s for topic %s not deleted: the coordinator moved", group, topic)
            return
        offsets = self.ctx.groups.offsets
        stored = [tp for tp in offsets.fetch(key) if tp[0] == topic]
        if stored:
            offsets.delete_topic_partitions(key, stored)

    def _address(self, node: int) -> str | None:
        info = self.ctx.cluster.view.brokers.get(node)
        return None if info is None else f"{info.host}:{info.port}"


def _metadata(state: dict) -> str:
    """The snapshot's part above the start offset as compact JSON of at most MAX_METADATA_BYTES."""
    rest = {k: v for k, v in state.items() if k != "floor"}
    while True:
        text = json.dumps(rest, separators=(",", ":")) if rest else ""
        if len(text) <= MAX_METADATA_BYTES:
            return text
        for part in ("deliveries", "settled"):  # keep the entries nearest the start offset
            entries = rest.get(part)
            if entries:
                rest[part] = dict(list(entries.items())[:len(entries) // 2]) if isinstance(entries, dict) \
                    else entries[:len(entries) // 2]
                break
        else:
            return ""


def _snapshot(offset: int, metadata: str | None) -> dict:
    state = {"floor": offset}
    if metadata:
        try:
            state.update(json.loads(metadata))
        except ValueError:
            pass  # written by something else: the start offset is all there is
    return state


# --- on a worker thread ---------------------------------------------------------------------------

def _fetch_offset(address: str, key: str, topic: str, index: int) -> dict | None:
    with KafkaAdmin(address, client_id="gateway-share-state") as client:
        answer = client.call(9, {"group_id": key, "topics": [{"name": topic, "partition_indexes": [index]}],
                                 "groups": [{"group_id": key, "topics": [{"name": topic, "partition_indexes": [index]}]}],
                                 "require_stable": False})
    groups = getattr(answer, "groups", None)
    topics = groups[0].topics if groups else answer.topics
    for t in topics:
        for p in t.partitions:
            if p.error_code:
                raise KafkaClientError(f"OffsetFetch of {key}: error {p.error_code}")
            return _snapshot(p.committed_offset, p.metadata) if p.committed_offset >= 0 else None
    return None


def _commit_offsets(address: str, key: str, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
    topics: dict[str, list[dict]] = {}
    for (topic, index), om in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": index, "committed_offset": om.offset,
                                             "committed_leader_epoch": -1, "committed_metadata": om.metadata})
    with KafkaAdmin(address, client_id="gateway-share-state") as client:
        answer = client.call(8, {"group_id": key, "generation_id_or_member_epoch": -1, "member_id": "",
                                 "group_instance_id": None, "retention_time_ms": -1,
                                 "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    errors = [p.error_code for t in answer.topics for p in t.partitions if p.error_code]
    if errors:
        raise KafkaClientError(f"OffsetCommit of {key}: errors {errors}")
