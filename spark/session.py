"""A SparkSession for the pipelines, with the ``gatewaylog`` data source registered.

Spark runs its Python workers with ``python3`` from PATH unless told otherwise; they must be
this interpreter, which has pyarrow and this package.

Spark's Kafka source and sink (``format("kafka")``) are not part of PySpark: they are the Maven
artifact ``org.apache.spark:spark-sql-kafka-0-10_2.13``, of exactly PySpark's version.
``spark_session(kafka=True)`` asks Spark to fetch it from Maven Central itself
(``spark.jars.packages``, cached in ``~/.ivy2.5.2``), the same as ``spark-submit --packages``.
``SPARK_KAFKA_JARS`` (jar paths, comma- or colon-separated) names local copies of the
connector and its dependencies instead, for machines that cannot reach a Maven repository.
"""
from __future__ import annotations

import os
import sys
from typing import Iterable, Mapping

KAFKA_JARS_ENV = "SPARK_KAFKA_JARS"
KAFKA_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"


# The connector's dependencies that PySpark 4.2's own jars already provide. Excluding them from
# the package resolution keeps one copy of each on the classpath (PySpark's, which Spark was built
# with), saves ~50 MB of downloads (the Hadoop client), and avoids a known Ivy failure: Spark's
# resolver looks in ~/.m2 first, and where Maven left only an artifact's .pom there (seen with
# slf4j-api 2.0.17) Ivy takes it as found and then fails to "download" its jar.
KAFKA_PACKAGE_EXCLUDES = (
    "org.slf4j:slf4j-api",
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "at.yawk.lz4:lz4-java",
    "org.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "com.google.code.findbugs:jsr305",
    "org.scala-lang.modules:scala-parallel-collections_2.13",
)


def kafka_package() -> str:
    """The connector's Maven coordinate for the installed PySpark (a mismatched version fails to load)."""
    import pyspark

    return f"{KAFKA_ARTIFACT}:{pyspark.__version__}"


def kafka_jars() -> list[str]:
    """The jars named by ``SPARK_KAFKA_JARS`` (empty when it is unset)."""
    raw = os.environ.get(KAFKA_JARS_ENV, "").replace(os.pathsep, ",")
    return [j.strip() for j in raw.split(",") if j.strip()]


def register(spark) -> None:
    """Make ``spark.read.format("gatewaylog")`` (and readStream) available in this session."""
    from spark.datasource import GatewayLogDataSource

    spark.dataSource.register(GatewayLogDataSource)


def spark_session(app_name: str = "gateway", *, master: str | None = None, jars: Iterable[str] = (),
                  conf: Mapping[str, str] | None = None, kafka: bool = False):
    """Get or create the session: ``local[2]`` unless ``master`` or ``SPARK_MASTER`` says otherwise.

    ``kafka`` puts Spark's Kafka connector on the classpath: the ``SPARK_KAFKA_JARS`` jars when
    that is set, else the package :func:`kafka_package` names, fetched by Spark. Jars and
    packages only take effect when this call starts the JVM (the first session of a process).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName(app_name)
               .master(master or os.environ.get("SPARK_MASTER", "local[2]"))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")  # our progress lines instead of stage bars
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")  # dates of the archive are UTC days
               .config("spark.sql.mapKeyDedupPolicy", "LAST_WIN"))  # repeated header names -> one map entry
    all_jars = list(jars) + kafka_jars()
    if all_jars:
        builder = builder.config("spark.jars", ",".join(dict.fromkeys(all_jars)))
    if kafka and not kafka_jars():
        builder = (builder.config("spark.jars.packages", kafka_package())
                   .config("spark.jars.excludes", ",".join(KAFKA_PACKAGE_EXCLUDES)))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    return session
