"""The management API fuzzed from its own OpenAPI description (``/api/openapi.json``) with
schemathesis, as the administrator guest: no 5xx, no hang (every call has a timeout), no
traceback in the broker's log. ``API_FUZZ_EXAMPLES`` (default 2 per operation, about a minute
in CI) sets the depth of a longer run by hand, e.g. ``API_FUZZ_EXAMPLES=50``."""
from __future__ import annotations

import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.brokerproc import start_broker

EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "2"))
# Creating topics with thousands of partitions is slow by design, not a fault: left to other tests.
SKIP = {("PUT", "/api/topics/{name0}")}


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    proc = start_broker(tmp_path_factory.mktemp("fuzz") / "data")
    try:
        yield proc
    finally:
        proc.stop()


def _check(case, broker) -> None:
    if (case.method.upper(), case.operation.path) in SKIP:
        return
    if case.path_parameters and any(v in ("guest", "/") for v in case.path_parameters.values()):
        return  # keep the fuzzing user and the default vhost
    try:
        response = case.call(base_url=broker.http_url, auth=("guest", "guest"), timeout=10)
    except requests.Timeout:
        raise AssertionError(f"{case.method} {case.formatted_path} hung") from None
    # a failed health check answers 503 with its reason, as RabbitMQ's do: an answer, not a fault
    health = case.operation.path.startswith(("/api/health/checks/", "/api/aliveness-test/"))
    assert response.status_code < 500 or (health and response.status_code == 503), \
        (case.method, case.formatted_path, case.body, response.text)


def test_no_server_error_no_hang_no_traceback(fuzz_broker):
    schema = schemathesis.openapi.from_url(fuzz_broker.http_url + "/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 90
    failures = []
    for op in operations:  # one Hypothesis run per operation, each a few examples
        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy())
        def run(case):
            _check(case, fuzz_broker)
        try:
            run()
        except AssertionError as exc:  # go on: one run names every failing operation
            failures.append(f"{op.method.upper()} {op.path}: {str(exc).splitlines()[0]}")
    assert not failures, "\n".join(failures)
    assert "Traceback" not in fuzz_broker.output()
