import pytest

from tests.brokerproc import start_broker


@pytest.fixture
def broker(tmp_path):
    """A running broker on free ports with a fresh data directory; stopped after the test."""
    b = start_broker(tmp_path / "data")
    yield b
    b.stop()


def pytest_sessionfinish(session, exitstatus):
    # A skipped test is not a passing one: a run with skips fails.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.stats.get("skipped") and session.exitstatus == 0:
        session.exitstatus = 1
