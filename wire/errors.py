"""Errors raised by the ``wire`` codecs."""


class CorruptBatchError(ValueError):
    """Bytes that do not form a valid record batch (or compressed payload).

    ``reason`` says precisely what is wrong; ``str()`` of the error is the reason.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FrameError(ValueError):
    """A connection's framing is broken (negative or oversize length): close the connection."""


class RequestError(ValueError):
    """A Kafka request that cannot be parsed; the connection it came on must be closed."""
