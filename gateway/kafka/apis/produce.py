"""Produce: validate and append each partition's batch, answer once it is durable (acks 1/-1).

Idempotent producers are checked against core.producers before anything is written: a
retried batch gets the offsets of its first append, a sequence gap is refused. A
transactional batch is taken only from the current epoch of its transactional id, inside
an ongoing transaction that added the partition (so no transaction can hang open on a
partition its coordinator does not know about). With
``flush.messages=1`` a partition's high watermark moves only after the group-commit fsync,
so acks=1 and acks=all both wait for that fsync (one node: the ISR is this node).

In cluster mode only the partition's leader takes a batch (NOT_LEADER_OR_FOLLOWER otherwise)
and stamps its leader epoch on it; acks=1 waits for the leader's own log, acks=all for the
high watermark (every in-sync replica has it), and is refused with NOT_ENOUGH_REPLICAS while
the ISR is smaller than the topic's ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS_AFTER_APPEND
if it shrank below it while the batch was replicated).

A transaction's first batch on a partition is checked with the transaction's coordinator
before it is written (KIP-890, gateway.kafka.txn_steps): from a transaction version 2 producer
(Produce v12+) that first batch is what adds the partition to the transaction.

Versions: v10 and v11 only add optional hints to a NOT_LEADER_OR_FOLLOWER answer (KIP-951: the
new leader and its endpoint, tagged fields this broker leaves out, so the client refreshes its
metadata as before) and the TRANSACTION_ABORTABLE code it may use; v12 is transaction version 2
(KIP-890), which a client uses when the broker finalizes the transaction.version feature at 2
(ApiVersions); v13 names topics by id (KIP-516).
"""
from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from twisted.internet import defer, task

from core.errors import InvalidRecordError, RecordTooLargeError, StorageError
from gateway.kafka import quotas, txn_steps
from gateway.kafka.apis.registry import handles
from gateway.logs import fields
from routing.state import STATE_TOPIC
from wire.errors import CorruptBatchError
from wire.kafka import respond
from wire.produce_response import encode_produce_response
from wire.records import read_batch_header

log = logging.getLogger(__name__)


def _short_of_replicas(ctx, topic: str, index: int, plog) -> bool:
    return ctx.cluster is not None and ctx.cluster.in_sync(topic, index) < plog.config.min_insync_replicas


def _append(ctx, topic: str, index: int, data: bytes, acks: int) -> tuple[ErrorCode, int, int, str | None, int]:
    """(error, base offset, last offset, message, leader epoch) for one partition's records."""
    plog, epoch, error = ctx.leader_log(topic, index)
    if error:
        return error, -1, -1, None, epoch
    if acks == -1 and _short_of_replicas(ctx, topic, index, plog):
        return (ErrorCode.not_enough_replicas, -1, -1,
                f"{ctx.cluster.in_sync(topic, index)} in-sync replica(s), min.insync.replicas is "
                f"{plog.config.min_insync_replicas}", epoch)
    return (*_append_to(ctx, topic, index, plog, epoch, data), epoch)


def _append_to(ctx, topic: str, index: int, plog, epoch: int, data: bytes) -> tuple[ErrorCode, int, int, str | None]:
    try:
        header = read_batch_header(data)
        if header.is_control:
            return ErrorCode.invalid_record, -1, -1, "control batches are written by the transaction coordinator only"
        if header.is_transactional:
            error = ctx.transactions.check_produce(header.producer_id, header.producer_epoch, topic, index)
            if error:
                return error, -1, -1, None
        state = ctx.producers.partition(topic, index, plog)
        verdict = state.check(header)
        if verdict.error:
            log.warning("produce refused: %s", verdict.error.name, extra=fields(
                topic=topic, partition=index, producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence, last_sequence=state.last_sequence(header.producer_id)))
            return verdict.error, -1, -1, None
        if verdict.duplicate_of:
            return ErrorCode.none, verdict.duplicate_of[0], verdict.duplicate_of[1], None
        info = plog.append(data, leader_epoch=epoch)
        state.record(header, info.first_offset)
        ctx.count_in(topic, info.records, info.bytes)
        return ErrorCode.none, info.first_offset, info.last_offset, None
    except CorruptBatchError as exc:
        log.warning("corrupt batch refused: %s", exc.reason, extra=fields(topic=topic, partition=index))
        return ErrorCode.corrupt_message, -1, -1, exc.reason
    except RecordTooLargeError as exc:
        return ErrorCode.message_too_large, -1, -1, str(exc)
    except InvalidRecordError as exc:
        return ErrorCode.invalid_record, -1, -1, str(exc)
    except StorageError as exc:  # nothing of the batch was kept: the client may retry once there is space
        first = ctx.storage_failed()  # then logged once, not once per refused batch until space is back
        log.log(logging.WARNING if first else logging.DEBUG, "produce refused: %s", exc,
                extra=fields(topic=topic, partition=index))
        return ErrorCode.kafka_storage_error, -1, -1, str(exc)


def topic_of(ctx, td) -> tuple[str | None, object]:
    """(name, topic id) of a Produce topic entry: v13+ (KIP-516) carries the id only, its name
    is looked up (None when no topic has that id); before v13 the id is None."""
    if hasattr(td, "topic_id"):
        return ctx.topic_name(td.topic_id), td.topic_id
    return td.name, None


def _first_batches(ctx, req) -> tuple[int, int, list[tuple[str, int]]] | None:
    """(producer id, epoch, partitions): where this request's transactional batches would open
    the producer's transaction (KIP-890: those are checked with its coordinator first)."""
    found, producer = [], (-1, -1)
    for td in req.topic_data:
        name, topic_id = topic_of(ctx, td)
        if name is None:
            continue
        for pd in td.partition_data:
            data = pd.records or b""
            try:
                header = read_batch_header(bytes(data[:61]))
            except (CorruptBatchError, ValueError, IndexError):
                continue  # refused with its own error by the append
            if not header.is_transactional or header.is_control or header.producer_id < 0:
                continue
            plog, _, error = ctx.leader_log(name, pd.index)
            if error or plog is None:
                continue
            state = ctx.producers.partition(name, pd.index, plog)
            known = state.producers.get(header.producer_id)
            if header.producer_id in state.open_txns and known is not None and known.epoch == header.producer_epoch:
                continue  # its transaction is open here already, and was checked when it opened
            producer = (header.producer_id, header.producer_epoch)
            found.append((name, pd.index))
    return (*producer, found) if found else None


@handles(0)
def produce(ctx, conn, h, req):
    # On one broker a version 1 producer's batches are checked as they are appended
    # (core.transactions.check_produce, the coordinator being local): only a cluster, or a
    # version 2 producer whose first batch adds its partition, needs the coordinator first.
    transactional = getattr(req, "transactional_id", None) is not None and (
        ctx.cluster is not None or h.api_version >= 12)
    previous = conn.txn_gate
    if previous is None or previous.called:
        if not transactional or _first_batches(ctx, req) is None:
            return _produce(ctx, conn, h, req, {})
        start = defer.succeed(None)
    else:  # an earlier request of this connection still waits for the coordinator: append after it
        start = defer.Deferred()
        previous.addBoth(lambda result: start.callback(None) or result)
    gate = conn.txn_gate = defer.Deferred()

    def checked(errors: dict) -> defer.Deferred:
        try:
            return _produce(ctx, conn, h, req, {tp: txn_steps.for_produce(e) for tp, e in errors.items() if e})
        finally:
            gate.callback(None)

    def check(_) -> defer.Deferred:
        first = _first_batches(ctx, req) if transactional else None  # the earlier request may have opened it
        if first is None:
            return checked({})
        producer_id, epoch, partitions = first
        # v12+ producers use transaction version 2: their first batch adds the partition
        return txn_steps.check(ctx, req.transactional_id, producer_id, epoch, partitions,
                               add=h.api_version >= 12).addCallback(checked)

    def failed(failure):
        if not gate.called:
            gate.callback(None)
        return failure
    return start.addCallback(check).addErrback(failed)


def _produce(ctx, conn, h, req, refused: dict[tuple[str, int], ErrorCode]):
    """Append and answer; ``refused`` partitions get their error instead (the coordinator said no)."""
    acks = req.acks
    results: list[tuple[str, list[dict]]] = []
    # (log, last offset, topic, partition, leader epoch at append): what must get under the HW, and
    # where (in a cluster) a change of leader ends the wait: the append may be truncated away then
    durable: list[tuple] = []
    for td in req.topic_data:
        name, topic_id = topic_of(ctx, td)
        # v13 names topics by id: an unknown id cannot be created, it is UNKNOWN_TOPIC_ID (as Kafka)
        topic = ctx.topic_or_create(name) if topic_id is None else (
            ctx.logs.store.get_topic(name) if name is not None else None)
        missing = ErrorCode.unknown_topic_or_partition if topic_id is None else ErrorCode.unknown_topic_id
        parts = []
        for pd in td.partition_data:
            epoch = -1
            if acks not in (0, 1, -1):
                error, base, last, message = ErrorCode.invalid_required_acks, -1, -1, None
            elif topic is None:
                error, base, last, message = missing, -1, -1, None
            elif (name, pd.index) in refused:
                error, base, last, message = refused[(name, pd.index)], -1, -1, None
            else:
                error, base, last, message, epoch = _append(ctx, name, pd.index, bytes(pd.records or b""), acks)
            plog = ctx.partition(name, pd.index) if topic is not None else None
            pending = (plog, last, name, pd.index, epoch) if error == ErrorCode.none else None
            if pending:
                durable.append(pending)
            parts.append({"index": pd.index, "error_code": error, "base_offset": base, "log_append_time": None,
                          "log_start_offset": plog.log_start_offset if plog else -1, "record_errors": [],
                          "error_message": message, "_durable": pending})
        results.append((name, topic_id, parts))
    if durable:
        ctx.request_flush()
        ctx.waiters.notify()
    # the producer's byte-rate quota (gateway.kafka.quotas), or a resource alarm: hold the answer
    size = sum(len(pd.records or b"") for td in req.topic_data for pd in td.partition_data)
    throttle = max(quotas.produce_throttle_ms(ctx, conn, h, size), ctx.throttle_ms())
    if acks == 0:
        return None

    def deposed(pending) -> bool:
        return ctx.cluster is not None and ctx.cluster.leader_epoch(pending[2], pending[3]) != pending[4]

    def stored(pending) -> bool:
        plog, last = pending[0], pending[1]
        return (plog.high_watermark if acks == -1 else plog.local_end_offset) > last

    def applied(pending) -> bool:  # the AMQP model: the other brokers know a definition when it is answered
        return acks != -1 or pending[2] != STATE_TOPIC or ctx.cluster is None or \
            ctx.cluster.state_followers.applied_everywhere(STATE_TOPIC, pending[3], pending[1] + 1)

    def all_durable() -> bool:
        return all(deposed(p) or (stored(p) and applied(p)) for p in durable)

    def answer(in_time: bool) -> bytes:
        responses = []
        for name, topic_id, parts in results:
            for part in parts:
                pending = part.pop("_durable")
                if pending and deposed(pending):  # no longer the leader: the batch may not survive, retry
                    part["error_code"] = ErrorCode.not_leader_or_follower
                elif not in_time and pending and not stored(pending):
                    part["error_code"] = ErrorCode.request_timed_out
                elif pending and acks == -1 and _short_of_replicas(ctx, name, part["index"], pending[0]):
                    part["error_code"] = ErrorCode.not_enough_replicas_after_append
            responses.append({"name": name, "topic_id": topic_id, "partition_responses": parts})
        return (encode_produce_response(h, responses, throttle)  # kio's writer only where it must
                or respond(h, {"responses": responses, "throttle_time": throttle}))

    # A zero timeout must not turn every acks=1 produce into an error while the fsync runs.
    d = ctx.waiters.wait(all_durable, max(req.timeout.total_seconds(), 1.0)).addCallback(answer)
    if throttle:  # tell the client why and hold the answer, slowing the producer down
        d.addCallback(lambda data: task.deferLater(ctx.reactor, throttle / 1000, lambda: data))
    return d
