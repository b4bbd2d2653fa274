"""Exchange logs: every message published to an exchange declared with ``x-log: true``, on a topic.

The topic has the exchange's name (escaped like a queue's, see :mod:`core.names`), one
partition, records in the AMQP form of :mod:`routing.mapping`. Kafka consumers and Spark jobs
read it to tap all traffic through the exchange without touching its queues.

The other direction: records that Kafka producers append to that topic are published through
the exchange (routed to its bound queues), once they are durable. The router appends to the
same log, so the log remembers which offset ranges it wrote itself (those were routed when
published) and forwards only the others. Forwarding starts at the log end when the broker
starts: a Kafka record appended but not yet forwarded when the broker stopped is not routed
after the restart (it stays in the log).
"""
from __future__ import annotations

from core.log import PartitionLog
from routing.queue import QueueStats
from routing.reader import LogReader
from wire.records import Record


class ExchangeLog:
    consumers = ()  # the router's commit loop asks every append target for its consumers
    dedup = None  # nor does it de-duplicate (the exchange itself may, before routing)
    remote = False  # always appended here (the router forwards only a RemoteQueue's messages)

    def __init__(self, vhost: str, exchange: str, topic: str, plog: PartitionLog):
        self.vhost = vhost
        self.name = exchange
        self.topic = topic
        self.plog = plog
        self.deleted = False
        self.reader = LogReader(plog)
        self.forwarded = plog.next_offset  # offsets below this are routed or were never to be
        self._own: list[tuple[int, int]] = []  # [first, last] ranges the router appended
        self.stats = QueueStats()  # what was appended, counted like a queue's

    def __repr__(self) -> str:
        return f"<ExchangeLog {self.name!r} vhost={self.vhost!r} topic={self.topic!r}>"

    # the append-target interface the router's commit uses
    def appended(self, first_offset: int, sizes: list[int]) -> None:
        self._own.append((first_offset, first_offset + len(sizes) - 1))

    def appended_limits(self) -> None:
        pass

    def foreign_records(self) -> list[Record]:
        """Durable records that did not come through the exchange, not yet forwarded."""
        end = self.plog.high_watermark
        out = []
        offset = max(self.forwarded, self.plog.log_start_offset)
        while offset < end:
            own = self._own_range(offset)
            if own is not None:
                offset = own + 1
                continue
            record = self.reader.get(offset)
            if record is not None:
                out.append(record)
            offset += 1
        self.forwarded = max(self.forwarded, end)
        self._own = [r for r in self._own if r[1] >= self.forwarded]
        return out

    def _own_range(self, offset: int) -> int | None:
        for first, last in self._own:
            if first <= offset <= last:
                return last
        return None
