"""The web dashboard (``/dashboard/``) in a real headless Chromium, against a real broker.

Real clients make the objects first (confluent-kafka: a topic with three partitions and a
consumer group with committed offsets; pika: a queue bound to ``amq.topic`` with messages and an
open connection); Debian's ``chromium`` driven through its ``chromedriver`` by Selenium then logs
in, checks that every view shows them, takes screenshots (PNG files under pytest's temporary
directory, checked for their size, their colours and the charts' pixels), and does what a user
does: create and delete a topic and a queue, purge a queue, publish a test message, each
checked afterwards with a real client. Without Chromium the tests fail and name the packages.
"""
from __future__ import annotations

import io
import os
import shutil
import threading
import time
import uuid
from pathlib import Path

import pika
import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.support import wait_until
from tests.brokerproc import start_broker

CHROMIUM = os.environ.get("DASHBOARD_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("DASHBOARD_CHROMEDRIVER", "/usr/bin/chromedriver")
PACKAGES = "Debian's chromium and chromium-driver (sudo apt-get install -y chromium chromium-driver)"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1440,1100", "--force-device-scale-factor=1", "--lang=en-US")

TOPIC, PARTITIONS, RECORDS = "dash-orders", 3, 30
GROUP, CONSUMED = "dash-readers", 12
QUEUE, QUEUE_MESSAGES, BINDING_KEY = "dash-tasks", 7, "dash.#"
LIVE_QUEUE, LIVE_TOPIC = "dash-live", "dash-live-records"  # traffic all along, for the charts' rates
BLUE = (0x1F, 0x6F, 0xEB)  # the first series' colour in chart.js


# --- the broker and its traffic ------------------------------------------------------------

@pytest.fixture(scope="module")
def dashboard_broker(tmp_path_factory):
    broker = start_broker(tmp_path_factory.mktemp("dashboard") / "data")
    try:
        wait_until(lambda: _healthy(broker), 30, "the broker's /healthz")
        yield broker
    finally:
        broker.stop()


def _healthy(broker) -> bool:
    try:
        return requests.get(f"{broker.http_url}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _amqp(broker) -> pika.BlockingConnection:
    host, port = broker.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, heartbeat=0, blocked_connection_timeout=30))


def _api(broker, method: str, path: str, auth=("guest", "guest"), **kw):
    return requests.request(method, f"{broker.http_url}/api{path}", auth=auth, timeout=10, **kw)


@pytest.fixture(scope="module")
def traffic(dashboard_broker):
    """The objects every view must show, made by real clients; connections stay open."""
    bootstrap = dashboard_broker.addresses["kafka"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(TOPIC, key=f"k{i}".encode(), value=f"order {i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 45000})
    consumer.subscribe([TOPIC])
    consumed, deadline = 0, time.monotonic() + 30
    while consumed < CONSUMED and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            consumed += 1
    assert consumed == CONSUMED, f"consumed {consumed} of {CONSUMED} records"
    # the same number on every partition, so that each has a committed offset and a lag
    consumer.commit(offsets=[TopicPartition(TOPIC, p, CONSUMED // PARTITIONS) for p in range(PARTITIONS)],
                    asynchronous=False)

    connection = _amqp(dashboard_broker)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_bind(QUEUE, "amq.topic", BINDING_KEY)
    channel.confirm_delivery()
    for i in range(QUEUE_MESSAGES):
        channel.basic_publish("amq.topic", "dash.created", f"task {i}".encode(), mandatory=True)
    stop, ready = threading.Event(), threading.Event()
    live = threading.Thread(target=_live_traffic, args=(dashboard_broker, bootstrap, stop, ready), daemon=True)
    live.start()
    assert ready.wait(15), "the live traffic did not start"
    yield {"connection": connection, "bootstrap": bootstrap}
    stop.set()
    live.join(10)
    consumer.close()
    connection.close()


def _live_traffic(broker, bootstrap: str, stop: threading.Event, ready: threading.Event) -> None:
    """About 50 AMQP messages a second through a queue (published, delivered, acked) and
    10 Kafka records a second into a topic, while the tests run: the charts' rates."""
    connection = _amqp(broker)
    channel = connection.channel()
    channel.queue_declare(LIVE_QUEUE, durable=False)
    channel.basic_qos(prefetch_count=100)
    channel.basic_consume(LIVE_QUEUE, lambda ch, method, _props, _body: ch.basic_ack(method.delivery_tag))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    producer.produce(LIVE_TOPIC, b"first")
    producer.flush(10)
    ready.set()
    try:
        next_at = time.monotonic()
        while not stop.is_set():
            for i in range(5):
                channel.basic_publish("", LIVE_QUEUE, b"live message %d" % i)
            producer.produce(LIVE_TOPIC, b"live record")
            producer.poll(0)
            next_at += 0.1
            while (left := next_at - time.monotonic()) > 0:
                connection.process_data_events(time_limit=left)
    finally:
        producer.flush(5)
        connection.close()


# --- the browser ---------------------------------------------------------------------------

class Page:
    """The Chromium window and a few helpers over it."""

    def __init__(self, driver, base: str, shots: Path):
        self.driver, self.base, self.shots = driver, base, shots

    def find(self, testid: str, root=None):
        from selenium.webdriver.common.by import By
        return (root or self.driver).find_element(By.CSS_SELECTOR, f'[data-testid="{testid}"]')

    def find_all(self, testid: str, root=None):
        from selenium.webdriver.common.by import By
        return (root or self.driver).find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]')

    def row(self, testid: str, name: str):
        from selenium.webdriver.common.by import By
        rows = self.driver.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"][data-name="{name}"]')
        return rows[0] if rows else None

    def row_text(self, testid: str, name: str, timeout: float = 10) -> str:
        """The text of a table row, read again if a live refresh replaced the row meanwhile."""
        return self.wait(lambda: (r := self.row(testid, name)) and r.text, timeout, f"{testid} {name} listed")

    def click_in_row(self, testid: str, name: str, button: str, timeout: float = 10) -> None:
        """Click a button of a table row; found again if a live refresh replaced the row first."""
        self.wait(lambda: (r := self.row(testid, name)) and (self.find(button, r).click() or True), timeout,
                  f"{button} of {testid} {name} clicked")

    def wait(self, predicate, timeout: float = 10, what: str = "the page"):
        return wait_until(lambda: _quiet(predicate), timeout, what, interval=0.1)

    def visible(self, testid: str, timeout: float = 10):
        return self.wait(lambda: (e := self.find(testid)).is_displayed() and e, timeout, f"[data-testid={testid}] visible")

    def fill(self, testid: str, text: str, root=None) -> None:
        field = self.find(testid, root)
        field.clear()
        field.send_keys(text)

    def go(self, view: str) -> None:
        """Open a view from the left navigation and wait for its first data."""
        self.find(f"nav-{view}").click()
        self.wait(lambda: self.driver.execute_script(
            "const v = document.getElementById('view'); return v.dataset.view === arguments[0] && v.dataset.loaded === 'true'",
            view), 10, f"the {view} view to load")

    def login(self, user: str, password: str) -> None:
        if not self.driver.current_url.startswith(self.base):
            self.driver.get(self.base + "/")
        self.visible("login-form")
        self.fill("login-user", user)
        self.fill("login-password", password)
        self.find("login-submit").click()

    def confirm(self) -> None:
        self.visible("confirm-dialog")
        self.find("confirm-ok").click()
        self.wait(lambda: not self.find("confirm-dialog").is_displayed(), 5, "the dialog to close")

    def screenshot(self, name: str, *must_show) -> bytes:
        """A full-window PNG saved under pytest's temporary directory, once ``must_show`` are visible."""
        for element in must_show:
            assert element.is_displayed(), f"{element.get_attribute('data-testid')} is not visible for {name}"
        if must_show:  # the last one (the one whose pixels may be checked) wholly in the window
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'nearest'})", must_show[-1])
        path = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot {path}"
        return check_png(path.read_bytes(), self.driver.execute_script("return [window.innerWidth, window.innerHeight]"))

    def pixels_of(self, png: bytes, element):
        """The screenshot's pixels under ``element``."""
        from PIL import Image
        box = self.driver.execute_script(
            "const r = arguments[0].getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]", element)
        image = Image.open(io.BytesIO(png)).convert("RGB")
        return image.crop(tuple(int(v) for v in box))


def _quiet(predicate):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    try:
        return predicate()
    except (NoSuchElementException, StaleElementReferenceException):
        return False


def check_png(data: bytes, window) -> bytes:
    """A real, non-trivial screenshot: a PNG of the window's size with many colours."""
    from PIL import Image
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert len(data) > 20_000, f"a {len(data)}-byte screenshot is too small to show the page"
    image = Image.open(io.BytesIO(data))
    assert image.size == tuple(window), f"screenshot is {image.size}, the window {window}"
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 100, f"only {len(colours)} colours: a blank page?"
    return data


def count_near(image, colour, tolerance: int = 40) -> int:
    return sum(n for n, rgb in image.getcolors(maxcolors=1 << 20)
               if all(abs(a - b) <= tolerance for a, b in zip(rgb, colour)))


@pytest.fixture(scope="module")
def page(dashboard_broker, traffic, tmp_path_factory):
    for path, what in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromedriver")):
        if not (Path(path).exists() or shutil.which(path)):
            pytest.fail(f"the dashboard tests need {what} at {path}: install {PACKAGES}", pytrace=False)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("the dashboard tests need selenium: pip install -e '.[test]'", pytrace=False)
    work = tmp_path_factory.mktemp("chromium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={work / 'profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=str(work / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    shots = tmp_path_factory.mktemp("screenshots")
    print(f"dashboard screenshots: {shots}")
    try:
        yield Page(driver, dashboard_broker.http_url, shots)
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def logged_in(page):
    page.driver.get(page.base + "/dashboard/")
    page.login("guest", "guest")
    page.visible("nav-overview")
    return page


def _errors(page) -> list[str]:
    """The page's own JavaScript errors so far (not the 401s the tests provoke)."""
    return [e["message"] for e in page.driver.get_log("browser")
            if e["level"] == "SEVERE" and "401" not in e["message"] and "403" not in e["message"]]


# --- serving ---------------------------------------------------------------------------------

def test_root_redirects_and_files_are_served(dashboard_broker):
    base = dashboard_broker.http_url
    root = requests.get(base + "/", allow_redirects=False, timeout=5)
    assert root.status_code in (301, 302, 303, 307, 308) and root.headers["location"].endswith("/dashboard/")
    bare = requests.get(base + "/dashboard", allow_redirects=False, timeout=5)
    assert bare.status_code in (301, 302, 303, 307, 308) and bare.headers["location"].endswith("/dashboard/")
    index = requests.get(base + "/dashboard/", timeout=5)
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert 'data-testid="login-form"' in index.text and "app.js" in index.text
    for name, kind in (("app.js", "text/javascript"), ("chart.js", "text/javascript"), ("style.css", "text/css"),
                       ("favicon.svg", "image/svg+xml")):
        response = requests.get(f"{base}/dashboard/{name}", timeout=5)
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind), name
        assert "default-src 'self'" in response.headers["content-security-policy"]
    for bad in ("/dashboard/nothing.js", "/dashboard/../gateway/http.py", "/dashboard/%2e%2e/http.py",
                "/dashboard/.hidden.js", "/dashboard/sub/app.js", "/elsewhere"):
        assert requests.get(base + bad, timeout=5).status_code == 404, bad
    # the API the page talks to still answers as before
    assert _api(dashboard_broker, "GET", "/whoami").json()["name"] == "guest"


# --- logging in ------------------------------------------------------------------------------

def test_wrong_password_shows_the_error(page):
    page.driver.get(page.base + "/")
    page.wait(lambda: page.driver.current_url.endswith("/dashboard/"), 5, "the redirect to /dashboard/")
    page.visible("login-form")  # as RabbitMQ's login: no user name or password filled in for you
    assert page.find("login-user").get_attribute("value") == ""
    assert page.find("login-password").get_attribute("value") == ""
    page.login("guest", "not-the-password")
    error = page.visible("login-error")
    assert "401" in error.text and "Login failed" in error.text, error.text
    assert not page.find("view").is_displayed()
    page.screenshot("login-error", page.find("login-form"), error)
    assert page.driver.execute_script("return sessionStorage.length") == 0


# --- the views -------------------------------------------------------------------------------

def test_overview_shows_totals_and_live_charts(logged_in, dashboard_broker, traffic):
    page = logged_in
    page.go("overview")
    expected = _api(dashboard_broker, "GET", "/overview").json()
    value = lambda testid: page.find(testid).find_element("css selector", ".value").text  # noqa: E731
    for key in ("topics", "queues", "exchanges", "groups"):
        assert value(f"total-{key}") == str(expected["object_totals"][key]), key
    assert int(value("total-messages_ready")) >= QUEUE_MESSAGES
    assert int(value("total-connections")) >= 2  # pika's and the Kafka consumer's at least
    assert page.find("whoami").text.startswith("guest")
    # charts of the last ten minutes from /api/history: drawn, then growing every 5 s
    chart = page.find("chart-message-rates")
    points = page.wait(lambda: int(page.find("chart-message-rates").get_attribute("data-points")) >= 2 and
                       int(page.find("chart-message-rates").get_attribute("data-points")), 15, "two history samples")
    page.wait(lambda: int(page.find("chart-message-rates").get_attribute("data-points")) > points, 12,
              "the charts to refresh with a new sample")
    for testid, series in (("chart-message-rates", "amqp_published_rate"), ("chart-kafka-bytes", "kafka_bytes_in_rate"),
                           ("chart-queue-depth", "queue_messages"), ("chart-consumer-lag", "group_lag"),
                           ("chart-connections", "connections")):
        path = page.find(testid).find_element("css selector", f'path.series[data-series="{series}"]')
        assert path.get_attribute("d").count("L") >= 1, f"{testid} has no line"
    # the live traffic shows in the rates (cards and charts) once a sample has seen it
    page.wait(lambda: float(value("rate-publish").rstrip("k")) > 0 and float(value("rate-ack").rstrip("k")) > 0, 12,
              "non-zero publish and ack rates")
    lag_legend = page.find("chart-consumer-lag-box").find_element("css selector", '[data-series="group_lag"] .val')
    assert lag_legend.text == str(RECORDS - CONSUMED)
    chart = page.find("chart-consumer-lag")
    png = page.screenshot("overview", page.find("overview-totals"), chart)
    drawn = count_near(page.pixels_of(png, chart), BLUE)
    assert drawn >= 20, f"only {drawn} pixels of the lag line in the chart"
    assert not _errors(page)


def test_topics_and_partitions(logged_in, dashboard_broker):
    page = logged_in
    page.go("topics")
    counts = page.wait(lambda: (r := page.row("topic-row", TOPIC)) and (
        page.find("topic-partitions-count", r).text, page.find("topic-messages", r).text), 10, f"topic {TOPIC} read")
    assert counts == (str(PARTITIONS), str(RECORDS))
    assert page.row("topic-row", QUEUE) is not None  # every queue is a topic too
    assert page.row("topic-row", "__consumer_offsets") is None  # internal ones only on request
    page.find("topics-show-internal").click()
    page.wait(lambda: page.row("topic-row", "__consumer_offsets"), 10, "internal topics shown")
    page.click_in_row("topic-row", TOPIC, "topic-link")

    def read():  # in one go, again if a live refresh re-rendered the table while it was read
        rows = page.find_all("partition-row")
        return len(rows) == PARTITIONS and [
            (int(page.find("partition-hw", r).text), page.find("partition-lso", r).text,
             page.find("partition-start", r).text) for r in rows]
    partitions = page.wait(read, 10, "the partition table")
    hws = [hw for hw, _, _ in partitions]
    assert sum(hws) == RECORDS and all(hw == RECORDS // PARTITIONS for hw in hws)
    assert [lso for _, lso, _ in partitions] == [str(hw) for hw in hws]
    assert [start for _, _, start in partitions] == ["0"] * PARTITIONS
    assert page.find("topic-detail-name").text == TOPIC
    page.screenshot("topic-partitions", page.find("partitions-table"))


def test_queues_exchanges_and_bindings(logged_in):
    page = logged_in
    page.go("queues")
    counts = page.wait(lambda: (r := page.row("queue-row", QUEUE)) and tuple(
        page.find(f"queue-{column}", r).text for column in ("ready", "unacked", "consumers")), 10, f"queue {QUEUE} read")
    assert counts == (str(QUEUE_MESSAGES), "0", "0")
    page.wait(lambda: page.screenshot("queues", page.find("queues-table"), page.row("queue-row", QUEUE)), 10,
              "a screenshot of the queues")
    page.go("exchanges")

    def read():  # in one go, again if a live refresh re-rendered the tables while they were read
        names = {r.get_attribute("data-name") for r in page.find_all("exchange-row")}
        bindings = [r.text for r in page.find_all("binding-row")
                    if r.get_attribute("data-source") == "amq.topic" and r.get_attribute("data-destination") == QUEUE]
        return names, bindings
    names, bindings = page.wait(read, 10, "the exchanges and bindings read whole")
    assert {"amq.topic", "amq.direct", "amq.fanout", "amq.headers"} <= names
    assert len(bindings) == 1 and BINDING_KEY in bindings[0]
    page.wait(lambda: page.screenshot("exchanges", page.find("exchanges-table"), page.find("bindings-table")), 10,
              "a screenshot of the exchanges")


def test_groups_with_lag(logged_in):
    page = logged_in
    page.go("groups")
    page.wait(lambda: page.row("group-row", GROUP), 10, f"group {GROUP} listed")

    def read():  # in one go, again if a live refresh re-rendered the table while it was read
        row = page.row("group-row", GROUP)
        offsets = [r for r in page.find_all("group-offset-row") if r.get_attribute("data-topic") == TOPIC]
        return (page.find("group-total-lag", row).text,
                sorted(int(r.get_attribute("data-partition")) for r in offsets),
                sum(int(page.find("group-committed", r).text) for r in offsets),
                sum(int(page.find("group-lag", r).text) for r in offsets))
    total, partitions, committed, lag = page.wait(read, 10, f"group {GROUP} read whole")
    assert total == str(RECORDS - CONSUMED)
    assert partitions == list(range(PARTITIONS))
    assert committed == CONSUMED
    assert lag == RECORDS - CONSUMED

    def shoot():  # again if a live refresh replaced the rows meanwhile
        offsets = [r for r in page.find_all("group-offset-row") if r.get_attribute("data-topic") == TOPIC]
        page.screenshot("groups", page.find("groups-table"), offsets[0])
        return True
    page.wait(shoot, 10, f"a screenshot of group {GROUP}")


def test_connections_and_channels(logged_in):
    page = logged_in
    page.go("connections")

    def read():  # in one go, again if a live refresh re-rendered the tables while they were read
        rows = [(r.get_attribute("data-protocol"), r.text) for r in page.find_all("connection-row")]
        return rows, [r.text for r in page.find_all("channel-row")]
    rows, channels = page.wait(read, 10, "the connections and channels read whole")
    assert any("Pika Python Client Library" in text for protocol, text in rows if protocol == "AMQP 0-9-1"), rows
    assert [text for protocol, text in rows if protocol == "Kafka"], rows
    assert channels and "guest" in channels[0], channels

    def shoot():
        page.screenshot("connections", page.find("connections-table"), page.find("channels-table"))
        return True
    page.wait(shoot, 10, "a screenshot of the connections")


# --- the actions -----------------------------------------------------------------------------

def test_create_and_delete_a_topic(logged_in, traffic):
    page = logged_in
    name = f"ui-topic-{uuid.uuid4().hex[:6]}"
    page.go("topics")
    page.fill("topic-name", name)
    page.fill("topic-partitions", "4")
    page.fill("topic-configs", "retention.ms=3600000")
    page.find("topic-create").click()
    assert f'"{name}" created with 4 partitions' in page.visible("notice").text
    assert "retention.ms=3600000" in page.row_text("topic-row", name)
    admin = AdminClient({"bootstrap.servers": traffic["bootstrap"]})
    metadata = admin.list_topics(name, timeout=10).topics[name]
    assert metadata.error is None and sorted(metadata.partitions) == [0, 1, 2, 3]
    producer = Producer({"bootstrap.servers": traffic["bootstrap"]})
    producer.produce(name, b"into the new topic", partition=3)
    assert producer.flush(10) == 0

    page.click_in_row("topic-row", name, "topic-delete")
    assert name in page.visible("confirm-dialog").text
    page.confirm()
    page.wait(lambda: page.row("topic-row", name) is None, 10, "the topic gone from the list")
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, 10, "the topic deleted")


def test_queue_create_publish_purge_delete(logged_in, dashboard_broker):
    page = logged_in
    name = f"ui-queue-{uuid.uuid4().hex[:6]}"
    page.go("queues")
    page.fill("queue-name", name)
    page.fill("queue-arguments", "x-max-length=1000")
    page.find("queue-create").click()
    page.visible("notice")
    assert "x-max-length: 1000" in page.row_text("queue-row", name)
    connection = _amqp(dashboard_broker)
    try:
        channel = connection.channel()
        declared = channel.queue_declare(name, passive=True)
        assert declared.method.message_count == 0

        # publish a test message from the queue's row: the form comes prefilled with its name
        page.click_in_row("queue-row", name, "queue-publish")
        page.wait(lambda: page.find("publish-routing-key").get_attribute("value") == name, 10, "the publish form")
        page.fill("publish-payload", "hello from the dashboard")
        page.fill("publish-message-id", "dash-msg-1")
        page.fill("publish-content-type", "text/plain")
        page.fill("publish-headers", "source=dashboard\nattempt=1")
        page.find("publish-submit").click()
        result = page.wait(lambda: (r := page.find("publish-result")).get_attribute("data-routed") and r, 10,
                           "the publish result")
        assert result.get_attribute("data-routed") == "true" and "routed" in result.text
        page.screenshot("publish", page.find("publish-form"), result)
        method, properties, body = wait_until(lambda: (got := channel.basic_get(name, auto_ack=True))[0] and got,
                                              10, "the published message")
        assert body == b"hello from the dashboard"
        assert properties.message_id == "dash-msg-1" and properties.content_type == "text/plain"
        assert properties.delivery_mode == 2
        assert properties.headers == {"source": "dashboard", "attempt": 1}

        # purge: messages from pika, then the purge button
        for i in range(5):
            channel.basic_publish("", name, f"to purge {i}".encode())
        page.go("queues")
        page.wait(lambda: page.find("queue-ready", page.row("queue-row", name)).text == "5", 15, "5 ready messages")
        page.click_in_row("queue-row", name, "queue-purge")
        page.confirm()
        page.wait(lambda: page.find("queue-ready", page.row("queue-row", name)).text == "0", 10, "the queue purged")
        assert channel.queue_declare(name, passive=True).method.message_count == 0

        page.click_in_row("queue-row", name, "queue-delete")
        page.confirm()
        page.wait(lambda: page.row("queue-row", name) is None, 10, "the queue gone from the list")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            channel.queue_declare(name, passive=True)
        assert closed.value.reply_code == 404
    finally:
        if connection.is_open:
            connection.close()


def test_forbidden_action_shows_the_api_error(logged_in, dashboard_broker):
    page = logged_in
    created = _api(dashboard_broker, "PUT", "/users/viewer", json={"password": "viewer-pass", "tags": "monitoring"})
    assert created.status_code in (201, 204), created.text
    page.find("logout").click()
    page.login("viewer", "viewer-pass")
    page.visible("nav-queues")
    assert page.find("whoami").text == "viewer · monitoring"
    page.go("queues")  # reading is allowed: the queue is listed
    assert page.row("queue-row", QUEUE) is not None
    page.fill("queue-name", "not-allowed")
    page.find("queue-create").click()
    banner = page.visible("error-banner")
    assert "401" in banner.text and "not authorised to access virtual host" in banner.text, banner.text
    page.screenshot("forbidden", banner)
    assert _api(dashboard_broker, "GET", "/queues/%2F/not-allowed").status_code == 404
    page.find("logout").click()
    page.visible("login-form")
    assert page.driver.execute_script("return sessionStorage.length") == 0
    assert not _errors(page)
