"""The management API's consumer groups in a cluster: the whole cluster's, from any broker.

A group lives with its coordinator, the leader of its offsets partition (Kafka's model), and a
broker lists only the groups it coordinates. So the API asks the other live brokers as well, over
the brokers' own connections, as a Kafka admin client asks every broker: ListGroups for their
groups, then DescribeGroups and OffsetFetch at each one's coordinator, and each partition's lag
from its leader's high watermark (read here for partitions led here, ListOffsets for the others).
A broker that cannot answer is left out of a listing and named in the log; one group whose
coordinator cannot answer is a 503 naming it. A share group's positions are its share
partitions' starts, which this broker knows from their leaders (routing.share).
"""
from __future__ import annotations

from twisted.internet import defer

from core.offsets import OFFSETS_TOPIC
from gateway.management import cluster_clients, cluster_offsets, views
from gateway.management.errors import ApiError

OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 9, 15, 16
TIMEOUT_S = 5.0


def groups(broker):
    """Every group of the cluster (a Deferred in cluster mode), sorted by id."""
    cluster = broker.cluster
    if cluster is None:
        return views.groups(broker)
    others = cluster_clients.others(broker)
    asked = [_local(broker, sorted(_local_ids(broker)))]
    asked += [_groups_of(broker, node, None).addErrback(cluster_clients.left_out, node, "groups")
              for node in others]

    def merged(answers) -> list[dict]:
        by_id: dict[str, dict] = {}
        for answer in answers:
            for g in answer:
                by_id.setdefault(g["group_id"], g)  # (a group moving between coordinators: either view)
        return [by_id[k] for k in sorted(by_id)]
    return defer.gatherResults(asked).addCallback(merged)


def group(broker, group_id: str):
    """One group, from its coordinator (a Deferred in cluster mode); None when none knows it."""
    cluster = broker.cluster
    if group_id in _local_ids(broker):
        return views.group(broker, group_id) if cluster is None else \
            _local(broker, [group_id]).addCallback(lambda found: found[0])
    if cluster is None:
        return None
    state = cluster.view.state(OFFSETS_TOPIC, broker.kafka.groups.offsets.partition_for(group_id))
    node = state.leader if state is not None else -1
    if node < 0 or node == broker.settings.node_id or node not in cluster.view.brokers:
        return None

    def unavailable(failure):
        raise ApiError(503, "unavailable", f"the coordinator of group '{group_id}', broker {node}, did not "
                                           f"answer: {failure.getErrorMessage()}")
    return _groups_of(broker, node, [group_id]).addCallbacks(lambda found: found[0] if found else None, unavailable)


def count(broker):
    """How many groups the cluster has (ListGroups of every other broker; a Deferred in a cluster)."""
    local = len(broker.kafka.groups.list_groups())
    cluster = broker.cluster
    if cluster is None:
        return local

    def counted(node: int):
        d = broker.kafka.peers.call(node, LIST_GROUPS, {"states_filter": [], "types_filter": []}, timeout=TIMEOUT_S)
        return d.addCallbacks(lambda answer: len(answer.groups),
                              lambda f: len(cluster_clients.left_out(f, node, "groups")))
    others = cluster_clients.others(broker)
    return defer.gatherResults([counted(node) for node in others]).addCallback(lambda counts: local + sum(counts))


def _local(broker, ids: list[str]):
    """Groups coordinated here, their lag measured at their partitions' leaders."""
    keys = {key for g in ids for key in views.group_offsets(broker, g)}
    return _ends(broker, keys).addCallback(lambda ends: [views.group(broker, g, ends) for g in ids])


def _local_ids(broker) -> set[str]:
    return {g[0] for g in broker.kafka.groups.list_groups()}


@defer.inlineCallbacks
def _groups_of(broker, node: int, wanted: list[str] | None):
    """The groups ``node`` coordinates (or those of ``wanted`` it does), shaped as views.group."""
    peers = broker.kafka.peers
    listed = yield peers.call(node, LIST_GROUPS, {"states_filter": [], "types_filter": []}, timeout=TIMEOUT_S)
    kinds = {g.group_id: getattr(g, "group_type", "") or "classic" for g in listed.groups}
    ids = sorted(kinds if wanted is None else (g for g in wanted if g in kinds))
    if not ids:
        return []
    described = yield peers.call(node, DESCRIBE_GROUPS, {"groups": ids, "include_authorized_operations": False},
                                 timeout=TIMEOUT_S)
    fetched = yield peers.call(node, OFFSET_FETCH, {"groups": [
        {"group_id": g, "member_id": None, "member_epoch": -1, "topics": None} for g in ids],
        "require_stable": False}, timeout=TIMEOUT_S)
    committed = {g.group_id: {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                              for t in g.topics for p in t.partitions if p.committed_offset >= 0}
                 for g in fetched.groups}
    for g in ids:
        if kinds[g] == "share":  # its positions: its share partitions' starts, from their leaders (known here)
            committed[g] = {key: (start, meta) for key, (start, _, meta) in views.group_offsets(broker, g).items()}
    ends = yield _ends(broker, {key for offsets in committed.values() for key in offsets})
    out = []
    for d in described.groups:
        if d.error_code or d.group_id not in kinds:
            continue
        lag_rows, total = [], 0
        for (name, index), (offset, metadata) in sorted(committed.get(d.group_id, {}).items()):
            end = ends.get((name, index))
            lag = max(end - offset, 0) if end is not None else None
            total += lag or 0
            lag_rows.append({"topic": name, "partition": index, "committed_offset": offset, "log_end_offset": end,
                             "lag": lag, "metadata": metadata})
        out.append({"group_id": d.group_id, "state": d.group_state, "protocol_type": d.protocol_type,
                    "protocol": d.protocol_data, "type": kinds[d.group_id], "members": [
                        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host} for m in d.members],
                    "offsets": lag_rows, "lag": total})
    return out


@defer.inlineCallbacks
def _ends(broker, keys: set[tuple[str, int]]):
    """Each partition's high watermark: here for those led here, else asked of its leader (left
    out if that fails: the lag is unknown then, not made up)."""
    ends = {}
    for name, index in keys:
        plog, _epoch, error = broker.kafka.leader_log(name, index)
        if not error and plog is not None:
            ends[(name, index)] = plog.high_watermark
    asked = yield cluster_offsets.ask(broker, cluster_offsets.elsewhere(broker, set(keys) - set(ends)))
    return {**asked, **ends}
