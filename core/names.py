"""Queue name <-> topic name: every AMQP queue is a one-partition topic of the log.

A queue of vhost ``/`` whose name is a legal Kafka topic name keeps it. Every other queue
(another vhost, or characters Kafka does not allow, or a name that starts with the escape
prefix itself) becomes ``__amqp.<vhost>.<name>`` where both parts are escaped so that
``.`` separates them unambiguously and the mapping is reversible:

* ASCII letters, digits and ``-`` stand for themselves;
* ``_`` is written ``__``;
* every other byte of the UTF-8 encoding (``.`` included) is ``_`` and two hex digits.

Names too long for a topic (249 characters) are refused with a clear error.
"""
from __future__ import annotations

import re

from core.errors import InvalidTopicError
from core.metadata import MAX_TOPIC_LENGTH, check_topic_name

PREFIX = "__amqp."
DEFAULT_VHOST = "/"


def is_internal_topic(name: str) -> bool:
    """Whether Metadata flags ``name`` internal: the broker's own ``__`` topics, not queue topics.

    An escaped queue topic starts with ``__`` too, but it holds user messages that Kafka clients
    must be able to read: clients skip internal topics (Spark's Kafka source drops them from
    ``subscribe`` and ``assign``, consumers from pattern subscriptions).
    """
    return name.startswith("__") and not name.startswith(PREFIX)
_PLAIN = re.compile(rb"[A-Za-z0-9-]")


def _escape(text: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        ch = bytes([byte])
        if _PLAIN.match(ch):
            out.append(ch.decode())
        elif ch == b"_":
            out.append("__")
        else:
            out.append(f"_{byte:02x}")
    return "".join(out)


def _unescape(text: str) -> str:
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "_":
            out += ch.encode()
            i += 1
        elif text[i + 1:i + 2] == "_":
            out += b"_"
            i += 2
        else:
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
    return out.decode("utf-8")


def _legal(name: str) -> bool:
    try:
        check_topic_name(name)
    except InvalidTopicError:
        return False
    return True


def queue_topic(vhost: str, queue: str) -> str:
    """The topic that holds ``queue`` of ``vhost``."""
    if vhost == DEFAULT_VHOST and _legal(queue) and not queue.startswith(PREFIX):
        return queue
    topic = f"{PREFIX}{_escape(vhost)}.{_escape(queue)}"
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"queue {queue!r} of vhost {vhost!r} needs a topic name of {len(topic)} characters; "
                                f"the limit is {MAX_TOPIC_LENGTH}: use a shorter queue name")
    return topic


def topic_queue(topic: str) -> tuple[str, str]:
    """(vhost, queue) for a topic name; a plain topic is a queue of vhost ``/``."""
    if not topic.startswith(PREFIX):
        return DEFAULT_VHOST, topic
    vhost, _, queue = topic[len(PREFIX):].partition(".")
    return _unescape(vhost), _unescape(queue)
