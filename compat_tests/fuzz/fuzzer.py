"""A mutation fuzzer for the Kafka, AMQP and RabbitMQ stream ports, seeded with real clients' traffic.

Each round replays one captured client connection (corpus/*.jsonl, see capture.py) on a fresh
connection, with one to three of its frames mutated (up to a tenth of a long session's): bit flips, random bytes, interesting
integers (0, -1, 0x7f.., 0x80..) written over a field, bytes inserted, deleted or duplicated,
truncation, or another frame's body spliced in. Most of the time the frame's own size field is
fixed up afterwards, so the damage reaches the request parsers rather than only the framing.
Stream frames also get field-aware edits: a string field swapped whole (null, empty, too long,
not UTF-8, a huge number) or eight bytes set to a u64/i64 extreme, so values reach the handlers.
Replies are read and thrown away; the broker may close the connection at any point.

Many connections run at once (asyncio). :func:`fuzz` returns counts; the caller checks the
broker: still running, no traceback in its log, memory back near where it started, logs whole.

    .venv/bin/python -m compat_tests.fuzz.fuzzer kafka 127.0.0.1:9092 --frames 1000000
    .venv/bin/python -m compat_tests.fuzz.fuzzer stream 127.0.0.1:5552 --frames 200000
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"
INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00", b"\xff\xff", b"\x7f\xff", b"\x80\x00",
               b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
               b"\x00\x00\x00\x01", b"\x00\x01\x00\x00", b"\xff\xff\xff\xfe"]


def load(protocol: str) -> list[list[bytes]]:
    sessions = []
    for line in (CORPUS / f"{protocol}.jsonl").read_text().splitlines():
        if line.strip():
            sessions.append([base64.b64decode(f) for f in json.loads(line)["frames"]])
    return sessions


PROTOCOLS = ("kafka", "amqp", "stream", "amqp10")


def _fix_size(protocol: str, frame: bytearray) -> None:
    if protocol == "kafka" and len(frame) >= 4:
        struct.pack_into(">i", frame, 0, len(frame) - 4)
    elif protocol == "stream" and len(frame) >= 4:  # size:u32, then key, version, the command's fields
        struct.pack_into(">I", frame, 0, len(frame) - 4)
    elif protocol == "amqp10" and len(frame) >= 8 and not frame.startswith(b"AMQP"):  # the size counts itself
        struct.pack_into(">I", frame, 0, len(frame))
    elif protocol == "amqp" and len(frame) >= 8 and not frame.startswith(b"AMQP"):
        struct.pack_into(">I", frame, 3, len(frame) - 8)
        frame[-1] = 0xCE


# What a stream frame's string fields (i16 length + UTF-8) are swapped for: null, empty, RabbitMQ's
# reserved prefix, past the 255-byte name limit, not UTF-8, numbers past any config's range
STRING_SWAPS = [None, b"", b"amq.x", b"n" * 256, b"n" * 4000, b"\xff\xfe", b"9" * 30, b"-1", b"0",
                b"99999999999999999999Y"]
WIDE = [b"\xff" * 8, b"\x7f" + b"\xff" * 7, b"\x80" + b"\x00" * 7, b"\x00" * 8]  # u64/i64 extremes


def _string_fields(frame: bytes | bytearray) -> list[tuple[int, int]]:
    """(position, length) of what look like string fields: an i16 length, then that many printable bytes."""
    out = []
    for pos in range(8, len(frame) - 2):
        n = (frame[pos] << 8) | frame[pos + 1]
        if 0 < n <= len(frame) - pos - 2 and all(32 <= c < 127 for c in frame[pos + 2:pos + 2 + n]):
            out.append((pos, n))
    return out


def _swap_string(out: bytearray, rng: random.Random) -> bool:
    """Structure-aware: replace one string field whole, so the frame still parses and the value
    reaches the command's handler (blind byte edits mostly stop at the codec's length checks)."""
    fields = _string_fields(out)
    if not fields:
        return False
    pos, n = rng.choice(fields)
    value = rng.choice(STRING_SWAPS)
    out[pos:pos + 2 + n] = b"\xff\xff" if value is None else struct.pack(">h", len(value)) + value
    return True


def mutate(protocol: str, frame: bytes, donors: list[bytes], rng: random.Random) -> bytes:
    out = bytearray(frame)
    if protocol == "stream" and rng.random() < 0.5:
        if rng.random() < 0.7 and _swap_string(out, rng):
            _fix_size(protocol, out)
            return bytes(out)
        if len(out) > 16:
            pos = rng.randrange(8, len(out) - 8)
            out[pos:pos + 8] = rng.choice(WIDE)
            _fix_size(protocol, out)
            return bytes(out)
    # keep the size field for the fix-up below; a stream frame's key and version are fair game
    head = 7 if protocol == "amqp" else 4
    for _ in range(rng.choice((1, 1, 1, 2, 3, 5))):
        if len(out) <= head:
            out += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
            continue
        pos = rng.randrange(head, len(out))
        kind = rng.randrange(8)
        if kind == 0:
            out[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[pos] = rng.randrange(256)
        elif kind == 2:
            value = rng.choice(INTERESTING)
            out[pos:pos + len(value)] = value
        elif kind == 3:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        elif kind == 4:
            del out[pos:pos + rng.randrange(1, 16)]
        elif kind == 5:
            chunk = out[pos:pos + rng.randrange(1, 64)]
            out[pos:pos] = chunk
        elif kind == 6:
            del out[rng.randrange(head, len(out)):]
        else:
            donor = rng.choice(donors)
            cut = rng.randrange(head, max(head + 1, len(donor)))
            out[pos:] = donor[cut:]
    if rng.random() < 0.85:
        _fix_size(protocol, out)
    return bytes(out)


@dataclass
class FuzzStats:
    frames: int = 0
    mutated: int = 0
    sessions: int = 0
    refused_connect: int = 0
    closed_by_broker: int = 0
    seconds: float = 0.0
    errors: dict = field(default_factory=dict)


async def _session(host: str, port: int, protocol: str, frames: list[bytes], donors, rng, stats: FuzzStats) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    except (OSError, asyncio.TimeoutError):
        stats.refused_connect += 1
        await asyncio.sleep(0.05)
        return
    stats.sessions += 1
    if rng.random() < 0.5:
        # scattered: one to three frames of a short session, up to a tenth of a long one (a pika
        # session has ~190); after the first fault the broker usually closes the connection
        targets = set(rng.sample(range(len(frames)), min(len(frames), rng.randint(1, max(3, len(frames) // 10)))))
    else:
        # deep: the session as the client sent it up to a random point, then a burst of faults
        # there and the end of the session; every fault meets a connection in that state
        first = int(len(frames) * rng.random() ** 2)  # early states more often: shorter prefixes
        frames = frames[:first + rng.randint(1, 6)]
        targets = {i for i in range(first, len(frames)) if i == first or rng.random() < 0.5}
    drain = asyncio.ensure_future(_drain(reader))
    try:
        for i, frame in enumerate(frames):
            if i in targets:
                frame = mutate(protocol, frame, donors, rng)
                stats.mutated += 1
            writer.write(frame)
            stats.frames += 1
            if i % 8 == 7:
                await asyncio.wait_for(writer.drain(), 10)
            if drain.done():
                stats.closed_by_broker += 1
                break
        await asyncio.wait_for(writer.drain(), 10)
        await asyncio.sleep(0.02)
    except (OSError, asyncio.TimeoutError) as exc:
        stats.errors[type(exc).__name__] = stats.errors.get(type(exc).__name__, 0) + 1
    finally:
        drain.cancel()
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 5)
        except (OSError, asyncio.TimeoutError):
            pass


async def _drain(reader: asyncio.StreamReader) -> None:
    try:
        while await reader.read(65536):
            pass
    except OSError:
        pass


async def _fuzz(host: str, port: int, protocol: str, total: int, connections: int, seed: int,
                progress=None) -> FuzzStats:
    sessions = load(protocol)
    donors = [f for s in sessions for f in s]
    stats, began = FuzzStats(), time.monotonic()
    rng = random.Random(seed)
    next_report = began + 10

    async def worker(k: int) -> None:
        nonlocal next_report
        wrng = random.Random(rng.randrange(1 << 30) + k)
        while stats.frames < total:
            await _session(host, port, protocol, wrng.choice(sessions), donors, wrng, stats)
            if progress and time.monotonic() >= next_report:
                next_report = time.monotonic() + 10
                progress(stats, time.monotonic() - began)

    await asyncio.gather(*(worker(k) for k in range(connections)))
    stats.seconds = time.monotonic() - began
    return stats


def fuzz(address: tuple[str, int], protocol: str, total: int, connections: int = 32, seed: int = 0,
         progress=None) -> FuzzStats:
    return asyncio.run(_fuzz(address[0], address[1], protocol, total, connections, seed, progress))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("protocol", choices=PROTOCOLS)
    parser.add_argument("address", help="HOST:PORT of a running broker")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    args = parser.parse_args()
    host, _, port = args.address.rpartition(":")
    print(f"seed {args.seed}")
    stats = fuzz((host, int(port)), args.protocol, args.frames, args.connections, args.seed,
                 progress=lambda s, t: print(f"{s.frames} frames, {s.sessions} connections, {t:.0f}s", flush=True))
    print(stats)


if __name__ == "__main__":
    main()
