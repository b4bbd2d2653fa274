"""Share partitions (KIP-932): a share group's delivery state over one topic partition IS a queue.

DESIGN.md: delivery state is one thing. What Kafka keeps per share partition (the start
offset below which every record is settled, acquired records with their locks, delivery
counts, archived records) is what :class:`routing.queue.Queue` keeps over its cursor (the ack
floor, unacked offsets with owners, delivery counts, settled offsets), so a share partition is
a queue driven by a Kafka share group:

* a share group named like an AMQP queue, reading that queue's topic (partition), uses **that
  queue**: pika consumers and share consumers compete for the same messages, each goes to one
  consumer of either kind, a release (or an expired lock) returns it to both, a reject
  dead-letters it per the queue's arguments, and the delivery count is the queue's count;
* any other (group, topic, partition) gets a :class:`ShareQueue`, a queue nobody declared:
  it starts at ``share.auto.offset.reset`` (latest by default, as in Kafka), sees records
  below the high watermark only, and archives a record after ``group.share.delivery.count.limit``
  deliveries (Kafka's count limit is one more than a quorum queue's delivery limit).

Acquisition is ``Queue.get`` for the member's :class:`ShareOwner`; each acquired offset gets
a lock deadline (``share.record.lock.duration.ms``); :meth:`SharePartitions.expire_locks`
returns expired ones to the queue as a release would. Accept is an ack, release a requeue,
reject a reject without requeue. The start offsets and delivery counts of plain share
partitions are saved with the queues' ack floors (key ``share:<group>:<topic>[#partition]``).
"""
from __future__ import annotations

import logging
import struct
import time
from typing import Callable

from core.log import PartitionLog
from routing.queue import Queue, position_key
from routing.reader import CommittedReader

log = logging.getLogger(__name__)

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3  # Kafka's AcknowledgeType
DEFAULT_LOCK_MS = 30_000  # group.share.record.lock.duration.ms
DEFAULT_DELIVERY_COUNT_LIMIT = 5  # group.share.delivery.count.limit
PENDING = object()  # a start offset being read from the group's coordinator
_PEEK = struct.Struct(">qi11xi")  # baseOffset, batchLength, lastOffsetDelta (at byte 23)
_READ_BYTES = 1 << 20


class ShareOwner:
    """Owns, in a queue's cursor, what one member of one share group acquired."""
    __slots__ = ("group", "member_id")

    def __init__(self, group: str, member_id: str):
        self.group, self.member_id = group, member_id

    def __repr__(self) -> str:
        return f"<share member {self.member_id} of {self.group}>"


class ShareQueue(Queue):
    """A plain share partition: a queue over a Kafka topic partition that no one declared."""

    counts_deliveries = True  # every delivery counts towards the delivery-count limit

    def _priority_stage(self, prioritised: bool):
        return None  # Kafka records are delivered in offset order (returned ones first)

    # () -> None (read_uncommitted) or (last stable offset, aborted(start, end)): see CommittedReader
    committed_view: Callable[[], tuple | None] = staticmethod(lambda: None)

    def attach(self, plog: PartitionLog) -> None:
        super().attach(plog)
        self.reader = CommittedReader(plog, lambda: self.committed_view())

    def sync_end(self) -> None:
        self.cursor.log_start(self.plog.log_start_offset)
        view = self.committed_view()
        # Kafka readers see replicated records only; read_committed ones stop at an open transaction
        self.cursor.log_end(self.plog.high_watermark if view is None else min(view[0], self.plog.high_watermark))


class SharePartition:
    def __init__(self, group: str, queue: Queue, shared: bool, written_start: int = -1):
        self.group = group
        self.queue = queue
        self.shared = shared  # True: the AMQP queue of the same name
        self.locks: dict[int, float] = {}  # acquired offset -> lock deadline (clock seconds)
        # the start offset Kafka's share coordinator would hold: each state write (a request's
        # acknowledgements, a release, an expiry) carries the start offset as it stood before
        # that write moved it; -1 until the first write. DescribeShareGroupOffsets reports it.
        self.written_start = written_start

    def writing(self) -> int:
        """Call before a state write; pass what it returns to :meth:`written`."""
        return self.queue.ack_floor

    def written(self, before: int) -> None:
        self.written_start = before

    @property
    def plog(self) -> PartitionLog:
        return self.queue.plog

    def delivery_count(self, offset: int, redelivered: bool) -> int:
        """Kafka's delivery count of a delivery being made now (1 for the first)."""
        if self.queue.counts_deliveries:
            return self.queue.delivery_counts.get(offset, 0) + 1
        return 2 if redelivered else 1

    def acquire(self, owner: ShareOwner, max_records: int, max_bytes: int, deadline: float) -> list[tuple[int, int]]:
        """Acquire up to ``max_records`` for ``owner``: [(offset, delivery count)] in offset order,
        but in the queue's delivery order for an AMQP queue that orders by priority (a consumer on
        another broker delivers them in the order of the acquired ranges, gateway.cluster.amqp_consume).

        As in Kafka, ``max_records`` is soft: the stored batch the limit falls in is handed over
        whole (the client receives whole batches anyway; cutting one would leave its tail to
        another member while the records travel here too)."""
        out, size = [], 0
        queue = self.queue
        batch_end = None
        while not out or size < max_bytes:
            if len(out) >= max_records:
                if self.shared:
                    break  # an AMQP queue's batches are the publishers' loop turns, not a Kafka producer's
                if batch_end is None:
                    batch_end = self._batch_end(out[-1][0])
                following = queue.cursor.peek()
                if following is None or following > batch_end:
                    break
            taken = queue.get(owner, no_ack=False)
            if taken is None:
                break
            offset, redelivered, record = taken
            out.append((offset, self.delivery_count(offset, redelivered)))
            self.locks[offset] = deadline
            size += len(record.value or b"") + len(record.key or b"") + 70
        if not (self.shared and queue.stage is not None):
            out.sort()
        return out

    def _batch_end(self, offset: int) -> int:
        """The last offset of the stored batch holding ``offset``."""
        data = self.plog.read(offset, 1, max_offset=self.plog.next_offset).records
        if len(data) < _PEEK.size:
            return offset
        base, _length, delta = _PEEK.unpack_from(data, 0)
        return max(base + delta, offset)

    def owned(self, offset: int, owner: ShareOwner) -> bool:
        return self.queue.cursor.owner_of(offset) is owner

    def acknowledge(self, owner: ShareOwner, first: int, last: int, types: tuple[int, ...]) -> bool:
        """One acknowledgement batch; False (nothing done) if an offset is not acquired by ``owner``."""
        offsets = range(first, last + 1)
        if not types or (len(types) != 1 and len(types) != len(offsets)) or any(t not in (0, 1, 2, 3) for t in types):
            return False
        kinds = [types[0]] * len(offsets) if len(types) == 1 else list(types)
        if any(kind != GAP and not self.owned(o, owner) for o, kind in zip(offsets, kinds)):
            return False
        accept, release, reject = [], [], []
        for offset, kind in zip(offsets, kinds):
            if kind == GAP and not self.owned(offset, owner):
                continue  # a gap (no record there) that was never acquired
            self.locks.pop(offset, None)
            (release if kind == RELEASE else reject if kind == REJECT else accept).append(offset)
        if accept:
            self.queue.ack(accept)
        if release:
            self.queue.reject(release, requeue=True)
        if reject:
            self.queue.reject(reject, requeue=False)
        return True

    def release_owner(self, owner: ShareOwner) -> int:
        mine = self.queue.cursor.owned_by(owner)
        for offset in mine:
            self.locks.pop(offset, None)
        if mine:
            self.written(self.writing())
            self.queue.reject(mine, requeue=True)
        return len(mine)

    def expire(self, now: float) -> int:
        """Acquisition locks past their deadline: those records go back as released."""
        late = [o for o, deadline in self.locks.items() if deadline <= now]
        if not late:
            return 0
        for offset in late:
            del self.locks[offset]
        cursor = self.queue.cursor
        late = [o for o in late if isinstance(cursor.owner_of(o), ShareOwner)]
        if late:
            self.written(self.writing())
            self.queue.reject(sorted(late), requeue=True)
        return len(late)

    def read_batches(self, offsets: list[int]) -> bytes:
        """The stored batches holding ``offsets`` (sorted), each once, read from the log as stored."""
        plog, out, position = self.plog, [], -1
        end = plog.next_offset
        runs: list[list[int]] = []
        for offset in offsets:
            if runs and offset == runs[-1][1] + 1:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset])
        for first, last in runs:
            at = max(first, position)
            while at <= last and at < end:
                data = plog.read(at, _READ_BYTES, max_offset=end).records
                if not data:
                    break
                cut, batch_end = 0, at
                while cut + _PEEK.size <= len(data):
                    base, length, delta = _PEEK.unpack_from(data, cut)
                    if base > last:
                        break
                    cut += 12 + length
                    batch_end = base + delta + 1
                out.append(data[:cut])
                if batch_end <= at:
                    break
                at = position = batch_end
        return b"".join(out)


class SharePartitions:
    """Every share partition of this broker, found or made on first use.

    ``router`` gives the AMQP model (None when this broker runs none: then every share partition
    is a plain one); ``auto_offset_reset(group)`` is ``"earliest"``, ``"latest"`` or a timestamp
    in ms; ``lock_ms(group)`` the acquisition lock duration."""

    def __init__(self, router: Callable[[], object], *, clock: Callable[[], float] = time.time,
                 delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT):
        self.router = router
        self.clock = clock
        self.delivery_count_limit = delivery_count_limit
        self.auto_offset_reset: Callable[[str], str | int] = lambda group: "latest"
        self.lock_ms: Callable[[str], int] = lambda group: DEFAULT_LOCK_MS
        # share.isolation.level of a group: read_committed gets stable(topic, index, plog), which is
        # (last stable offset, aborted(start, end)) as routing.reader.CommittedReader takes it
        self.read_committed: Callable[[str], bool] = lambda group: False
        self.stable: Callable[[str, int, PartitionLog], tuple] | None = None
        self.partitions: dict[tuple[str, str, int], SharePartition] = {}
        self.owners: dict[tuple[str, str], ShareOwner] = {}
        self.saved: dict[str, dict] = {}  # share:... -> {"floor", "deliveries"}, from the last run
        self.on_released: Callable[[], None] = lambda: None  # records became available again
        # cluster mode: start offsets kept by the group's coordinator (gateway.cluster.share_state),
        # since a partition's leader may change; None on a single node (the file above is enough)
        self.remote = None
        self._remote_written: dict[tuple[str, str, int], dict] = {}  # the snapshots written last

    # --- finding ----------------------------------------------------------------------------
    def owner(self, group: str, member_id: str) -> ShareOwner:
        key = (group, member_id)
        owner = self.owners.get(key)
        if owner is None:
            owner = self.owners[key] = ShareOwner(group, member_id)
        return owner

    def get(self, group: str, topic: str, index: int, plog: PartitionLog) -> SharePartition | None:
        """The share partition; None while its start offset is being read from the group's
        coordinator (cluster mode): ask again later."""
        key = (group, topic, index)
        sp = self.partitions.get(key)
        if sp is not None and not sp.queue.deleted and sp.plog is plog and (sp.shared or self._queue_for(*key) is None):
            return sp
        if sp is not None:  # its queue was deleted or declared, or the log replaced: let go of it
            self._drop(sp)
        queue = self._queue_for(group, topic, index)
        if queue is not None and queue.remote:
            # cluster mode 'spread': this broker leads the topic but has not made the queue its own
            # yet (it does at its next tick): ask again later, as while a start offset is read
            return None
        if queue is not None:
            sp = SharePartition(group, queue, True)
        else:
            saved = self.saved.get(_key(group, topic, index))
            if self.remote is not None:
                start = self.remote.start(group, topic, index)
                if start is PENDING:
                    return None
                saved = start  # the snapshot the last leader wrote (snapshot() below), or None
                if start is not None:
                    self._remote_written[key] = start
            # a start offset read back is what was written last
            sp = SharePartition(group, self._plain(group, topic, index, plog, saved), False,
                                -1 if saved is None else saved.get("floor", 0))
        self.partitions[key] = sp
        return sp

    def _queue_for(self, group: str, topic: str, index: int) -> Queue | None:
        router = self.router()
        if router is None:
            return None
        for vhost in router.vhosts.values():
            queue = vhost.queues.get(group)
            if queue is not None and queue.topic == topic and queue.partition == index and not queue.is_stream \
                    and not queue.deleted:
                return queue
        return None

    def _plain(self, group: str, topic: str, index: int, plog: PartitionLog, saved: dict | None) -> ShareQueue:
        if saved is not None:
            floor = saved.get("floor", 0)
        else:
            reset = self.auto_offset_reset(group)
            if reset == "earliest":
                floor = plog.log_start_offset
            elif reset == "latest":
                floor = plog.high_watermark
            else:
                found = plog.offset_for_timestamp(int(reset))
                floor = plog.high_watermark if found is None else found[0]
        counts = {int(o): n for o, n in (saved or {}).get("deliveries", {}).items()}
        queue = ShareQueue("", group, topic, None, durable=True, exclusive_owner=None, auto_delete=False,
                           arguments={"x-delivery-limit": self.delivery_count_limit - 1}, ack_floor=floor,
                           clock=self.clock, delivery_counts=counts)
        queue.partition = index
        queue.committed_view = lambda: (self.stable(topic, index, plog)
                                        if self.stable is not None and self.read_committed(group) else None)
        queue.attach(plog)
        settled = [o for first, last in (saved or {}).get("settled", ()) for o in range(first, last + 1)]
        if settled:  # archived above the start offset: never delivered again
            queue.cursor.settle(settled)
        return queue

    def _drop(self, sp: SharePartition) -> None:
        if not sp.queue.deleted and sp.shared:
            for owner in {o for o in sp.queue.cursor.unacked.values() if isinstance(o, ShareOwner)}:
                sp.release_owner(owner)
        self.partitions.pop((sp.group, sp.queue.topic, sp.queue.partition), None)

    # --- members come and go -------------------------------------------------------------------
    def release_member(self, group: str, member_id: str) -> int:
        """A member left its group (or its share session closed): what it acquired goes back."""
        owner = self.owners.pop((group, member_id), None)
        if owner is None:
            return 0
        released = 0
        for (g, _t, _i), sp in list(self.partitions.items()):
            if g == group and not sp.queue.deleted:
                released += sp.release_owner(owner)
        if released:
            self.changed([sp.queue for (g, _t, _i), sp in self.partitions.items() if g == group])
        return released

    def expire_locks(self) -> int:
        now, expired, touched = self.clock(), 0, []
        for sp in list(self.partitions.values()):
            if sp.locks and not sp.queue.deleted:
                n = sp.expire(now)
                if n:
                    expired += n
                    touched.append(sp.queue)
        if expired:
            log.info("share groups: %d acquisition lock(s) expired, records released", expired)
            self.changed(touched)
        return expired

    def changed(self, queues: list[Queue]) -> None:
        """Records were released or rejected: AMQP consumers of shared queues and parked share
        fetches may take them; dead letters get appended."""
        for queue in queues:
            if queue.consumers and not queue.deleted:
                queue.dispatch()
        router = self.router()
        if router is not None:
            router.settle_appends()
        self.on_released()

    # --- persistence (with the queues' ack floors; cluster mode: with the group's coordinator) ----
    def sync_remote(self) -> None:
        """Cluster mode: send the start offsets that moved to their groups' coordinators."""
        if self.remote is None:
            return
        moved = {}
        for key, sp in self.partitions.items():
            if sp.shared or sp.queue.deleted:
                continue
            state = snapshot(sp.queue)
            if self._remote_written.get(key) != state:
                moved[key] = state
        if moved:
            self._remote_written.update(moved)
            self.remote.write(moved)

    def forget_partition(self, topic: str, index: int) -> None:
        """This broker (again) leads a partition: what it knew of its share state may be stale."""
        for key in [k for k in self.partitions if k[1] == topic and k[2] == index]:
            del self.partitions[key]
            self._remote_written.pop(key, None)
        if self.remote is not None:
            self.remote.forget(topic, index)

    def positions(self) -> dict[str, dict]:
        out = dict(self.saved)
        for (group, topic, index), sp in self.partitions.items():
            if sp.shared or sp.queue.deleted:
                continue
            out[_key(group, topic, index)] = snapshot(sp.queue)
        return out

    def restore(self, positions: dict[str, dict]) -> None:
        self.saved = {k: v for k, v in positions.items() if k.startswith("share:")}

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[1] == topic]:
            del self.partitions[key]
        self.saved = {k: v for k, v in self.saved.items() if _split(k)[1][0] != topic}

    def forget_group(self, group: str) -> None:
        for key in [k for k in self.partitions if k[0] == group]:
            self._drop(self.partitions[key])
        self.saved = {k: v for k, v in self.saved.items() if not k.startswith(f"share:{group}:")}

    def set_start(self, group: str, topic: str, index: int, plog: PartitionLog, offset: int) -> None:
        """AlterShareGroupOffsets of a plain share partition: start at ``offset`` (within the log),
        with no record acquired or counted; the group has no members (the caller checks)."""
        sp = self.partitions.pop((group, topic, index), None)
        if sp is not None and sp.shared:
            raise ValueError(f"share group {group} reads AMQP queue {sp.queue.name!r}: its position is the "
                             f"queue's (purge the queue, or consume it)")
        start = min(max(offset, plog.log_start_offset), plog.high_watermark)
        self.saved[_key(group, topic, index)] = {"floor": start}
        if self.remote is not None:  # cluster mode: the coordinator's copy is what a leader reads
            self._remote_written[(group, topic, index)] = {"floor": start}
            self.remote.write({(group, topic, index): {"floor": start}})

    def reset_topic(self, group: str, topic: str) -> None:
        """DeleteShareGroupOffsets: the group forgets the topic; a later fetch starts afresh."""
        for key in [k for k in self.partitions if k[0] == group and k[1] == topic]:
            self._drop(self.partitions[key])
        self.saved = {k: v for k, v in self.saved.items() if _split(k)[0] != group or _split(k)[1][0] != topic}
        if self.remote is not None:
            self.remote.delete(group, topic)

    def shared_queue(self, group: str, topic: str, index: int) -> Queue | None:
        return self._queue_for(group, topic, index)

    def describe(self, group: str, as_written: bool = False) -> list[tuple[str, int, int]]:
        """(topic, partition, start offset) of each share partition of ``group`` known here: its
        ack floor, or with ``as_written`` (DescribeShareGroupOffsets) for a plain one the start
        offset its last state write carried (-1 before any), as Kafka's share coordinator
        reports it."""
        out = {}
        for key, value in self.saved.items():
            g, where = _split(key)
            if g == group:
                out[where] = value.get("floor", 0)
        for (g, topic, index), sp in self.partitions.items():
            if g == group and not sp.queue.deleted:
                out[(topic, index)] = sp.written_start if as_written and not sp.shared else sp.queue.ack_floor
        return sorted((t, i, floor) for (t, i), floor in out.items())


def snapshot(queue: Queue) -> dict:
    """A plain share partition's state as Kafka's share snapshot has it: the start offset, the
    delivery count of every record above it that was delivered (one still acquired counts its
    current delivery), and the ranges archived above it. Saved with the ack floors, and in
    cluster mode kept by the group's coordinator, so a new leader goes on where the last stopped."""
    counts = {int(o): n for o, n in queue.delivery_counts_json().items()}
    for offset in queue.cursor.unacked:
        counts[offset] = counts.get(offset, 0) + 1
    entry: dict = {"floor": queue.ack_floor}
    if counts:
        entry["deliveries"] = {str(o): n for o, n in sorted(counts.items())}
    if queue.cursor.settled_above:
        ranges: list[list[int]] = []
        for offset in sorted(queue.cursor.settled_above):
            if ranges and ranges[-1][1] == offset - 1:
                ranges[-1][1] = offset
            else:
                ranges.append([offset, offset])
        entry["settled"] = ranges
    return entry


def _key(group: str, topic: str, index: int) -> str:
    return f"share:{group}:{position_key(topic, index)}"


def _split(key: str) -> tuple[str, tuple[str, int]]:
    """share:<group>:<topic>[#p] -> (group, (topic, p)); group ids may hold ':', topics may not."""
    body = key[len("share:"):]
    group, _, where = body.rpartition(":")
    topic, _, part = where.partition("#")
    return group, (topic, int(part) if part else 0)
