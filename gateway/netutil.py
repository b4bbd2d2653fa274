"""Socket options the listeners set on every accepted connection, and writes that skip Twisted's
queue when the socket can take the bytes at once (latency) or straight from a file (zero copy)."""
from __future__ import annotations

import os

from twisted.internet.interfaces import ISSLTransport


def no_delay(transport) -> None:
    """Turn Nagle's algorithm off (TCP_NODELAY), as RabbitMQ and Kafka do.

    With it on, a small write (a delivery, a confirm, a fetch response) that follows another one
    still unacknowledged waits for the peer's delayed ACK, up to 40 ms on Linux: the broker then
    answers in tens of milliseconds at low rates. Under TLS the option goes on the TCP transport
    beneath; transports without one (in-memory tests) are left alone.
    """
    for candidate in (transport, getattr(transport, "transport", None)):
        set_no_delay = getattr(candidate, "setTcpNoDelay", None)
        if set_no_delay is not None:
            try:
                set_no_delay(True)
            except OSError:  # the socket is already gone
                pass
            return


def _socket_free(transport) -> bool:
    """True for a plain TCP transport (not TLS: its ``writeSomeData`` would bypass the
    encryption) that is connected and has nothing queued: bytes may go to its socket directly."""
    return (getattr(transport, "writeSomeData", None) is not None and getattr(transport, "socket", None) is not None
            and not ISSLTransport.providedBy(transport) and not getattr(transport, "TLS", False)
            and transport.connected and not transport.disconnecting
            and not transport._tempDataBuffer and len(transport.dataBuffer) == transport.offset)


def write_through(transport, data: bytes) -> None:
    """Hand ``data`` to the socket in this call when nothing is queued ahead of it.

    Twisted's ``write`` only queues: the bytes go out on a later reactor pass, after the socket
    is registered for writability (two epoll_ctl calls and an extra epoll_wait per answer). A
    broker answering one message at a time pays that on every delivery and confirm, so a plain
    TCP transport with an empty buffer gets a direct non-blocking send; what does not fit, or
    any error, goes through ``write`` and the reactor as before (which also reports the error).
    TLS and in-memory transports always take ``write``.
    """
    if _socket_free(transport):
        sent = transport.writeSomeData(data)
        if isinstance(sent, int) and sent > 0:
            if sent == len(data):
                return
            data = data[sent:]
    transport.write(data)


# Bytes of stored records a Kafka Fetch sent straight from the segment files (os.sendfile) and
# bytes of them that were read into Python instead (TLS, a busy socket): /metrics shows both.
RANGES_SENT = {"sendfile": 0, "copied": 0}


def write_parts(transport, parts: list) -> None:
    """Write a response made of bytes and file ranges (``core.segment.FileRange``) in order.

    On a plain TCP transport with nothing queued ahead, bytes go with a direct send and ranges
    with ``os.sendfile`` from the file to the socket, never through a Python buffer, for as long
    as the socket takes them; from the first part it does not take whole, the rest is read in
    and handed to ``write`` (Twisted queues it and pauses the connection while the client is
    slow). TLS and in-memory transports get it all read in. Ranges are used before this returns:
    they are valid only until control goes back to the reactor."""
    i = 0
    if _socket_free(transport):
        fileno = transport.socket.fileno()
        while i < len(parts):
            part = parts[i]
            if isinstance(part, bytes):
                sent = transport.writeSomeData(part)
                sent = sent if isinstance(sent, int) else 0
                if sent < len(part):
                    parts = [part[sent:]] + parts[i + 1:]
                    break
            else:
                sent = _sendfile(fileno, part)
                RANGES_SENT["sendfile"] += sent
                if sent < part.length:
                    rest = os.pread(part.fd, part.length - sent, part.position + sent)
                    RANGES_SENT["copied"] += len(rest)
                    parts = [rest] + parts[i + 1:]
                    break
            i += 1
        else:
            return
    else:
        parts = list(parts)
    out = []
    for part in parts:
        if isinstance(part, bytes):
            out.append(part)
        else:
            data = part.read()
            RANGES_SENT["copied"] += len(data)
            out.append(data)
    transport.write(b"".join(out))


def _sendfile(fileno: int, part) -> int:
    """Bytes of ``part`` the socket took now (0 when it is full or gone: the caller falls back)."""
    sent = 0
    while sent < part.length:
        try:
            n = os.sendfile(fileno, part.fd, part.position + sent, part.length - sent)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:  # the connection broke: the reactor reports it on the queued write
            break
        if n == 0:
            break
        sent += n
    return sent
