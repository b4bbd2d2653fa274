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
