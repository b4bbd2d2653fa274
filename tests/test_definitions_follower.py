"""A broker's followed copy of the AMQP model (routing.definitions_follower).

Whatever a writer broker declares, binds, deletes or sets as policy, a follower that reads the
same ``__amqp_state`` log up to its high watermark ends with the same durable definitions and
routes every publish to the same queues; records above the high watermark are not applied yet.
"""
from __future__ import annotations

import random

import pytest

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from routing.broker import Router
from routing.definitions_follower import DefinitionsFollower
from routing.state import STATE_TOPIC, LogState, NoState


@pytest.fixture
def state_log(tmp_path):
    logs = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    logs.startup()
    logs.create_topic(STATE_TOPIC, 1, {"cleanup.policy": "compact"})
    yield logs, logs.get_log(STATE_TOPIC, 0)
    logs.shutdown()


def _durable(router) -> dict:
    return {name: v.durable_definitions() for name, v in router.vhosts.items()}


def _routes(router, vhost: str, exchanges: list[str], keys: list[str]) -> dict:
    v = router.vhosts[vhost]
    out = {}
    for exchange in exchanges:
        if exchange in v.exchanges:
            for key in keys:
                out[(exchange, key)] = sorted(q.name for q in v.route(exchange, key, {"h": "1"}))
    return out


def _writer_and_follower(tmp_path, logs, plog):
    writer = Router(tmp_path, logs, state=LogState(plog))
    writer.load()
    follower = DefinitionsFollower(Router(tmp_path, logs, state=NoState()), plog)
    return writer, follower


def test_a_follower_applies_only_what_is_below_the_high_watermark(tmp_path, state_log):
    logs, plog = state_log
    writer, follower = _writer_and_follower(tmp_path, logs, plog)
    plog.flush()
    follower.catch_up()
    writer.vhosts["/"].declare_exchange("orders", "topic", durable=True)
    assert follower.catch_up() == 0  # appended, not yet durable: not visible
    assert "orders" not in follower.router.vhosts["/"].exchanges
    plog.flush()
    assert follower.catch_up() == 1
    assert follower.router.vhosts["/"].exchanges["orders"].type_name == "topic"


@pytest.mark.parametrize("seed", [27, 28, 29])
def test_a_follower_ends_with_the_writers_definitions_and_routes(tmp_path, state_log, seed):
    logs, plog = state_log
    writer, follower = _writer_and_follower(tmp_path, logs, plog)
    rnd = random.Random(seed)
    exchanges = ["ex-direct", "ex-topic", "ex-fanout", "ex-headers"]
    types = {"ex-direct": "direct", "ex-topic": "topic", "ex-fanout": "fanout", "ex-headers": "headers"}
    queues = [f"q{i}" for i in range(12)]
    keys = ["a", "b", "a.b", "a.b.c", "x"]
    for step in range(400):
        vname = rnd.choice(["/", "/", "other"])
        if vname not in writer.vhosts:
            writer.vhost_create(vname)
        v = writer.vhosts[vname]
        op = rnd.random()
        try:
            if op < 0.15:
                name = rnd.choice(exchanges)
                v.declare_exchange(name, types[name], durable=True)
            elif op < 0.3:
                v.declare_queue(rnd.choice(queues), owner=None, durable=True,
                                arguments=rnd.choice([{}, {"x-max-length": 5}, {"x-queue-type": "quorum"}]))
            elif op < 0.6:
                exchange = rnd.choice(exchanges + ["amq.topic", "amq.direct"])
                args = {"x-match": "any", "h": "1"} if exchange == "ex-headers" else None
                if rnd.random() < 0.8:
                    v.bind_queue(rnd.choice(queues), exchange, rnd.choice(["a", "a.*", "#", "a.#", "b"]), args, None)
                else:
                    v.bind_exchange(rnd.choice(exchanges), exchange, rnd.choice(["a", "#"]), args)
            elif op < 0.75:
                exchange = rnd.choice(exchanges)
                v.unbind_queue(rnd.choice(queues), exchange, rnd.choice(["a", "a.*", "#", "a.#", "b"]), None, None)
            elif op < 0.82:
                v.delete_queue(rnd.choice(queues), owner=None)
            elif op < 0.88:
                v.delete_exchange(rnd.choice(exchanges))
            elif op < 0.94:
                v.policies[f"p{rnd.randrange(3)}"] = {"pattern": "^q", "definition": {"max-length": rnd.randrange(9)},
                                                     "apply-to": "queues", "priority": 0}
                writer.save_definitions()
            elif vname != "/":
                writer.vhost_delete(vname)
        except Exception as exc:  # refusals (a missing queue or exchange) are part of the sequence
            if type(exc).__name__ not in ("ChannelError", "ConnectionError"):
                raise
        if step % 37 == 0 or step == 399:
            plog.flush()
            follower.catch_up()
            assert _durable(follower.router) == _durable(writer), f"after step {step}"
            for vhost in writer.vhosts:
                assert _routes(follower.router, vhost, exchanges + ["amq.topic", ""], keys + queues) == \
                    _routes(writer, vhost, exchanges + ["amq.topic", ""], keys + queues)
    assert set(follower.router.vhosts) == set(writer.vhosts)


def test_a_followers_partition_streams_are_the_super_streams_partitions(tmp_path, state_log):
    """The partition streams' records may come before the super stream's (vhost settings): each
    still ends as its partition of the super stream's topic, as on the writer."""
    from routing import streams
    logs, plog = state_log
    writer, follower = _writer_and_follower(tmp_path, logs, plog)
    streams.create_super(writer.vhosts["/"], "invoices", ["invoices-0", "invoices-1", "invoices-2"],
                         ["a", "b", "c"], {})
    plog.flush()
    follower.catch_up()
    backing = {name: (q.topic, q.partition) for name, q in follower.router.vhosts["/"].queues.items()}
    assert backing == {f"invoices-{i}": ("invoices", i) for i in range(3)}
