"""Kafka's connection framing: every request and response is an int32 size, then that many bytes.

:class:`FrameDecoder` is sans-I/O: feed it whatever the socket delivered and take whole
frames out. Chunks are kept in a list and joined once per frame, so a 1 MB request that
arrives in 64 KB pieces is copied once, not once per piece.
"""
from __future__ import annotations

import struct

from wire.errors import FrameError

_SIZE = struct.Struct(">i")

# Kafka's socket.request.max.bytes default: larger requests close the connection.
MAX_FRAME_BYTES = 100 * 1024 * 1024


class FrameDecoder:
    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = b""       # bytes being consumed, from self._pos on
        self._pos = 0
        self._chunks: list[bytes] = []  # arrived after _buf, joined only when a frame needs them
        self._buffered = 0
        self._need = -1  # size of the frame being assembled, -1 while the size is not yet known

    @property
    def buffered(self) -> int:
        return self._buffered

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the frames (payloads without the size) now complete, in order.

        Raises FrameError on a negative or oversize length; the connection must then be closed.
        """
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
        frames = []
        while True:
            if self._need < 0:
                if self._buffered < 4:
                    return frames
                (size,) = _SIZE.unpack(self._take(4))
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self.max_frame_bytes:
                    raise FrameError(f"frame of {size} bytes is larger than the limit of {self.max_frame_bytes}")
                self._need = size
            if self._buffered < self._need:
                return frames
            frames.append(self._take(self._need))
            self._need = -1

    def _take(self, n: int) -> bytes:
        if len(self._buf) - self._pos < n:
            self._buf = self._buf[self._pos:] + b"".join(self._chunks)
            self._chunks.clear()
            self._pos = 0
        out = self._buf[self._pos:self._pos + n]
        self._pos += n
        self._buffered -= n
        if self._pos == len(self._buf):  # do not pin a consumed large frame in memory
            self._buf, self._pos = b"", 0
        return out


def frame(payload: bytes) -> bytes:
    """Prefix one payload with its size."""
    return _SIZE.pack(len(payload)) + payload
