"""On a failure in the dashboard suite: the broker's log, the page's console and a screenshot."""
from __future__ import annotations

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    broker = funcargs.get("dashboard_broker")
    if broker is not None:
        try:
            report.sections.append(("broker log (tail)", broker.output()[-4000:]))
        except OSError:
            pass
    page = funcargs.get("page")
    if page is not None:
        try:
            path = page.shots / f"FAILED-{item.name}.png"
            page.driver.save_screenshot(str(path))
            logs = page.driver.get_log("browser")
            report.sections.append(("browser", f"screenshot: {path}\nurl: {page.driver.current_url}\nconsole:\n"
                                    + "\n".join(f"{e['level']} {e['message']}" for e in logs[-30:])))
        except Exception as exc:  # the browser may be what failed
            report.sections.append(("browser", f"no screenshot: {exc!r}"))
