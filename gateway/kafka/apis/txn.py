"""Transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
and the operator views DescribeTransactions, ListTransactions, DescribeProducers.

core.transactions decides; this module maps requests onto it and runs its Steps
(gateway.kafka.txn_steps). AddPartitionsToTxn v4+ is the partition leaders' question before a
transaction's first batch (KIP-890, txn_steps.check).
"""
from __future__ import annotations

import datetime
import logging
import re

from kio.schema.errors import ErrorCode
from twisted.internet import defer

from core.offsets import MAX_METADATA_BYTES, OFFSETS_TOPIC, OffsetAndMetadata
from core.transactions import Step
from gateway.kafka import txn_steps
from gateway.kafka.apis.registry import handles
from gateway.kafka.txn_steps import run
from wire.kafka import respond

log = logging.getLogger(__name__)


@handles(22)
def init_producer_id(ctx, conn, h, req):
    pid_in, epoch_in = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
    if req.transactional_id is None:
        pid, epoch = ctx.producers.init_producer(pid_in, epoch_in)
        return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid,
                           "producer_epoch": epoch})
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000)
    step = ctx.transactions.init_producer(req.transactional_id, timeout_ms, pid_in, epoch_in)

    def answer(final: Step) -> bytes:
        ok = final.error == ErrorCode.none
        return respond(h, {"throttle_time": 0, "error_code": final.error,
                           "producer_id": final.producer_id if ok else -1, "producer_epoch": final.epoch if ok else -1})
    return run(ctx, step).addCallback(answer)


@handles(24)
def add_partitions_to_txn(ctx, conn, h, req):
    if h.api_version >= 4:  # a partition leader asking for its producers (txn_steps.check)
        return txn_steps.answer_brokers(ctx, req).addCallback(lambda results: respond(h, {
            "throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results}))
    topics = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    wanted = [(name, p) for name, parts in topics for p in parts]
    step = ctx.transactions.add_partitions(req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                           req.v3_and_below_producer_epoch, wanted)

    def answer(final: Step) -> bytes:
        errors = step.partition_errors
        results = [{"name": name, "results_by_partition": [
            {"partition_index": p, "partition_error_code": final.error or errors.get((name, p), step.error)}
            for p in parts]} for name, parts in topics]
        return respond(h, {"throttle_time": 0, "results_by_topic_v3_and_below": results})
    return run(ctx, step).addCallback(answer)


@handles(25)
def add_offsets_to_txn(ctx, conn, h, req):
    step = ctx.transactions.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch, req.group_id)
    return run(ctx, step).addCallback(lambda final: respond(h, {"throttle_time": 0, "error_code": final.error}))


@handles(28)
def txn_offset_commit(ctx, conn, h, req):
    offsets, errors = {}, {}
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            topic = ctx.logs.store.get_topic(t.name)
            metadata = p.committed_metadata or ""
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            elif len(metadata.encode()) > MAX_METADATA_BYTES:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                offsets[tp] = OffsetAndMetadata(p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                                metadata, int(ctx.reactor.seconds() * 1000))
    # KIP-447: a zombie member of an older generation (or member epoch) must not commit; checked
    # after the producer's transaction (Kafka verifies that first), in commit_offsets
    def member_error() -> ErrorCode | None:
        return ctx.groups.check_txn_member(req.group_id, getattr(req, "generation_id", -1),
                                           getattr(req, "member_id", ""), getattr(req, "group_instance_id", None))

    def answer(final: Step) -> bytes:
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": errors.get((t.name, p.partition_index), final.error)}
            for p in t.partitions]} for t in req.topics]
        return respond(h, {"throttle_time": 0, "topics": topics})

    def commit(error: ErrorCode = ErrorCode.none) -> defer.Deferred:
        step = Step(error) if error else ctx.transactions.commit_offsets(
            req.transactional_id, req.group_id, req.producer_id, req.producer_epoch, offsets, add=implicit,
            member_check=member_error)
        return run(ctx, step).addCallback(answer)
    # v5 (transaction version 2): no AddOffsetsToTxn came first; the group's partition joins the
    # transaction now, at its coordinator (here: commit_offsets does it; elsewhere: asked first)
    implicit = h.api_version >= 5
    if implicit and not ctx.transactions.coordinates(req.transactional_id):
        tp = (OFFSETS_TOPIC, ctx.groups.offsets.partition_for(req.group_id))
        return txn_steps.check(ctx, req.transactional_id, req.producer_id, req.producer_epoch, [tp], add=True
                               ).addCallback(lambda found: commit(found[tp]))
    return commit()


@handles(26)
def end_txn(ctx, conn, h, req):
    v2 = h.api_version >= 5  # transaction version 2: the end bumps the epoch and answers the new one
    step = ctx.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch, req.committed, v2)
    return run(ctx, step).addCallback(lambda final: respond(h, {
        "throttle_time": 0, "error_code": final.error,
        "producer_id": final.producer_id if not final.error else -1,
        "producer_epoch": final.epoch if not final.error else -1}))


@handles(27)
def write_txn_markers(ctx, conn, h, req):
    """A coordinator's markers for partitions led here: append, answer once durable (acks=all)."""
    results, written = [], set()
    durable = []
    for m in req.markers:
        topics = []
        for t in m.topics:
            parts = []
            for index in t.partition_indexes:
                if ctx.cluster is not None:
                    error = ctx.cluster.leader_log(t.name, index)[2]
                else:
                    error = ErrorCode.none if ctx.partition(t.name, index) else ErrorCode.unknown_topic_or_partition
                if not error:
                    at = ctx.transactions.write_marker(t.name, index, m.producer_id, m.producer_epoch,
                                                       m.transaction_result)
                    if at is None:
                        error = ErrorCode.unknown_topic_or_partition
                    else:
                        durable.append(at)
                        written.add((m.producer_id, t.name, index))
                parts.append((index, error))
            topics.append((t.name, parts))
        results.append((m.producer_id, topics))

    def answer(final: Step) -> bytes:
        return respond(h, {"throttle_time": 0, "markers": [{"producer_id": pid, "topics": [
            {"name": name, "partitions": [
                {"partition_index": index,
                 "error_code": final.error if (pid, name, index) in written and final.error else error}
                for index, error in parts]} for name, parts in topics]} for pid, topics in results]})
    # a partition leader's answer, as to acks=all: the coordinator's sender asks again
    return run(ctx, Step(durable=durable), timed_out=ErrorCode.request_timed_out).addCallback(answer)


@handles(65)
def describe_transactions(ctx, conn, h, req):
    states = []
    for tid in req.transactional_ids:
        txn = ctx.transactions.describe(tid)
        mine = ctx.transactions.coordinates(tid)  # in a cluster the admin client asks the id's coordinator
        if txn is None or not mine:
            error = ErrorCode.transactional_id_not_found if mine else ErrorCode.not_coordinator
            states.append({"error_code": error, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": datetime.timedelta(0),
                           "transaction_start_time": _time(-1), "producer_id": -1, "producer_epoch": -1,
                           "topics": []})
            continue
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            topics.setdefault(topic, []).append(partition)
        states.append({"error_code": ErrorCode.none, "transactional_id": tid, "transaction_state": txn.state,
                       "transaction_timeout": datetime.timedelta(milliseconds=txn.timeout_ms),
                       "transaction_start_time": _time(txn.start_ms), "producer_id": txn.producer_id,
                       "producer_epoch": txn.epoch,
                       "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
    return respond(h, {"throttle_time": 0, "transaction_states": states})


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(max(ms, 0) / 1000, datetime.timezone.utc)


@handles(66)
def list_transactions(ctx, conn, h, req):
    states = list(req.state_filters)
    unknown = [s for s in states if not ctx.transactions.known_state(s)]
    txns = ctx.transactions.list(states, req.producer_id_filters, getattr(req, "duration_filter", -1))
    pattern = getattr(req, "transactional_id_pattern", None)  # v2 (KIP-1152): a regex the whole id matches
    if pattern:
        try:
            wanted = re.compile(pattern)
        except re.error:
            return respond(h, {"throttle_time": 0, "error_code": ErrorCode.invalid_regular_expression,
                               "unknown_state_filters": [], "transaction_states": []})
        txns = [t for t in txns if wanted.fullmatch(t.transactional_id)]
    return respond(h, {"throttle_time": 0, "error_code": ErrorCode.none, "unknown_state_filters": unknown,
                       "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                               "transaction_state": t.state} for t in txns]})


@handles(61)
def describe_producers(ctx, conn, h, req):
    topics = []
    for t in req.topics:
        parts = []
        for index in t.partition_indexes:
            plog = ctx.partition(t.name, index)
            if plog is None:
                parts.append({"partition_index": index, "error_code": ErrorCode.unknown_topic_or_partition,
                              "error_message": None, "active_producers": []})
                continue
            producers = ctx.producers.partition(t.name, index, plog).describe()
            parts.append({"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                          "active_producers": [{"producer_id": p.producer_id, "producer_epoch": p.epoch,
                                                "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                                                "coordinator_epoch": 0, "current_txn_start_offset": p.txn_start_offset}
                                               for p in producers]})
        topics.append({"name": t.name, "partitions": parts})
    return respond(h, {"throttle_time": 0, "topics": topics})
