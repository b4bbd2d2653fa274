"""A ``gateway serve`` process per test module for the stream-protocol suite (port-0 listeners)."""
from __future__ import annotations

import pytest

from tests.brokerproc import start_broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("stream") / "data")
    yield process
    assert process.stop() == 0, process.output()
