"""A stream receiver's filters (:mod:`routing.amqp10_filters`) in the reactor: the stream
dispatch asks :meth:`FilterGate.accepts` of each record, and the gate bounds how many records
that fail may be read in one go.

A selective filter over a long stream would otherwise read and test every record up to the
stream's end within one reactor turn, stalling every other connection; RabbitMQ pauses its
filtering for the same reason. After :data:`UNMATCHED_PER_TURN` records in a row that fail, the
gate pauses the link (its ``has_credit`` is then false, so the dispatch stops where it is) and
resumes it on the next reactor turn; a flow from the client resumes it too.
"""
from __future__ import annotations

from routing.amqp10_filters import FilterSet

UNMATCHED_PER_TURN = 1000


class FilterGate:
    def __init__(self, link, filters: FilterSet):
        self.link = link
        self.filters = filters
        self.unmatched = 0

    def accepts(self, record) -> bool:
        if self.filters.accepts(record):
            self.unmatched = 0
            return True
        self.unmatched += 1
        if self.unmatched >= UNMATCHED_PER_TURN and not self.link.filter_paused:
            self.unmatched = 0
            self.link.filter_paused = True
            self.link.session.connection.reactor.callLater(0, self.resume)
        return False

    def resume(self) -> None:
        if self.link.filter_paused:
            self.link.filter_paused = False
            self.link.dispatch()
