"""routing.exchanges: RabbitMQ's exchange types and exchange-to-exchange routing."""
import datetime
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.errors import PRECONDITION_FAILED, ChannelError
from routing.exchanges import (
    EXCHANGE_TYPES, Binding, DirectExchange, FanoutExchange, HeadersExchange, TopicExchange, route_through,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def q(name):
    return ("queue", name)


def x(name):
    return ("exchange", name)


# -------------------------------------------------------------------------------- base, direct

def test_types_registry():
    assert {name: cls.type_name for name, cls in EXCHANGE_TYPES.items()} == {
        "direct": "direct", "fanout": "fanout", "topic": "topic", "headers": "headers"}


def test_direct_routes_on_equal_keys():
    ex = DirectExchange("d")
    assert ex.is_unused
    assert ex.bind(q("a"), "k1") is True
    assert ex.bind(q("a"), "k1") is False  # already there
    assert ex.bind(q("b"), "k1") and ex.bind(q("a"), "k2")
    assert ex.route("k1") == {q("a"), q("b")}
    assert ex.route("k2") == {q("a")}
    assert ex.route("K1") == set() and ex.route("") == set()
    assert not ex.is_unused
    assert ex.unbind(q("b"), "k1") is True and ex.unbind(q("b"), "k1") is False
    assert ex.route("k1") == {q("a")}


def test_bindings_differing_only_in_arguments_are_distinct():
    ex = DirectExchange("d")
    assert ex.bind(q("a"), "k", {"x": 1})
    assert ex.bind(q("a"), "k", {"x": True})  # True is not 1 in a field table
    assert ex.bind(q("a"), "k")
    assert len(list(ex.bindings())) == 3
    assert ex.route("k") == {q("a")}
    assert ex.unbind(q("a"), "k", {"x": 1})
    assert ex.unbind(q("a"), "k")
    assert ex.route("k") == {q("a")}
    assert list(ex.bindings()) == [Binding(q("a"), "k", {"x": True})]
    assert ex.unbind(q("a"), "k", {"x": True}) and ex.is_unused and ex.route("k") == set()


def test_unbind_destination_removes_all_its_bindings():
    ex = TopicExchange("t")
    ex.bind(q("a"), "x.*")
    ex.bind(q("a"), "#")
    ex.bind(q("b"), "#")
    gone = ex.unbind_destination(q("a"))
    assert {b.routing_key for b in gone} == {"x.*", "#"}
    assert ex.route("x.y") == {q("b")}


def test_fanout_ignores_keys():
    ex = FanoutExchange("f")
    ex.bind(q("a"), "whatever")
    ex.bind(q("b"))
    ex.bind(q("a"), "other")
    assert ex.route("anything") == {q("a"), q("b")}
    ex.unbind(q("a"), "whatever")
    assert ex.route("") == {q("a"), q("b")}
    ex.unbind(q("a"), "other")
    assert ex.route("") == {q("b")}


def test_alternate_exchange_attribute_comes_from_arguments():
    assert DirectExchange("d", arguments={"alternate-exchange": "ae"}).alternate_exchange == "ae"
    assert DirectExchange("d").alternate_exchange is None


# ------------------------------------------------------------------------------------- topic

TOPIC_CASES = [
    # (binding key, routing key, matches?)
    ("#", "", True), ("#", "a", True), ("#", "a.b.c", True), ("#", ".", True),
    ("*", "a", True), ("*", "", False), ("*", "a.b", False), ("*", ".", False),
    ("", "", True), ("", "a", False), ("", ".", False),
    ("a.#.b", "a.b", True), ("a.#.b", "a.x.b", True), ("a.#.b", "a.x.y.b", True), ("a.#.b", "a.b.c", False),
    ("a.#.b", "b", False), ("a.#.b", "a.b.b", True), ("a.#.b", "a", False),
    ("a.*", "a.b", True), ("a.*", "a", False), ("a.*", "a.", True), ("a.*", "a.b.c", False),
    ("#.a", "a", True), ("#.a", "x.a", True), ("#.a", "x.y.a", True), ("#.a", "a.x", False),
    ("a.#", "a", True), ("a.#", "a.b.c", True), ("a.#", "ab", False), ("a.#", "b.a", False),
    ("a..b", "a..b", True), ("a..b", "a.b", False), ("a.*.b", "a..b", True), ("a.*.b", "a.b", False),
    (".", ".", True), (".", "", False), ("*.*", ".", True), ("a.", "a.", True), ("a.", "a", False),
    ("#.#", "", True), ("#.#", "a.b", True), ("*.#", "", False), ("*.#", "a", True), ("#.*", "", False),
    ("#.*", "a.b.c", True), ("*.*.*", "a.b", False), ("*.#.*", "a", False), ("*.#.*", "a.b", True),
    ("a.#.#.b", "a.b", True), ("#.b.#", "b", True), ("#.b.#", "a.b.c", True), ("#.b.#", "a.c", False),
    ("a.b", "a.b", True), ("a.b", "A.B", False), ("ä.*", "ä.ö", True),
]


@pytest.mark.parametrize("binding,key,expected", TOPIC_CASES)
def test_topic_cases(binding, key, expected):
    ex = TopicExchange("t")
    ex.bind(q("q"), binding)
    assert (ex.route(key) == {q("q")}) is expected


def reference_match(binding, key):
    """Words as RabbitMQ splits them, matched recursively: the spec's definition, no trie."""
    def words(s):
        return s.split(".") if s else []

    def match(p, w):
        if not p:
            return not w
        if p[0] == "#":
            return any(match(p[1:], w[i:]) for i in range(len(w) + 1))
        if not w:
            return False
        return (p[0] == "*" or p[0] == w[0]) and match(p[1:], w[1:])
    return match(words(binding), words(key))


words = st.sampled_from(["a", "b", "", "c"])
patterns = st.lists(st.sampled_from(["a", "b", "", "*", "#"]), max_size=5).map(".".join)
keys = st.lists(words, max_size=6).map(".".join)


@FAST
@given(st.lists(patterns, max_size=12), st.lists(keys, min_size=1, max_size=8))
def test_topic_trie_agrees_with_the_definition(bindings, routing_keys):
    ex = TopicExchange("t")
    for i, binding in enumerate(bindings):
        ex.bind(q(str(i)), binding)
    for key in routing_keys:
        expected = {q(str(i)) for i, b in enumerate(bindings) if reference_match(b, key)}
        assert ex.route(key) == expected
    for i, binding in enumerate(bindings):  # unbinding everything leaves an empty trie
        assert ex.unbind(q(str(i)), binding)
    assert ex.is_unused and not ex._root.children and not ex._root.destinations
    assert all(ex.route(key) == set() for key in routing_keys)


def test_topic_cache_is_invalidated_by_bind_and_unbind():
    ex = TopicExchange("t")
    ex.bind(q("a"), "x.*")
    assert ex.route("x.y") == {q("a")}
    ex.bind(q("b"), "#.y")
    assert ex.route("x.y") == {q("a"), q("b")}
    ex.unbind(q("a"), "x.*")
    assert ex.route("x.y") == {q("b")}
    result = ex.route("x.y")
    result.add("mutated")  # callers get their own set
    assert ex.route("x.y") == {q("b")}


def test_topic_many_hashes_stay_fast():
    ex = TopicExchange("t")
    ex.bind(q("q"), ".".join(["#"] * 12) + ".z")
    start = time.perf_counter()
    assert ex.route(".".join(["a"] * 40)) == set()
    assert ex.route(".".join(["a"] * 40) + ".z") == {q("q")}
    assert time.perf_counter() - start < 1.0


def test_topic_thousands_of_bindings():
    ex = TopicExchange("t")
    for i in range(5000):
        ex.bind(q(f"q{i}"), f"region{i % 50}.service{i}.*")
    ex.bind(q("audit"), "#")
    ex.bind(q("errors"), "*.*.error")
    assert ex.route("region7.service7.error") == {q("q7"), q("audit"), q("errors")}
    assert ex.route("region7.service8.error") == {q("audit"), q("errors")}
    for i in range(2000):  # distinct keys: no cache hits (the routing cost is measured in bench/, not here)
        assert ex.route(f"region{i % 50}.service{i}.info") == {q(f"q{i}"), q("audit")}


# ----------------------------------------------------------------------------------- headers

def headers_ex(*bindings):
    ex = HeadersExchange("h")
    for name, args in bindings:
        ex.bind(q(name), "", args)
    return ex


def test_headers_all_and_any():
    ex = headers_ex(("all", {"x-match": "all", "a": 1, "b": "two"}),
                    ("any", {"x-match": "any", "a": 1, "b": "two"}),
                    ("default", {"a": 1, "b": "two"}))
    assert ex.route("", {"a": 1, "b": "two", "c": 3}) == {q("all"), q("any"), q("default")}
    assert ex.route("", {"a": 1}) == {q("any")}  # b missing
    assert ex.route("", {"a": 2, "b": "two"}) == {q("any")}  # a differs
    assert ex.route("", {"a": 2, "b": "three"}) == set()
    assert ex.route("", {}) == set() and ex.route("", None) == set()


def test_headers_routing_key_is_ignored():
    ex = headers_ex(("q", {"a": 1}))
    assert ex.route("anything", {"a": 1}) == {q("q")}


def test_headers_void_matches_on_presence():
    ex = headers_ex(("all", {"x-match": "all", "flag": None}), ("any", {"x-match": "any", "flag": None, "z": 9}))
    assert ex.route("", {"flag": "whatever"}) == {q("all"), q("any")}
    assert ex.route("", {"flag": None}) == {q("all"), q("any")}
    assert ex.route("", {"other": 1}) == set()


def test_headers_void_header_does_not_equal_a_value():
    ex = headers_ex(("q", {"a": 1}))
    assert ex.route("", {"a": None}) == set()


def test_headers_empty_patterns():
    ex = headers_ex(("all", {}), ("any", {"x-match": "any"}), ("all-x-only", {"x-match": "all", "x-foo": 1}))
    assert ex.route("", {"whatever": 1}) == {q("all"), q("all-x-only")}
    assert ex.route("", None) == {q("all"), q("all-x-only")}


def test_headers_x_arguments_ignored_unless_with_x():
    ex = headers_ex(("all", {"x-match": "all", "x-tenant": "t1", "a": 1}),
                    ("any", {"x-match": "any", "x-tenant": "t1"}),
                    ("all-with-x", {"x-match": "all-with-x", "x-tenant": "t1", "a": 1}),
                    ("any-with-x", {"x-match": "any-with-x", "x-tenant": "t1", "a": 5}))
    assert ex.route("", {"a": 1}) == {q("all")}
    assert ex.route("", {"a": 1, "x-tenant": "t1"}) == {q("all"), q("all-with-x"), q("any-with-x")}
    assert ex.route("", {"a": 1, "x-tenant": "t2"}) == {q("all")}
    assert ex.route("", {"a": 5, "x-tenant": "t2"}) == {q("any-with-x")}


def test_headers_value_equality_follows_erlang():
    ex = headers_ex(("int", {"v": 1}), ("bool", {"v": True}), ("str", {"s": "abc"}), ("float", {"f": 2.0}),
                    ("nested", {"t": {"k": [1, "x"]}}))
    assert ex.route("", {"v": 1}) == {q("int")}
    assert ex.route("", {"v": True}) == {q("bool")}
    assert ex.route("", {"v": 1.0}) == {q("int")}  # Erlang: 1 == 1.0
    assert ex.route("", {"s": b"abc"}) == {q("str")}  # both are binaries in RabbitMQ
    assert ex.route("", {"s": bytearray(b"abc")}) == {q("str")}
    assert ex.route("", {"s": "abd"}) == set()
    assert ex.route("", {"f": 2}) == {q("float")}
    assert ex.route("", {"t": {"k": [1, b"x"]}}) == {q("nested")}
    assert ex.route("", {"t": {"k": [1, "y"]}}) == set()


def test_headers_timestamps():
    when = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    ex = headers_ex(("q", {"ts": when}))
    assert ex.route("", {"ts": when}) == {q("q")}
    assert ex.route("", {"ts": when.replace(tzinfo=None)}) == {q("q")}


@pytest.mark.parametrize("bad", ["some", "ALL", 1, True])
def test_headers_invalid_x_match_is_refused(bad):
    ex = HeadersExchange("h")
    with pytest.raises(ChannelError) as info:
        ex.bind(q("q"), "", {"x-match": bad})
    assert info.value.reply_code == PRECONDITION_FAILED
    assert "x-match" in info.value.reply_text
    assert ex.is_unused  # nothing recorded


def test_headers_unbind():
    ex = headers_ex(("q", {"a": 1}), ("q", {"b": 2}))
    assert ex.route("", {"b": 2}) == {q("q")}
    assert ex.unbind(q("q"), "", {"b": 2})
    assert ex.route("", {"b": 2}) == set()
    assert ex.route("", {"a": 1}) == {q("q")}


# ------------------------------------------------------------------------------ route_through

def vhost(*exchanges):
    return {ex.name: ex for ex in exchanges}


def test_exchange_to_exchange_chain():
    a, b, c = TopicExchange("a"), FanoutExchange("b"), DirectExchange("c")
    a.bind(x("b"), "logs.#")
    a.bind(q("qa"), "logs.error")
    b.bind(x("c"))
    b.bind(q("qb"))
    c.bind(q("qc"), "logs.error")
    ex = vhost(a, b, c)
    assert route_through(ex, "a", "logs.error") == {q("qa"), q("qb"), q("qc")}
    assert route_through(ex, "a", "logs.info") == {q("qb")}
    assert route_through(ex, "a", "metrics") == set()
    assert route_through(ex, "missing", "x") == set()


@pytest.mark.parametrize("start", ["a", "b"])
def test_exchange_cycles_end(start):
    a, b = FanoutExchange("a"), FanoutExchange("b")
    a.bind(x("b"))
    b.bind(x("a"))
    a.bind(x("a"))  # a binding to itself
    b.bind(q("qb"))
    assert route_through(vhost(a, b), start, "k") == {q("qb")}


def test_diamond_delivers_once():
    top, left, right = FanoutExchange("top"), FanoutExchange("left"), FanoutExchange("right")
    top.bind(x("left"))
    top.bind(x("right"))
    left.bind(q("shared"))
    right.bind(q("shared"))
    assert route_through(vhost(top, left, right), "top", "k") == {q("shared")}


def test_alternate_exchange_when_nothing_matched():
    main = DirectExchange("main", arguments={"alternate-exchange": "ae"})
    ae = FanoutExchange("ae")
    main.bind(q("orders"), "order")
    ae.bind(q("unrouted"))
    ex = vhost(main, ae)
    assert route_through(ex, "main", "order") == {q("orders")}
    assert route_through(ex, "main", "other") == {q("unrouted")}


def test_alternate_exchange_not_used_when_an_exchange_matched():
    # RabbitMQ: the alternate is for an exchange whose own route found no destination at all
    main = DirectExchange("main", arguments={"alternate-exchange": "ae"})
    inner = DirectExchange("inner")  # matches nothing for this key
    ae = FanoutExchange("ae")
    main.bind(x("inner"), "k")
    ae.bind(q("unrouted"))
    assert route_through(vhost(main, inner, ae), "main", "k") == set()


def test_alternate_exchange_of_an_inner_exchange_and_chains_and_cycles():
    main = DirectExchange("main")
    inner = DirectExchange("inner", arguments={"alternate-exchange": "ae1"})
    ae1 = DirectExchange("ae1", arguments={"alternate-exchange": "ae2"})
    ae2 = DirectExchange("ae2", arguments={"alternate-exchange": "ae1"})  # cycle back
    main.bind(x("inner"), "k")
    ex = vhost(main, inner, ae1, ae2)
    assert route_through(ex, "main", "k") == set()  # ends
    ae2.bind(q("last"), "k")
    assert route_through(ex, "main", "k") == {q("last")}


def test_missing_alternate_exchange_is_ignored():
    main = DirectExchange("main", arguments={"alternate-exchange": "gone"})
    assert route_through(vhost(main), "main", "k") == set()


def test_headers_reach_inner_exchanges():
    top = FanoutExchange("top")
    h = HeadersExchange("h")
    top.bind(x("h"))
    h.bind(q("red"), "", {"colour": "red"})
    assert route_through(vhost(top, h), "top", "", {"colour": "red"}) == {q("red")}
    assert route_through(vhost(top, h), "top", "", {"colour": "blue"}) == set()

