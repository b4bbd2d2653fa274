import pytest

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from routing.broker import Router
from tests.brokerproc import start_broker


@pytest.fixture
def broker(tmp_path):
    """A running broker on free ports with a fresh data directory; stopped after the test."""
    b = start_broker(tmp_path / "data")
    yield b
    b.stop()


@pytest.fixture
def make_router(tmp_path):
    """Routers over one data directory (several: a restart), their logs shut down after the test."""
    made = []

    def make():
        logs = LogManager(tmp_path, LocalMetadataStore(tmp_path))
        logs.startup()
        router = Router(tmp_path, logs)
        router.load()
        made.append(logs)
        return router

    yield make
    for logs in made:
        logs.shutdown()


def pytest_sessionfinish(session, exitstatus):
    # A skipped test is not a passing one: a run with skips fails.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and reporter.stats.get("skipped") and session.exitstatus == 0:
        session.exitstatus = 1
