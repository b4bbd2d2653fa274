"""KIP-932 share groups on the wire: ShareGroupHeartbeat (76), ShareGroupDescribe (77),
ShareFetch (78) and ShareAcknowledge (79).

Membership is core.groups.share_group's; what a member may read is routing.share's (a share
partition is a queue, the AMQP queue of the group's name when it reads that queue's topic).
This module keeps the share sessions (Kafka's ShareSessionCache: per member, the partitions it
fetches from and the epoch its next request must carry) and maps topic ids to names.

Session epochs: 0 opens a session (no acknowledgements allowed), -1 closes it after applying
the request's acknowledgements and releases what the member still holds, anything else must
be the session's next epoch (INVALID_SHARE_SESSION_EPOCH otherwise; SHARE_SESSION_NOT_FOUND
without a session). A fetch that acquires nothing waits up to ``max_wait`` for records.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from gateway.kafka.apis.consumer_groups import by_id, heartbeat_response
from gateway.kafka.apis.metadata import UNKNOWN_OPERATIONS
from core.group_configs import auto_offset_reset_ms
from gateway.kafka.apis.registry import handles
from gateway.kafka.operations import authorized_operations
from gateway.kafka.context import group_config
from routing.share import REJECT, RELEASE
from wire.kafka import respond

FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1


# A client closing its share consumer sends its leave heartbeat and its session-closing
# acknowledgements at once; the leave may arrive first. The member's session outlives the leave
# by this long, so those acknowledgements still settle their records before the rest go back.
LEAVE_GRACE_S = 3.0


@dataclass
class ShareSession:
    epoch: int = 1  # the epoch the next request must carry
    partitions: set[tuple[str, int]] = field(default_factory=set)
    ids: dict = field(default_factory=dict)  # topic name -> the id it was added under
    leaving: bool = False  # the member left its group: acknowledgements only, nothing new acquired


def share_partitions(ctx):
    """The AMQP model's share partitions, with this listener's settings (the model may be replaced
    in cluster mode, so they are applied whenever it or the settings are new to it, not on every
    use: parked share fetches ask on every notify)."""
    shares = ctx.router().shares
    if (getattr(shares, "settings_of", None) is ctx and shares.remote is ctx.share_remote
            and shares.delivery_count_limit == ctx.share_delivery_count_limit):
        return shares
    shares.settings_of = ctx
    shares.on_released = ctx.waiters.notify  # parked fetches may take released records
    shares.lock_ms = lambda group: int(group_config(ctx, group, "share.record.lock.duration.ms"))
    shares.auto_offset_reset = lambda group: auto_offset_reset_ms(
        group_config(ctx, group, "share.auto.offset.reset"), int(shares.clock() * 1000))
    shares.delivery_count_limit = ctx.share_delivery_count_limit
    shares.read_committed = lambda group: group_config(ctx, group, "share.isolation.level") == "read_committed"
    shares.stable = lambda topic, index, plog: (ctx.last_stable_offset(topic, index, plog),
                                                ctx.producers.partition(topic, index, plog).aborted.overlapping)
    shares.remote = ctx.share_remote
    return shares


@handles(76)
def share_group_heartbeat(ctx, conn, h, req):
    names = None if req.subscribed_topic_names is None else list(req.subscribed_topic_names)
    result = ctx.groups.share.heartbeat(req.group_id, req.member_id or "", req.member_epoch, rack_id=req.rack_id,
                                        subscribed_topic_names=names, client_id=h.client_id or "",
                                        client_host=conn.peer_host)
    return heartbeat_response(ctx, h, result)


@handles(77)
def share_group_describe(ctx, conn, h, req):
    out = []
    for group_id in req.group_ids:
        group = ctx.groups.share.groups.get(group_id)
        if group is None:
            kind = ctx.groups.group_type(group_id)
            out.append({"error_code": ErrorCode.group_id_not_found, "group_id": group_id, "group_state": "",
                        "error_message": f"Group {group_id} is not a share group." if kind
                        else f"Group {group_id} not found.", "group_epoch": -1, "assignment_epoch": -1,
                        "assignor_name": "", "members": [], "authorized_operations": UNKNOWN_OPERATIONS})
            continue
        members = [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": tuple(m.subscribed_topic_names),
                    "assignment": {"topic_partitions": by_id(ctx, m.assigned, True)}}
                   for m in group.members.values()]
        out.append({"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                    "group_state": group.state, "group_epoch": group.group_epoch,
                    "assignment_epoch": group.assignment_epoch, "assignor_name": "simple", "members": members,
                    "authorized_operations": authorized_operations(conn, "group", group_id)
                    if req.include_authorized_operations else UNKNOWN_OPERATIONS})
    return respond(h, {"throttle_time": 0, "groups": out})


# --- sessions ---------------------------------------------------------------------------------

def _session(ctx, group: str, member: str, epoch: int, add, forget) -> tuple[ShareSession | None, ErrorCode, str]:
    """The member's session after this request's epoch, adds and forgets; or an error."""
    sessions = ctx.share_sessions
    key = (group, member)
    if epoch == 0:
        session = sessions[key] = ShareSession()
    else:
        session = sessions.get(key)
        if session is None:
            return None, ErrorCode.share_session_not_found, f"no share session for member {member} of {group}"
        if epoch != FINAL_EPOCH:
            if epoch != session.epoch:
                return None, ErrorCode.invalid_share_session_epoch, \
                    f"share session epoch {epoch} is not the expected {session.epoch}"
            session.epoch = 1 if session.epoch == MAX_EPOCH else session.epoch + 1
    session.partitions.update(add)
    session.partitions.difference_update(forget)
    return session, ErrorCode.none, ""


def _close(ctx, group: str, member: str) -> None:
    if ctx.share_sessions.pop((group, member), None) is not None:
        share_partitions(ctx).release_member(group, member)


def _top_error(h, error: ErrorCode, message: str, extra: dict) -> bytes:
    return respond(h, {"throttle_time": 0, "error_code": error, "error_message": message, "responses": [],
                       "node_endpoints": [], **extra})


def _partition_entry(index: int) -> dict:
    return {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
            "acknowledge_error_code": ErrorCode.none, "acknowledge_error_message": None,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"", "acquired_records": []}


class _Answer:
    """The per-partition part of a ShareFetch/ShareAcknowledge response, by (topic, partition)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.entries: dict[tuple[str | None, object, int], dict] = {}

    def entry(self, name: str | None, topic_id, index: int) -> dict:
        key = (name, topic_id, index)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _partition_entry(index)
            if name is not None:
                entry["current_leader"] = {"leader_id": self.ctx.node_id, "leader_epoch": 0}
        return entry

    def topics(self) -> list[dict]:
        by_topic: dict = {}
        for (name, topic_id, _index), entry in self.entries.items():
            by_topic.setdefault(topic_id, []).append(entry)
        return [{"topic_id": tid, "partitions": sorted(es, key=lambda e: e["partition_index"])}
                for tid, es in by_topic.items()]


def _share_partition(ctx, group: str, name: str | None, index: int):
    """(share partition, error) for a partition this broker leads; (None, NONE) while its state is
    being read from the group's coordinator (cluster mode)."""
    if name is None:
        return None, ErrorCode.unknown_topic_id
    plog, _epoch, error = ctx.leader_log(name, index)
    if error:
        return None, error
    return share_partitions(ctx).get(group, name, index, plog), ErrorCode.none


def _acknowledge(ctx, answer: _Answer, group: str, member: str, topics, error_key: str) -> list:
    """Apply acknowledgement batches; their outcome goes in ``error_key`` of each partition entry."""
    owner = share_partitions(ctx).owner(group, member)
    touched = []
    returned = False  # a release or reject: records may go to others, dead letters get appended
    for t in topics:
        name = ctx.topic_name(t.topic_id)
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            entry = answer.entry(name, t.topic_id, p.partition_index)
            sp, error = _share_partition(ctx, group, name, p.partition_index)
            if not error and sp is None:
                error = ErrorCode.invalid_record_state  # nothing can have been acquired there yet
            if not error:
                before, applied = sp.writing(), False  # one state write per partition and request
                for batch in p.acknowledgement_batches:
                    if batch.last_offset < batch.first_offset or \
                            not sp.acknowledge(owner, batch.first_offset, batch.last_offset,
                                               tuple(batch.acknowledge_types)):
                        error = ErrorCode.invalid_record_state
                    else:
                        applied = True
                        returned = returned or any(kind in (RELEASE, REJECT) for kind in batch.acknowledge_types)
                if applied:
                    sp.written(before)
                touched.append(sp.queue)
            if error:
                entry[error_key] = error
                entry[error_key.replace("code", "message")] = (
                    "records not acquired by this member (lock expired, or acknowledged already)"
                    if error == ErrorCode.invalid_record_state else None)
    if touched and returned:  # accepts alone free nothing another consumer or parked fetch could take
        share_partitions(ctx).changed(touched)
    return touched


# --- ShareFetch -------------------------------------------------------------------------------

@handles(78)
def share_fetch(ctx, conn, h, req):
    group, member, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch
    lock_ms = share_partitions(ctx).lock_ms(group)
    extra = {"acquisition_lock_timeout": datetime.timedelta(milliseconds=lock_ms)}
    if not group or not member:
        return _top_error(h, ErrorCode.invalid_request, "GroupId and MemberId must be set", extra)
    has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    if epoch == 0 and has_acks:
        return _top_error(h, ErrorCode.invalid_request, "acknowledgements are not allowed when a session opens",
                          extra)
    add = {(name, p.partition_index) for t in req.topics if (name := ctx.topic_name(t.topic_id)) is not None
           for p in t.partitions}
    added_ids = {name: t.topic_id for t in req.topics if (name := ctx.topic_name(t.topic_id)) is not None}
    forget = {(name, index) for t in req.forgotten_topics_data if (name := ctx.topic_name(t.topic_id)) is not None
              for index in t.partitions}
    session, error, message = _session(ctx, group, member, epoch, add, forget)
    if session is None:
        return _top_error(h, error, message, extra)
    session.ids.update(added_ids)
    answer = _Answer(ctx)
    for t in req.topics:  # partitions asked for by an unknown id are answered with that error
        if ctx.topic_name(t.topic_id) is None:
            for p in t.partitions:
                answer.entry(None, t.topic_id, p.partition_index)["error_code"] = ErrorCode.unknown_topic_id
    _acknowledge(ctx, answer, group, member, req.topics, "acknowledge_error_code")
    if epoch == FINAL_EPOCH:
        _close(ctx, group, member)
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                           "responses": answer.topics(), "node_endpoints": [], **extra})
    if epoch == 0:
        for name, index in sorted(session.partitions):
            answer.entry(name, ctx.topic_id(name), index)

    def acquire() -> bool:
        if ctx.share_sessions.get((group, member)) is not session or session.leaving:
            return True  # closed, replaced or left while this fetch waited: it must not take records any more
        return _acquire(ctx, answer, group, member, session, req, lock_ms)

    def reply(_=None) -> bytes:
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                           "responses": answer.topics(), "node_endpoints": [], **extra})

    wait = req.max_wait.total_seconds()
    if acquire() or wait <= 0 or has_acks or not session.partitions:
        return reply()
    return ctx.waiters.wait(lambda: _ready(ctx, group, session) and acquire(), wait).addCallback(reply)


def _ready(ctx, group: str, session: ShareSession) -> bool:
    for name, index in session.partitions:
        plog = ctx.partition(name, index)
        if plog is None:
            continue
        sp = share_partitions(ctx).get(group, name, index, plog)
        if sp is None:
            continue
        sp.queue.sync_end()
        if sp.queue.cursor.has_ready or (sp.queue.stage is not None and sp.queue.stage.lanes):
            return True
    return False


def _acquire(ctx, answer: _Answer, group: str, member: str, session: ShareSession, req, lock_ms: int) -> bool:
    """Acquire up to max_records across the session's partitions; True if any were."""
    shares = share_partitions(ctx)
    owner = shares.owner(group, member)
    budget = req.max_records if req.max_records > 0 else 500
    byte_budget = req.max_bytes if req.max_bytes > 0 else 50 * 1024 * 1024
    deadline = shares.clock() + lock_ms / 1000
    got = False
    for name, index in sorted(session.partitions):
        if budget <= 0 or byte_budget <= 0:
            break
        if _stale(ctx, answer, session, name, index):
            got = True  # answered at once: the client learns the topic's new id and asks again
            continue
        sp, error = _share_partition(ctx, group, name, index)
        if error:
            answer.entry(name, ctx.topic_id(name), index)["error_code"] = error
            continue
        if sp is None:
            continue  # its start offset is on its way from the coordinator
        acquired = sp.acquire(owner, budget, byte_budget, deadline)
        if not acquired:
            continue
        got = True
        entry = answer.entry(name, ctx.topic_id(name), index)
        records = sp.read_batches(sorted(o for o, _n in acquired))
        entry["records"] = records
        entry["acquired_records"] = _ranges(acquired)
        budget -= len(acquired)
        byte_budget -= len(records)
        ctx.count_out(name, len(records))
    return got


def _stale(ctx, answer: _Answer, session: ShareSession, name: str, index: int) -> bool:
    """A partition added under a topic id its name no longer has (the topic was deleted, perhaps
    recreated): it leaves the session, answered UNKNOWN_TOPIC_ID under the old id, as Kafka does.
    Records of the new topic answered under the old id would be dropped by the client."""
    old = session.ids.get(name)
    if old is None or old == ctx.topic_id(name):
        return False
    session.partitions.discard((name, index))
    if not any(n == name for n, _i in session.partitions):
        session.ids.pop(name, None)
    answer.entry(None, old, index)["error_code"] = ErrorCode.unknown_topic_id
    return True


def _ranges(acquired: list[tuple[int, int]]) -> list[dict]:
    """Consecutive offsets with one delivery count become one AcquiredRecords entry."""
    out: list[dict] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last["last_offset"] == offset - 1 and last["delivery_count"] == count:
            last["last_offset"] = offset
        else:
            out.append({"first_offset": offset, "last_offset": offset, "delivery_count": count})
    return out


# --- ShareAcknowledge -------------------------------------------------------------------------

@handles(79)
def share_acknowledge(ctx, conn, h, req):
    group, member, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch
    if not group or not member:
        return _top_error(h, ErrorCode.invalid_request, "GroupId and MemberId must be set", {})
    if epoch == 0:
        return _top_error(h, ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a session", {})
    session, error, message = _session(ctx, group, member, epoch, (), ())
    if session is None:
        return _top_error(h, error, message, {})
    answer = _Answer(ctx)
    _acknowledge(ctx, answer, group, member, req.topics, "error_code")
    if epoch == FINAL_EPOCH:
        _close(ctx, group, member)
    topics = [{"topic_id": t["topic_id"], "partitions": [
        {k: p[k] for k in ("partition_index", "error_code", "error_message", "current_leader")}
        for p in t["partitions"]]} for t in answer.topics()]
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                       "responses": topics, "node_endpoints": []})


def member_gone(ctx, group: str, member: str) -> None:
    """The group removed a member (it left or timed out): its records come back, after a short
    grace for acknowledgements still on their way if it has a session here (LEAVE_GRACE_S)."""
    session = ctx.share_sessions.get((group, member))
    if session is None or ctx.reactor is None:
        ctx.share_sessions.pop((group, member), None)
        ctx.router().shares.release_member(group, member)
        return
    session.leaving = True

    def settle() -> None:
        if ctx.share_sessions.get((group, member)) is session:
            _close(ctx, group, member)
    ctx.reactor.callLater(LEAVE_GRACE_S, settle)
