"""The client examples of the README and of the docs' getting-started page run as written.

Every fenced ``python`` block of those two pages is an example that claims to run, and so is a
block anywhere else under docs/ marked by a ``<!-- runnable ... -->`` comment on the line before
its fence (the guides' first examples; the other blocks there are sketches). Each is
executed in a fresh Python process against one broker started by the test on free ports
(tests/brokerproc.py). The examples name the default addresses (Kafka ``127.0.0.1:9092``, AMQP
``"127.0.0.1", 5672``, stream ``port=5552``); the test rewrites exactly those spellings to the
started broker's ports before it runs a block, and nothing else. A block that names a default
port in any other spelling is a failure here, so a new example cannot silently talk to another
broker. The Spark example needs Spark's Kafka connector, a Maven artifact named by
``SPARK_KAFKA_JARS`` (as in compat_tests/spark/); without it that one block is skipped, saying so.
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
    if 'format("kafka")' in code and not os.environ.get("SPARK_KAFKA_JARS"):
        pytest.skip("Spark's Kafka connector is a Maven artifact: set SPARK_KAFKA_JARS to its jars to run this example")
    ports = {name: doc_broker.address(name)[1] for name in ("kafka", "amqp", "stream")}
    script = tmp_path / "example.py"
    script.write_text(localise(code, ports))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, f"{name} failed:\n{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
