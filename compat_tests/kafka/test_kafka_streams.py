"""Kafka Streams with exactly_once_v2 (compat_tests/java/StreamsWordCount.java), killed mid-run.

A stateful count (a repartition topic and a changelog topic, both made by Kafka Streams through
CreateTopics) runs as its own JVM against the broker; after part of the input it is killed with
SIGKILL and started again. Read committed, the output must hold, for each word, the counts
1, 2, ..., n exactly once each: an aborted transaction of the killed instance must stay
invisible, and the restarted one must resume from the committed offsets and the changelog.

Kafka Streams 4.1 comes from Maven Central (``compat_tests.tools.maven_classpath``).
"""
from __future__ import annotations


from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests import tools
from compat_tests.conftest import unique_name
from compat_tests.kafka.streams_app import PARTITIONS, PER_WORD, STREAMS, WORDS, OutputReader, StreamsApp, produce

def test_exactly_once_v2_count_survives_kill_9(bootstrap, tmp_path):
    cp = tools.maven_classpath("kafka-streams", STREAMS)
    argv, main = tools.compile_java("StreamsWordCount.java", cp)
    source, sink, app_id = unique_name("words"), unique_name("counts"), unique_name("wordcount")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
                                  for t in (source, sink)]).values():
        f.result(30)
    words = [w for _ in range(PER_WORD) for w in WORDS]
    half = len(words) // 2
    produce(bootstrap, source, words[:half])

    app = StreamsApp([argv[0], "-Xmx256m", *argv[1:], main, bootstrap, app_id, source, sink,
                      str(tmp_path / "state"), "classic"])
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
    finally:
        app.stop()
        reader.stop()
    reader.assert_exactly_once()
