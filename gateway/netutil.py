"""Socket options the listeners set on every accepted connection."""
from __future__ import annotations


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


def write_through(transport, data: bytes) -> None:
    """Hand ``data`` to the socket in this call when nothing is queued ahead of it.

    Twisted's ``write`` only queues: the bytes go out on a later reactor pass, after the socket
    is registered for writability (two epoll_ctl calls and an extra epoll_wait per answer). A
    broker answering one message at a time pays that on every delivery and confirm, so a plain
    TCP transport with an empty buffer gets a direct non-blocking send; what does not fit, or
    any error, goes through ``write`` and the reactor as before (which also reports the error).
    TLS and in-memory transports always take ``write``.
    """
    send = getattr(transport, "writeSomeData", None)
    if (send is not None and transport.connected and not transport.disconnecting
            and not transport._tempDataBuffer and len(transport.dataBuffer) == transport.offset):
        sent = send(data)
        if isinstance(sent, int) and sent > 0:
            if sent == len(data):
                return
            data = data[sent:]
    transport.write(data)
