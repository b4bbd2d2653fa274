"""Kafka Streams with exactly_once_v2 (compat_tests/java/StreamsWordCount.java), killed mid-run.

A stateful count (a repartition topic and a changelog topic) runs as its own JVM against the
broker; after part of the input it is killed with SIGKILL and started again. Read committed, the
output must hold, for each word, the counts 1, 2, ..., n exactly once each: an aborted
transaction of the killed instance must stay invisible, and the restarted one must resume from
the committed offsets and the changelog.

Two group protocols: ``classic`` (Kafka Streams 4.1: the client assigns tasks and creates its
internal topics through CreateTopics) and ``streams`` (KIP-1071, Kafka Streams 4.4: the broker
holds the topology, creates the internal topics and assigns the tasks; the group's session
timeout is lowered through its group config, so the killed instance's tasks are released in
seconds; the Java Admin (compat_tests/java/StreamsGroupAdmin.java) then lists the group as a
streams group and describes it). Kafka Streams comes from Maven Central
(``compat_tests.tools.maven_classpath``).
"""
from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from compat_tests import tools
from compat_tests.conftest import unique_name
from compat_tests.kafka.streams_app import (PARTITIONS, PER_WORD, STREAMS, STREAMS_PROTOCOL, WORDS, OutputReader,
                                            StreamsApp, produce)

# a killed member's tasks wait for its session to end: 6 s instead of 45 (heartbeats every second)
STREAMS_GROUP_CONFIGS = {"streams.session.timeout.ms": "6000", "streams.heartbeat.interval.ms": "1000"}


def set_streams_group_configs(admin: AdminClient, app_id: str) -> None:
    group = ConfigResource(ResourceType.GROUP, app_id, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in STREAMS_GROUP_CONFIGS.items()])
    admin.incremental_alter_configs([group])[group].result(30)


@pytest.mark.parametrize("protocol", ["classic", "streams"])
def test_exactly_once_v2_count_survives_kill_9(bootstrap, tmp_path, protocol):
    cp = tools.maven_classpath("kafka-streams" if protocol == "classic" else "kafka-streams-4.4",
                               STREAMS if protocol == "classic" else STREAMS_PROTOCOL)
    argv, main = tools.compile_java("StreamsWordCount.java", cp)
    source, sink, app_id = unique_name("words"), unique_name("counts"), unique_name("wordcount")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
                                  for t in (source, sink)]).values():
        f.result(30)
    if protocol == "streams":
        set_streams_group_configs(admin, app_id)
    words = [w for _ in range(PER_WORD) for w in WORDS]
    half = len(words) // 2
    produce(bootstrap, source, words[:half])

    app = StreamsApp([argv[0], "-Xmx256m", *argv[1:], main, bootstrap, app_id, source, sink,
                      str(tmp_path / "state"), protocol])
    reader = OutputReader(bootstrap, sink)
    reader.start()
    try:
        app.start()
        app.wait_running(120)
        reader.wait_total(half // 3, app, 120, "before the kill")  # part of the first half is through
        app.kill()
        produce(bootstrap, source, words[half:])
        app.start()
        app.wait_running(120)
        reader.wait_complete(app, 180, "")
        if protocol == "streams":
            _check_admin_view(cp, bootstrap, app_id)
    finally:
        app.stop()
        reader.stop()
    reader.assert_exactly_once()


def _check_admin_view(cp: list[str], bootstrap: str, app_id: str) -> None:
    """Admin.listGroups and Admin.describeStreamsGroups: one member (the restarted instance, once
    the killed one's session ended) running all six tasks of the two subtopologies."""
    argv, main = tools.compile_java("StreamsGroupAdmin.java", cp)
    want = "type=streams state=stable subtopologies=0,1 members=1 active=0:0,0:1,0:2,1:0,1:1,1:2"
    deadline = time.monotonic() + 30
    while True:
        r = subprocess.run(argv + [main, bootstrap, app_id], capture_output=True, text=True, timeout=60)
        seen = r.stdout.strip().lower()
        if seen == want or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert seen == want, f"{seen!r}\n{r.stderr[-3000:]}"
