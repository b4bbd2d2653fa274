"""RabbitMQ's Java AMQP 0-9-1 client (``com.rabbitmq:amqp-client`` 5.x from Maven Central), driven by
compat_tests/java/RabbitAmqpClient.java: publisher confirms (waitForConfirmsOrDie and a
ConfirmListener), a manual-ack consumer under basicQos, basic.get, nack/reject with requeue,
direct/topic/fanout/headers routing and basic.return, queue arguments with dead-lettering,
transactions and a clean close.

One run of the Java program per target (about 5 s); each test below checks one stage of its
JSON-lines report, with RabbitMQ's answers as the expectations.
"""
from __future__ import annotations


import pytest

from compat_tests import tools
from compat_tests.java_steps import assert_completed, run_steps, stage

from .helpers import unique

AMQP_CLIENT = "com.rabbitmq:amqp-client:5.37.1"
JAVA_TIMEOUT = 120


def amqp_client_classpath() -> list[str]:
    return tools.maven_classpath("rabbitmq-amqp-client", [AMQP_CLIENT])


@pytest.fixture(scope="module")
def run(amqp_broker):
    argv, main = tools.compile_java("RabbitAmqpClient.java", amqp_client_classpath(), helpers=("JsonLines.java",))
    return run_steps(argv + [main, amqp_broker.host, str(amqp_broker.port), unique("java")], JAVA_TIMEOUT,
                     broker=amqp_broker)


def test_program_completed(run):
    assert_completed(run)


def test_connection_tune_and_capabilities(run):
    connected = stage(run, "connected")
    assert connected["frame_max"] == 131072 and connected["channel_max"] == 2047 and connected["heartbeat"] == 10
    # the capabilities the client looks for before using each extension
    assert {"publisher_confirms", "basic.nack", "consumer_cancel_notify", "exchange_exchange_bindings",
            "connection.blocked", "authentication_failure_close"} <= set(connected["capabilities"])


def test_publisher_confirms_sync_and_async(run):
    confirms = stage(run, "confirms")
    assert confirms["first_async_seq"] == 101  # sequence numbers count on across the two ways of waiting
    assert (confirms["settled"], confirms["acked"], confirms["nacked"]) == (True, 200, 0)
    assert confirms["queue_depth"] == 300


def test_manual_ack_consumer_keeps_to_prefetch(run):
    prefetch = stage(run, "prefetch")
    assert prefetch["first_window"] == 10 and prefetch["max_unacked"] == 10
    assert (prefetch["received"], prefetch["in_order"], prefetch["left"]) == (300, True, 0)


def test_basic_get(run):
    get = stage(run, "get")
    assert get["bodies"] == ["g0", "g1", "g2"] and get["counts"] == [2, 1, 0] and get["empty"] is True
    assert (get["message_id"], get["content_type"], get["header_n"]) == ("id-0", "text/plain", "2")
    assert get["exchange"] == "" and get["routing_key"].endswith("-get")


def test_nack_and_reject_requeue_set_redelivered(run):
    requeue = stage(run, "requeue")
    assert requeue["get_redelivered"] == [False, True]
    assert requeue["consume_redelivered"] == [True, True]
    assert requeue["bodies"] == ["n0"] * 4
    assert requeue["rejected_dropped"] is True


def test_exchange_types_route_to_queues(run):
    routing = stage(run, "routing")
    assert routing["queues"] == {
        "d-red": ["red"], "d-green": ["green"], "d-red2": ["red"],
        "t-star": ["a.x", "a.b"], "t-hash": ["a.b", "c.b"],
        "f-1": ["fan"], "f-2": ["fan"],
        "h-all": ["h0"], "h-any": ["h0", "h1", "h2"],
    }
    assert routing["returned"] == "312 NO_ROUTE nobody"
    assert routing["deleted_exchange_gone"] is True


def test_queue_arguments_and_dead_lettering(run):
    arguments = stage(run, "arguments")
    assert arguments["capped_depth"] == 3 and arguments["capped_kept"] == ["c2", "c3", "c4"]
    deaths = sorted(arguments["deaths"], key=lambda d: d["body"])
    assert [(d["body"], d["reason"], d["queue"].rpartition("-")[2], d["count"], d["first_death_reason"])
            for d in deaths] == [("c0", "maxlen", "capped", 1, "maxlen"), ("c1", "maxlen", "capped", 1, "maxlen"),
                                 ("expires", "expired", "ttl", 1, "expired")]
    assert arguments["ttl_queue_empty"] is True
    assert arguments["rejected"] == {"body": "rejected", "reason": "rejected"}
    assert arguments["missing_queue_code"] == 404 and arguments["channel_open_after"] is False


def test_transactions(run):
    tx = stage(run, "tx")
    assert (tx["after_rollback"], tx["after_commit"]) == (0, 2)
    assert (tx["first_get"], tx["after_ack_rollback"], tx["redelivered"], tx["acked_body"]) == ("t2", 2, True, "t2")
    assert tx["after_ack_commit"] == 1 and tx["rest"] == ["t3"]


def test_clean_close(run):
    close = stage(run, "close")
    assert close == {"step": "close", "channel_closed": True, "connection_open": False, "by_application": True,
                     "hard_error": True, "reply_code": 200}
