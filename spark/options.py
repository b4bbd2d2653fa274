"""Option maps for Spark's own Kafka source and sink pointed at this broker.

Spark's connector talks the Kafka protocol, so it needs nothing of ours but the right
options; this module writes them, including the topic of an AMQP queue (every queue is a
one-partition topic, named by core.names.queue_topic)::

    from spark.options import kafka_options

    opts = kafka_options("127.0.0.1:9092", topics=["orders"], queues=["invoices"],
                         starting_offsets="earliest")
    df = spark.readStream.format("kafka").options(**opts).load()
    # -> {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders,invoices",
    #     "startingOffsets": "earliest", "includeHeaders": "true"}

    out = kafka_options("127.0.0.1:9092", queues=["invoices"], sink=True)
    df.selectExpr("key", "value").write.format("kafka").options(**out).save()

with the connector on the classpath: ``spark.session.spark_session(kafka=True)``, or
``spark-submit --packages`` with the coordinate ``spark.session.kafka_package()`` gives
(the connector of exactly your PySpark's version). The same map plus ``path`` works for
the direct ``gatewaylog`` data source (spark/datasource.py), which ignores ``kafka.*``.
"""
from __future__ import annotations

import json
from typing import Iterable, Mapping

from core.names import DEFAULT_VHOST, queue_topic

Offsets = str | Mapping[str, Mapping[int | str, int]]


def topic_names(topics: Iterable[str] = (), queues: Iterable[str] = (), vhost: str = DEFAULT_VHOST) -> list[str]:
    """Topics to read: the given topics, then each AMQP queue's topic, without duplicates."""
    names = list(topics) + [queue_topic(vhost, q) for q in queues]
    return list(dict.fromkeys(names))


def _offsets(spec: Offsets) -> str:
    """"earliest"/"latest" as they are, a {topic: {partition: offset}} mapping as Kafka's JSON."""
    if isinstance(spec, str):
        return spec
    return json.dumps({t: {str(p): int(o) for p, o in parts.items()} for t, parts in spec.items()})


def kafka_options(
    bootstrap: str,
    *,
    topics: Iterable[str] = (),
    queues: Iterable[str] = (),
    vhost: str = DEFAULT_VHOST,
    starting_offsets: Offsets | None = None,
    ending_offsets: Offsets | None = None,
    include_headers: bool = True,
    sink: bool = False,
    **extra: str,
) -> dict[str, str]:
    """The option map of ``format("kafka")`` for this broker: a source (default) or, with ``sink``, a sink.

    A source subscribes to ``topics`` and the topics of ``queues`` (of ``vhost``); a sink
    writes to exactly one of them (or leave both empty and give each row a ``topic``
    column). ``starting_offsets``/``ending_offsets`` take "earliest", "latest" or
    ``{topic: {partition: offset}}`` (-2 earliest, -1 latest). ``extra`` entries are added
    as they are (e.g. ``failOnDataLoss="false"``, ``maxOffsetsPerTrigger="100000"``).
    """
    names = topic_names(topics, queues, vhost)
    options = {"kafka.bootstrap.servers": bootstrap}
    if sink:
        if starting_offsets is not None or ending_offsets is not None:
            raise ValueError("a Kafka sink takes no starting or ending offsets")
        if len(names) > 1:
            raise ValueError(f"a Kafka sink writes to one topic (or to each row's topic column), not {names}")
        if names:
            options["topic"] = names[0]
    else:
        if not names:
            raise ValueError("name at least one topic or queue to read")
        options["subscribe"] = ",".join(names)
        options["includeHeaders"] = "true" if include_headers else "false"
        if starting_offsets is not None:
            options["startingOffsets"] = _offsets(starting_offsets)
        if ending_offsets is not None:
            options["endingOffsets"] = _offsets(ending_offsets)
    options.update({k: str(v) for k, v in extra.items()})
    return options


def gatewaylog_options(data_dir: str, **kwargs) -> dict[str, str]:
    """The same map for the direct ``gatewaylog`` source: ``kafka_options`` without a bootstrap, plus ``path``."""
    options = kafka_options("", **kwargs)
    del options["kafka.bootstrap.servers"]
    options["path"] = str(data_dir)
    return options
