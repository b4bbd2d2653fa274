"""Fixtures of the Spark suite: one SparkSession (``local[2]``) for the whole run, real brokers.

The session has Spark's own Kafka connector (``spark-sql-kafka-0-10_2.13`` of PySpark's version,
with the Java kafka-clients it brings) on its classpath: the jars ``SPARK_KAFKA_JARS`` names, or
else the ones connector.py resolves from Maven Central. So every test here runs, the
``format("kafka")`` ones included, and tests can also drive the connector's kafka-clients from
Spark's own JVM through py4j.
"""
from __future__ import annotations

import pytest

from spark.session import spark_session

from .connector import connector_jars


@pytest.fixture(scope="session")
def spark():
    """The run's SparkSession, with the gatewaylog data source and Spark's Kafka connector."""
    conf = {"spark.sql.shuffle.partitions": "2",
            # the sink's producers are cached per JVM; each module's broker stops when the module
            # ends, and an idle producer would retry its address every second for ten minutes
            "spark.kafka.producer.cache.timeout": "5s",
            "spark.kafka.producer.cache.evictorThreadRunInterval": "2s"}
    session = spark_session("gateway-compat-tests", master="local[2]", jars=connector_jars(), conf=conf)
    try:
        yield session
    finally:
        session.stop()
