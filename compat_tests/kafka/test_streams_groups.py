"""KIP-1071 streams groups at the protocol level: StreamsGroupHeartbeat (88) and
StreamsGroupDescribe (89) sent with ``kio`` over real sockets, on both targets.

Two members of a two-subtopology application (a source topic, a repartition topic the broker
must create, a changelog topic it must create) act as Kafka Streams' client does: each heartbeat
reports the tasks the member runs, and a task the answer no longer lists is given up before the
next one. The tests check what Kafka Streams relies on: internal topics created with the
partition count the topology implies, every task active on exactly one member, a rebalance that
splits the tasks when a member joins and gives them back when it leaves, the describe (and
DescribeGroups and ConsumerGroupDescribe not describing it), the group listed as type
``streams``, and the ``MISSING_SOURCE_TOPICS`` status.
"""
from __future__ import annotations

import time
import uuid
from datetime import timedelta

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_describe.v0.response import ConsumerGroupDescribeResponse
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_groups.v5.response import DescribeGroupsResponse
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_groups.v5.response import ListGroupsResponse
from kio.schema.streams_group_describe.v0.request import StreamsGroupDescribeRequest
from kio.schema.streams_group_describe.v0.response import StreamsGroupDescribeResponse
from kio.schema.streams_group_heartbeat.v0 import request as hbq
from kio.schema.streams_group_heartbeat.v0.response import StreamsGroupHeartbeatResponse
from kio.static.primitive import i16, i32, i32Timedelta

from compat_tests.conftest import unique_name
from compat_tests.kafka.helpers import wait_until
from compat_tests.kafka.kio_call import kio_call

PARTITIONS = 2
RETRY = {ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress}
MISSING_SOURCE_TOPICS = 1


def topology(app: str, source: str) -> hbq.Topology:
    """Subtopology 0 reads ``source`` and writes the repartition topic; subtopology 1 reads it
    and keeps a store with a changelog (Kafka Streams' names: <app>-<name>-repartition/-changelog)."""
    rep = hbq.TopicInfo(name=f"{app}-by-key-repartition", partitions=i32(0), replication_factor=i16(0),
                        topic_configs=(hbq.KeyValue(key="cleanup.policy", value="delete"),))
    log = hbq.TopicInfo(name=f"{app}-store-changelog", partitions=i32(0), replication_factor=i16(0),
                        topic_configs=(hbq.KeyValue(key="cleanup.policy", value="compact"),))
    return hbq.Topology(epoch=i32(0), subtopologies=(
        hbq.Subtopology(subtopology_id="0", source_topics=(source,), state_changelog_topics=(),
                        repartition_sink_topics=(rep.name,), repartition_source_topics=(), copartition_groups=()),
        hbq.Subtopology(subtopology_id="1", source_topics=(), state_changelog_topics=(log,),
                        repartition_source_topics=(rep,), copartition_groups=())))


def _ids(tasks) -> set[tuple[str, int]]:
    return {(t.subtopology_id, int(p)) for t in tasks or () for p in t.partitions}


def _task_ids(tasks: set[tuple[str, int]]) -> tuple:
    return tuple(hbq.TaskIds(subtopology_id=s, partitions=tuple(i32(p) for t, p in sorted(tasks) if t == s))
                 for s in sorted({s for s, _ in tasks}))


class Member:
    """One streams consumer: it runs what the last assignment gave and reports it each heartbeat."""

    def __init__(self, address, group: str, app: str, source: str):
        self.address, self.group, self.app, self.source = address, group, app, source
        self.member_id, self.process_id = str(uuid.uuid4()), str(uuid.uuid4())
        self.epoch = 0
        self.active: set[tuple[str, int]] = set()
        self.last: StreamsGroupHeartbeatResponse | None = None

    def heartbeat(self, leave: bool = False) -> StreamsGroupHeartbeatResponse:
        joining = self.epoch == 0 and not leave
        req = hbq.StreamsGroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, member_epoch=i32(-1 if leave else self.epoch),
            endpoint_information_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(timedelta(milliseconds=30_000 if joining else -1)),
            topology=topology(self.app, self.source) if joining else None,
            active_tasks=_task_ids(self.active), standby_tasks=(), warmup_tasks=(),
            process_id=self.process_id if joining else None, user_endpoint=None,
            client_tags=() if joining else None, task_offsets=None, task_end_offsets=None)
        deadline = time.monotonic() + 30
        while True:
            r = kio_call(self.address, 88, req, StreamsGroupHeartbeatResponse)
            if r.error_code not in RETRY or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.error_code == ErrorCode.none, (r.error_code, r.error_message)
        self.epoch = r.member_epoch
        if r.active_tasks is not None:
            self.active = _ids(r.active_tasks)  # revoked tasks are given up at once
        self.last = r
        return r

    def status(self) -> set[int]:
        return set() if self.last is None else {s.status_code for s in self.last.status or ()}


def _until(members: list[Member], done, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for m in members:
            m.heartbeat()
        if done():
            return
        assert time.monotonic() < deadline, f"{what}: " + "; ".join(
            f"{m.member_id[:8]} epoch {m.epoch} active {sorted(m.active)} status {m.last.status}" for m in members)
        time.sleep(0.3)


def _describe(address, group: str):
    r = kio_call(address, 89, StreamsGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False),
                 StreamsGroupDescribeResponse)
    return r.groups[0]


ALL = {(s, p) for s in ("0", "1") for p in range(PARTITIONS)}


def test_streams_group_join_split_leave_and_describe(kafka_broker):
    address, bootstrap = kafka_broker.address, kafka_broker.bootstrap
    app, source = unique_name("app"), unique_name("src")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(source, num_partitions=PARTITIONS, replication_factor=1)])[source].result(30)
    a = Member(address, app, app, source)
    _until([a], lambda: a.active == ALL, "the first member gets every task")
    assert a.status() == set(), a.last.status
    internal = {f"{app}-by-key-repartition", f"{app}-store-changelog"}
    wait_until(lambda: internal <= set(admin.list_topics(timeout=10).topics), 15, "internal topics")
    topics = admin.list_topics(timeout=10).topics
    assert {t: len(topics[t].partitions) for t in internal} == {t: PARTITIONS for t in internal}

    b = Member(address, app, app, source)
    _until([a, b], lambda: a.active | b.active == ALL and len(a.active) == len(b.active) == 2
           and not a.active & b.active, "two members split the tasks")
    described = _describe(address, app)
    assert described.error_code == ErrorCode.none
    assert described.group_state == "Stable"
    assert {m.member_id: _ids(m.assignment.active_tasks) for m in described.members} == \
        {a.member_id: a.active, b.member_id: b.active}
    assert {s.subtopology_id for s in described.topology.subtopologies} == {"0", "1"}

    # the other describe APIs do not describe it (DescribeGroups before v6: as a Dead group)
    old = kio_call(address, 15, DescribeGroupsRequest(groups=(app,), include_authorized_operations=False),
                   DescribeGroupsResponse, api_version=5).groups[0]
    assert (old.error_code, old.group_state, old.members) == (ErrorCode.none, "Dead", ())
    other = kio_call(address, 69, ConsumerGroupDescribeRequest(group_ids=(app,), include_authorized_operations=False),
                     ConsumerGroupDescribeResponse).groups[0]
    assert (other.error_code, other.error_message) == (ErrorCode.group_id_not_found,
                                                       f"Group {app} is not a consumer group.")

    listed = kio_call(address, 16, ListGroupsRequest(states_filter=(), types_filter=("streams",)),
                      ListGroupsResponse, api_version=5)
    assert {(g.group_id, g.group_type) for g in listed.groups if g.group_id == app} == {(app, "streams")}

    left = a.heartbeat(leave=True)
    assert left.member_epoch == -1
    _until([b], lambda: b.active == ALL, "the member that stays gets every task back")
    assert {m.member_id for m in _describe(address, app).members} == {b.member_id}
    assert _describe(address, unique_name("nope")).error_code == ErrorCode.group_id_not_found


def test_streams_group_missing_source_topic_status(kafka_broker):
    app = unique_name("app")
    m = Member(kafka_broker.address, app, app, unique_name("absent"))
    deadline = time.monotonic() + 20
    while MISSING_SOURCE_TOPICS not in m.status():
        m.heartbeat()
        assert time.monotonic() < deadline, m.last
        time.sleep(0.3)
    assert m.active == set()
    assert m.epoch > 0
