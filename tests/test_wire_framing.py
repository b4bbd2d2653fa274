import struct

import pytest
from hypothesis import given, strategies as st

from wire.errors import FrameError
from wire.framing import FrameDecoder, frame


@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(1, 64), min_size=1))
def test_frames_survive_any_chunking(payloads, cuts):
    stream = b"".join(frame(p) for p in payloads)
    decoder, out, pos, i = FrameDecoder(), [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += decoder.feed(stream[pos:pos + step])
        pos, i = pos + step, i + 1
    assert out == payloads and decoder.buffered == 0


def test_one_byte_at_a_time():
    decoder = FrameDecoder()
    out = []
    for byte in frame(b"hello") + frame(b"") + frame(b"x" * 1000):
        out += decoder.feed(bytes([byte]))
    assert out == [b"hello", b"", b"x" * 1000]


@pytest.mark.parametrize("size", [-1, 101])
def test_bad_sizes_raise(size):
    with pytest.raises(FrameError):
        FrameDecoder(max_frame_bytes=100).feed(struct.pack(">i", size))
