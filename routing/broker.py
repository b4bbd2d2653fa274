"""The AMQP model of one broker: vhosts, durable definitions, and the publish pipeline.

Publishing is two steps so that appends are batched per event-loop turn, as DESIGN.md asks:
:meth:`Router.publish` routes one message and stages a record on each queue it reaches;
:meth:`Router.commit` (called by the gateway once it has handled all it received in a turn)
appends each queue's staged records to its log as one batch and fills in every publish's
``targets`` with (log, offset) pairs. A publisher confirm for it is due once each of those
offsets is below its log's high watermark (:meth:`Publish.durable`); the gateway's group-commit
flush moves the watermarks and then calls :meth:`Router.log_moved`, which lets queues deliver
what became visible.

State (see routing.state: files under ``<data-dir>/amqp/`` on a single node, the replicated
topic ``__amqp_state`` in a cluster): ``definitions`` (durable exchanges, queues and bindings of
every vhost), ``ack-floors`` (each durable queue's ack floor, written by
:meth:`Router.checkpoint`; everything above it is delivered again after a crash, flagged
redelivered; with a quorum queue's delivery counts, its held at-least-once dead letters and
whether it has seen a high-priority message) and ``transient`` (topics of non-durable queues,
deleted at the next start).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import time
from pathlib import Path
from typing import Callable

from core.errors import StorageError
from core.log import PartitionLog
from core.log_manager import LogManager
from routing import definitions, definitions_follower, mapping, message_fields
from routing.dead_letter import DeadLetterCopy, DeadLetterForwarder, dead_letter_copy
from routing.dedup import Deduplicator, recent_records
from routing.delayed import DelayLog, delay_of
from routing.errors import FRAME_ERROR, NOT_ALLOWED, PRECONDITION_FAILED, ChannelError, ConnectionError
from routing.queue import Queue, position_key
from routing.share import SharePartitions
from routing.state import FileState, LogState
from routing.direct_reply import DirectReplies
from routing.vhost import DEFAULT_EXCHANGES, VirtualHost
from wire.records import Record, built_batch, record_tail, stamp_built

log = logging.getLogger(__name__)

DEFAULT_VHOST = "/"
BUILTIN_EXCHANGES = frozenset(name for name, _ in DEFAULT_EXCHANGES)  # there in every vhost, never stored
_FOLD_AFTER = 1000  # the definitions journal is folded into one document past this many + its entries


class Publish:
    """One published message on its way to the log: where it went, and whether that is durable."""

    __slots__ = ("targets", "rejected", "forwarded")

    def __init__(self) -> None:
        self.targets: list[tuple[PartitionLog, int]] = []
        self.rejected = False  # a queue refused it (x-overflow reject-publish): nack, not ack
        self.forwarded = 0  # copies sent to queues led by other brokers and not yet stored there

    def durable(self) -> bool:
        if self.forwarded:
            return False
        for plog, offset in self.targets:
            # a queue deleted before its copy was synced settles it, as RabbitMQ confirms a
            # message routed to a queue deleted meanwhile: a dropped log's HW moves no more
            if plog.high_watermark <= offset and not plog.dropped:
                return False
        return True


# What a queue (or exchange log) gets at the next commit, flat, _STAGED_FIELDS per message: its
# source (property section or record: for a de-duplication key), timestamp, record tail
# (wire.records.record_tail, made once per message for all its queues), Publish or None, and body
# size. One list per queue and one extend per message: spread over thousands of queues, most of
# these lists hold a single message, and five lists per queue were a good part of its cost.
_STAGED_FIELDS = 5


class Router:
    def __init__(self, data_dir: Path, logs: LogManager, *, clock: Callable[[], float] = time.time,
                 state: FileState | LogState | None = None):
        self.state = state if state is not None else FileState(Path(data_dir) / "amqp")
        self.logs = logs
        # cluster mode: create_topic arguments placing a new queue's topic (replicas, leader) -- see gateway.cluster
        self.placement: Callable[[dict], dict] = lambda arguments: {}
        self.available: Callable[[str, int], bool] = lambda topic, partition=0: True  # cluster mode: led here
        self.committed: Callable[[], object] | None = None  # spread cluster: a Deferred, once the model's writes are
        # committed, those of the definitions batch under way too (gateway.cluster.amqp_spread)
        self._after_batch: list = []  # called once the definitions batch under way is written
        # cluster mode: send one batch (bytes, base offset 0) to the leader of a RemoteQueue; each
        # Publish given has ``forwarded`` raised by one, to be lowered (or ``rejected`` set) when
        # the leader answers
        self.forward: Callable[[Queue, bytes, int, list], None] = self._cannot_forward
        self.remote_stubs = False  # cluster mode 'spread': queues led elsewhere are RemoteQueues (routing.vhost)
        self.share_transient = False  # cluster mode 'spread': non-durable definitions are stored too
        self.node_id = -1  # the broker this router runs on (cluster mode 'spread')
        self.clock = clock
        self.vhosts: dict[str, VirtualHost] = {}
        self._staged: dict[Queue, list] = {}  # see _STAGED_FIELDS
        self._floors_written: dict[str, dict] | None = None
        self._stopped_cleanly = False  # the clean stop's floors (with delivered bounds) are written: keep them
        self._transient: set[str] = set()
        self._definitions_dirty = False
        self._stored = definitions.DefinitionEntries()  # what the definitions journal holds (load fills it)
        self._touched: list | None = None  # (vhost, what changed) since the last write; None: everything
        self._fold_next = False
        self._transient_dirty = False
        self._batching = 0  # inside definitions_batch(): the files are written once, at its end
        self.on_appended: Callable[[], None] = lambda: None  # the gateway asks for a flush
        self.queues_created = self.queues_deleted = 0
        self.delayed_max = 100_000  # held messages per delayed-message exchange (--delayed-messages-max)
        # a log write failed: the gateway raises the disk alarm (True the first time, to log it once)
        self.on_storage_error: Callable[[], bool] = lambda: True
        self.dead_letters = DeadLetterForwarder(self.stage_record, clock)  # at-least-once dead-lettering
        self.shares = SharePartitions(lambda: self, clock=clock)  # Kafka share groups (routing.share)
        self.direct_replies = DirectReplies()  # Direct Reply-To consumers here (routing.direct_reply)
        # cluster mode 'spread': (node, vhost, routing key, properties, body) -> Deferred of whether
        # the broker holding a Direct Reply-To requester handed it the reply
        self.reply_elsewhere: Callable | None = None

    # --- start and stop ----------------------------------------------------------------
    def load(self) -> None:
        """Delete the last run's transient queues; bring back durable definitions and ack floors."""
        self.state.open()
        for topic in self.state.read("transient", []):
            if self.logs.store.get_topic(topic) is not None:
                self.logs.delete_topic(topic)
        self.state.write("transient", [])
        snapshot, changes = self.state.read_journal(definitions.JOURNAL)
        self._stored = stored = definitions.DefinitionEntries()
        for vhost, doc in (snapshot or {"vhosts": {}})["vhosts"].items():
            stored.apply((vhost, key, value) for key, value in definitions.entries_of_doc(doc).items())
        stored.apply(changes)
        own, others = definitions.split_transient(stored, self.node_id) if self.share_transient else ([], [])
        positions = self.state.read("ack-floors", {})
        self.shares.restore(positions)
        for name, doc in stored.documents(BUILTIN_EXCHANGES)["vhosts"].items():
            self.vhost_create(name, persist=False).restore(definitions.decode(doc), positions)
        self.vhost_create(DEFAULT_VHOST, persist=False)
        if own:  # this broker's non-durable definitions went with its last run
            self.state.append_journal(definitions.JOURNAL, own)
        if others:  # the other brokers' (cluster mode 'spread'): known here as they are
            stored.apply(others)
            definitions_follower.apply_changes(self, others)
        # the journal folded into one document if it holds changes (not at every start: 10,000 queues
        # are one write of every definition), and the default vhost stored if new
        self._touched, self._fold_next = None, self.state.needs_fold(definitions.JOURNAL)
        self._write_definitions()
        self.checkpoint()  # drop the delivered bounds at once: they hold only until the next crash

    def vhost_create(self, name: str, persist: bool = True) -> VirtualHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = VirtualHost(name, self.logs, on_change=functools.partial(self._definitions_changed, name),
                                on_queue=self._queue_made)
            vhost.dead_letter = self._dead_letter
            vhost.placement = lambda arguments: self.placement(arguments)
            vhost.available = lambda topic, partition=0: self.available(topic, partition)
            vhost.remote_stubs = self.remote_stubs
            vhost.share_transient, vhost.node_id = self.share_transient, self.node_id
            self.vhosts[name] = vhost
            if persist:
                self._definitions_changed(name)
        return vhost

    def vhost_delete(self, name: str) -> None:
        """RabbitMQ's delete_vhost: every queue and exchange log in it goes, with their topics."""
        self.vhosts.pop(name).dismantle()
        self._definitions_changed(name)

    def _definitions_changed(self, vhost: str, *touched: tuple) -> None:
        """``touched``: what changed, as routing.definitions names it; nothing named: look at all of it."""
        if self._touched is not None:
            if touched:
                self._touched.extend((vhost, t) for t in touched)
            else:
                self._touched.append((vhost, None))
        self._definitions_dirty = True
        if not self._batching:
            self._write_definitions()

    @contextlib.contextmanager
    def definitions_batch(self):
        """Write definitions.json and transient.json once for all the changes made inside.

        A connection handles everything one read brought inside one batch: a client that
        pipelines 1,000 declarations costs two file writes, not 2,000 rewrites of files that grow
        with every queue. Its replies leave after the batch ends, so after the files are written.
        """
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                if self._transient_dirty:
                    self._write_transient()
                if self._definitions_dirty:
                    self._write_definitions()
                waiting, self._after_batch = self._after_batch, []
                for fn in waiting:
                    fn()

    def after_batch(self, fn: Callable[[], None]) -> None:
        """``fn()`` once the definitions batch under way has been written (now if none is)."""
        if self._batching:
            self._after_batch.append(fn)
        else:
            fn()

    def _queue_made(self, queue: Queue, created: bool) -> None:
        """Keep transient.json current: those topics are dropped at the next start."""
        if created:  # running totals for /metrics (rabbitmq_queues_{created,deleted}_total)
            self.queues_created += 1
        else:
            self.queues_deleted += 1
        if queue.durable:
            return
        if created:
            self._transient.add(queue.topic)
        else:
            self._transient.discard(queue.topic)
        if self._batching:
            self._transient_dirty = True
        else:
            self._write_transient()

    def _write_transient(self) -> None:
        self._transient_dirty = False
        self.state.write("transient", sorted(self._transient))

    def save_definitions(self) -> None:
        """Store every vhost's durable definitions as they are now (after changes nobody named)."""
        self._touched = None
        self._write_definitions()

    def _write_definitions(self) -> None:
        """Append what changed to the definitions journal (fsync'd); fold the journal into one
        document once it holds more changes than the document has entries."""
        stored, touched = self._stored, self._touched
        self._touched, self._definitions_dirty = [], False
        whole = set(stored.vhosts) | set(self.vhosts) if touched is None else {v for v, t in touched if t is None}
        changes: list[definitions.Change] = []
        for name in whole:  # changes nobody named: compare the whole vhost
            vhost = self.vhosts.get(name)
            wanted = {} if vhost is None else definitions.entries_of_doc(
                definitions.encode(vhost.durable_definitions(stored=True)))
            changes += stored.diff(name, wanted)
        stored.apply(changes)
        for name, what in touched or ():
            vhost = self.vhosts.get(name)
            if name in whole or what is None:
                continue
            found = stored.diff(name, {}) if vhost is None else \
                definitions.touched_entries(vhost, what, stored, BUILTIN_EXCHANGES)
            stored.apply(found)  # before the next: a queue that went takes its bindings along once
            changes += found
        if self._fold_next:
            self._fold_next = False
            self.state.compact_journal(definitions.JOURNAL, stored.documents(BUILTIN_EXCHANGES), stored.changes())
            return
        if not changes:
            return
        try:
            held = self.state.append_journal(definitions.JOURNAL, changes)
        except Exception:
            self._fold_next = True  # the stored entries are what should be on disk: write them whole next
            raise
        if held > _FOLD_AFTER + len(stored):
            self.state.compact_journal(definitions.JOURNAL, stored.documents(BUILTIN_EXCHANGES), stored.changes())

    def checkpoint(self, clean_stop: bool = False) -> None:
        """Persist the ack floors that moved (durable queues only).

        At a clean stop each queue's delivered bound is saved too, so that after the restart only
        messages that were in fact delivered come back flagged redelivered."""
        # Runs 4 times a second over every queue: a queue with nothing but its floor to save is
        # compared by that number, and the document is built only when something moved.
        if self._stopped_cleanly:
            # a timer's pass between the stop's checkpoint and the end of the shutdown would write
            # the floors again without the delivered bounds: never-delivered messages would then
            # come back flagged redelivered
            return
        self._stopped_cleanly = clean_stop
        saved = {}
        for vhost in self.vhosts.values():
            for delay_log in vhost.delay_logs.values():
                if not delay_log.remote:
                    saved[delay_log.topic] = {"delayed": delay_log.state()}
            for queue in vhost.queues.values():
                if not queue.durable or queue.remote:
                    continue
                key, stage = position_key(queue.topic, queue.partition), queue.stage
                prioritised = stage is not None and stage.returns_first and stage.active
                if not (queue.delivery_counts or queue.held.reasons or clean_stop or prioritised):
                    saved[key] = queue.cursor.ack_floor
                    continue
                floor = saved[key] = {"floor": queue.ack_floor}
                if queue.delivery_counts:
                    floor["deliveries"] = queue.delivery_counts_json()
                if queue.held:
                    floor["dead-lettering"] = queue.held.as_json()
                if prioritised:
                    floor["prioritised"] = True
                if clean_stop:
                    floor["delivered"] = queue.delivered_bound
        saved.update(self.shares.positions())
        if saved != self._floors_written:
            self.state.write("ack-floors", {key: {"floor": value} if type(value) is int else value
                                            for key, value in saved.items()})
            self._floors_written = saved

    def topic_deleted(self, topic: str) -> None:
        """A Kafka client deleted a topic: the queue or exchange log it backed goes with it."""
        self.shares.forget_topic(topic)
        for vhost in self.vhosts.values():
            vhost.topic_deleted(topic)

    # --- connections -------------------------------------------------------------------
    def open_vhost(self, name: str, username: str) -> VirtualHost:
        """The vhost a connection opens (users and their permissions are the gateway's business)."""
        vhost = self.vhosts.get(name)
        if vhost is None:
            raise ConnectionError(NOT_ALLOWED, f"vhost {name} not found")
        return vhost

    # --- publishing --------------------------------------------------------------------
    def publish(self, vhost: VirtualHost, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
                headers: dict | None, confirm: bool) -> tuple[Publish | None, bool]:
        """Route and stage one message; returns (its Publish if confirm, whether it reached a queue).

        Raises ChannelError for a missing (404) or internal (403) exchange.
        """
        delay_log = vhost.delay_logs.get(exchange) if vhost.delay_logs else None
        if delay_log is not None and delay_of(headers) > 0:
            return self._hold(vhost, delay_log, routing_key, properties_raw, body, headers, confirm)
        queues = vhost.route(exchange, routing_key, headers)
        publish = Publish() if confirm else None
        xlog = vhost.exchange_logs.get(exchange) if vhost.exchange_logs else None
        if not queues and xlog is None:
            return publish, False
        now_ms = int(self.clock() * 1000)
        xdedup = vhost.exchanges[exchange].dedup if exchange else None
        if xdedup is not None and not self._admitted(vhost, exchange, xdedup, properties_raw, now_ms):
            return publish, True  # a duplicate: confirmed, not stored again, and not "unroutable" either
        try:
            key, value, record_headers, timestamp, encoded_headers = mapping.stored_form(
                exchange, routing_key, properties_raw, body, now_ms)
        except ValueError as exc:  # a property section the codec let through but that does not decode
            raise ConnectionError(FRAME_ERROR, f"cannot decode content properties: {exc}") from None
        tail = record_tail(key, value, record_headers, encoded_headers)
        size = len(body)
        if xlog is not None:  # the exchange's own log takes every message, routed or not
            self._stage(xlog, properties_raw, timestamp, tail, publish, size)
        for queue in queues:
            if queue.args.overflow != "drop-head" and not self._admits(queue, len(body)):
                if publish is not None:
                    publish.rejected = True
                if queue.args.overflow == "reject-publish-dlx":
                    queue._dead_letter(Record(0, timestamp, key, value, record_headers), "maxlen")
                continue
            if queue.dedup is not None and not self._admitted(vhost, None, queue.dedup, properties_raw, now_ms,
                                                              queue):
                continue
            self._stage(queue, properties_raw, timestamp, tail, publish, size)
        return publish, bool(queues)

    def _hold(self, vhost: VirtualHost, delay_log: DelayLog, routing_key: str, properties_raw: bytes, body: bytes,
              headers: dict, confirm: bool) -> tuple[Publish | None, bool]:
        """A publish with x-delay > 0 to a delayed-message exchange: appended to its delay log."""
        vhost.route(delay_log.name, routing_key, headers)  # 404/403 as for any publish to it
        if delay_log.held >= self.delayed_max:
            raise ChannelError(PRECONDITION_FAILED, f"delayed-message exchange '{delay_log.name}' in vhost "
                                                    f"'{vhost.name}' holds {delay_log.held} messages, its limit "
                                                    f"(--delayed-messages-max): publish later or raise the limit")
        now_ms = int(self.clock() * 1000)
        try:
            key, value, record_headers, timestamp, encoded_headers = mapping.stored_form(
                delay_log.name, routing_key, properties_raw, body, now_ms)
        except ValueError as exc:
            raise ConnectionError(FRAME_ERROR, f"cannot decode content properties: {exc}") from None
        publish = Publish() if confirm else None
        delay_log.expect(timestamp + delay_of(headers))
        self._stage(delay_log, properties_raw, timestamp, record_tail(key, value, record_headers, encoded_headers),
                    publish, len(body))
        return publish, True  # held messages count as routed (RabbitMQ's plugin does not return them)

    def next_delayed_due(self) -> int | None:
        """The earliest due time (ms) of any held delayed message, for the one release timer."""
        dues = [d.next_due() for v in self.vhosts.values() for d in v.delay_logs.values()]
        dues = [d for d in dues if d is not None]
        return min(dues) if dues else None

    def release_delayed(self) -> int:
        """Route every held message now due (and durable) through its exchange; returns how many."""
        now_ms, released = int(self.clock() * 1000), 0
        for vhost in self.vhosts.values():
            for delay_log in list(vhost.delay_logs.values()):
                delay_log.settle(now_ms)
                for offset, record in delay_log.take_due(now_ms):
                    copy = self._route_stored(vhost, delay_log.name, record, track=True)
                    delay_log.routing(offset, copy or None)  # False: the exchange is gone, nothing to route
                    released += copy is not False
        return released

    def _route_stored(self, vhost: VirtualHost, exchange: str, record: Record, track: bool = False):
        """Publish a stored record (AMQP form) through ``exchange``; False if the exchange is gone.
        ``track``: a DeadLetterCopy that learns when every target queue stored it (None: no target)."""
        _, routing_key, properties_raw = mapping.amqp_from_record(record)
        try:
            queues = vhost.route(exchange, routing_key, message_fields.headers_table(properties_raw))
        except Exception:  # the exchange went away meanwhile
            return False
        copy = DeadLetterCopy(list(queues)) if track and queues else None
        for queue in queues:
            self.stage_record(queue, Record(0, record.timestamp, record.key, record.value, record.headers), copy)
        return copy if track else True

    @staticmethod
    def _admitted(vhost: VirtualHost, exchange: str | None, dedup: Deduplicator, properties_raw: bytes,
                  now_ms: int, queue: Queue | None = None) -> bool:
        """Whether a publish passes a de-duplicator, which first learns its window from the logs."""
        if not dedup.loaded:
            if queue is not None:
                dedup.rebuild(recent_records(queue.plog, dedup.size), now_ms)
            else:  # an exchange's window: what it routed into any queue of the vhost
                dedup.rebuild((r for q in vhost.queues.values() for r in recent_records(q.plog, dedup.size)),
                              now_ms, exchange=exchange)
        try:
            key = dedup.key(properties_raw)
        except ValueError:
            return True  # malformed properties: record_from_amqp refuses them with the right error
        return dedup.admit(key, now_ms)

    def _stage(self, target, source: message_fields.Source, timestamp: int, tail: bytes, publish: Publish | None,
               size: int) -> None:
        staged = self._staged.get(target)
        if staged is None:
            self._staged[target] = [source, timestamp, tail, publish, size]
        else:
            staged += (source, timestamp, tail, publish, size)

    def _admits(self, queue: Queue, size: int) -> bool:
        staged = self._staged.get(queue)
        return queue.admits(size, len(staged) // _STAGED_FIELDS if staged else 0)

    def stage_record(self, queue: Queue, record: Record, publish=None) -> None:
        """``publish``: anything with ``targets`` and ``rejected`` to learn where it went (a
        :class:`Publish`, or an at-least-once dead letter's routing.dead_letter.DeadLetterCopy)."""
        self._stage(queue, record, record.timestamp, record_tail(record.key, record.value, record.headers), publish,
                    len(record.value or b""))

    def stage_stored(self, queue: Queue, record: Record, publish: Publish | None) -> None:
        """Stage a record made elsewhere (a stream-protocol publish) on a queue, with its confirm."""
        self._stage(queue, record, record.timestamp, record_tail(record.key, record.value, record.headers), publish,
                    len(record.value or b""))

    def commit(self) -> list[Queue]:
        """Append everything staged, one batch per queue; returns the queues appended to."""
        if not self._staged:
            return []
        staged_map, self._staged = self._staged, {}
        for queue, staged in staged_map.items():
            if queue.deleted:
                continue
            timestamps = staged[1::_STAGED_FIELDS]
            count = len(timestamps)
            if queue.remote:
                self._forward_staged(queue, staged, timestamps)
                continue
            max_timestamp = max(timestamps) if count > 1 else timestamps[0]
            try:
                info = queue.plog.append_built(*built_batch(timestamps, staged[2::_STAGED_FIELDS]), count,
                                               max_timestamp)
            except Exception as exc:  # e.g. a Kafka-made topic with a smaller max.message.bytes
                first = self.on_storage_error() if isinstance(exc, StorageError) else True
                log.log(logging.ERROR if first else logging.DEBUG, "cannot append %d message(s) to queue %s in "
                        "vhost %s: %s", count, queue.name, queue.vhost, exc)
                for publish in staged[3::_STAGED_FIELDS]:
                    if publish is not None:
                        publish.rejected = True  # nack: the publisher must not think it is stored
                if isinstance(queue, DelayLog):
                    queue.append_failed(count)
                if queue.dedup is not None:
                    for source in staged[0::_STAGED_FIELDS]:
                        queue.dedup.forget(queue.dedup.key(source))
                continue
            first_offset = info.first_offset
            sizes = staged[4::_STAGED_FIELDS]
            if isinstance(queue, Queue):  # the sources tell a quorum queue about high priorities
                queue.appended(first_offset, sizes, staged[0::_STAGED_FIELDS])
            else:
                queue.appended(first_offset, sizes)
            stats = queue.stats
            stats.published += count
            stats.published_bytes += sum(sizes)
            queue.appended_limits()
            plog = queue.plog
            for i, publish in enumerate(staged[3::_STAGED_FIELDS], first_offset):
                if publish is not None:
                    publish.targets.append((plog, i))
        self.on_appended()
        return list(staged_map)

    def _forward_staged(self, queue: Queue, staged: list, timestamps: list[int]) -> None:
        """A queue led by another broker: its staged messages go there as one batch."""
        buffers, length, crc = built_batch(timestamps, staged[2::_STAGED_FIELDS])
        stamp_built(buffers, length, crc, 0, -1)
        publishes = [p for p in staged[3::_STAGED_FIELDS] if p is not None]
        for publish in publishes:
            publish.forwarded += 1
        queue.stats.published += len(timestamps)
        queue.stats.published_bytes += sum(staged[4::_STAGED_FIELDS])
        self.forward(queue, b"".join(buffers), len(timestamps), publishes)

    @staticmethod
    def _cannot_forward(queue: Queue, batch: bytes, count: int, publishes: list) -> None:
        log.warning("%d message(s) for queue %s in vhost %s not stored: it is led by another broker and this "
                    "broker forwards to none", count, queue.name, queue.vhost)
        for publish in publishes:
            publish.forwarded -= 1
            publish.rejected = True

    def settle_appends(self) -> None:
        """Commit, let the queues appended to deliver, and repeat while that dead-letters more."""
        touched = self.commit()
        while touched:
            for queue in touched:
                if queue.consumers and not queue.deleted:
                    queue.dispatch()
            touched = self.commit()

    # --- the log moved ----------------------------------------------------------------
    def log_moved(self) -> None:
        """High watermarks may have moved: let the queues with consumers and something new deliver
        (and held delayed messages that came due before they were durable go).

        Runs after every group-commit fsync; with thousands of queues, most of which did not move,
        a queue is dispatched only if its log grew behind its back (a Kafka producer appended)
        or it still holds ready messages. Held at-least-once dead letters whose copies became
        durable are settled in their source queues."""
        self._forward_exchange_logs()
        self.release_delayed()
        for queue in list(self.dead_letters.settling):
            self.dead_letters.settle(queue)
        for vhost in self.vhosts.values():
            for queue in list(vhost.consuming):  # not every queue: 10,000 idle ones cost a scan per fsync
                if queue.consumers and queue.may_deliver():
                    queue.dispatch()
        self.settle_appends()  # dead-lettered messages

    def _forward_exchange_logs(self) -> None:
        """Records Kafka producers wrote to an exchange log are published through the exchange."""
        for vhost in self.vhosts.values():
            for xlog in list(vhost.exchange_logs.values()):
                for record in xlog.foreign_records():
                    if not self._route_stored(vhost, xlog.name, record):
                        break

    def tick(self) -> None:
        """Periodic: expire messages at queue heads, release quorum queues' delayed retries that
        came due, drop unused queues (x-expires), route held at-least-once dead letters again."""
        now = self.clock()
        self.shares.expire_locks()
        self.shares.sync_remote()
        for vhost in self.vhosts.values():
            vhost.refresh_policies()
            for queue in list(vhost.queues.values()):
                if queue.remote:
                    continue  # its leader expires its messages and the queue itself
                queue.expire_head()
                if queue.retries:
                    queue.release_due_retries()
                if queue.held.reasons:
                    self.dead_letters.retry(vhost, queue)
                expires = queue.args.expires
                if expires is not None and not queue.consumers and (now - queue.last_used) * 1000 >= expires:
                    log.info("queue %s in vhost %s expired (x-expires %d ms)", queue.name, vhost.name, expires)
                    vhost.delete_queue(queue.name, owner=queue.exclusive_owner)
        self.settle_appends()

    # --- dead-lettering ----------------------------------------------------------------
    def _dead_letter(self, queue: Queue, record: Record, reason: str, held: int | None = None) -> None:
        """Send a queue's dead letter on (see routing.dead_letter). ``held``: the source offset of
        an at-least-once dead letter, which stays in the queue until its copies are durable;
        otherwise at most once: staged now, or dropped without a route, as RabbitMQ does."""
        vhost = self.vhosts.get(queue.vhost)
        if vhost is None or queue.args.dead_letter_exchange is None:
            return
        if held is not None:
            self.dead_letters.forward(vhost, queue, held, record, reason)
            return
        built = dead_letter_copy(vhost, queue, record, reason, self.clock())
        if built is not None:
            targets, copy = built
            for target in targets:
                self.stage_record(target, copy)
