"""Errors the log layer raises. The gateway maps each to its protocol's error code."""


class LogError(Exception):
    """Base of the log layer's errors; the message names the thing and, where it helps, the fix."""


class OffsetOutOfRangeError(LogError):
    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(
            f"offset {offset} is outside the log's range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(LogError):
    """A batch is larger than the topic's max.message.bytes."""


class InvalidRecordError(LogError):
    """A batch is well formed but breaks a rule of the topic (e.g. a keyless record on a compacted topic)."""


class StorageError(LogError):
    """A write to a log's files failed (the file system is full, or an I/O error); nothing of
    the refused write is kept, so the log stays as it was before it."""


class InvalidConfigError(LogError):
    """A topic config key is unknown or its value is out of range."""


class UnknownTopicError(LogError):
    """The topic or partition does not exist."""


class TopicExistsError(LogError):
    pass


class InvalidTopicError(LogError):
    """The topic name is not a legal Kafka topic name."""


class InvalidPartitionsError(LogError):
    pass


class OffsetMismatchError(LogError):
    """A replica append does not continue the log: its first offset is not the log end offset."""

    def __init__(self, offset: int, log_end_offset: int, detail: str = ""):
        super().__init__(
            f"replicated batches start at offset {offset}, the log ends at {log_end_offset}"
            + (f" ({detail})" if detail else "") + "; fetch from the log end offset, truncating first if needed"
        )
        self.offset = offset
        self.log_end_offset = log_end_offset


class InvalidReplicationFactorError(LogError):
    """More replicas were asked for than there are brokers."""
