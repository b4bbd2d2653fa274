"""Durable definitions kept as a journal of entries (routing.definitions, routing.state).

Whatever sequence of declarations, bindings, deletions and policy changes a broker saw, the
definitions it restores after a restart are the ones it had; each change appends a few lines
instead of rewriting every definition; a crash mid-append loses only the unacknowledged change.
"""
from __future__ import annotations

import json
import random

import pytest

from core.log_manager import LogManager
from core.metadata import LocalMetadataStore
from routing import broker as broker_module
from routing.broker import Router
from routing.errors import ChannelError
from routing.state import STATE_TOPIC, LogState


def _all(router) -> dict:
    return {name: v.durable_definitions() for name, v in router.vhosts.items()}


def _journal(tmp_path) -> list[list]:
    path = tmp_path / "amqp" / "definitions.journal"
    return [json.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_a_declaration_appends_its_entry_and_leaves_the_document_alone(make_router, tmp_path):
    router = make_router()
    vhost = router.vhosts["/"]
    snapshot = (tmp_path / "amqp" / "definitions.json").read_bytes()
    for i in range(50):
        vhost.declare_queue(f"q{i}", owner=None, durable=True)
    vhost.bind_queue("q7", "amq.topic", "a.#", {"x-match": b"\x01", "w": 1.5}, None)
    assert (tmp_path / "amqp" / "definitions.json").read_bytes() == snapshot
    lines = _journal(tmp_path)
    assert len(lines) == 51
    assert lines[0] == ["/", "queue:q0", {"arguments": {}, "auto_delete": False, "name": "q0"}]
    assert lines[-1][2]["arguments"] == {"x-match": {"$bytes": "AQ=="}, "w": {"$float": "1.5"}}


def test_deleting_a_queue_takes_its_stored_bindings_along(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("ex", "topic", durable=True)
    vhost.declare_queue("q", owner=None, durable=True)
    vhost.bind_queue("q", "ex", "k1", None, None)
    vhost.bind_queue("q", "amq.direct", "k2", None, None)
    vhost.delete_queue("q", owner=None)
    vhost.declare_queue("q", owner=None, durable=True)  # the same name again: no bindings of the old one
    before = _all(router)
    assert before["/"]["bindings"] == []
    assert _all(make_router()) == before


def test_deleting_an_exchange_takes_bindings_from_and_to_it_along(make_router):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_exchange("a", "fanout", durable=True)
    vhost.declare_exchange("b", "direct", durable=True)
    vhost.declare_queue("q", owner=None, durable=True)
    vhost.bind_exchange("b", "a", "", None)
    vhost.bind_queue("q", "b", "k", None, None)
    vhost.bind_exchange("a", "amq.fanout", "", None)
    vhost.delete_exchange("a")
    vhost.declare_exchange("a", "fanout", durable=True)
    before = _all(router)
    assert [(b["source"], b["destination"]) for b in before["/"]["bindings"]] == [("b", "q")]
    assert _all(make_router()) == before


def test_transient_things_are_not_stored(make_router, tmp_path):
    router = make_router()
    vhost = router.vhosts["/"]
    vhost.declare_queue("t", owner=None, durable=False)
    vhost.declare_exchange("tx", "direct", durable=False)
    vhost.bind_queue("t", "amq.direct", "k", None, None)
    vhost.declare_queue("d", owner=None, durable=True)
    vhost.bind_queue("d", "tx", "k", None, None)  # a transient end: not stored
    assert [line[1] for line in _journal(tmp_path)] == ["queue:d"]


def test_a_change_cut_short_by_a_crash_is_dropped_and_the_rest_loads(make_router, tmp_path):
    router = make_router()
    router.vhosts["/"].declare_queue("kept", owner=None, durable=True)
    before = _all(router)
    path = tmp_path / "amqp" / "definitions.journal"
    with path.open("ab") as f:
        f.write(b'["/","queue:torn",{"argu')  # the fsync never finished: declare-ok never went out
    assert _all(make_router()) == before
    assert path.read_bytes().endswith(b"\n") or path.read_bytes() == b""


def test_a_damaged_journal_line_is_an_error_naming_the_file(make_router, tmp_path):
    router = make_router()
    router.vhosts["/"].declare_queue("a", owner=None, durable=True)
    path = tmp_path / "amqp" / "definitions.journal"
    path.write_bytes(b'not json\n["/","queue:b",{"name":"b","arguments":{},"auto_delete":false}]\n')
    with pytest.raises(ValueError, match="definitions.journal line 1"):
        make_router()


def test_the_journal_is_folded_into_the_document_once_it_outgrows_it(make_router, tmp_path, monkeypatch):
    monkeypatch.setattr(broker_module, "_FOLD_AFTER", 10)
    router = make_router()
    vhost = router.vhosts["/"]
    for i in range(30):
        vhost.declare_queue(f"q{i}", owner=None, durable=True)
        vhost.delete_queue(f"q{i}", owner=None) if i % 3 == 0 else None
    assert len(_journal(tmp_path)) < 25  # folded at least once
    document = json.loads((tmp_path / "amqp" / "definitions.json").read_text())
    assert {q["name"] for q in document["vhosts"]["/"]["queues"]} >= {"q1", "q2"}
    before = _all(router)
    assert _all(make_router()) == before
    assert _journal(tmp_path) == []  # a start folds what is there
    document = (tmp_path / "amqp" / "definitions.json").stat().st_ino  # a rewrite is a new file
    assert _all(make_router()) == before  # ...and leaves the document alone when there is nothing
    assert (tmp_path / "amqp" / "definitions.json").stat().st_ino == document


def test_a_document_written_before_journals_loads(make_router, tmp_path):
    amqp = tmp_path / "amqp"
    amqp.mkdir()
    legacy = {"vhosts": {"/": {"exchanges": [{"name": "ex", "type": "topic", "auto_delete": False,
                                              "internal": False, "arguments": {}}],
                               "queues": [{"name": "q", "arguments": {"x-max-length": 5}, "auto_delete": False}],
                               "bindings": [{"source": "ex", "destination_type": "queue", "destination": "q",
                                             "routing_key": "#", "arguments": {}}],
                               "policies": [], "operator_policies": [], "limits": {}, "metadata": {},
                               "super_streams": {}}}}
    (amqp / "definitions.json").write_text(json.dumps(legacy))
    router = make_router()
    got = router.vhosts["/"].durable_definitions()
    assert [q["name"] for q in got["queues"]] == ["q"] and got["bindings"][0]["routing_key"] == "#"


@pytest.mark.parametrize("seed", range(6))
def test_any_sequence_of_changes_comes_back_after_a_restart(make_router, seed):
    rng = random.Random(seed)
    router = make_router()
    for step in range(400):
        vhost = router.vhosts[rng.choice(sorted(router.vhosts))]
        queue, exchange = f"q{rng.randrange(8)}", f"x{rng.randrange(5)}"
        op = rng.randrange(12)
        try:
            if op == 0:
                vhost.declare_queue(queue, owner=None, durable=rng.random() < 0.8,
                                    arguments={"x-message-ttl": rng.randrange(1, 9)} if rng.random() < 0.3 else None)
            elif op == 1:
                vhost.delete_queue(queue, owner=None)
            elif op == 2:
                vhost.declare_exchange(exchange, rng.choice(["direct", "topic", "fanout"]),
                                       durable=rng.random() < 0.8, auto_delete=rng.random() < 0.2)
            elif op == 3:
                vhost.delete_exchange(exchange)
            elif op in (4, 5):
                vhost.bind_queue(queue, rng.choice([exchange, "amq.topic"]), rng.choice(["a", "b"]),
                                 rng.choice([None, {"k": b"v"}]), None)
            elif op == 6:
                vhost.unbind_queue(queue, exchange, rng.choice(["a", "b"]), None, None)
            elif op == 7:
                vhost.bind_exchange(exchange, rng.choice([f"x{rng.randrange(5)}", "amq.fanout"]), "r", None)
            elif op == 8:
                vhost.unbind_exchange(exchange, f"x{rng.randrange(5)}", "r", None)
            elif op == 9:
                vhost.set_policy(f"p{rng.randrange(3)}", "^q", {"max-length": rng.randrange(1, 100)})
            elif op == 10:
                name = f"v{rng.randrange(3)}"
                router.vhost_delete(name) if name in router.vhosts else router.vhost_create(name)
            elif op == 11 and rng.random() < 0.3:
                before = _all(router)
                router = make_router()
                assert _all(router) == before, f"seed {seed} step {step}"
        except ChannelError:
            pass  # bindings to missing things, inequivalent redeclarations: refused, nothing stored
    before = _all(router)
    assert _all(make_router()) == before


def test_the_state_topic_keeps_one_record_per_entry_and_migrates_a_whole_document(tmp_path):
    logs = LogManager(tmp_path, LocalMetadataStore(tmp_path))
    logs.startup()
    try:
        logs.create_topic(STATE_TOPIC, 1, {"cleanup.policy": "compact"})
        plog = logs.get_log(STATE_TOPIC, 0)
        legacy = {"vhosts": {"/": {"exchanges": [], "queues": [{"name": "old", "arguments": {}, "auto_delete": False}],
                                   "bindings": [], "policies": [], "operator_policies": [], "limits": {},
                                   "metadata": {}, "super_streams": {}}}}
        LogState(plog).write("definitions", legacy)
        router = Router(tmp_path, logs, state=LogState(plog))
        router.load()
        vhost = router.vhosts["/"]
        vhost.declare_queue("new", owner=None, durable=True)
        vhost.bind_queue("new", "amq.direct", "k", None, None)
        vhost.delete_queue("old", owner=None)
        before = _all(router)
        state = LogState(plog)
        state.open()
        assert state.read("definitions", None) is None  # the whole document was replaced by entries
        again = Router(tmp_path, logs, state=state)
        again.load()
        assert _all(again) == before
    finally:
        logs.shutdown()
