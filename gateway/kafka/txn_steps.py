"""Transactions at the gateway: running the coordinator's Steps, and KIP-890's checks.

:func:`run` carries out a core.transactions Step: wait until its appends are durable (under
the high watermark), send its markers to other brokers, then run its next phase.

KIP-890 at a partition leader: a transaction's first batch on a partition (and, for a
transaction version 2 producer, its TxnOffsetCommit) is checked with the transaction's
coordinator before anything is written.

A version 1 producer added the partition itself (AddPartitionsToTxn), so the coordinator is
only asked whether it did (verify only); a version 2 producer never sends AddPartitionsToTxn,
so the coordinator adds the partition now. Either way a batch cannot open a transaction on a
partition that its coordinator would never send a marker to: the hanging transaction that
holds back every read_committed consumer of the partition.

On one broker, and in a cluster where this broker coordinates the id, the coordinator is
asked directly; otherwise AddPartitionsToTxn v5 (the brokers' batched form) goes to the
leader of the id's ``__transaction_state`` partition over the inter-broker links.
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from twisted.internet import defer

from core.transactions import TXN_TOPIC, Step
from gateway.cluster import txn_markers

log = logging.getLogger(__name__)

DURABLE_WAIT_S = 30.0
LATE_ROUNDS = 20  # a step's rest waits this many DURABLE_WAIT_S more after its answer timed out


def run(ctx, step: Step, timed_out: ErrorCode = ErrorCode.coordinator_not_available) -> defer.Deferred:
    """Fires with the last Step once every phase's appends are durable.

    Cluster mode: a step's markers for partitions led elsewhere are sent (WriteTxnMarkers)
    and answered before its next phase.

    The errors are Kafka's coordinator's, which clients retry: an append not durable in time
    answers ``timed_out`` (COORDINATOR_NOT_AVAILABLE; librdkafka takes REQUEST_TIMED_OUT on
    EndTxn as a failed transaction and aborts it, while the commit goes on here), and markers
    left to a new coordinator answer NOT_COORDINATOR. A step whose record is already in the log
    is not dropped by a timeout: its next phase runs once the record is durable, so a prepared
    transaction is completed and the client's retry finds it so."""
    if step.remote is not None:
        remote, step.remote = step.remote, None

        def unsent(failure):  # the sender gives up only once this broker stopped coordinating the id
            log.warning("transaction markers left to the new coordinator: %s", failure.getErrorMessage())
            return Step(ErrorCode.not_coordinator)
        return txn_markers.send(ctx, remote).addCallbacks(lambda _: run(ctx, step), unsent)
    if not step.durable:
        return run(ctx, step.then()) if step.then else defer.succeed(step)
    logs = [(ctx.partition(topic, partition), last) for topic, partition, last in step.durable]
    logs = [(plog, last) for plog, last in logs if plog is not None]
    ctx.request_flush()
    ctx.waiters.notify()  # a marker may have moved a last stable offset: parked read_committed fetches look again

    def written() -> bool:
        return all(plog.high_watermark > last for plog, last in logs)

    def durable(in_time: bool):
        if not in_time:
            log.warning("transaction step not durable within %.0f s: answered %s", DURABLE_WAIT_S, timed_out.name)
            if step.then:
                _go_on_when_durable(ctx, step, written)
            return Step(timed_out)
        return run(ctx, step.then()) if step.then else step
    return ctx.waiters.wait(written, DURABLE_WAIT_S).addCallback(durable)


def _go_on_when_durable(ctx, step: Step, written, rounds: int = LATE_ROUNDS) -> None:
    """The rest of a step whose answer timed out, once its appends are durable (the core's next
    phase checks that this broker still coordinates the id). Given up after ``rounds`` waits (ten
    minutes), so nothing stays parked for good; a prepared transaction left then is finished by
    whichever broker next loads the log (a new leader, or this one restarting)."""
    def again(in_time: bool):
        if in_time:
            return run(ctx, step.then()).addErrback(lambda f: log.error("late transaction step failed: %s",
                                                                          f.getErrorMessage()))
        if rounds > 1:
            _go_on_when_durable(ctx, step, written, rounds - 1)
        else:
            log.warning("transaction step still not durable after %d waits: left to the log's next leader",
                        LATE_ROUNDS)
    ctx.waiters.wait(written, DURABLE_WAIT_S).addCallback(again)

ADD_PARTITIONS_TO_TXN = 24
BROKER_VERSION = 5  # v4+ is the brokers' form: many transactions per request, verify_only per transaction
TIMEOUT_S = 10.0
# the coordinator could not answer now: the producer should retry the batch (every Produce
# version knows NOT_ENOUGH_REPLICAS as retriable, which is what Kafka answers too)
_RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
              ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
              ErrorCode.request_timed_out}

TopicPartition = tuple[str, int]


def for_produce(error: ErrorCode) -> ErrorCode:
    """A coordinator's answer as a Produce partition error."""
    if error in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    if error == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch  # what a partition says to a fenced producer
    return error


def check(ctx, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
          add: bool) -> defer.Deferred:
    """Fires with {partition: error}: add the partitions to the transaction (``add``), or only
    check that they are in it."""
    coordinator = ctx.transactions
    if coordinator.coordinates(transactional_id):
        if not add:
            return defer.succeed(coordinator.verify(transactional_id, producer_id, epoch, partitions))
        step = coordinator.add_partitions(transactional_id, producer_id, epoch, partitions)
        return run(ctx, step).addCallback(
            lambda final: {tp: final.error or step.partition_errors.get(tp, step.error) for tp in partitions})
    if ctx.cluster is None or ctx.peers is None:
        return defer.succeed({tp: ErrorCode.not_coordinator for tp in partitions})
    state = ctx.cluster.view.state(TXN_TOPIC, coordinator.partition_for(transactional_id))
    if state is None or state.leader not in ctx.cluster.view.brokers or state.leader == ctx.node_id:
        # no leader, or this broker is about to lead it and has not loaded it yet
        return defer.succeed({tp: ErrorCode.coordinator_not_available for tp in partitions})
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    request = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                                 "producer_epoch": epoch, "verify_only": not add,
                                 "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]}

    def answered(response) -> dict[TopicPartition, ErrorCode]:
        found = {(t.name, p.partition_index): p.partition_error_code for txn in response.results_by_transaction
                 for t in txn.topic_results for p in t.results_by_partition}
        return {tp: found.get(tp, response.error_code or ErrorCode.unknown_server_error) for tp in partitions}

    def unreachable(failure) -> dict[TopicPartition, ErrorCode]:
        log.info("transaction coordinator %d not reached for %r: %s", state.leader, transactional_id,
                 failure.getErrorMessage())
        return {tp: ErrorCode.coordinator_not_available for tp in partitions}
    return ctx.peers.call(state.leader, ADD_PARTITIONS_TO_TXN, request, timeout=TIMEOUT_S).addCallbacks(
        answered, unreachable)


def answer_brokers(ctx, req) -> defer.Deferred:
    """AddPartitionsToTxn v4+ at the coordinator: each transaction's partitions checked or added.
    Fires with the response's ``results_by_transaction``."""
    results = []
    for txn in req.transactions:
        partitions = [(t.name, p) for t in txn.topics for p in t.partitions]
        if not ctx.transactions.coordinates(txn.transactional_id):
            errors = defer.succeed({tp: ErrorCode.not_coordinator for tp in partitions})
        else:
            errors = check(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions,
                           add=not txn.verify_only)
        results.append(errors.addCallback(_result, txn.transactional_id, partitions))
    return defer.gatherResults(results)


def _result(errors: dict[TopicPartition, ErrorCode], transactional_id: str, partitions) -> dict:
    topics: dict[str, list[dict]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append({"partition_index": partition,
                                             "partition_error_code": errors.get((topic, partition), ErrorCode.none)})
    return {"transactional_id": transactional_id,
            "topic_results": [{"name": t, "results_by_partition": ps} for t, ps in topics.items()]}

