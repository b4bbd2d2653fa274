"""The generated reference pages under docs/reference/ are what the code generates now.

A failure names the stale page: run ``python -m gateway.docs_reference`` and commit the result.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from gateway import docs_reference
from gateway.config import reference_markdown

GENERATED = docs_reference.generate()


@pytest.mark.parametrize("name", sorted(docs_reference.PAGES))
def test_reference_page_is_generated_from_the_code(name):
    page = docs_reference.REFERENCE_DIR / name
    assert page.exists(), f"docs/reference/{name} is missing: run `python -m gateway.docs_reference`"
    assert page.read_text() == GENERATED[name], \
        f"docs/reference/{name} is stale: run `python -m gateway.docs_reference` and commit the result"


def test_settings_page_holds_the_config_modules_table():
    """``python -m gateway.config`` keeps printing the table the settings page is built around."""
    printed = subprocess.run([sys.executable, "-m", "gateway.config"], capture_output=True, text=True, check=True,
                             cwd=docs_reference.ROOT).stdout
    assert printed.strip() == reference_markdown().strip()
    assert reference_markdown() in GENERATED["settings.md"]


def test_every_kafka_api_served_is_listed():
    from wire.kafka import ADVERTISED, api_name

    page = GENERATED["kafka-apis.md"]
    for key in ADVERTISED:
        assert f"| {api_name(key)} | {key} |" in page
    assert "no handler" not in page, "an API is announced in ApiVersions without a handler"


def test_amqp_connection_methods_named_in_the_code():
    """The connection-level methods the generator lists by hand are ones gateway/amqp/ handles."""
    source = "".join(p.read_text() for p in (docs_reference.ROOT / "gateway" / "amqp").glob("*.py"))
    for method, _ in docs_reference.AMQP_CONNECTION_METHODS:
        cls, name = method.split(" ")[0].split(".")
        camel = "".join(part.capitalize() for part in name.split("-"))
        assert f"{cls.capitalize()}.{camel}" in source or f"{cls.capitalize()}.{camel}Ok" in source, method


def test_every_metric_family_is_listed():
    page = GENERATED["metrics.md"]
    for name in ("gateway_connections", "gateway_fsync_seconds", "rabbitmq_identity_info", "kafka_consumergroup_lag",
                 "rabbitmq_detailed_queue_messages_ready"):
        assert f"`{name}" in page


def test_every_http_route_is_listed():
    page = GENERATED["http-api.md"]
    for path in ("/api/overview", "/api/queues/{vhost}/{name}", "/api/definitions", "/api/topics/{name}"):
        assert f"`{path}`" in page
