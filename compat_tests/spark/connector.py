"""Spark's Kafka connector for the Spark suite: the jars of ``spark-sql-kafka-0-10_2.13``.

``SPARK_KAFKA_JARS`` wins when it is set (spark/session.py reads it). Otherwise the connector of
exactly the installed PySpark's version and its runtime dependencies are resolved from Maven
Central once per machine (compat_tests.tools.maven_classpath, cached and locked). Jars of
artifacts PySpark already ships (scala-library, hadoop-client-*, slf4j, lz4, snappy...) are
dropped: PySpark's own copies are the ones Spark was built and tested with, and a second copy
of another version on the same classpath only invites a class-version mismatch.
"""
from __future__ import annotations

import re
from pathlib import Path

from compat_tests import tools
from spark.session import kafka_jars, kafka_package

_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-(?P<version>\d[^-]*)(?:-[A-Za-z][\w.]*)?\.jar$")


def artifact_of(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the name without its version)."""
    match = _VERSIONED_JAR.match(jar_name)
    return match.group("artifact") if match else jar_name


def pyspark_artifacts() -> set[str]:
    import pyspark

    return {artifact_of(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def resolved_jars() -> list[str]:
    """The connector of PySpark's version and all its runtime dependencies, from Maven Central."""
    package = kafka_package()
    return tools.maven_classpath(f"spark-kafka-{package.rsplit(':', 1)[1]}", [package])


def connector_jars() -> list[str]:
    """Jars to add to the suite's session: none when ``SPARK_KAFKA_JARS`` already names them."""
    if kafka_jars():
        return []
    resolved = resolved_jars()
    shipped = pyspark_artifacts()
    jars = [jar for jar in resolved if artifact_of(Path(jar).name) not in shipped]
    assert any("spark-sql-kafka-0-10" in Path(j).name for j in jars), f"no connector jar among {resolved}"
    return jars
