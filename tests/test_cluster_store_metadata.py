"""The ZooKeeper metadata store's get_topic: answers kept per assignment, never stale."""
from dataclasses import replace

from core.cluster.store import ZkMetadataStore
from core.cluster.view import ClusterView, TopicAssignment


def _store(*topics: TopicAssignment) -> ZkMetadataStore:
    store = ZkMetadataStore(agent=None)
    store.update(ClusterView(topics={t.name: t for t in topics}))
    return store


def test_the_same_assignment_gives_the_same_answer():
    store = _store(TopicAssignment("orders", ((1, 2), (2, 3)), {"retention.ms": "1000"}, "id-1", 5))
    first = store.get_topic("orders")
    assert first is store.get_topic("orders")
    assert (first.name, first.partitions, dict(first.configs), first.topic_id, first.replicas) == (
        "orders", 2, {"retention.ms": "1000"}, "id-1", ((1, 2), (2, 3)))


def test_a_changed_assignment_is_seen_at_once():
    old = TopicAssignment("orders", ((1,),), {}, "id-1", 5, version=1)
    store = _store(old)
    assert store.get_topic("orders").partitions == 1
    grown = replace(old, replicas=((1,), (2,)), configs={"cleanup.policy": "compact"}, version=2)
    store.update(ClusterView(topics={"orders": grown}))
    meta = store.get_topic("orders")
    assert (meta.partitions, dict(meta.configs)) == (2, {"cleanup.policy": "compact"})


def test_a_deleted_topic_is_gone_and_old_entries_are_dropped():
    store = _store(*(TopicAssignment(f"t{i}", ((1,),)) for i in range(300)))
    for i in range(300):
        assert store.get_topic(f"t{i}") is not None
    fresh = TopicAssignment("fresh", ((1,),))
    store.update(ClusterView(topics={"t0": store.assignment("t0"), "fresh": fresh}))
    assert store.get_topic("t1") is None
    assert store.get_topic("fresh").name == "fresh"  # a new entry: the deleted topics' ones are dropped
    assert len(store._metadata) <= 2 * 2 + 101
