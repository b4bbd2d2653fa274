"""The AMQP model topic's leader book of its followers (gateway.cluster.state_followers)."""
from __future__ import annotations

from types import SimpleNamespace

from gateway.cluster.state_followers import StateFollowers
from routing.state import STATE_TOPIC


class _Replicas:
    def __init__(self, isr):
        self.rep = SimpleNamespace(state=SimpleNamespace(isr=isr))

    def get(self, topic, partition):
        return self.rep if topic == STATE_TOPIC and partition == 0 else None


def test_a_write_counts_as_applied_once_every_other_in_sync_follower_fetched_after_being_told():
    replicas = _Replicas((1, 2, 3))
    book = StateFollowers(1, replicas)
    assert book.untold(2, 0, 5) and book.untold(3, 0, 5)
    book.told(2, 0, 5)
    book.told(3, 0, 5)
    assert not book.untold(2, 0, 5) and book.untold(2, 0, 6)
    assert not book.applied_everywhere(STATE_TOPIC, 0, 5)  # told, but not fetched again yet
    assert book.fetched(2, 0) is True and book.fetched(2, 0) is False  # a second fetch moves nothing
    assert not book.applied_everywhere(STATE_TOPIC, 0, 5)  # broker 3 has not come back
    assert book.fetched(3, 0) is True
    assert book.applied_everywhere(STATE_TOPIC, 0, 5) and not book.applied_everywhere(STATE_TOPIC, 0, 6)
    replicas.rep.state.isr = (1, 2)  # broker 3 fell out of the ISR: it no longer holds writes back
    book.told(2, 0, 6)
    book.fetched(2, 0)
    assert book.applied_everywhere(STATE_TOPIC, 0, 6)
    assert book.applied_everywhere("other", 0, 100)  # a topic not replicated here holds nothing back


def test_a_new_term_forgets_what_followers_were_told():
    book = StateFollowers(1, _Replicas((1, 2)))
    book.told(2, 0, 9)
    book.fetched(2, 0)
    book.forget()
    assert book.untold(2, 0, 0) and not book.applied_everywhere(STATE_TOPIC, 0, 1)
