"""Which broker coordinates a consumer group (or a transactional id) in cluster mode.

As in Kafka, the coordinator of group g is the leader of ``__consumer_offsets`` partition
hash(g) % partitions (for a transactional id, of ``__transaction_state``): the group's state
lives in that partition, so it moves with the partition's leadership and is reloaded from it
by the new leader. A group request that reaches another broker is answered NOT_COORDINATOR,
whole, before any handler runs; the client asks FindCoordinator again and goes there. The
transaction APIs (InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn) go to the transaction coordinator, TxnOffsetCommit to the group's.
"""
from __future__ import annotations

from kio.schema.errors import ErrorCode

from core.offsets import OFFSETS_TOPIC
from core.transactions import TXN_TOPIC
from wire.kafka import build, encode_response, response_class

NOT_COORDINATOR = ErrorCode.not_coordinator
# APIs about one group (field group_id): the answer when this broker is not its coordinator
_ONE_GROUP = {
    11: {"generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False,
         "member_id": "", "members": []},
    12: {},
    13: {"members": []},
    14: {"protocol_type": None, "protocol_name": None, "assignment": b""},
    47: {"topics": []},  # OffsetDelete
    # ConsumerGroupHeartbeat and ShareGroupHeartbeat: the group's state is its coordinator's
    68: {"error_message": None, "member_id": None, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None},
    76: {"error_message": None, "member_id": None, "member_epoch": -1, "heartbeat_interval": 0, "assignment": None},
    88: {"error_message": None, "member_id": "", "member_epoch": -1, "heartbeat_interval": 0,  # StreamsGroupHeartbeat
         "acceptable_recovery_lag": 0, "task_offset_interval": 0, "status": None, "active_tasks": None,
         "standby_tasks": None, "warmup_tasks": None, "endpoint_information_epoch": 0,
         "partitions_by_user_endpoint": None},
    91: {"error_message": None, "responses": []},  # AlterShareGroupOffsets
    92: {"error_message": None, "responses": []},  # DeleteShareGroupOffsets
}


def coordinator(ctx, key: str, key_type: int) -> int | None:
    """The node coordinating ``key``; None while its partition has no leader (or no topic yet)."""
    if key_type == 1:
        if ctx.logs.store.get_topic(TXN_TOPIC) is None:
            ctx.transactions.ensure_topic()  # created once enough brokers are registered
        topic, partition = TXN_TOPIC, ctx.transactions.partition_for(key)
    else:
        offsets = ctx.groups.offsets
        if ctx.logs.store.get_topic(OFFSETS_TOPIC) is None:
            offsets.ensure_topic()  # created once enough brokers are registered
        topic, partition = OFFSETS_TOPIC, offsets.partition_for(key)
    state = ctx.cluster.view.state(topic, partition)
    if state is None or state.leader not in ctx.cluster.view.brokers:
        return None
    return state.leader


def _here(ctx, group: str) -> bool:
    rep = ctx.cluster.replicas.leader_of(OFFSETS_TOPIC, ctx.groups.offsets.partition_for(group))
    return rep is not None


def _coordinates(ctx, transactional_id: str) -> bool:
    return ctx.cluster.replicas.leader_of(TXN_TOPIC, ctx.transactions.partition_for(transactional_id)) is not None


def _txn_misdirected(ctx, h, req) -> bytes | None:
    """NOT_COORDINATOR for a transaction request whose transactional id another broker coordinates."""
    key = h.api_key
    if key == 22:  # InitProducerId: only with a transactional id (an idempotent producer is served anywhere)
        if req.transactional_id is None or _coordinates(ctx, req.transactional_id):
            return None
        return _answer(h, {"error_code": NOT_COORDINATOR, "producer_id": -1, "producer_epoch": -1})
    if key == 24 and h.api_version >= 4:  # the brokers' batched form: answered per transaction
        return None
    if key == 24:  # AddPartitionsToTxn (v0-3: one transaction)
        if _coordinates(ctx, req.v3_and_below_transactional_id):
            return None
        return _answer(h, {"results_by_topic_v3_and_below": [
            {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": NOT_COORDINATOR}
                                                      for p in t.partitions]} for t in req.v3_and_below_topics]})
    if key in (25, 26):  # AddOffsetsToTxn, EndTxn
        return None if _coordinates(ctx, req.transactional_id) else _answer(h, {"error_code": NOT_COORDINATOR})
    if key == 28:  # TxnOffsetCommit: served by the group's coordinator
        if _here(ctx, req.group_id):
            return None
        return _answer(h, {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": NOT_COORDINATOR} for p in t.partitions]}
            for t in req.topics]})
    return None


def _answer(h, data: dict) -> bytes:
    return encode_response(h, build(response_class(h.api_key, h.api_version), {"throttle_time": 0, **data}))


def misdirected(ctx, h, req) -> bytes | None:
    """NOT_COORDINATOR for a group request this broker cannot serve, else None (dispatch it)."""
    key = h.api_key
    if key in (22, 24, 25, 26, 28):
        return _txn_misdirected(ctx, h, req)
    if key in _ONE_GROUP:
        return None if _here(ctx, req.group_id) else _answer(h, {"error_code": NOT_COORDINATOR, **_ONE_GROUP[key]})
    if key == 8:  # OffsetCommit
        if _here(ctx, req.group_id):
            return None
        return _answer(h, {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": NOT_COORDINATOR} for p in t.partitions]}
            for t in req.topics]})
    if key == 9:  # OffsetFetch
        if h.api_version >= 8:
            if all(_here(ctx, g.group_id) for g in req.groups):
                return None
            return _answer(h, {"groups": [{"group_id": g.group_id, "topics": [], "error_code": NOT_COORDINATOR}
                                          for g in req.groups]})
        return None if _here(ctx, req.group_id) else _answer(h, {"error_code": NOT_COORDINATOR, "topics": []})
    if key == 15:  # DescribeGroups
        if all(_here(ctx, g) for g in req.groups):
            return None
        return _answer(h, {"groups": [{"error_code": NOT_COORDINATOR, "group_id": g, "group_state": "",
                                       "protocol_type": "", "protocol_data": "", "members": [],
                                       "authorized_operations": -(2**31)} for g in req.groups]})
    if key == 89:  # StreamsGroupDescribe
        if all(_here(ctx, g) for g in req.group_ids):
            return None
        return _answer(h, {"groups": [{"error_code": NOT_COORDINATOR, "error_message": None, "group_id": g,
                                       "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                                       "topology": None, "members": [], "authorized_operations": -(2**31)}
                                      for g in req.group_ids]})
    if key == 90:  # DescribeShareGroupOffsets
        if all(_here(ctx, g.group_id) for g in req.groups):
            return None
        return _answer(h, {"groups": [{"group_id": g.group_id, "topics": [], "error_code": NOT_COORDINATOR,
                                       "error_message": None} for g in req.groups]})
    if key == 42:  # DeleteGroups
        if all(_here(ctx, g) for g in req.groups_names):
            return None
        return _answer(h, {"results": [{"group_id": g, "error_code": NOT_COORDINATOR} for g in req.groups_names]})
    return None
