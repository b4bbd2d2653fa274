"""Dead-lettering: the copy a queue sends to its dead-letter exchange, and how safely it gets there.

A message leaves a queue without an ack when it is rejected or nacked without requeue
(``rejected``), expires (``expired``), overflows a drop-head length limit (``maxlen``) or comes
back more often than a quorum queue's delivery limit (``delivery_limit``). With a dead-letter
exchange it is republished there with an ``x-death`` entry, to ``x-dead-letter-routing-key`` or
its own routing key (:func:`dead_letter_copy`).

Two strategies, as RabbitMQ has them (``x-dead-letter-strategy`` or policy ``dead-letter-strategy``):

* ``at-most-once`` (the default, and the only one for classic queues): the source settles the
  message at once and the copy is staged on the target queues; no route, a missing exchange or a
  crash before the targets' fsync loses it.
* ``at-least-once``: for a quorum queue with ``overflow: reject-publish`` and a dead-letter
  exchange (anything else falls back to at-most-once, as in RabbitMQ). The source *holds* the
  message (:data:`HELD` owns its offset in the cursor: neither ready nor settled, so the ack
  floor cannot pass it) until every target queue has the copy durably -- appended and below
  the target log's high watermark, i.e. through the target's group-commit fsync (and, in
  cluster mode, on its in-sync replicas), the same point at which a publisher confirm for it
  would go out. Only then does the source settle it. Without a route, with the exchange missing,
  or when an append fails, it stays held and is routed again every :data:`RETRY_S` (RabbitMQ's
  dead-letter worker retries every ``dead_letter_worker_publisher_confirm_timeout``). The held
  offsets and their reasons are saved with the queue's ack floor (routing.broker checkpoint), so
  they come back after a crash or restart and are retried; a crash between a target's fsync and
  the source's settlement sends the copy again: at least once, duplicates possible.
"""
from __future__ import annotations

from typing import Any, Callable

from routing import amqp_properties, mapping, message_fields
from routing.errors import PRECONDITION_FAILED, ChannelError, unsupported_argument
from wire.records import Record

AT_MOST_ONCE, AT_LEAST_ONCE = "at-most-once", "at-least-once"
RETRY_S = 1.0  # how often held dead letters without a route (or whose append failed) are routed again
RETRY_BATCH = 1024  # held dead letters routed again per queue and pass, to bound one pass's work


class _Held:
    """Cursor owner of a dead letter the source keeps until its targets have it durably."""

    def __repr__(self) -> str:
        return "<dead-lettering>"


HELD = _Held()


def strategy_argument(args: dict, queue: str, vhost: str, queue_type: str, *, strict: bool = True) -> str | None:
    """``x-dead-letter-strategy``. ``strict`` (at declaration) validates it as RabbitMQ does: a
    quorum-queue argument only, one of the two names. Not strict (a definition read back at
    start-up, perhaps saved before this check existed): a bad one counts as absent."""
    if "x-dead-letter-strategy" not in args:
        return None
    value = args["x-dead-letter-strategy"]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    valid = queue_type == "quorum" and value in (AT_MOST_ONCE, AT_LEAST_ONCE)
    if valid or not strict:
        return value if valid else None
    if queue_type != "quorum":
        raise unsupported_argument("x-dead-letter-strategy", queue, vhost, queue_type)
    if not isinstance(value, str):
        kind = "signedint" if isinstance(value, int) and not isinstance(value, bool) else type(value).__name__
        raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-dead-letter-strategy' for queue '{queue}' in "
                                                f"vhost '{vhost}': {{unacceptable_type,{kind}}}")
    raise ChannelError(PRECONDITION_FAILED, f"invalid arg 'x-dead-letter-strategy' for queue '{queue}' in "
                                            f"vhost '{vhost}': invalid_dlx_strategy")


def effective_strategy(queue) -> str:
    """The strategy a queue dead-letters with now. The argument wins over a policy; at-least-once
    needs a quorum queue, reject-publish overflow and a dead-letter exchange (RabbitMQ falls back
    to at-most-once without them, e.g. under the default drop-head overflow)."""
    wanted = queue.args.dead_letter_strategy or queue.policy_dead_letter_strategy()
    if (wanted == AT_LEAST_ONCE and queue.args.queue_type == "quorum" and queue.args.overflow == "reject-publish"
            and queue.args.dead_letter_exchange is not None):
        return AT_LEAST_ONCE
    return AT_MOST_ONCE


def dead_letter_copy(vhost, queue, record: Record, reason: str, now: float) -> tuple[list, Record] | None:
    """The queues the dead-lettered copy of ``record`` goes to and the copy itself (with its
    x-death entry), or None when the dead-letter exchange is missing or routes it nowhere."""
    exchange_name = queue.args.dead_letter_exchange
    exchange, routing_key, properties_raw = mapping.amqp_from_record(record)
    dl_key = queue.args.dead_letter_routing_key
    key = dl_key if dl_key is not None else routing_key
    new_raw = amqp_properties.dead_lettered(properties_raw, queue=queue.name, reason=reason, exchange=exchange,
                                             routing_keys=[routing_key], now_s=int(now))
    try:
        targets = vhost.route(exchange_name, key, message_fields.headers_table(new_raw))
    except Exception:  # the dead-letter exchange is missing
        return None
    # a message that expires in a queue dead-lettering to itself would loop forever: RabbitMQ drops that cycle
    targets = [t for t in targets if t is not queue or reason != "expired"]
    if not targets:
        return None
    key, value, headers, timestamp = mapping.record_from_amqp(exchange_name, key, new_raw, record.value or b"",
                                                              int(now * 1000))
    return targets, Record(0, timestamp, key, value, headers)


class DeadLetterCopy:
    """One at-least-once copy on its way: the router's commit fills ``targets`` with the
    (log, offset) each target queue got, or sets ``rejected`` when an append failed -- the same
    fields as a publisher confirm's :class:`routing.broker.Publish`."""

    __slots__ = ("queues", "targets", "rejected", "forwarded")

    def __init__(self, queues: list):
        self.queues = queues
        self.targets: list[tuple[Any, int]] = []
        self.rejected = False
        self.forwarded = 0  # copies sent to target queues led by other brokers, not yet stored there

    def stored(self) -> bool:
        """Every target queue has it below its high watermark (or was deleted meanwhile: RabbitMQ
        stops waiting for a target queue that is gone); a target led by another broker (cluster
        mode 'spread') has it once that broker answered the forwarded copy (acks=all)."""
        if self.forwarded:
            return False
        durable = {id(plog) for plog, offset in self.targets if plog.high_watermark > offset}
        return all(q.deleted or q.remote or id(q.plog) in durable for q in self.queues)


class HeldDeadLetters:
    """A source queue's at-least-once dead letters: offset -> reason, until stored everywhere."""

    def __init__(self, reasons: dict[int, str] | None = None):
        self.reasons: dict[int, str] = dict(reasons or {})
        self.copies: dict[int, DeadLetterCopy] = {}  # the ones routed and not yet stored
        self.retry_at = 0.0

    def __len__(self) -> int:
        return len(self.reasons)

    def restore(self, cursor) -> None:
        """After a restart: the saved offsets that are still unsettled are held again."""
        for offset in list(self.reasons):
            if offset < cursor.end_offset:  # not lost with an unsynced tail (its offset will be reused)
                cursor.hold(offset, HELD)
            if cursor.owner_of(offset) is not HELD:  # settled meanwhile, or lost
                del self.reasons[offset]

    def as_json(self) -> dict[str, str]:
        return {str(offset): reason for offset, reason in sorted(self.reasons.items())}


class DeadLetterForwarder:
    """The router's side of at-least-once dead-lettering: route held messages, settle them in the
    source once stored, route again what found no way."""

    def __init__(self, stage_record: Callable[[Any, Record, DeadLetterCopy], None], clock: Callable[[], float]):
        self.stage_record = stage_record
        self.clock = clock
        self.settling: set = set()  # source queues with copies on their way: a group commit settles them

    def forward(self, vhost, queue, offset: int, record: Record, reason: str) -> None:
        built = dead_letter_copy(vhost, queue, record, reason, self.clock())
        if built is None:
            return  # no route yet: held, and routed again at the next retry
        targets, copy_record = built
        copy = queue.held.copies[offset] = DeadLetterCopy(targets)
        self.settling.add(queue)
        for target in targets:
            self.stage_record(target, copy_record, copy)

    def settle(self, queue) -> None:
        """After an fsync: the source lets go of what every target now has durably."""
        copies = queue.held.copies
        for offset, copy in list(copies.items()):
            if copy.rejected:  # an append failed: routed again at the next retry
                del copies[offset]
            elif copy.stored():
                del copies[offset]
                queue.dead_lettered(offset)
        if not copies:
            self.settling.discard(queue)

    def retry(self, vhost, queue) -> None:
        """Periodic: route again the held messages that have no copy on its way."""
        held = queue.held
        if queue.dead_letter_strategy() != AT_LEAST_ONCE:
            # RabbitMQ deletes what is still held when the strategy stops being at-least-once
            for offset in list(held.reasons):
                held.copies.pop(offset, None)
                queue.dead_lettered(offset)
            return
        now = self.clock()
        if now < held.retry_at:
            return
        held.retry_at = now + RETRY_S
        sent = 0
        for offset, reason in list(held.reasons.items()):
            if offset in held.copies:
                continue
            record = queue.reader.get(offset)
            if record is None:  # gone from the log (retention): nothing left to send
                queue.dead_lettered(offset)
                continue
            self.forward(vhost, queue, offset, record, reason)
            sent += 1
            if sent >= RETRY_BATCH:
                break
