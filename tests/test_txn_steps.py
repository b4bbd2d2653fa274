"""The gateway's running of transaction coordinator steps: what a client is told when a step's
appends are late, and that a prepared transaction is still completed then."""
from __future__ import annotations

from types import SimpleNamespace

from kio.schema.errors import ErrorCode
from twisted.internet import defer, task

from core.transactions import COMPLETE_COMMIT, PREPARE_COMMIT, TXN_TOPIC
from gateway.cluster import txn_markers
from gateway.kafka import txn_steps
from gateway.kafka.waiters import Waiters
from tests.logutil import FakeClock
from tests.test_transactions import Node, markers


def _node_and_ctx(tmp_path):
    node = Node(tmp_path, FakeClock())
    reactor = task.Clock()
    ctx = SimpleNamespace(partition=lambda topic, p: node.logs.logs.get((topic, p)), request_flush=lambda: None,
                          waiters=Waiters(reactor), reactor=reactor)
    return node, ctx, reactor


def _answer(deferred):
    found = []
    deferred.addCallback(found.append)
    return found


def _replicate(node, ctx):
    """The followers catch up: every log's high watermark moves to its end."""
    for plog in node.logs.logs.values():
        plog.advance_high_watermark(plog.next_offset)
    ctx.waiters.notify()


def test_a_late_prepare_answers_a_retriable_error_and_the_commit_still_completes(tmp_path):
    """Before, the client got REQUEST_TIMED_OUT, which librdkafka takes on EndTxn as a failed
    transaction: it aborted, got INVALID_TXN_STATE (the commit was prepared) and went fatal,
    and the prepared commit was never finished."""
    node, ctx, reactor = _node_and_ctx(tmp_path)
    init = node.txns.init_producer("tid", 60000)
    pid, epoch = init.producer_id, init.epoch
    node.run(node.txns.add_partitions("tid", pid, epoch, [("t", 0)]))
    node.produce(pid, epoch, 0, [b"a"])
    for plog in node.logs.logs.values():  # the HW moves only by replication from here on
        plog.replicated = True
    _replicate(node, ctx)

    answered = _answer(txn_steps.run(ctx, node.txns.end_txn("tid", pid, epoch, commit=True)))
    reactor.advance(txn_steps.DURABLE_WAIT_S + 1)  # the prepare record's followers are away
    assert [a.error for a in answered] == [ErrorCode.coordinator_not_available]
    assert node.txns.describe("tid").state == PREPARE_COMMIT
    retried = node.txns.end_txn("tid", pid, epoch, commit=True)  # what librdkafka does with that answer
    assert retried.error == ErrorCode.concurrent_transactions  # retried again, not fatal

    _replicate(node, ctx)  # the followers are back: the rest of the step runs
    _replicate(node, ctx)  # and the Complete record is durable too
    assert node.txns.describe("tid").state == COMPLETE_COMMIT
    assert markers(node.logs.get_log("t", 0)) == [(1, True)]
    assert node.txns.end_txn("tid", pid, epoch, commit=True).error == ErrorCode.none


def test_a_late_step_is_left_to_the_next_leader_after_its_rounds(tmp_path):
    node, ctx, reactor = _node_and_ctx(tmp_path)
    init = node.txns.init_producer("tid", 60000)
    pid, epoch = init.producer_id, init.epoch
    node.run(node.txns.add_partitions("tid", pid, epoch, [("t", 0)]))
    node.logs.get_log(TXN_TOPIC, 0).replicated = True
    answered = _answer(txn_steps.run(ctx, node.txns.end_txn("tid", pid, epoch, commit=True)))
    reactor.advance(txn_steps.DURABLE_WAIT_S + 1)
    assert [a.error for a in answered] == [ErrorCode.coordinator_not_available]
    for _ in range(txn_steps.LATE_ROUNDS + 1):
        reactor.advance(txn_steps.DURABLE_WAIT_S + 1)
    assert len(ctx.waiters) == 0  # nothing parked for good
    assert node.txns.describe("tid").state == PREPARE_COMMIT


def test_markers_left_to_a_new_coordinator_answer_not_coordinator(tmp_path, monkeypatch):
    """The marker sender gives up only once this broker no longer coordinates the id: the client
    is sent to the new coordinator (a retry), which finishes the transaction from its log."""
    node, ctx, _ = _node_and_ctx(tmp_path)
    init = node.txns.init_producer("tid", 60000)
    pid, epoch = init.producer_id, init.epoch
    node.run(node.txns.add_partitions("tid", pid, epoch, [("t", 0)]))
    node.txns.coordinates_all = False  # cluster mode: markers go through the sender
    second = node.txns.end_txn("tid", pid, epoch, commit=True).then()
    assert second.remote is not None
    monkeypatch.setattr(txn_markers, "send", lambda *_a, **_k: defer.fail(
        txn_markers.KafkaClientError("no longer the coordinator of 'tid'")))
    answered = _answer(txn_steps.run(ctx, second))
    assert [a.error for a in answered] == [ErrorCode.not_coordinator]
