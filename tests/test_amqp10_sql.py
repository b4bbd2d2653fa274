"""The SQL filter expression parser and evaluator (wire/amqp10_sql.py): RabbitMQ 4.2's grammar,
three-valued logic, the bounds, and LIKE matched in linear time."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.amqp10_sql import MAX_LENGTH, MAX_TOKENS, Fields, Like, SqlError, compile_sql

MSG = Fields(12, {"subject": b"v1", "creation_time": 5, "message_id": 7},
             {"k": 3, "s": b"hello", "f": 2.5, "b": True, "bin": b"\x01\x02", "odd key": b"x", "n": None})


def ev(expr: str, fields: Fields = MSG) -> bool:
    return compile_sql(expr, clock=lambda: 1000.0)(fields)


@pytest.mark.parametrize("expr", [
    "p.subject = 'v1' AND h.priority > 10", "properties.subject = \"v1\"", "header.priority = 12",
    "k IN (1, 2, 3)", "k NOT IN (1, 2)", "s LIKE 'h%o'", "s LIKE 'h_llo'", "s LIKE '%'", "s NOT LIKE '%x%'",
    "k / 2 = 1.5", "k % 2 = 1", "-7 % 2 = -1", "-k = -3", "+k = 3", "[s] = 'hello'", "[odd key] = 'x'",
    "a.k = 3.0", "application_properties.f > 2", "s <> 1", "b = TRUE", "bin = 0x0102", "UTC() = 1000000",
    "TRUE", "NOT FALSE", "missing IS NULL", "s IS NOT NULL", "missing = 1 OR TRUE", "(k = 3)",
    "k * 2 + 1 = 7", "k - 1 * 2 = 1", "NOT k = 4 AND k = 3", "p.creation_time = 5", "p.message_id = 7",
    "s > 'hell'", "'it''s' = 'it''s'", "s LIKE 'h\\%llo' ESCAPE '\\' OR TRUE", "1.5E1 = 15",
    "h.priority = 4 OR k = 3",
])
def test_true(expr):
    assert ev(expr) is True


@pytest.mark.parametrize("expr", [
    "missing = 1", "NOT missing = 1", "missing = 1 AND TRUE", "s > 1", "b > FALSE", "b = 1", "k / 0 = 1",
    "k % 0 = 0", "f % 2 = 0.5", "s LIKE 'x%'", "k LIKE '3'", "missing IN (1)", "missing LIKE '%'",
    "s = 0x68656C6C6F AND FALSE", "k", "s", "n = 1", "NOT missing IS NULL", "-s = 1", "FALSE OR missing = 2",
])
def test_not_true(expr):
    assert ev(expr) is False


def test_default_priority():
    assert ev("h.priority = 4", Fields()) is True


def test_strings_and_binaries_compare_as_bytes():
    assert ev("bin2 = 'ab'", Fields(application_properties={"bin2": b"ab"})) is True


@pytest.mark.parametrize("expr", [
    "@#$%^&", "FALSE FALSE", "a and b", "x.y = 1", "h.durable = TRUE", "p.nope = 1", "'abc", "(a) IS NULL",
    "k + 1 IS NULL", "s LIKE 'a' ESCAPE 'xy'", "s LIKE 'a\\' ESCAPE '\\'", "s LIKE k", "k = ", "k = 1 = 1",
    "UTC(1)", "NOT", "(k = 1", "k IN ()", "[abc", "s LIKE 'a\tb'", "", "1 2", "exists = 1", "k NOT = 1",
    "- - 1 = 1", "s = 0x68656c6c6f",
])
def test_refused(expr):
    with pytest.raises(SqlError):
        compile_sql(expr)


def test_bounds():
    with pytest.raises(SqlError, match="longer"):
        compile_sql("k = '" + "x" * MAX_LENGTH + "'")
    with pytest.raises(SqlError, match="tokens"):
        compile_sql(" OR ".join(["k = 1"] * (MAX_TOKENS // 3)))
    with pytest.raises(SqlError, match="deep"):
        compile_sql("(" * 40 + "TRUE" + ")" * 40)
    with pytest.raises(SqlError, match="deep"):
        compile_sql("NOT " * 40 + "TRUE")
    assert compile_sql("(" * 20 + "TRUE" + ")" * 20)(MSG) is True


def _reference_like(pattern: str, subject: str) -> bool:
    """Dynamic programming over (pattern, subject) prefixes: slow, obviously right."""
    n = len(subject)
    row = [True] + [False] * n
    for c in pattern:
        if c == "%":
            new = row[:]
            for j in range(1, n + 1):
                new[j] = new[j - 1] or row[j]
        else:
            new = [False] + [row[j - 1] and (c == "_" or subject[j - 1] == c) for j in range(1, n + 1)]
        row = new
    return row[n]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab%_", max_size=10), st.text(alphabet="abc", max_size=14))
def test_like_matches_reference(pattern, subject):
    assert Like(pattern).match(subject) == _reference_like(pattern, subject)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab", max_size=8), st.text(alphabet="ab%_", max_size=8))
def test_like_escape(literal, rest):
    """An escaped wildcard is the character itself."""
    pattern = "!%" + rest
    assert Like(pattern, "!").match("%" + literal) == _reference_like(rest, literal) if "%" not in literal else True


@pytest.mark.parametrize("pattern", ["%a" * 60 + "%b", "%" + "a_" * 30 + "%b", "a%" * 40 + "c", "%" * 200 + "b"])
def test_like_adversarial_is_linear(pattern):
    """Patterns that make a backtracking matcher explode: the steps grow linearly with the subject."""
    like = Like(pattern)
    counts = []
    for n in (1000, 2000, 4000):
        assert like.match("a" * n) is False
        counts.append(like.steps)
    assert counts[2] <= 2 * counts[1] + 300 and counts[1] <= 2 * counts[0] + 300
    assert counts[2] <= 3 * 4000 + len(pattern) * 2


_PIECES = ["k", "s", "missing", "p.subject", "h.priority", "[odd key]", "1", "2.5", "1.5E3", "0x0A", "'a%_'",
           "\"x\"", "TRUE", "FALSE", "NULL", "AND", "OR", "NOT", "IN", "LIKE", "ESCAPE", "IS", "UTC", "(", ")",
           ",", "=", "<>", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "'!'", "@", "and"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=25))
def test_any_token_soup_is_refused_or_evaluates_to_a_boolean(pieces):
    """Whatever the text, compiling either refuses it with SqlError or gives a predicate that
    answers True or False (never another exception) on a message."""
    try:
        predicate = compile_sql(" ".join(pieces))
    except SqlError:
        return
    assert predicate(MSG) in (True, False)
    assert predicate(Fields()) in (True, False)
