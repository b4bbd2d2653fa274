"""The metric names stock dashboards and alerts know, served by a real broker after real traffic.

Every test drives a real ``gateway serve`` process with real clients (pika, confluent-kafka)
over real sockets and reads ``/metrics``, ``/metrics/per-object`` and ``/metrics/detailed`` as
Prometheus would; nothing is mocked. Checked: RabbitMQ's Prometheus plugin names (labels and
values after known traffic), the Kafka exporter's, that every name used by RabbitMQ's published
RabbitMQ-Overview dashboard, by the Kafka Exporter Overview dashboard (Grafana 7589) and by our
own dashboard and alert rules (ops/) appears in a real scrape, and the alert rules themselves.

The rules are checked with Debian's ``promtool`` (package ``prometheus``): ``promtool check
rules`` on the shipped file, and ``promtool test rules`` on input series built from real
scrapes. A second broker started with ``--memory-limit-mb 1`` and a ``--disk-free-limit-mb``
no disk can meet really raises both alarms; its scrape becomes the series the alarm rules must
fire on (and the healthy replication gauges the series they must not). Consumer lag and a
growing unacked count come from scrapes of the main broker after real traffic. This is chosen
over running a Prometheus server against the broker because the rules hold ``for: 1m`` to
``for: 15m``: promtool evaluates them over simulated time in a second, with nothing depending
on scrape or evaluation timers. Only the clock is simulated; every value is the broker's.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pika
import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from compat_tests.conftest import unique_name
from compat_tests.support import wait_until
from tests.brokerproc import ROOT, start_broker

RULES = ROOT / "ops" / "prometheus" / "gateway-alerts.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "gateway-overview.json"
JOB = "gateway"

# Every metric name the queries and variables of RabbitMQ's RabbitMQ-Overview dashboard use
# (rabbitmq-server, deps/rabbitmq_prometheus/docker/grafana/dashboards/RabbitMQ-Overview.json,
# the version joining on rabbitmq_identity_info with on(instance, job)).
RABBITMQ_OVERVIEW_NAMES = [
    "rabbitmq_identity_info", "rabbitmq_build_info",
    "rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked", "rabbitmq_queues",
    "rabbitmq_connections", "rabbitmq_channels", "rabbitmq_consumers", "rabbitmq_global_publishers",
    "rabbitmq_resident_memory_limit_bytes", "rabbitmq_process_resident_memory_bytes",
    "rabbitmq_disk_space_available_bytes", "rabbitmq_process_max_fds", "rabbitmq_process_open_fds",
    "rabbitmq_process_max_tcp_sockets", "rabbitmq_process_open_tcp_sockets",
    "rabbitmq_global_messages_received_total", "rabbitmq_global_messages_received_confirm_total",
    "rabbitmq_global_messages_confirmed_total", "rabbitmq_global_messages_routed_total",
    "rabbitmq_global_messages_unroutable_dropped_total", "rabbitmq_global_messages_unroutable_returned_total",
    "rabbitmq_global_messages_delivered_consume_auto_ack_total",
    "rabbitmq_global_messages_delivered_consume_manual_ack_total",
    "rabbitmq_global_messages_delivered_get_auto_ack_total", "rabbitmq_global_messages_delivered_get_manual_ack_total",
    "rabbitmq_global_messages_redelivered_total", "rabbitmq_global_messages_acknowledged_total",
    "rabbitmq_global_messages_get_empty_total",
    "rabbitmq_queues_declared_total", "rabbitmq_queues_created_total", "rabbitmq_queues_deleted_total",
    "rabbitmq_channels_opened_total", "rabbitmq_channels_closed_total",
    "rabbitmq_connections_opened_total", "rabbitmq_connections_closed_total",
]
# The Kafka Exporter Overview dashboard (Grafana id 7589, kafka_exporter_overview.json in
# danielqsj/kafka_exporter): its panels and its job/instance/topic variables.
KAFKA_EXPORTER_OVERVIEW_NAMES = [
    "kafka_topic_partition_current_offset", "kafka_consumergroup_lag", "kafka_consumergroup_current_offset",
    "kafka_topic_partitions",
]


# --- scraping -------------------------------------------------------------------------------

def scrape(broker, path: str = "/metrics") -> str:
    r = requests.get(broker.http_url + path, timeout=10)
    assert r.status_code == 200, (path, r.status_code, r.text)
    assert r.headers["content-type"].startswith("text/plain")
    return r.text


def samples(text: str) -> list[tuple[str, dict, float]]:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def value(text: str, name: str, **labels) -> float:
    found = [v for n, ls, v in samples(text) if n == name and all(ls.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, f"{len(found)} samples of {name} {labels}"
    return found[0]


def scrape_when(broker, predicate, timeout: float, what: str, path: str = "/metrics") -> str:
    """The first scrape for which ``predicate(text)`` holds."""
    texts = []

    def check():
        texts.append(scrape(broker, path))
        return predicate(texts[-1])
    wait_until(check, timeout, what, interval=0.1)
    return texts[-1]


def names_in(text: str) -> set[str]:
    return {n for n, _l, _v in samples(text)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label names and template variables left out)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"label_values\(([^,)]*)(,[^)]*)?\)", r"\1", expr)
    return set(re.findall(r"(?<![\w$])((?:rabbitmq|kafka|gateway)_\w+)", expr))


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: install Debian's `prometheus` package (apt-get install prometheus)")
    return path


# --- the rules file, read without a YAML library ---------------------------------------------

def read_rules(path: Path = RULES) -> list[dict]:
    """Alert rules as {"alert", "expr", "labels", "annotations"}; reads the subset of YAML the
    shipped file uses (one-line values, quoted or not, and ``>-`` folded blocks)."""
    rules: list[dict] = []
    current = target = folding = None
    fold_indent = 0
    for raw in path.read_text().splitlines():
        text = raw.strip()
        indent = len(raw) - len(raw.lstrip())
        if folding is not None:
            if text and indent > fold_indent:
                target[folding] = (target[folding] + " " + text).strip()
                continue
            folding = None
        if not text or text.startswith("#"):
            continue
        if text.startswith("- alert:"):
            current = {"alert": text.split(":", 1)[1].strip(), "labels": {}, "annotations": {}}
            rules.append(current)
            continue
        if current is None:
            continue
        key, _, val = text.partition(":")
        val = val.strip()
        if key in ("expr", "severity", "summary", "description"):
            target = current if key == "expr" else current["labels"] if key == "severity" else current["annotations"]
            if val in (">-", ">"):
                target[key], folding, fold_indent = "", key, indent
            else:
                target[key] = val[1:-1] if val.startswith('"') else val
    return rules


def expected_alert(rule: dict, labels: dict, value: float) -> dict:
    """The alert promtool should report: the rule's labels and its annotations rendered."""
    def render(template: str) -> str:
        template = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
        return template.replace("{{ $value }}", f"{value:g}")
    return {"exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {k: render(v) for k, v in rule["annotations"].items()}}


def series_of(text: str, names: set[str], instance: str) -> dict[str, float]:
    """The scrape's samples of ``names`` as promtool series strings, with instance and job."""
    out = {}
    for name, labels, v in samples(text):
        if name in names:
            labels = {**labels, "instance": instance, "job": JOB}
            inner = ",".join(f'{k}="{w}"' for k, w in sorted(labels.items()))
            out[f"{name}{{{inner}}}"] = v
    return out


def run_promtool_test(tmp_path: Path, tests: list[dict]) -> None:
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}
    path = tmp_path / "rules-test.json"  # JSON is YAML: promtool reads it
    path.write_text(json.dumps(doc, indent=1))
    r = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# --- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = start_broker(tmp_path_factory.mktemp("metrics-compat") / "data")
    try:
        yield proc
    finally:
        proc.stop()


def _amqp(broker):
    host, port = broker.address("amqp")
    return pika.BlockingConnection(pika.ConnectionParameters(host, port, credentials=pika.PlainCredentials(
        "guest", "guest")))


def _bootstrap(broker) -> str:
    return "%s:%d" % broker.address("kafka")


@pytest.fixture(scope="module")
def traffic(broker):
    """Known traffic for the whole module: 5 messages in a queue without consumers; a Kafka
    topic of 2 partitions with 15 records each and a group committed at 5 and 15 (lag 10, 0)."""
    queue, topic, group = unique_name("ready-q"), unique_name("lag-t"), unique_name("lag-g")
    conn = _amqp(broker)
    ch = conn.channel()
    ch.queue_declare(queue)
    for i in range(5):
        ch.basic_publish("", queue, b"m%d" % i)
    conn.close()
    admin = AdminClient({"bootstrap.servers": _bootstrap(broker)})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(15)
    producer = Producer({"bootstrap.servers": _bootstrap(broker)})
    for i in range(30):
        producer.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": _bootstrap(broker), "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 15)], asynchronous=False)
    consumer.close()
    wait_until(lambda: value(scrape(broker, "/metrics/per-object"), "rabbitmq_queue_messages_ready", vhost="/",
                             queue=queue) == 5, 10, "5 ready messages")
    return {"queue": queue, "topic": topic, "group": group}


# --- RabbitMQ's names -----------------------------------------------------------------------

def test_queue_metrics_per_object_and_aggregated(broker, traffic):
    per_object = scrape(broker, "/metrics/per-object")
    assert value(per_object, "rabbitmq_queue_messages_ready", vhost="/", queue=traffic["queue"]) == 5
    assert value(per_object, "rabbitmq_queue_messages_unacked", vhost="/", queue=traffic["queue"]) == 0
    assert value(per_object, "rabbitmq_queue_messages", vhost="/", queue=traffic["queue"]) == 5
    assert value(per_object, "rabbitmq_queue_consumers", vhost="/", queue=traffic["queue"]) == 0
    assert value(per_object, "rabbitmq_queue_messages_published_total", vhost="/", queue=traffic["queue"]) == 5
    aggregated = scrape(broker)
    for name in ("rabbitmq_queue_messages_ready", "rabbitmq_queue_messages_unacked", "rabbitmq_queue_messages",
                 "rabbitmq_queue_consumers"):
        rows = [(ls, v) for n, ls, v in samples(aggregated) if n == name]
        assert len(rows) == 1 and rows[0][0] == {}, (name, rows)  # one unlabelled sum, as RabbitMQ's default
    assert value(aggregated, "rabbitmq_queue_messages_ready") >= 5
    assert value(aggregated, "rabbitmq_queues") >= 1


def test_identity_and_build_info(broker, traffic):
    text = scrape(broker)
    [(labels, v)] = [(ls, v) for n, ls, v in samples(text) if n == "rabbitmq_identity_info"]
    assert v == 1 and labels["rabbitmq_node"] == "gateway@0" and labels["rabbitmq_cluster"] == "gateway"
    assert labels["rabbitmq_cluster_permanent_id"] and labels["rabbitmq_endpoint"] == "metrics"
    api = requests.get(broker.http_url + "/api/overview", auth=("guest", "guest"), timeout=10).json()
    assert labels["rabbitmq_node"] == api["node"] and labels["rabbitmq_cluster"] == api["cluster_name"]
    [(build, v)] = [(ls, v) for n, ls, v in samples(text) if n == "rabbitmq_build_info"]
    assert v == 1 and build["rabbitmq_version"] and build["prometheus_client_version"] and build["python_version"]
    for name in ("rabbitmq_resident_memory_limit_bytes", "rabbitmq_process_resident_memory_bytes",
                 "rabbitmq_disk_space_available_bytes", "rabbitmq_disk_space_available_limit_bytes",
                 "rabbitmq_process_open_fds", "rabbitmq_process_max_fds"):
        assert value(text, name) > 0, name
    assert value(text, "rabbitmq_disk_space_available_limit_bytes") == 50 << 20  # the default --disk-free-limit-mb
    for name in ("rabbitmq_alarms_memory_used_watermark", "rabbitmq_alarms_free_disk_space_watermark",
                 "rabbitmq_alarms_file_descriptor_limit"):
        assert value(text, name) == 0, name


GLOBAL = ("received", "received_confirm", "routed", "unroutable_dropped", "unroutable_returned", "confirmed")
BY_TYPE = ("delivered", "delivered_consume_manual_ack", "delivered_consume_auto_ack", "delivered_get_manual_ack",
           "delivered_get_auto_ack", "get_empty", "redelivered", "acknowledged")
CHURN = ("connections_opened", "connections_closed", "channels_opened", "channels_closed", "queues_declared",
         "queues_created", "queues_deleted")


def _counters(broker) -> dict[str, float]:
    text = scrape(broker)
    out = {name: value(text, f"rabbitmq_global_messages_{name}_total", protocol="amqp091") for name in GLOBAL}
    out.update({name: value(text, f"rabbitmq_global_messages_{name}_total", protocol="amqp091",
                            queue_type="rabbit_classic_queue") for name in BY_TYPE})
    out.update({name: value(text, f"rabbitmq_{name}_total") for name in CHURN})
    return out


def test_global_counters_count_amqp_traffic(broker, traffic):
    wait_until(lambda: value(scrape(broker), "rabbitmq_connections") == 0, 10, "earlier connections gone")
    before = _counters(broker)
    name = unique_name("counted-q")
    conn = _amqp(broker)
    confirming = conn.channel()
    confirming.queue_declare(name)
    confirming.confirm_delivery()
    for i in range(3):
        confirming.basic_publish("", name, b"c%d" % i)  # waits for each confirm
    plain = conn.channel()
    plain.basic_publish("", "nowhere-" + name, b"dropped")
    plain.basic_publish("", "nowhere-" + name, b"returned", mandatory=True)
    method, _props, _body = plain.basic_get(name, auto_ack=False)
    plain.basic_ack(method.delivery_tag)
    assert plain.basic_get(name, auto_ack=True)[0] is not None
    text = scrape(broker)
    assert value(text, "rabbitmq_global_publishers", protocol="amqp091") >= 2
    assert value(text, "rabbitmq_channels") == 2 and value(text, "rabbitmq_connections") == 1
    seen = []
    for method, _props, _body in plain.consume(name, inactivity_timeout=10):
        assert method is not None, "a delivery"
        seen.append(method.redelivered)
        if not method.redelivered:
            plain.basic_nack(method.delivery_tag, requeue=True)
        else:
            plain.basic_ack(method.delivery_tag)
            break
    plain.cancel()
    assert seen == [False, True]
    assert plain.basic_get(name, auto_ack=False) == (None, None, None)
    confirming.basic_publish("", name, b"auto")
    for method, _props, _body in plain.consume(name, auto_ack=True, inactivity_timeout=10):
        assert method is not None
        break
    plain.cancel()
    plain.queue_delete(name)
    conn.close()
    wait_until(lambda: value(scrape(broker), "rabbitmq_connections") == 0, 10, "the connection closed")
    after = _counters(broker)
    delta = {k: after[k] - before[k] for k in before}
    assert delta == {
        "received": 6, "received_confirm": 4, "routed": 4, "unroutable_dropped": 1, "unroutable_returned": 1,
        "confirmed": 4, "delivered": 5, "delivered_consume_manual_ack": 2, "delivered_consume_auto_ack": 1,
        "delivered_get_manual_ack": 1, "delivered_get_auto_ack": 1, "get_empty": 1, "redelivered": 1,
        "acknowledged": 2, "connections_opened": 1, "connections_closed": 1, "channels_opened": 2,
        "channels_closed": 2, "queues_declared": 1, "queues_created": 1, "queues_deleted": 1}


def test_detailed_endpoint(broker, traffic):
    queue = traffic["queue"]
    exchange = unique_name("detailed-x")
    conn = _amqp(broker)
    ch = conn.channel()
    ch.exchange_declare(exchange, "topic")
    ch.queue_bind(queue, exchange, "a.#")
    ch.queue_bind(queue, exchange, "b.#")
    text = scrape(broker, "/metrics/detailed?family=queue_coarse_metrics&vhost=%2F")
    assert value(text, "rabbitmq_detailed_queue_messages_ready", vhost="/", queue=queue) == 5
    assert value(text, "rabbitmq_detailed_queue_messages", vhost="/", queue=queue) == 5
    assert value(text, "rabbitmq_identity_info", rabbitmq_endpoint="detailed") == 1
    assert "rabbitmq_detailed_queue_consumers" not in names_in(text)  # only the families asked for
    assert "rabbitmq_detailed_queue_messages_ready" not in names_in(
        scrape(broker, "/metrics/detailed?family=queue_coarse_metrics&vhost=no-such-vhost"))
    assert names_in(scrape(broker, "/metrics/detailed")) == {"rabbitmq_identity_info"}
    text = scrape(broker, "/metrics/detailed?family=queue_consumer_count&family=vhost_status"
                          "&family=exchange_bindings&family=exchange_names")
    assert value(text, "rabbitmq_detailed_queue_consumers", vhost="/", queue=queue) == 0
    assert value(text, "rabbitmq_cluster_vhost_status", vhost="/") == 1
    assert value(text, "rabbitmq_cluster_exchange_name", vhost="/", exchange=exchange, type="topic") == 1
    assert value(text, "rabbitmq_cluster_exchange_bindings", vhost="/", exchange=exchange, type="topic") == 2
    r = requests.get(broker.http_url + "/metrics/detailed?family=no_such_family", timeout=10)
    assert r.status_code == 400 and "queue_coarse_metrics" in r.text
    ch.exchange_delete(exchange)
    conn.close()


# --- the Kafka exporter's names ----------------------------------------------------------

def test_kafka_exporter_names_after_real_traffic(broker, traffic):
    topic, group = traffic["topic"], traffic["group"]
    live_group = unique_name("live-g")
    consumer = Consumer({"bootstrap.servers": _bootstrap(broker), "group.id": live_group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        wait_until(lambda: consumer.poll(0.2) is not None or consumer.assignment(), 30, "a group assignment")
        text = scrape_when(broker, lambda t: _has(t, "kafka_consumergroup_members", consumergroup=live_group), 10,
                           "the live group in /metrics")
        assert value(text, "kafka_consumergroup_members", consumergroup=live_group) == 1
    finally:
        consumer.close()
    assert value(text, "kafka_brokers") == 1
    assert value(text, "kafka_broker_info", id="0", address=_bootstrap(broker)) == 1
    assert value(text, "kafka_topic_partitions", topic=topic) == 2
    for p in ("0", "1"):
        assert value(text, "kafka_topic_partition_current_offset", topic=topic, partition=p) == 15
        assert value(text, "kafka_topic_partition_oldest_offset", topic=topic, partition=p) == 0
        assert value(text, "kafka_topic_partition_in_sync_replica", topic=topic, partition=p) == 1
        assert value(text, "kafka_topic_partition_replicas", topic=topic, partition=p) == 1
        assert value(text, "kafka_topic_partition_leader", topic=topic, partition=p) == 0
        assert value(text, "kafka_topic_partition_leader_is_preferred", topic=topic, partition=p) == 1
        assert value(text, "kafka_topic_partition_under_replicated_partition", topic=topic, partition=p) == 0
    assert value(text, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="0") == 5
    assert value(text, "kafka_consumergroup_current_offset", consumergroup=group, topic=topic, partition="1") == 15
    assert value(text, "kafka_consumergroup_current_offset_sum", consumergroup=group, topic=topic) == 20
    assert value(text, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 10
    assert value(text, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="1") == 0
    assert value(text, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 10
    assert value(text, "gateway_under_replicated_partitions") == 0
    assert value(text, "gateway_offline_partitions") == 0  # one node leads everything


def _has(text: str, name: str, **labels) -> bool:
    return any(n == name and all(ls.get(k) == v for k, v in labels.items()) for n, ls, _v in samples(text))


# --- dashboards -------------------------------------------------------------------------------

def _dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in doc["templating"]["list"] if isinstance(v.get("query"), dict)]
    assert len(exprs) > 20
    return exprs


def test_stock_dashboards_names_appear_in_a_real_scrape(broker, traffic):
    scraped = names_in(scrape(broker))
    assert sorted(set(RABBITMQ_OVERVIEW_NAMES) - scraped) == []
    assert sorted(set(KAFKA_EXPORTER_OVERVIEW_NAMES) - scraped) == []


def test_our_dashboard_and_rules_use_names_a_real_scrape_has(broker, traffic, tmp_path):
    scraped = names_in(scrape(broker))
    used = set().union(*(metric_names(e) for e in _dashboard_exprs()))
    assert {"rabbitmq_identity_info", "kafka_consumergroup_lag", "gateway_fsync_seconds_bucket"} <= used
    assert sorted(used - scraped) == []
    rules = read_rules()
    assert {r["alert"] for r in rules} >= {"GatewayMemoryAlarm", "GatewayDiskAlarm", "GatewayUnderReplicatedPartitions",
                                           "GatewayOfflinePartitions", "GatewayConsumerGroupLag",
                                           "GatewayUnackedMessagesGrowing"}
    in_rules = set().union(*(metric_names(r["expr"]) for r in rules))
    assert sorted(in_rules - scraped) == []
    # every dashboard query is valid PromQL: promtool parses them as recording rules
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(_dashboard_exprs()):
        expr = expr.replace("$rabbitmq_cluster", "gateway").replace("$instance", ".*")
        if expr.startswith("label_values("):
            expr = re.sub(r"label_values\(([^,]*),.*\)$", r"\1", expr)
        lines += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(expr)}"]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text("\n".join(lines) + "\n")
    r = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_scrapes_pass_promtool_lint(broker, traffic):
    """``promtool check metrics``: Prometheus' own lint of names, types and HELP texts. The only
    findings allowed are the Kafka exporter's two ``*_sum`` gauges, whose names dashboards expect."""
    allowed = {f'{name} non-histogram and non-summary metrics should not have "_sum" suffix'
               for name in ("kafka_consumergroup_current_offset_sum", "kafka_consumergroup_lag_sum")}
    for path in ("/metrics", "/metrics/per-object", "/metrics/detailed?family=queue_coarse_metrics"):
        r = subprocess.run([promtool(), "check", "metrics"], input=scrape(broker, path), capture_output=True,
                           text=True, timeout=60)
        findings = {line.strip() for line in (r.stdout + r.stderr).splitlines() if line.strip()}
        assert findings <= allowed, (path, findings - allowed)


# --- alert rules -----------------------------------------------------------------------------

def test_promtool_check_rules():
    r = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_alarm_rules_fire_on_a_real_alarm(tmp_path):
    rules = {r["alert"]: r for r in read_rules()}
    alarmed = start_broker(tmp_path / "data", "--memory-limit-mb", "1", "--disk-free-limit-mb", str(1 << 30))
    try:
        text = scrape_when(alarmed, lambda t: value(t, "rabbitmq_alarms_memory_used_watermark") == 1
                           and value(t, "rabbitmq_alarms_free_disk_space_watermark") == 1, 15, "both alarms raised")
    finally:
        alarmed.stop()
    instance = alarmed.addresses["http"]
    names = set().union(*(metric_names(rules[a]["expr"]) for a in (
        "GatewayMemoryAlarm", "GatewayDiskAlarm", "GatewayFileDescriptorsExhausted",
        "GatewayUnderReplicatedPartitions", "GatewayOfflinePartitions")))
    series = series_of(text, names, instance)
    assert len(series) == len(names)
    where = {"instance": instance, "job": JOB}
    run_promtool_test(tmp_path, [{
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v:g}x20"} for s, v in series.items()],
        "alert_rule_test": [
            {"eval_time": "30s", "alertname": "GatewayMemoryAlarm", "exp_alerts": []},  # not yet: for 1m
            {"eval_time": "5m", "alertname": "GatewayMemoryAlarm",
             "exp_alerts": [expected_alert(rules["GatewayMemoryAlarm"], where, 1)]},
            {"eval_time": "5m", "alertname": "GatewayDiskAlarm",
             "exp_alerts": [expected_alert(rules["GatewayDiskAlarm"], where, 1)]},
            {"eval_time": "10m", "alertname": "GatewayFileDescriptorsExhausted", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "GatewayUnderReplicatedPartitions", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "GatewayOfflinePartitions", "exp_alerts": []},
        ]}])


def test_lag_and_unacked_rules_fire_on_real_scrapes(broker, traffic, tmp_path):
    rules = {r["alert"]: r for r in read_rules()}
    instance = broker.addresses["http"]
    # consumer lag: 1500 records produced, the group committed at 0
    topic, group = unique_name("lagging-t"), unique_name("lagging-g")
    producer = Producer({"bootstrap.servers": _bootstrap(broker), "linger.ms": 5})
    for i in range(1500):
        producer.produce(topic, value=b"r%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": _bootstrap(broker), "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    consumer.close()
    lag_text = scrape(broker)
    assert value(lag_text, "kafka_consumergroup_lag_sum", consumergroup=group, topic=topic) == 1500
    lag_series = series_of(lag_text, {"kafka_consumergroup_lag_sum"}, instance)
    # unacked deliveries growing: a consumer that never acknowledges, four scrapes 400 apart
    queue = unique_name("unacked-q")
    conn = _amqp(broker)
    publisher, holder = conn.channel(), conn.channel()
    publisher.queue_declare(queue)
    holder.basic_consume(queue, lambda *args: None, auto_ack=False)  # no prefetch limit, never acks
    unacked_scrapes = []
    for batch in range(1, 5):
        for i in range(400):
            publisher.basic_publish("", queue, b"u")
        wait_until(lambda: conn.process_data_events(0.05) or value(
            scrape(broker, "/metrics/per-object"), "rabbitmq_queue_messages_unacked", vhost="/", queue=queue)
            == 400 * batch, 20, f"{400 * batch} unacked")
        unacked_scrapes.append(value(scrape(broker), "rabbitmq_queue_messages_unacked"))
    conn.close()
    assert unacked_scrapes == sorted(unacked_scrapes) and unacked_scrapes[-1] >= 1600
    # each scrape's value held for 6 minutes, the last one for 20: more than 1000 from the third
    # scrape on (minute 12) and still growing over the last 15 minutes until minute 33
    unacked_values = " ".join(" ".join([f"{v:g}"] * 6) for v in unacked_scrapes[:-1]) + \
        " " + " ".join([f"{unacked_scrapes[-1]:g}"] * 20)
    where = {"instance": instance, "job": JOB}
    lag_rule = rules["GatewayConsumerGroupLag"]
    run_promtool_test(tmp_path, [{
        "interval": "1m",
        "input_series": [{"series": s, "values": f"{v:g}x40"} for s, v in lag_series.items()],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "GatewayConsumerGroupLag", "exp_alerts": []},  # for 10m
            {"eval_time": "12m", "alertname": "GatewayConsumerGroupLag",
             "exp_alerts": [expected_alert(lag_rule, {"job": JOB, "consumergroup": group, "topic": topic}, 1500)]},
        ]}, {
        "interval": "1m",
        "input_series": [{"series": f'rabbitmq_queue_messages_unacked{{instance="{instance}",job="{JOB}"}}',
                          "values": unacked_values}],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "GatewayUnackedMessagesGrowing", "exp_alerts": []},  # for 15m
            {"eval_time": "30m", "alertname": "GatewayUnackedMessagesGrowing",
             "exp_alerts": [expected_alert(rules["GatewayUnackedMessagesGrowing"], where, unacked_scrapes[-1])]},
            {"eval_time": "38m", "alertname": "GatewayUnackedMessagesGrowing", "exp_alerts": []},  # stopped growing
        ]}])
