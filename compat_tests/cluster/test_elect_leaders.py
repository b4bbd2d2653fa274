"""ElectLeaders (KIP-460) in cluster mode, through confluent-kafka's AdminClient (which sends it to
the controller Metadata names): a preferred election while the preferred replica is down is
PREFERRED_LEADER_NOT_AVAILABLE; once it is back in the ISR the election moves leadership to it;
an unclean election with a live leader is not needed; an unknown partition is unknown.

The controller also moves leadership back to preferred replicas by itself every 10 s, so the
election right after the ISR is full may find that done already (ELECTION_NOT_NEEDED); either
way the preferred replica leads when the answer arrives.
"""
from __future__ import annotations

from confluent_kafka import ElectionType, KafkaError, TopicPartition

from compat_tests.cluster.cluster import admin, create_topic, metadata, partition_view
from compat_tests.kafka.helpers import wait_until


def _elect(bootstrap, election, *partitions):
    client = admin(bootstrap)  # kept referenced until the answer is in
    result = client.elect_leaders(election, [TopicPartition(t, p) for t, p in partitions]).result(30)
    return {(tp.topic, tp.partition): None if err is None else err.code() for tp, err in result.items()}


def test_preferred_election_moves_leadership_back(cluster):
    create_topic(cluster.bootstrap(), "elect", 1, 3)
    leader, replicas, _isr = partition_view(cluster.wait_isr_full("elect"), "elect")[0]
    preferred = replicas[0]
    assert leader == preferred
    cluster.by_id(preferred).kill()
    wait_until(lambda: (md := metadata(cluster.bootstrap(), 2)) is not None
               and partition_view(md, "elect")[0][0] not in (preferred, -1), 30, "a new leader")
    assert _elect(cluster.bootstrap(), ElectionType.PREFERRED, ("elect", 0)) == {
        ("elect", 0): KafkaError.PREFERRED_LEADER_NOT_AVAILABLE}
    cluster.by_id(preferred).start()
    cluster.wait_isr_full("elect")
    codes = _elect(cluster.bootstrap(), ElectionType.PREFERRED, ("elect", 0), ("no-such-topic", 0))
    assert codes[("no-such-topic", 0)] == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert codes[("elect", 0)] in (None, KafkaError.ELECTION_NOT_NEEDED)
    wait_until(lambda: partition_view(metadata(cluster.bootstrap(), 2), "elect")[0][0] == preferred, 15,
               "the preferred replica to lead")
    assert _elect(cluster.bootstrap(), ElectionType.UNCLEAN, ("elect", 0)) == {
        ("elect", 0): KafkaError.ELECTION_NOT_NEEDED}
