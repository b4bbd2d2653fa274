"""Coverage-guided fuzzing of the sans-I/O codecs in wire/ with atheris (libFuzzer for Python).

Where the live fuzzer (fuzzer.py) mutates blindly, libFuzzer keeps every input that reaches new
branches of wire/ and mutates those further, so it gets past length checks and into the field
decoders. Each target accepts any bytes and may fail only with the codec's own error; anything
else is a crash: libFuzzer stops, prints the traceback and writes the input as crash-<sha1>.

    python -m compat_tests.fuzz.coverage kafka|amqp|stream|records [libFuzzer flags] [CORPUS_DIR ...]

``--seed-corpus DIR`` (our flag, given first) fills DIR with the captured client traffic
(corpus/*.jsonl) and batches of every codec before the run. tests/test_wire_coverage_fuzz.py
runs every target for a short while; run longer by hand with e.g. ``-max_total_time=600``.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["wire"]):
    from wire.amqp.codec import NEED_DATA, PROTOCOL_HEADER, AmqpFrameError, ServerCodec
    from wire.compression import CODEC_NAMES, decompress
    from wire.errors import CorruptBatchError
    from wire.kafka import RequestError, parse_request
    from wire.records import Header, Record, decode_batch, encode_batch, iter_batches
    from wire.stream_codec import FrameBuffer, StreamFrameError, decode_request

from compat_tests.fuzz.fuzzer import load


def kafka(data: bytes) -> None:
    try:
        parse_request(data)
    except RequestError:
        pass


def amqp(data: bytes) -> None:
    # The first byte picks a frame_max and how the bytes are cut into reads, so that partial
    # frames and frame-size limits are explored too.
    if not data:
        return
    frame_max = (4096, 131072, 0)[data[0] % 3]
    step = (1, 7, 300, 1 << 20)[data[0] // 3 % 4]
    codec = ServerCodec(frame_max=frame_max)
    codec.receive_data(PROTOCOL_HEADER)
    codec.next_event()
    rest = data[1:]
    try:
        for at in range(0, len(rest), step):
            codec.receive_data(rest[at:at + step])
            while codec.next_event() is not NEED_DATA:
                pass
    except AmqpFrameError:
        pass


def stream(data: bytes) -> None:
    # As for AMQP, the first byte picks a frame-max and how the bytes are cut into reads.
    if not data:
        return
    buffer = FrameBuffer((8192, 1 << 20, 0)[data[0] % 3])
    step = (1, 7, 300, 1 << 20)[data[0] // 3 % 4]
    rest = data[1:]
    try:
        for at in range(0, len(rest), step):
            for key, version, body in buffer.feed(rest[at:at + step]):
                decode_request(key, version, body)
    except StreamFrameError:
        pass


def records(data: bytes) -> None:
    try:
        for pos, _header in iter_batches(data):
            decode_batch(data, pos)
    except CorruptBatchError:
        pass
    if data:
        try:
            decompress(data[0] % 5, data[1:])
        except CorruptBatchError:
            pass


TARGETS = {"kafka": kafka, "amqp": amqp, "stream": stream, "records": records}


def seeds(target: str) -> list[bytes]:
    """Starting inputs: what real clients sent, split the way the target reads it."""
    if target == "kafka":
        return [frame[4:] for session in load("kafka") for frame in session]
    if target == "amqp":
        out = []
        for session in load("amqp"):
            stream = b"".join(session)
            if stream.startswith(PROTOCOL_HEADER):
                stream = stream[len(PROTOCOL_HEADER):]
            out += [bytes([choice]) + stream for choice in (1, 3 * 2, 3 * 3)]
        return out
    if target == "stream":
        return [bytes([choice]) + b"".join(session) for session in load("stream") for choice in (1, 3 * 2, 3 * 3)]
    batch = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"value %d" % i, (Header("h", b"v"),)) for i in range(3)]
    return [encode_batch(batch, compression=codec) for codec in sorted(CODEC_NAMES)]


def write_seeds(target: str, directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    found = seeds(target)
    for data in found:
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return len(found)


def main() -> None:
    args = sys.argv[1:]
    if not args or args[0] not in TARGETS:
        raise SystemExit(f"usage: python -m compat_tests.fuzz.coverage {'|'.join(TARGETS)} "
                         "[--seed-corpus DIR] [libFuzzer flags] [CORPUS_DIR ...]")
    target = args.pop(0)
    if args[:1] == ["--seed-corpus"]:
        directory = Path(args[1])
        print(f"[coverage {target}] {write_seeds(target, directory)} seed inputs in {directory}", flush=True)
        args = args[2:] + [str(directory)]
    atheris.Setup([sys.argv[0], *args], TARGETS[target])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
