"""The transaction coordinator: transactional ids, their producers and the two-phase end.

Kafka's design (KIP-98). A transactional id owns one producer id; every
InitProducerId for it bumps the epoch, which fences the previous holder: its requests get
PRODUCER_FENCED here and INVALID_PRODUCER_EPOCH from the partitions, once a marker of the
newer epoch lands there. A transaction adds partitions (AddPartitionsToTxn, and for offsets
AddOffsetsToTxn, which adds the group's ``__consumer_offsets`` partition), then ends:

1. the decision (PrepareCommit / PrepareAbort) is appended to ``__transaction_state`` and
   must be durable before anything else happens, so a crash after it cannot split the
   outcome between partitions;
2. a control batch (the marker) is appended to every partition of the transaction, offsets
   committed in it are applied (commit) or dropped (abort), and CompleteCommit /
   CompleteAbort is appended.

Operations return a :class:`Step`: what to answer, which appends must be durable first and,
for two-phase operations, what to run once they are (``then``). While a transaction is in
a Prepare state, every other request about it gets CONCURRENT_TRANSACTIONS, which clients
retry. At start-up a transaction found in a Prepare state is completed; one found Ongoing
is aborted when its timeout passes, like one whose producer vanished.

In cluster mode the coordinator of an id is the leader of its ``__transaction_state``
partition (``leads``): markers for partitions led by other brokers come back as
``Step.remote`` for the gateway to send (WriteTxnMarkers), Complete* follows once they are
durable, and a new leader of the partition reloads it (:meth:`load_partition`) and finishes
what was prepared. A data partition's leader does not know the producer's transaction
(``coordinates_all`` False); before a transaction's first batch there it asks the
coordinator (:meth:`verify`, or :meth:`add_partitions` for a version 2 producer, which adds
partitions by producing to them), so no batch opens a transaction its coordinator does not know.

Transaction version 2 (KIP-890): a producer that learnt the broker finalizes
``transaction.version`` 2 adds partitions implicitly (its first Produce to a partition, its
TxnOffsetCommit) and every EndTxn bumps its epoch: the markers carry the new epoch, so a late
batch of the old transaction is refused as from a fenced producer.

``__transaction_state`` is compacted and keyed by transactional id, in Kafka's own record
format (TransactionLogKey v0, TransactionLogValue v0), so Kafka tools can read it::

    key    int16 version = 0, string transactional_id
    value  int16 version = 0, int64 producer_id, int16 producer_epoch, int32 timeout_ms,
           int8 state, int32 n x (string topic, int32 m x int32 partition),
           int64 last_update_ms, int64 start_ms

Thread-safety: none; the owner's (reactor) thread only, like the logs it writes.
"""
from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from kio.schema.errors import ErrorCode

from core.errors import LogError
from core.log_manager import LogManager
from core.offsets import OFFSETS_TOPIC, DurableAt, OffsetAndMetadata, OffsetStore, java_string_hash
from core.producers import MAX_EPOCH, ProducerStates
from wire.records import Record, control_record, encode_batch

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"
TXN_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD = (
    "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")
_STATE_CODES = {EMPTY: 0, ONGOING: 1, PREPARE_COMMIT: 2, PREPARE_ABORT: 3, COMPLETE_COMMIT: 4, COMPLETE_ABORT: 5,
                DEAD: 6}
_STATE_NAMES = {code: name for name, code in _STATE_CODES.items()}
_PREPARING = (PREPARE_COMMIT, PREPARE_ABORT)
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")

TopicPartition = tuple[str, int]


@dataclass
class Transaction:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1


@dataclass
class Step:
    """What an operation answers, after ``durable`` appends are durable, and what runs next."""
    error: ErrorCode = ErrorCode.none
    durable: list[DurableAt] = field(default_factory=list)
    then: Callable[[], "Step"] | None = None
    producer_id: int = -1
    epoch: int = -1
    partition_errors: dict[TopicPartition, ErrorCode] = field(default_factory=dict)
    # cluster mode: markers another broker must write (WriteTxnMarkers) before ``then`` runs
    remote: "RemoteMarkers | None" = None


@dataclass(frozen=True)
class RemoteMarkers:
    """Markers of one transaction for partitions led by other brokers."""
    producer_id: int
    epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    transactional_id: str = ""  # whose: markers are sent while this broker coordinates it


# --- record format -------------------------------------------------------------------------

def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise ValueError("string runs past the end of the record")
    return buf[pos:pos + n].decode(), pos + n


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def decode_key(key: bytes) -> str:
    (version,) = _I16.unpack_from(key, 0)
    if version != 0:
        raise ValueError(f"transaction log key version {version}")
    return _read_string(key, 2)[0]


def encode_value(txn: Transaction) -> bytes:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        topics.setdefault(topic, []).append(partition)
    parts = [_I16.pack(0), _I64.pack(txn.producer_id), _I16.pack(txn.epoch), _I32.pack(txn.timeout_ms),
             _I8.pack(_STATE_CODES[txn.state]), _I32.pack(len(topics))]
    for topic, partitions in topics.items():
        parts += [_string(topic), _I32.pack(len(partitions)), b"".join(_I32.pack(p) for p in partitions)]
    parts += [_I64.pack(txn.update_ms), _I64.pack(txn.start_ms)]
    return b"".join(parts)


def decode_value(transactional_id: str, value: bytes) -> Transaction:
    (version,) = _I16.unpack_from(value, 0)
    if version != 0:
        raise ValueError(f"transaction log value version {version}")
    pid, epoch, timeout_ms, state = struct.unpack_from(">qhib", value, 2)
    pos = 2 + 8 + 2 + 4 + 1
    (n,) = _I32.unpack_from(value, pos)
    pos += 4
    partitions = set()
    for _ in range(n):
        topic, pos = _read_string(value, pos)
        (m,) = _I32.unpack_from(value, pos)
        pos += 4
        partitions.update((topic, p) for p in struct.unpack_from(f">{m}i", value, pos))
        pos += 4 * m
    update_ms, start_ms = struct.unpack_from(">qq", value, pos)
    return Transaction(transactional_id, pid, epoch, timeout_ms, _STATE_NAMES[state], partitions, start_ms, update_ms)


# --- the coordinator -----------------------------------------------------------------------

class TransactionCoordinator:
    def __init__(self, logs: LogManager, producers: ProducerStates, offsets: OffsetStore,
                 clock: Callable[[], float] = time.time, *, partitions: int = 1,
                 on_marker: Callable[[str, int], None] = lambda topic, partition: None):
        self.logs = logs
        self.producers = producers
        self.offsets = offsets
        self.clock = clock
        self.partitions = partitions
        self.on_marker = on_marker  # a marker moved this partition's last stable offset
        # cluster mode: whether this broker leads a __transaction_state partition / a data partition
        # (single node: it leads everything). Only a led partition's transactions are served here.
        self.leads: Callable[[int], bool] = lambda partition: True
        self.coordinates_all = True  # False in cluster mode
        self.txns: dict[str, Transaction] = {}
        self._by_producer: dict[int, str] = {}

    # --- life cycle -----------------------------------------------------------------
    def ensure_topic(self) -> None:
        """Create ``__transaction_state`` if missing; adopt the partition count of an existing one."""
        topic = self.logs.store.get_topic(TXN_TOPIC)
        if topic is None:
            try:
                self.logs.create_topic(TXN_TOPIC, self.partitions, TXN_TOPIC_CONFIGS)
            except LogError as exc:  # cluster mode: created by another broker meanwhile, or too few brokers yet
                log.warning("%s not created: %s", TXN_TOPIC, exc)
        else:
            self.partitions = topic.partitions

    def load(self) -> list[Step]:
        """Replay ``__transaction_state``; finish transactions a crash left in a Prepare state."""
        self.ensure_topic()
        self.txns.clear()
        for partition in range(self.partitions):
            plog = self.logs.logs.get((TXN_TOPIC, partition))
            if plog is None:  # cluster mode: held by other brokers
                continue
            for batch in plog.replay():
                if not batch.is_control:
                    for record in batch.records:
                        self._apply(record)
        self._by_producer = {t.producer_id: t.transactional_id for t in self.txns.values()}
        steps = [self._complete(t) for t in self.txns.values()
                 if t.state in _PREPARING and self.leads(self.partition_for(t.transactional_id))]
        if self.txns:
            log.info("loaded %d transactional id(s); %d transaction(s) completed after a restart",
                     len(self.txns), len(steps))
        return steps

    def load_partition(self, partition: int) -> list[Step]:
        """Cluster mode, on becoming leader of a ``__transaction_state`` partition: its transactions
        are read again from the replica and every prepared one is finished (markers, Complete*)."""
        self._sync_partitions()
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            self._by_producer.pop(self.txns.pop(tid).producer_id, None)
        plog = self.logs.logs.get((TXN_TOPIC, partition))
        if plog is None:
            return []
        for batch in plog.replay():
            if not batch.is_control:
                for record in batch.records:
                    self._apply(record)
        loaded = [t for tid, t in self.txns.items() if self.partition_for(tid) == partition]
        for txn in loaded:
            self._by_producer[txn.producer_id] = txn.transactional_id
        steps = [self._complete(t) for t in loaded if t.state in _PREPARING]
        log.info("%s-%d led here: %d transactional id(s) loaded, %d prepared transaction(s) being completed",
                 TXN_TOPIC, partition, len(loaded), len(steps))
        return steps

    def _sync_partitions(self) -> None:
        topic = self.logs.store.get_topic(TXN_TOPIC)
        if topic is not None:
            self.partitions = topic.partitions

    def _apply(self, record: Record) -> None:
        try:
            tid = decode_key(record.key)
            if record.value is None:
                self.txns.pop(tid, None)
            else:
                self.txns[tid] = decode_value(tid, record.value)
        except (ValueError, KeyError, struct.error, UnicodeDecodeError, TypeError) as exc:
            log.warning("skipping unreadable %s record at offset %d: %s", TXN_TOPIC, record.offset, exc)

    def partition_for(self, transactional_id: str) -> int:
        h = java_string_hash(transactional_id)
        return (0 if h == -(1 << 31) else abs(h)) % self.partitions

    def coordinates(self, transactional_id: str) -> bool:
        """Is this broker the transactional id's coordinator (single node: always)?"""
        return self.leads(self.partition_for(transactional_id))

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _persist(self, txn: Transaction) -> DurableAt:
        txn.update_ms = self._now_ms()
        partition = self.partition_for(txn.transactional_id)
        plog = self.logs.get_log(TXN_TOPIC, partition)
        info = plog.append(encode_batch([Record(0, txn.update_ms, encode_key(txn.transactional_id),
                                                encode_value(txn))]))
        return TXN_TOPIC, partition, info.last_offset

    # --- requests -------------------------------------------------------------------
    def init_producer(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                      epoch: int = -1) -> Step:
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            return Step(ErrorCode.invalid_transaction_timeout)
        txn = self.txns.get(transactional_id)
        if txn is None:
            txn = Transaction(transactional_id, self.producers.ids.allocate(), 0, timeout_ms)
            self.txns[transactional_id] = txn
            self._by_producer[txn.producer_id] = transactional_id
            return Step(durable=[self._persist(txn)], producer_id=txn.producer_id, epoch=txn.epoch)
        if txn.state in _PREPARING:
            return Step(ErrorCode.concurrent_transactions)
        if producer_id >= 0 and (producer_id != txn.producer_id or epoch > txn.epoch):
            return Step(ErrorCode.producer_fenced)  # KIP-360 recovery by a producer that is not the holder
        txn.timeout_ms = timeout_ms
        if txn.state == ONGOING:
            # A new holder: fence the old one and abort what it left open, at the new epoch.
            self._bump_epoch(txn)
            log.info("transactional id %r re-initialised: open transaction aborted, epoch now %d",
                     transactional_id, txn.epoch)
            return self._prepare(txn, commit=False, answer_producer=True)
        self._bump_epoch(txn)
        txn.state, txn.partitions, txn.start_ms = EMPTY, set(), -1
        return Step(durable=[self._persist(txn)], producer_id=txn.producer_id, epoch=txn.epoch)

    def _bump_epoch(self, txn: Transaction) -> None:
        if txn.epoch + 1 >= MAX_EPOCH:  # epoch exhausted: a new producer id, as Kafka does
            del self._by_producer[txn.producer_id]
            txn.producer_id, txn.epoch = self.producers.ids.allocate(), 0
            self._by_producer[txn.producer_id] = txn.transactional_id
        else:
            txn.epoch += 1

    def _check(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[Transaction | None, ErrorCode]:
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return None, ErrorCode.invalid_producer_id_mapping
        if txn.epoch != epoch:
            return None, ErrorCode.producer_fenced
        if txn.state in _PREPARING:
            return None, ErrorCode.concurrent_transactions
        return txn, ErrorCode.none

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition]) -> Step:
        partitions = list(partitions)
        txn, error = self._check(transactional_id, producer_id, epoch)
        if txn is None:
            return Step(error, partition_errors={tp: error for tp in partitions})
        unknown = {tp for tp in partitions if not self._exists(tp)}
        if unknown:
            return Step(ErrorCode.unknown_topic_or_partition, partition_errors={
                tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in partitions})
        return self._add(txn, partitions)

    def verify(self, transactional_id: str, producer_id: int, epoch: int,
               partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890's check for a partition leader about to take a transaction's first batch (from a
        transaction version 1 producer, which added the partition itself): is the partition in
        the producer's ongoing transaction? Otherwise the batch could open a transaction there
        that no marker would ever close."""
        partitions = list(partitions)
        txn, error = self._check(transactional_id, producer_id, epoch)
        if txn is None:
            return {tp: error for tp in partitions}
        return {tp: ErrorCode.none if txn.state == ONGOING and tp in txn.partitions else ErrorCode.invalid_txn_state
                for tp in partitions}

    def _exists(self, tp: TopicPartition) -> bool:
        topic = self.logs.store.get_topic(tp[0])
        return topic is not None and 0 <= tp[1] < topic.partitions

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> Step:
        txn, error = self._check(transactional_id, producer_id, epoch)
        if txn is None:
            return Step(error)
        return self._add(txn, [(OFFSETS_TOPIC, self.offsets.partition_for(group_id))])

    def _add(self, txn: Transaction, partitions: list[TopicPartition]) -> Step:
        ok = {tp: ErrorCode.none for tp in partitions}
        if txn.state == ONGOING and txn.partitions.issuperset(partitions):
            return Step(partition_errors=ok)
        if txn.state != ONGOING:
            txn.state, txn.partitions, txn.start_ms = ONGOING, set(), self._now_ms()
        txn.partitions.update(partitions)
        return Step(durable=[self._persist(txn)], partition_errors=ok)

    def commit_offsets(self, transactional_id: str, group_id: str, producer_id: int, epoch: int,
                       offsets: dict[TopicPartition, OffsetAndMetadata], add: bool = False,
                       member_check: Callable[[], ErrorCode | None] | None = None) -> Step:
        """TxnOffsetCommit: offsets that apply when the transaction commits. ``add`` (v5+,
        transaction version 2): the group's partition joins the transaction here, as
        AddOffsetsToTxn would have added it (the gateway has done that already when the
        coordinator is another broker). ``member_check`` (KIP-447's zombie fencing) runs only
        once the producer and its transaction passed, as Kafka verifies the transaction before
        its group coordinator looks at the member: a producer without one is refused as such
        (INVALID_PRODUCER_ID_MAPPING) whatever member epoch it sent."""
        if add and self.coordinates(transactional_id):
            added = self.add_offsets(transactional_id, producer_id, epoch, group_id)
            if added.error:
                return added
            committed = self.commit_offsets(transactional_id, group_id, producer_id, epoch, offsets,
                                            member_check=member_check)
            committed.durable = added.durable + committed.durable
            return committed
        if self.coordinates(transactional_id):
            txn, error = self._check(transactional_id, producer_id, epoch)
            if txn is None:
                return Step(error)
            if txn.state != ONGOING or (OFFSETS_TOPIC, self.offsets.partition_for(group_id)) not in txn.partitions:
                return Step(ErrorCode.invalid_txn_state)  # AddOffsetsToTxn first
        # else cluster mode: the group's coordinator is not the transaction's, which checked the
        # producer when the group was added (Kafka's group coordinator does not check either)
        if member_check is not None and (refused := member_check()):
            return Step(refused)
        durable_at = self.offsets.commit_in_txn(group_id, producer_id, epoch, offsets)
        return Step(durable=[durable_at] if durable_at else [])

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, v2: bool = False) -> Step:
        """EndTxn. ``v2`` (transaction version 2, KIP-890, EndTxn v5+): the end bumps the epoch,
        its markers carry the new one (fencing every batch of the old), and the answer names it."""
        if v2 and (retried := self._retried_end(transactional_id, producer_id, epoch, commit)) is not None:
            return retried
        txn, error = self._check(transactional_id, producer_id, epoch)
        if txn is None:
            return Step(error)
        if not v2 and txn.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return Step()  # a retry of an end that already happened
        if txn.state != ONGOING:
            if not v2 or commit:  # Kafka's answer too; the client fails for good, so say why here
                log.warning("EndTxn (%s) of %r refused: its transaction is %s (producer %d, epoch %d)",
                            "commit" if commit else "abort", transactional_id, txn.state, producer_id, epoch)
                return Step(ErrorCode.invalid_txn_state)
            txn.partitions = set()  # v2: an abort with nothing open still fences the epoch (Kafka's rule)
        if v2:
            txn.epoch += 1  # may reach MAX_EPOCH: the producer id changes once the end is complete
        return self._prepare(txn, commit, answer_producer=v2)

    def _retried_end(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Step | None:
        """A v2 EndTxn sent again by a producer that did not get the answer: it still has the epoch
        the end replaced. Finished: answer as before; still preparing: the client retries."""
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id or epoch != txn.epoch - 1:
            return None
        if txn.state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
            return Step(ErrorCode.concurrent_transactions)
        if txn.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return Step(producer_id=txn.producer_id, epoch=txn.epoch)
        return None

    def _prepare(self, txn: Transaction, commit: bool, answer_producer: bool = False) -> Step:
        txn.state = PREPARE_COMMIT if commit else PREPARE_ABORT
        durable_at = self._persist(txn)

        def complete() -> Step:
            if not self.coordinates(txn.transactional_id) or self.txns.get(txn.transactional_id) is not txn:
                return Step(ErrorCode.not_coordinator)  # deposed or reloaded meanwhile: the leader's load finishes it
            return self._complete(txn, answer_producer)
        return Step(durable=[durable_at], then=complete)

    def _complete(self, txn: Transaction, answer_producer: bool = False) -> Step:
        """Phase two: markers into every partition of the transaction, then Complete*.

        A single node marks every partition at once. In cluster mode every partition is returned
        as ``remote`` for the gateway's marker sender, which writes those led here itself and
        sends WriteTxnMarkers for the others, and asks again (at the partition's leader then)
        until each marker is on the in-sync replicas: a marker written here and lost when the
        partition's leadership moved before its followers had it is written again at the new
        leader, as Kafka's coordinator retries. Complete* is written once every marker is
        durable, so a new coordinator never finds a transaction complete whose marker a failover
        lost."""
        commit = txn.state == PREPARE_COMMIT
        pid, epoch = txn.producer_id, txn.epoch

        def finish() -> Step:
            if txn.producer_id != pid or txn.epoch != epoch or txn.state not in _PREPARING \
                    or self.txns.get(txn.transactional_id) is not txn:
                return Step(producer_id=pid, epoch=epoch)  # finished meanwhile (reloaded after a move)
            if not self.coordinates(txn.transactional_id):
                return Step(ErrorCode.not_coordinator)  # its log is a follower's now: never append to it
            txn.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            txn.partitions = set()
            if txn.epoch >= MAX_EPOCH:  # v2 ends bumped the epoch to its last value: a new producer id
                self._bump_epoch(txn)
            return Step(durable=[self._persist(txn)], producer_id=txn.producer_id if answer_producer else -1,
                        epoch=txn.epoch if answer_producer else -1)

        partitions = tuple(sorted(txn.partitions))
        if not self.coordinates_all:
            return Step(then=finish, remote=RemoteMarkers(pid, epoch, commit, partitions, txn.transactional_id)
                        if partitions else None)
        durable = []
        for topic, partition in partitions:
            durable_at = self.write_marker(topic, partition, pid, epoch, commit)
            if durable_at is not None:
                durable.append(durable_at)
        done = finish()
        done.durable = durable + done.durable
        return done

    def write_marker(self, topic: str, partition: int, producer_id: int, epoch: int,
                     commit: bool) -> DurableAt | None:
        """Append a commit/abort control batch to a partition led here (also WriteTxnMarkers' work):
        it closes the producer's open transaction there, moving the last stable offset, and
        applies or drops offsets committed in it. None if the partition is gone."""
        plog = self.logs.logs.get((topic, partition))
        if plog is None:
            return None  # the topic was deleted meanwhile
        marker = encode_batch([control_record(commit, 0, self._now_ms())], producer_id=producer_id,
                              producer_epoch=epoch, is_control=True, is_transactional=True)
        try:
            info = plog.append(marker)
        except (LogError, OSError) as exc:
            log.error("transaction marker not written to %s-%d: %s", topic, partition, exc)
            return None
        self.producers.partition(topic, partition, plog).end_txn(producer_id, epoch, commit, info.first_offset)
        if topic == OFFSETS_TOPIC:
            self.offsets.end_txn(producer_id, commit, partition)
        self.on_marker(topic, partition)
        return topic, partition, info.last_offset

    # --- produce checks and timeouts -------------------------------------------------
    def check_produce(self, producer_id: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        """May this transactional batch be appended? Only inside an ongoing transaction that added the partition."""
        tid = self._by_producer.get(producer_id)
        txn = self.txns.get(tid) if tid is not None else None
        if txn is None or not self.coordinates(tid):
            # cluster mode: the coordinator is another broker; as in Kafka before KIP-890 the
            # partition leader fences by epoch (core.producers) and trusts AddPartitionsToTxn
            return ErrorCode.invalid_producer_id_mapping if self.coordinates_all else ErrorCode.none
        if epoch < txn.epoch:
            return ErrorCode.invalid_producer_epoch
        if epoch > txn.epoch or txn.state != ONGOING or (topic, partition) not in txn.partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    def expire(self) -> list[Step]:
        """Abort transactions open longer than their timeout; the producer is fenced (epoch bump)."""
        now = self._now_ms()
        steps = []
        for txn in list(self.txns.values()):
            if txn.state == ONGOING and now - txn.start_ms > txn.timeout_ms and self.coordinates(txn.transactional_id):
                log.warning("transaction of %r timed out after %d ms: aborting it", txn.transactional_id,
                            txn.timeout_ms)
                self._bump_epoch(txn)
                steps.append(self._prepare(txn, commit=False))
        return steps

    def forget_topic(self, topic: str) -> None:
        for txn in self.txns.values():
            txn.partitions = {tp for tp in txn.partitions if tp[0] != topic}

    # --- operators ------------------------------------------------------------------
    def describe(self, transactional_id: str) -> Transaction | None:
        return self.txns.get(transactional_id)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
             min_duration_ms: int = -1) -> list[Transaction]:
        states, producer_ids = set(states), set(producer_ids)
        now = self._now_ms()
        return [t for t in self.txns.values() if self.coordinates(t.transactional_id)  # a cluster: its own ids
                and (not states or t.state in states) and (not producer_ids or t.producer_id in producer_ids)
                and (min_duration_ms < 0 or (t.state == ONGOING and now - t.start_ms >= min_duration_ms))]

    @staticmethod
    def known_state(name: str) -> bool:
        return name in _STATE_CODES
