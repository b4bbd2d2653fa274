"""A broker's followed copy of the AMQP model (routing.definitions_follower).

Whatever a writer broker declares, binds, deletes or sets as policy, a follower that reads the
same ``__amqp_state`` log up to its high watermark ends with the same durable definitions and
routes every publish to the same queues; records above the high watermark are not applied yet.
"""
from __future__ import annotations

import json
import random

import pytest

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from routing import definitions
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


# --- several writers (cluster mode 'spread': every broker writes the log and follows the others) -----

class _Replica(LogState):
    """A broker's state in a spread cluster: its replica is read up to the high watermark, which
    may lag what the other brokers have written (as SpreadState reads it)."""

    def open(self) -> None:
        super().open(self.plog.high_watermark)


def _broker(tmp_path, logs, plog, node: int):
    state = _Replica(plog, origin=str(node).encode(), track=definitions.JOURNAL)
    router = Router(tmp_path / f"broker-{node}", logs, state=state)
    router.load()
    return DefinitionsFollower(router, plog, position=state.opened_at, own=state.origin, in_flight=state.in_flight)


def _model(router) -> dict:
    """The durable definitions, each list in one order (brokers may have learnt them in another)."""
    return {name: {part: sorted(json.dumps(x, sort_keys=True) for x in value) if isinstance(value, list) else value
                   for part, value in doc.items()} for name, doc in _durable(router).items()}


def _fresh(tmp_path, logs, plog) -> dict:
    """What a broker starting now reads from the log: the last record of each entry."""
    router = Router(tmp_path / "fresh", logs, state=LogState(plog))
    router.load()
    return _model(router)


def _settle(plog, *brokers) -> None:
    plog.flush()
    for broker in brokers:
        broker.catch_up()


def test_a_policy_set_while_another_broker_starts_stays_on_every_broker(tmp_path, state_log):
    """Broker 2 starts on a replica that has not seen broker 1's policy yet and writes the default
    vhost's settings: the policy is an entry of its own, so that write does not undo it."""
    logs, plog = state_log
    one = _broker(tmp_path, logs, plog, 1)
    one.router.vhosts["/"].set_policy("lazy", "^q", {"max-length": 3}, apply_to="queues")
    two = _broker(tmp_path, logs, plog, 2)
    assert "lazy" not in two.router.vhosts["/"].policies  # its replica was behind when it started
    _settle(plog, one, two)
    for broker in (one, two):
        assert broker.router.vhosts["/"].policies["lazy"]["definition"] == {"max-length": 3}
    assert _model(one.router) == _model(two.router) == _fresh(tmp_path, logs, plog)


def test_two_brokers_writing_one_policy_at_once_end_with_the_same_one(tmp_path, state_log):
    """The log's order decides, on the broker whose write came first too: it does not keep its own
    value because it applied it first, nor take the other's because it read it last."""
    logs, plog = state_log
    one, two = _broker(tmp_path, logs, plog, 1), _broker(tmp_path, logs, plog, 2)
    _settle(plog, one, two)
    one.router.vhosts["/"].set_policy("cap", "^q", {"max-length": 1})
    two.router.vhosts["/"].set_policy("cap", "^q", {"max-length": 2})  # before it has read broker 1's
    _settle(plog, one, two)
    for broker in (one, two):
        assert broker.router.vhosts["/"].policies["cap"]["definition"] == {"max-length": 2}
    assert _model(one.router) == _model(two.router) == _fresh(tmp_path, logs, plog)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_brokers_changing_definitions_at_once_converge(tmp_path, state_log, seed):
    """Three brokers change policies, limits, exchanges and bindings between exchanges, each on a
    model its replica keeps current only now and then; once every replica has everything, the
    three models are the same and are what the log says."""
    logs, plog = state_log
    brokers = [_broker(tmp_path, logs, plog, node) for node in (1, 2, 3)]
    brokers[0].router.vhost_create("other")
    _settle(plog, *brokers)
    rnd = random.Random(seed)
    exchanges = ["e1", "e2", "e3"]
    for step in range(300):
        broker = rnd.choice(brokers)
        v = broker.router.vhosts[rnd.choice(["/", "other"])]
        op = rnd.random()
        try:
            if op < 0.2:
                v.set_policy(f"p{rnd.randrange(3)}", rnd.choice(["^q", "^e"]), {"max-length": rnd.randrange(9)})
            elif op < 0.3:
                v.clear_policy(f"p{rnd.randrange(3)}")
            elif op < 0.4:
                v.set_limit(rnd.choice(["max-queues", "max-connections"]), rnd.randrange(100))
            elif op < 0.45:
                v.clear_limit(rnd.choice(["max-queues", "max-connections"]))
            elif op < 0.6:
                v.declare_exchange(rnd.choice(exchanges), rnd.choice(["topic", "direct", "fanout"]), durable=True)
            elif op < 0.7:
                v.delete_exchange(rnd.choice(exchanges))
            elif op < 0.9:
                v.bind_exchange(rnd.choice(exchanges), rnd.choice(exchanges), rnd.choice(["a", "#"]), None)
            else:
                v.unbind_exchange(rnd.choice(exchanges), rnd.choice(exchanges), rnd.choice(["a", "#"]), None)
        except Exception as exc:  # refusals (a missing exchange, another type) are part of the sequence
            if type(exc).__name__ not in ("ChannelError", "ConnectionError", "ValueError"):
                raise
        if rnd.random() < 0.1:
            plog.flush()
        if rnd.random() < 0.2:
            rnd.choice(brokers).catch_up()
    _settle(plog, *brokers)
    fresh = _fresh(tmp_path, logs, plog)
    for broker in brokers:
        assert _model(broker.router) == fresh, f"broker {broker.own!r}"


def test_settings_written_whole_by_an_older_version_are_read_and_rewritten_as_entries(tmp_path, state_log):
    """Older journals kept a vhost's policies, limits and super streams inside its settings entry:
    a broker starting on such a log restores them and writes them as entries of their own; a
    follower applies such a record whole."""
    logs, plog = state_log
    policy = {"name": "cap", "pattern": "^q", "definition": {"max-length": 4}, "priority": 1, "apply-to": "queues"}
    old = {"policies": [policy], "operator_policies": [], "limits": {"max-queues": 7}, "metadata": {"x": 1},
           "super_streams": {}}
    LogState(plog).append_journal(definitions.JOURNAL, [("/", definitions.SETTINGS, old)])
    plog.flush()
    follower = DefinitionsFollower(Router(tmp_path / "follower", logs, state=NoState()), plog)
    follower.catch_up()
    router = Router(tmp_path / "writer", logs, state=LogState(plog))
    router.load()
    for v in (follower.router.vhosts["/"], router.vhosts["/"]):
        assert v.policies == {"cap": {k: x for k, x in policy.items() if k != "name"}}
        assert v.limits == {"max-queues": 7} and v.metadata == {"x": 1}
    stored = router._stored.vhosts["/"]
    assert stored[definitions.SETTINGS] == {"metadata": {"x": 1}}
    assert stored["policy:cap"] == policy and stored["limit:max-queues"] == 7
    plog.flush()
    follower.catch_up()  # the rewrite as entries changes nothing on a follower
    assert _model(follower.router) == _model(router)


def test_a_binding_that_comes_before_its_exchange_is_bound_when_the_exchange_arrives(tmp_path, state_log):
    """The entries of one write come in no set order (a definitions import writes a whole vhost's
    diff): a binding applied before its exchange exists must not be lost."""
    from routing.definitions_follower import apply_changes
    logs, plog = state_log
    follower = Router(tmp_path, logs, state=NoState())
    exchange = {"name": "orders", "type": "topic", "durable": True, "auto_delete": False, "internal": False,
                "arguments": {}}
    queue = {"name": "eu-orders", "durable": True, "auto_delete": False, "arguments": {}}
    binding = {"source": "orders", "vhost": "/", "destination": "eu-orders", "destination_type": "queue",
               "routing_key": "eu.#", "arguments": {}}
    entries = definitions.entries_of_doc({"exchanges": [exchange], "queues": [queue], "bindings": [binding]})
    order = sorted(entries, key=lambda key: not key.startswith("binding:"))  # the binding first
    apply_changes(follower, [("/", key, entries[key]) for key in order])
    assert [q.name for q in follower.vhosts["/"].route("orders", "eu.paris", {})] == ["eu-orders"]
