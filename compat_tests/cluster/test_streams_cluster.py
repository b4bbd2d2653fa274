"""Kafka Streams (exactly_once_v2, the Java kafka-clients 4.x producer and consumer inside it) on a
3-broker cluster, every topic with three replicas, while the brokers it depends on are killed.

The word count of compat_tests/java/StreamsWordCount.java runs as its own JVM. Midway the leader
of ``__transaction_state`` (the coordinator of every transactional id), then the coordinator of
the application's group, then the leader of an output partition are killed with SIGKILL, each
started again a second later. Read committed, each word's counts must be 1, 2, ..., n exactly
once: no aborted output visible, none lost, no count repeated.

Both group protocols: ``classic`` (Kafka Streams 4.1) and ``streams`` (KIP-1071, Kafka Streams
4.4), where killing the group's coordinator moves the streams group (topology, members, epochs,
tasks) to the broker that takes over its ``__consumer_offsets`` partition.
"""
from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import tools
from compat_tests.cluster.test_transactions_cluster import coordinator, leader_of
from compat_tests.conftest import unique_name
from compat_tests.kafka.streams_app import (PARTITIONS, PER_WORD, STREAMS, STREAMS_PROTOCOL, WORDS, OutputReader,
                                            StreamsApp, produce)
from compat_tests.kafka.test_kafka_streams import set_streams_group_configs

INTERNAL = ("__transaction_state", "__consumer_offsets")


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_exactly_once_v2_count_survives_kill_9_of_its_brokers(cluster, tmp_path, protocol):
    cp = tools.maven_classpath("kafka-streams" if protocol == "classic" else "kafka-streams-4.4",
                               STREAMS if protocol == "classic" else STREAMS_PROTOCOL)
    argv, main = tools.compile_java("StreamsWordCount.java", cp)
    bootstrap = cluster.bootstrap()
    source, sink, app_id = unique_name("words"), unique_name("counts"), unique_name("wordcount")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=3)
                                  for t in (source, sink)]).values():
        f.result(30)
    if protocol == "streams":
        set_streams_group_configs(admin, app_id)
    words = [w for _ in range(PER_WORD) for w in WORDS]
    produce(bootstrap, source, words)

    app = StreamsApp([argv[0], "-Xmx256m", *argv[1:], main, bootstrap, app_id, source, sink,
                      str(tmp_path / "state"), protocol, "3"])
    reader = OutputReader(bootstrap, sink)
    reader.start()
    victims = [("the transaction coordinator", lambda: leader_of(cluster, "__transaction_state", 0)),
               ("the group coordinator", lambda: coordinator(cluster, app_id, 0)),
               ("an output partition's leader", lambda: leader_of(cluster, sink, 0))]
    killed = []
    try:
        app.start()
        app.wait_running(120)
        for i, (what, victim) in enumerate(victims):
            reader.wait_total(len(words) * (i + 1) // (len(victims) + 2), app, 180, f"before killing {what}")
            broker = cluster.by_id(victim())
            broker.kill()
            killed.append((what, broker.node_id))
            time.sleep(1.0)
            broker.start()
            cluster.wait_registered(60)
            for topic in (source, sink) + INTERNAL:
                cluster.wait_isr_full(topic, 60)
        reader.wait_complete(app, 240, f" after killing {killed}")
    finally:
        app.stop()
        reader.stop()
    reader.assert_exactly_once(f" after killing {killed}")
