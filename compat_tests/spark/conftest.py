"""Fixtures of the Spark suite: one SparkSession (``local[2]``) for the whole run, real brokers.

The session has the Java kafka-clients jar on its classpath (provisioned from PyPI by
compat_tests/tools.py) so tests can drive it from Spark's own JVM through py4j. When
``SPARK_KAFKA_JARS`` names Spark's Kafka connector and its dependencies, those jars are used
instead (they bring their own kafka-clients) and the tests marked ``spark_kafka`` run the same
pipelines through ``format("kafka")``; without it those tests are deselected, and the run's
summary says so and why (the connector comes from Maven, which this machine cannot reach).
"""
from __future__ import annotations

import pytest

from compat_tests import tools
from spark.session import KAFKA_JARS_ENV, kafka_jars, spark_session

KAFKA_MARK = "spark_kafka"
_deselected: list[str] = []


def pytest_configure(config):
    config.addinivalue_line("markers", f"{KAFKA_MARK}: runs through Spark's Kafka connector (needs {KAFKA_JARS_ENV})")


def pytest_collection_modifyitems(config, items):
    if kafka_jars():
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker(KAFKA_MARK) else keep).append(item)
    if drop:
        _deselected.extend(item.nodeid for item in drop)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter):
    if _deselected:
        terminalreporter.write_sep("-", f"{len(_deselected)} format('kafka') test(s) deselected, not run")
        terminalreporter.write_line(
            f"{KAFKA_JARS_ENV} is not set: Spark's Kafka connector (spark-sql-kafka-0-10_2.13 and its "
            "dependencies) is a Maven artifact and cannot be fetched here. Set it to those jars' paths "
            "(comma-separated) to run these too; the same pipelines ran through the gatewaylog source:")
        for nodeid in _deselected:
            terminalreporter.write_line(f"  {nodeid}")


@pytest.fixture(scope="session")
def spark():
    """The run's SparkSession, with the gatewaylog data source registered."""
    extra = [] if kafka_jars() else [tools.kafka_clients_classpath()[0]]  # Spark ships lz4/snappy/zstd/slf4j
    session = spark_session("gateway-compat-tests", master="local[2]", jars=extra,
                            conf={"spark.sql.shuffle.partitions": "2"})
    try:
        yield session
    finally:
        session.stop()
