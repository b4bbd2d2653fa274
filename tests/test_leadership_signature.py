"""The leadership walk's change signature (gateway.cluster.amqp_spread): it must move whenever a
queue or delayed-message log object is replaced, even by one that takes the freed object's address."""
from __future__ import annotations

from types import SimpleNamespace

from gateway.cluster.amqp_spread import leadership_signature


class Stub:
    pass


def _vhost(**queues):
    return SimpleNamespace(queues=dict(queues), delay_logs={})


def test_the_signature_moves_when_a_queue_is_replaced_even_at_the_same_address():
    replicas = SimpleNamespace(generation=3)
    view = object()
    vhosts = {"/": _vhost(a=Stub(), b=Stub())}
    before = leadership_signature(view, replicas, vhosts)
    assert leadership_signature(view, replicas, vhosts) == before
    reused = 0
    for _ in range(50):  # CPython hands a freed object's memory to the next one of its size
        old_id = id(vhosts["/"].queues["a"])
        seen = leadership_signature(view, replicas, vhosts)
        del vhosts["/"].queues["a"]
        vhosts["/"].queues["a"] = Stub()  # a definition replaced on another broker
        reused += id(vhosts["/"].queues["a"]) == old_id
        assert leadership_signature(view, replicas, vhosts) != seen
    assert reused == 0  # the signature held the old stub, so its address was not free to take


def test_the_signature_moves_with_the_replicas_generation_the_view_and_the_delayed_logs():
    replicas = SimpleNamespace(generation=0)
    view = object()
    vhosts = {"/": _vhost(a=Stub())}
    seen = leadership_signature(view, replicas, vhosts)
    replicas.generation += 1
    assert leadership_signature(view, replicas, vhosts) != seen
    seen = leadership_signature(view, replicas, vhosts)
    assert leadership_signature(object(), replicas, vhosts) != seen
    vhosts["/"].delay_logs["later"] = Stub()
    assert leadership_signature(view, replicas, vhosts) != seen
