"""The client examples of the README and of the docs' getting-started page run as written.

Every fenced ``python`` block of those two pages is an example that claims to run, and so is a
block anywhere else under docs/ marked by a ``<!-- runnable ... -->`` comment on the line before
its fence (the guides' first examples; the other blocks there are sketches). Each is
executed in a fresh Python process against one broker started by the test on free ports
(tests/brokerproc.py). The examples name the default addresses (Kafka ``127.0.0.1:9092``, AMQP
``"127.0.0.1", 5672``, stream ``port=5552``); the test rewrites exactly those spellings to the
started broker's ports before it runs a block, and nothing else. A block that names a default
port in any other spelling is a failure here, so a new example cannot silently talk to another
broker. The Spark examples run as a user runs them: ``spark_session(kafka=True)`` has Spark fetch
its Kafka connector from Maven Central (``spark.jars.packages``) on first use, or take the jars
``SPARK_KAFKA_JARS`` names; and every Maven coordinate of the connector the pages and spark/ name
must be of the installed PySpark's version, or Spark could not load it.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.brokerproc import start_broker

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


MARKED = re.compile(r"^<!-- runnable[^>]*-->\n```python\n(.*?)^```", re.M | re.S)


def examples() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for i, match in enumerate(FENCE.finditer(page.read_text())):
            out.append((f"{page.relative_to(ROOT)}#{i + 1}", match.group(1)))
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if page in PAGES:
            continue
        for i, match in enumerate(MARKED.finditer(page.read_text())):
            out.append((f"{page.relative_to(ROOT)}#runnable-{i + 1}", match.group(1)))
    return out


def localise(code: str, ports: dict[str, int]) -> str:
    """The example with the default ports replaced by the test broker's."""
    code = code.replace("127.0.0.1:9092", f"127.0.0.1:{ports['kafka']}")
    code = code.replace('"127.0.0.1", 5672', f'"127.0.0.1", {ports["amqp"]}')
    code = code.replace("port=5552", f"port={ports['stream']}")
    code = code.replace("127.0.0.1:5672", f"127.0.0.1:{ports['amqp']}")  # AMQP 1.0 URLs
    left = [p for p in ("9092", "5672", "5552", "15672") if re.search(rf"\b{p}\b", code)]
    assert not left, f"an example names default port(s) {left} in a spelling this test does not rewrite"
    return code


@pytest.fixture(scope="module")
def doc_broker(tmp_path_factory):
    broker = start_broker(tmp_path_factory.mktemp("doc-examples") / "data")
    try:
        yield broker
    finally:
        broker.stop()


def test_pages_have_examples():
    names = [name for name, _ in examples()]
    assert len([n for n in names if n.startswith("README")]) >= 5, names


@pytest.mark.parametrize("name,code", examples(), ids=[name for name, _ in examples()])
def test_example_runs_as_written(doc_broker, name, code, tmp_path):
    ports = {name: doc_broker.address(name)[1] for name in ("kafka", "amqp", "stream")}
    script = tmp_path / "example.py"
    script.write_text(localise(code, ports))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a Spark example starts a JVM and, the first time on a machine, downloads the connector
    timeout = 360 if "spark_session(" in code else 180
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{name} failed:\n{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


CONNECTOR = re.compile(r"org\.apache\.spark:spark-sql-kafka-0-10_2\.13:([0-9][\w.]*)")


def test_connector_coordinates_match_pyspark():
    import pyspark

    from spark.session import kafka_package

    named = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "spark").glob("*.py"))]:
        for version in CONNECTOR.findall(path.read_text()):
            named.setdefault(version, []).append(str(path.relative_to(ROOT)))
    assert "README.md" in named.get(pyspark.__version__, []), named  # the README shows the line to run
    assert set(named) == {pyspark.__version__}, f"PySpark is {pyspark.__version__}; the connector named: {named}"
    assert kafka_package() == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
