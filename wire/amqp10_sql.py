"""AMQP SQL filter expressions (OASIS "AMQP Filter Expressions" §6, as RabbitMQ 4.2 serves them),
without I/O: :func:`compile_sql` turns the expression text into a predicate over a message's
fields, or raises :class:`SqlError` saying what is wrong and where.

The language is SQL-92's conditional expressions: ``AND OR NOT``, comparisons (``= <> != < > <=
>=``), arithmetic (``+ - * / %``), ``[NOT] IN (...)``, ``[NOT] LIKE 'pattern' [ESCAPE 'c']``,
``identifier IS [NOT] NULL``, ``UTC()``, and string (``'..'`` / ``".."``, doubled quote inside),
integer, decimal (``1.5``, ``1.5E3``), binary (``0x0A1B``) and boolean (``TRUE FALSE``) literals.
Keywords are upper case (a lower-case keyword is refused as an identifier, as RabbitMQ does).

Identifiers: ``h.priority`` / ``header.priority`` (4 when absent), ``p.<field>`` /
``properties.<field>`` (message_id, user_id, to, subject, reply_to, correlation_id, content_type,
content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence,
reply_to_group_id), and application properties: a bare name, ``a.<name>`` /
``application_properties.<name>``, or any text in brackets (``[my key]``, ``]]`` for ``]``).

Evaluation is three-valued (Jakarta Messaging's tables): a missing field or an operation on one is
*unknown*, and only an expression that is true matches. Comparisons of unlike types are false
(``<>``: true); numbers of any kind compare by value; strings, symbols and binaries compare as
their bytes; ``/`` is always real division and ``%`` truncates toward zero.

Bounds (so one consumer's filter cannot make the broker slow): at most :data:`MAX_LENGTH`
characters, :data:`MAX_TOKENS` tokens and :data:`MAX_DEPTH` nested parentheses/``NOT``s; the node
count is bounded by the tokens. ``LIKE`` patterns are compiled to fixed-length segments between
``%`` wildcards and matched left to right with a bit-parallel scan (Shift-And), never a
backtracking regular expression: time linear in the subject's length whatever the pattern.
"""
from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_TOKENS", "Like", "SqlError", "compile_sql", "Fields"]

MAX_LENGTH = 4096  # characters (RabbitMQ's limit)
MAX_TOKENS = 200  # (RabbitMQ's limit)
MAX_DEPTH = 32  # nesting of parentheses and NOT: keeps the recursive parser and evaluator shallow
DEFAULT_PRIORITY = 4

PROPERTY_FIELDS = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                   "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
                   "reply_to_group_id")
_KEYWORDS = {"AND", "OR", "NOT", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE", "UTC"}
# names RabbitMQ keeps from being application-property identifiers in any case
_RESERVED = {"and", "or", "not", "like", "in", "is", "null", "escape", "true", "false", "exists", "nan", "inf",
             "lower", "upper", "left", "right", "substring", "utc", "date"}
_SECTIONS = {"h": "header", "header": "header", "p": "properties", "properties": "properties",
             "a": "application_properties", "application_properties": "application_properties"}
_OPS = ("<>", "!=", ">=", "<=", "=", ">", "<", "+", "-", "*", "/", "%", "(", ")", ",")
_HEX = "0123456789ABCDEF"


class SqlError(ValueError):
    """The expression is not one this broker can evaluate (syntax, an unknown field, a bound)."""


class Fields:
    """What an expression reads from one message: ``priority`` (int or None), ``properties``
    (name -> plain value) and ``application_properties`` (name -> plain value). Plain values:
    None, bool, int, float, or bytes (strings and symbols as their UTF-8 bytes)."""
    __slots__ = ("priority", "properties", "application_properties")

    def __init__(self, priority=None, properties=None, application_properties=None):
        self.priority = priority
        self.properties = properties or {}
        self.application_properties = application_properties or {}


# --- lexing ----------------------------------------------------------------------------------

def _letters(text: str, i: int, extra: str) -> int:
    n = len(text)
    while i < n and (text[i].isascii() and (text[i].isalpha() or text[i] in extra)):
        i += 1
    return i


def _tokens(text: str) -> list[tuple[str, Any, int]]:
    """(kind, value, position) tokens; kinds: op, kw, int, float, str, bin, bool, id."""
    out: list[tuple[str, Any, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\f\n\r":
            i += 1
            continue
        if len(out) >= MAX_TOKENS:
            raise SqlError(f"more than {MAX_TOKENS} tokens")
        if c.isascii() and c.isalpha():
            regular = _letters(text, i + 1, "0123456789_")
            head = _letters(text, i + 1, "_-")
            if head < n and text[head] == "." and head + 1 < n and text[head + 1].isascii() \
                    and text[head + 1].isalpha():
                end = _letters(text, head + 2, "0123456789_")
                section, name = _SECTIONS.get(text[i:head]), text[head + 1:end]
                if section is None:
                    raise SqlError(f"unknown section {text[i:head]!r} at {i} (use h., p. or a.)")
                if section == "header" and name != "priority":
                    raise SqlError(f"unsupported header field {name!r} at {i} (only priority)")
                if section == "properties" and name not in PROPERTY_FIELDS:
                    raise SqlError(f"unknown properties field {name!r} at {i}")
                out.append(("id", (section, name), i))
                i = end
                continue
            word = text[i:regular]
            if word in _KEYWORDS:
                out.append(("bool", word == "TRUE", i) if word in ("TRUE", "FALSE") else ("kw", word, i))
            elif word.lower() in _RESERVED:
                raise SqlError(f"{word!r} at {i} is a reserved word (keywords are upper case)")
            else:
                out.append(("id", ("application_properties", word), i))
            i = regular
        elif c.isascii() and c.isdigit():
            i = _number(text, i, out)
        elif c in "'\"":
            j, parts = i + 1, []
            while True:
                k = text.find(c, j)
                if k < 0:
                    raise SqlError(f"unterminated string starting at {i}")
                parts.append(text[j:k])
                if k + 1 < n and text[k + 1] == c:
                    parts.append(c)
                    j = k + 2
                    continue
                break
            out.append(("str", "".join(parts), i))
            i = k + 1
        elif c == "[":
            j, parts = i + 1, []
            while True:
                if j >= n:
                    raise SqlError(f"unterminated [identifier] starting at {i}")
                ch = text[j]
                if ch in "[]":
                    if j + 1 < n and text[j + 1] == ch:
                        parts.append(ch)
                        j += 2
                        continue
                    if ch == "[":
                        raise SqlError(f"unescaped '[' inside the identifier at {j}")
                    break
                if _control(ch):
                    raise SqlError(f"control character in the identifier at {j}")
                parts.append(ch)
                j += 1
            out.append(("id", ("application_properties", "".join(parts)), i))
            i = j + 1
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise SqlError(f"unexpected character {c!r} at {i}")
            out.append(("op", "<>" if op == "!=" else op, i))
            i += len(op)
    return out


def _number(text: str, i: int, out: list) -> int:
    n = len(text)
    if text.startswith("0x", i):
        j = i + 2
        while j + 1 < n and text[j] in _HEX and text[j + 1] in _HEX:
            j += 2
        if j > i + 2:
            out.append(("bin", bytes.fromhex(text[i + 2:j]), i))
            return j
    j = i
    while j < n and text[j].isascii() and text[j].isdigit():
        j += 1
    if j + 1 < n and text[j] == "." and text[j + 1].isascii() and text[j + 1].isdigit():
        k = j + 1
        while k < n and text[k].isascii() and text[k].isdigit():
            k += 1
        if k < n and text[k] == "E":
            e = k + 1 + (k + 1 < n and text[k + 1] in "+-")
            f = e
            while f < n and text[f].isascii() and text[f].isdigit():
                f += 1
            if f > e:
                k = f
        out.append(("float", float(text[i:k]), i))
        return k
    out.append(("int", int(text[i:j]), i))
    return j


def _control(ch: str) -> bool:
    return ord(ch) < 32 or ord(ch) == 127


# --- LIKE ------------------------------------------------------------------------------------

class Like:
    """A LIKE pattern: ``%`` any run of characters, ``_`` exactly one, ``escape`` makes the next
    character literal. Split at each ``%`` into fixed-length segments; the first is anchored at
    the start and the last at the end, the ones between are found leftmost-first in order
    (leftmost is always right for ``%``: it leaves the most room for what follows). ``steps``
    counts subject characters examined by the last :meth:`match` (for tests of linearity)."""
    __slots__ = ("segments", "anchored_end", "steps", "_masks")

    def __init__(self, pattern: str, escape: str | None = None):
        segments: list[list[str | None]] = [[]]  # None stands for '_'
        i = 0
        while i < len(pattern):
            c = pattern[i]
            if _control(c):
                raise SqlError("control character in a LIKE pattern")
            if escape is not None and c == escape:
                if i + 1 >= len(pattern):
                    raise SqlError("LIKE pattern ends with its escape character")
                if _control(pattern[i + 1]):
                    raise SqlError("control character in a LIKE pattern")
                segments[-1].append(pattern[i + 1])
                i += 2
                continue
            if c == "%":
                segments.append([])
            else:
                segments[-1].append(None if c == "_" else c)
            i += 1
        self.segments = segments
        self.anchored_end = len(segments) == 1
        self.steps = 0
        # per middle segment: (length, bit of its last position, {char: mask}, mask of its '_'s)
        self._masks = [_shift_and(s) for s in segments[1:-1]]

    def match(self, subject: str) -> bool:
        self.steps = 0
        segs = self.segments
        first = segs[0]
        if self.anchored_end:
            return len(subject) == len(first) and self._at(subject, 0, first)
        last = segs[-1]
        if len(subject) < len(first) + len(last) or not self._at(subject, 0, first):
            return False
        pos, end = len(first), len(subject) - len(last)
        for k, masks, any_mask in self._masks:
            if k == 0:
                continue
            top, state, found = 1 << (k - 1), 0, -1
            while pos < end:
                self.steps += 1
                state = ((state << 1) | 1) & masks.get(subject[pos], any_mask)
                pos += 1
                if state & top:
                    found = pos
                    break
            if found < 0:
                return False
        return self._at(subject, end, last)

    def _at(self, subject: str, start: int, seg: list) -> bool:
        for i, c in enumerate(seg):
            self.steps += 1
            if c is not None and subject[start + i] != c:
                return False
        return True


def _shift_and(seg: list) -> tuple[int, dict[str, int], int]:
    any_mask = 0
    for i, c in enumerate(seg):
        if c is None:
            any_mask |= 1 << i
    masks: dict[str, int] = {}
    for i, c in enumerate(seg):
        if c is not None:
            masks[c] = masks.get(c, any_mask) | (1 << i)
    return len(seg), masks, any_mask


# --- parsing: a recursive-descent parser over the token list; nodes are tuples ---------------
# ("lit", v) ("id", section, name) ("utc",) ("not", e) ("and", a, b) ("or", a, b) ("cmp", op, a, b)
# ("arith", op, a, b) ("neg", e) ("pos", e) ("in", e, [items]) ("null", id) ("like", e, Like)

class _Parser:
    def __init__(self, tokens: list):
        self.tokens = tokens
        self.i = 0
        self.depth = 0

    def peek(self, kind: str, value=None) -> bool:
        if self.i >= len(self.tokens):
            return False
        k, v, _ = self.tokens[self.i]
        return k == kind and (value is None or v == value)

    def take(self, kind: str, value=None):
        if not self.peek(kind, value):
            raise SqlError(f"expected {value or kind} {self._where()}")
        tok = self.tokens[self.i]
        self.i += 1
        return tok[1]

    def _where(self) -> str:
        if self.i >= len(self.tokens):
            return "at the end"
        _, v, pos = self.tokens[self.i]
        return f"at {pos} (found {v!r})"

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SqlError(f"nested more than {MAX_DEPTH} deep")

    def selector(self):
        node = self.or_expr()
        if self.i < len(self.tokens):
            raise SqlError(f"unexpected token {self._where()}")
        return node

    def or_expr(self):
        node = self.and_expr()
        while self.peek("kw", "OR"):
            self.i += 1
            node = ("or", node, self.and_expr())
        return node

    def and_expr(self):
        node = self.not_expr()
        while self.peek("kw", "AND"):
            self.i += 1
            node = ("and", node, self.not_expr())
        return node

    def not_expr(self):
        if self.peek("kw", "NOT"):
            self.i += 1
            self.nest()
            node = ("not", self.not_expr())
            self.depth -= 1
            return node
        return self.comparison()

    def comparison(self):
        bare_id = self.peek("id")
        left = self.additive()
        bare_id = bare_id and left[0] == "id"
        if self.peek("op") and self.tokens[self.i][1] in ("=", "<>", "<", ">", "<=", ">="):
            op = self.take("op")
            return ("cmp", op, left, self.additive())
        if self.peek("kw", "IS"):
            if not bare_id:
                raise SqlError(f"IS NULL applies to an identifier {self._where()}")
            self.i += 1
            negate = self.peek("kw", "NOT")
            self.i += negate
            self.take("kw", "NULL")
            return ("not", ("null", left)) if negate else ("null", left)
        negate = self.peek("kw", "NOT")
        if negate:
            self.i += 1
            if not (self.peek("kw", "LIKE") or self.peek("kw", "IN")):
                raise SqlError(f"expected LIKE or IN after NOT {self._where()}")
        if self.peek("kw", "LIKE"):
            self.i += 1
            pattern = self.take("str")
            escape = None
            if self.peek("kw", "ESCAPE"):
                self.i += 1
                escape = self.take("str")
                if len(escape) != 1:
                    raise SqlError("ESCAPE takes a string of one character")
            node = ("like", left, Like(pattern, escape))
        elif self.peek("kw", "IN"):
            self.i += 1
            self.take("op", "(")
            items = [self.additive()]
            while self.peek("op", ","):
                self.i += 1
                items.append(self.additive())
            self.take("op", ")")
            node = ("in", left, items)
        else:
            return left
        return ("not", node) if negate else node

    def additive(self):
        node = self.multiplicative()
        while self.peek("op", "+") or self.peek("op", "-"):
            op = self.take("op")
            node = ("arith", op, node, self.multiplicative())
        return node

    def multiplicative(self):
        node = self.unary()
        while self.peek("op", "*") or self.peek("op", "/") or self.peek("op", "%"):
            op = self.take("op")
            node = ("arith", op, node, self.unary())
        return node

    def unary(self):
        if self.peek("op", "-") or self.peek("op", "+"):
            op = self.take("op")
            return ("neg" if op == "-" else "pos", self.primary())
        return self.primary()

    def primary(self):
        if self.i >= len(self.tokens):
            raise SqlError("the expression ends too early")
        kind, value, _ = self.tokens[self.i]
        if kind == "op" and value == "(":
            self.i += 1
            self.nest()
            node = self.or_expr()
            self.depth -= 1
            self.take("op", ")")
            return node
        if kind in ("int", "float", "bool", "bin"):
            self.i += 1
            return ("lit", value)
        if kind == "str":
            self.i += 1
            return ("lit", value.encode())
        if kind == "id":
            self.i += 1
            return ("id", *value)
        if kind == "kw" and value == "UTC":
            self.i += 1
            self.take("op", "(")
            self.take("op", ")")
            return ("utc",)
        raise SqlError(f"unexpected token {self._where()}")


def compile_sql(text: str, clock: Callable[[], float] = time.time) -> Callable[[Fields], bool]:
    """The predicate of an SQL filter expression; SqlError if it is not valid."""
    if not isinstance(text, str):
        raise SqlError("the expression is not a string")
    if len(text) > MAX_LENGTH:
        raise SqlError(f"the expression is longer than {MAX_LENGTH} characters")
    tree = _Parser(_tokens(text)).selector()

    def matches(fields: Fields) -> bool:
        return _eval(tree, fields, clock) is True
    return matches


# --- evaluation: None is "unknown" ------------------------------------------------------------

def _num(v) -> bool:
    return type(v) in (int, float)


def _eq(a, b) -> bool:
    if _num(a) and _num(b):
        return a == b
    return type(a) is type(b) and a == b


def _eval(node, f: Fields, clock):
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "id":
        section, name = node[1], node[2]
        if section == "application_properties":
            return f.application_properties.get(name)
        if section == "header":
            return DEFAULT_PRIORITY if f.priority is None else f.priority
        return f.properties.get(name)
    if kind == "and":
        a = _eval(node[1], f, clock)
        if a is False:
            return False
        b = _eval(node[2], f, clock)
        if b is False:
            return False
        return True if a is True and b is True else None
    if kind == "or":
        a = _eval(node[1], f, clock)
        if a is True:
            return True
        b = _eval(node[2], f, clock)
        if b is True:
            return True
        return False if a is False and b is False else None
    if kind == "not":
        v = _eval(node[1], f, clock)
        return (not v) if type(v) is bool else None
    if kind == "cmp":
        return _compare(node[1], _eval(node[2], f, clock), _eval(node[3], f, clock))
    if kind == "arith":
        return _arith(node[1], _eval(node[2], f, clock), _eval(node[3], f, clock))
    if kind in ("neg", "pos"):
        v = _eval(node[1], f, clock)
        return (-v if kind == "neg" else v) if _num(v) else None
    if kind == "in":
        v = _eval(node[1], f, clock)
        if v is None:
            return None
        return any(_eq(_eval(item, f, clock), v) for item in node[2])
    if kind == "null":
        return _eval(node[1], f, clock) is None
    if kind == "like":
        v = _eval(node[1], f, clock)
        if type(v) is not bytes:
            return None
        try:
            return node[2].match(v.decode())
        except UnicodeDecodeError:
            return None
    if kind == "utc":
        return int(clock() * 1000)
    raise AssertionError(kind)


def _compare(op: str, a, b):
    if a is None or b is None:
        return None
    if op == "=":
        return _eq(a, b)
    if op == "<>":
        return not _eq(a, b)
    if not ((_num(a) and _num(b)) or (type(a) is bytes and type(b) is bytes)):
        return False
    if op == "<":
        return a < b
    if op == ">":
        return a > b
    if op == "<=":
        return a <= b
    return a >= b


def _arith(op: str, a, b):
    if not (_num(a) and _num(b)):
        return None
    try:
        return _arith2(op, a, b)
    except (OverflowError, ValueError):  # an int too large for a float: no number, so unknown
        return None


def _arith2(op: str, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b if b != 0 else None
    if type(a) is int and type(b) is int and b != 0:  # '%': the remainder with the dividend's sign
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    return None
