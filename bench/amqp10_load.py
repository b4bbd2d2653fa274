"""AMQP 1.0 load generator on a raw socket: ``python -m bench.amqp10_load SPEC-JSON``.

The counterpart of :mod:`bench.amqp_load` for the AMQP 1.0 door. The handshake and the frames
are made with the repository's own encoder (:mod:`wire.amqp10_frames`); one transfer frame is
encoded once and only its delivery-id is patched per message (a uint at a fixed offset), so the
client costs next to nothing and the broker is what is measured. Incoming frames are read by
hand (frame header, performative code, the one or two uints needed); other frames go through
the generic decoder.

SPEC: ``{"address": "host:port", "queue": str, "messages": int, "size": int, "mode": ...}``

* ``settled``: a durable queue (declared over 0-9-1, as the 0-9-1 rows do), a sender link to
  ``/queues/:queue``, pre-settled transfers of a data body (no header: transient), as much as the
  link credit allows; the clock stops when a passive Queue.Declare counts all messages.
* ``unsettled``: durable messages (header durable=true), unsettled, keeping at most 1,000
  without an outcome (sent in chunks of 100, credit permitting); the clock stops at the last
  disposition (all must be accepted). The 1.0 side of "persistent + confirms".
* ``consume``: a receiver link on the queue (unsettled), credit 1,000 topped up and the
  deliveries accepted (one disposition for a range) every 500: the 1.0 side of "prefetch 1000,
  multi-ack/500". The queue is deleted after.

Prints one JSON line with seconds and msgs/s.
"""
from __future__ import annotations

import json
import socket
import struct
import sys
import time

from bench import amqp_load
from wire.amqp10 import Typed
from wire.amqp10_frames import (
    HEADER_AMQP, HEADER_SASL, SASL_FRAME, Accepted, Attach, Begin, Close, Disposition, Flow, Open, SaslInit,
    Source, Target, Transfer, decode_body, encode_frame,
)

WINDOW = 1000
CHUNK = 100
CREDIT = 1000
ACCEPT_EVERY = 500
UINT = 1 << 32
_HEAD = struct.Struct(">IBBH")
_FLOW, _TRANSFER, _DISPOSITION, _DETACH, _END, _CLOSE = 0x13, 0x14, 0x15, 0x16, 0x17, 0x18


class ServerClosed(RuntimeError):
    pass


def _uint_at(buf, p: int) -> tuple[int, int]:
    """A uint field (uint0, smalluint or uint) at buf[p]: its value and its end."""
    code = buf[p]
    if code == 0x43:
        return 0, p + 1
    if code == 0x52:
        return buf[p + 1], p + 2
    if code == 0x70:
        return struct.unpack_from(">I", buf, p + 1)[0], p + 5
    raise ValueError(f"not a uint: constructor {code:#x}")


def _fields_start(buf, p: int) -> int:
    """Where the first field of the performative list at buf[p] (after 00 53 code) starts."""
    code = buf[p + 3]
    if code == 0xc0:
        return p + 6
    if code == 0xd0:
        return p + 12
    raise ValueError(f"performative is not a list: {code:#x}")


class Conn:
    """One AMQP 1.0 connection (SASL PLAIN guest) with one session on channel 0."""

    def __init__(self, address: str):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0
        self.sock.sendall(HEADER_SASL)
        self._need(8)
        self.pos += 8
        self.expect(0x40, SASL_FRAME)  # sasl-mechanisms
        self.sock.sendall(encode_frame(0, SaslInit(mechanism="PLAIN", initial_response=b"\0guest\0guest"),
                                       type_=SASL_FRAME))
        outcome = self.expect(0x44, SASL_FRAME)
        if outcome.code != 0:
            raise ServerClosed(f"SASL outcome {outcome.code}")
        self.sock.sendall(HEADER_AMQP + encode_frame(0, Open(container_id="bench.amqp10_load", max_frame_size=131072))
                          + encode_frame(0, Begin(next_outgoing_id=0, incoming_window=1 << 31, outgoing_window=UINT - 1)))
        self._need(8)
        self.pos += 8
        self.expect(0x10)
        self.expect(0x11)

    def _need(self, n: int) -> None:
        while len(self.buf) - self.pos < n:
            self._recv()

    def _recv(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ServerClosed("connection closed by the broker")
        if self.pos > (1 << 20):
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data

    def frames(self):
        """Yield (type, code, start, end) of the complete frames in the buffer: ``code`` is the
        performative's descriptor (None for a heartbeat), buf[start:end] the frame body."""
        buf = self.buf
        while len(buf) - self.pos >= 8:
            size, doff, ftype, _ = _HEAD.unpack_from(buf, self.pos)
            if len(buf) - self.pos < size:
                break
            start, end = self.pos + doff * 4, self.pos + size
            self.pos = end
            if start == end:
                continue  # heartbeat
            code = buf[start + 2] if buf[start] == 0 and buf[start + 1] == 0x53 else None
            if code in (_DETACH, _END, _CLOSE):
                raise ServerClosed(f"broker sent {decode_body(ftype, bytes(buf[start:end]))[0]!r}")
            yield ftype, code, start, end

    def decode(self, ftype: int, start: int, end: int):
        return decode_body(ftype, bytes(self.buf[start:end]))[0]

    def expect(self, code: int, ftype: int = 0):
        """Read until a frame with performative ``code`` arrives (skipping others); return it decoded."""
        while True:
            for t, c, s, e in self.frames():
                if t == ftype and c == code:
                    return self.decode(t, s, e)
            self._recv()

    def send(self, body, payload: bytes = b"") -> None:
        self.sock.sendall(encode_frame(0, body, payload))

    def close(self) -> None:
        try:
            self.send(Close())
            self.expect(_CLOSE)
        except (OSError, ServerClosed):
            pass
        self.sock.close()


def message(size: int, durable: bool) -> bytes:
    """A message with a data body of ``size`` bytes (a header durable=true when ``durable``)."""
    head = b"\x00\x53\x70\xc0\x02\x01\x41" if durable else b""
    body = b"x" * size
    return head + b"\x00\x53\x75" + (b"\xa0" + bytes([size]) if size < 256 else b"\xb0" + struct.pack(">I", size)) + body


def transfer_template(size: int, settled: bool, durable: bool, handle: int = 0) -> tuple[bytearray, int]:
    """One transfer frame and the offset of its 4-byte delivery-id to patch."""
    frame = bytearray(encode_frame(0, Transfer(handle=handle, delivery_id=Typed(0x70, 0x01020304), delivery_tag=b"t",
                                               message_format=0, settled=settled), message(size, durable)))
    at = frame.index(b"\x70\x01\x02\x03\x04") + 1
    return frame, at


def attach_sender(conn: Conn, queue: str) -> int:
    """A sender link on handle 0 to the queue; the link credit the broker grants first."""
    conn.send(Attach(name="bench-sender", handle=0, role=False, snd_settle_mode=2, rcv_settle_mode=0,
                     source=Source(address="bench"), target=Target(address=f"/queues/{queue}"),
                     initial_delivery_count=0))
    conn.expect(0x12)
    flow = conn.expect(_FLOW)
    return (flow.delivery_count or 0) + (flow.link_credit or 0)


class Sender:
    """Transfers within the link credit (credit limit: delivery-count + link-credit of the last flow)."""

    def __init__(self, conn: Conn, size: int, settled: bool, durable: bool):
        self.conn = conn
        self.frame, self.at = transfer_template(size, settled, durable)
        self.sent = 0
        self.limit = 0

    def send(self, k: int) -> int:
        k = min(k, self.limit - self.sent)
        if k <= 0:
            return 0
        frame, at, pack = self.frame, self.at, struct.pack_into
        out = bytearray()
        for i in range(self.sent, self.sent + k):
            pack(">I", frame, at, i)
            out += frame
        self.conn.sock.sendall(out)
        self.sent += k
        return k

    def on_flow(self, s: int) -> None:
        """A flow frame at buf[s:]: the new credit limit (delivery-count field 6, link-credit 7)."""
        buf = self.conn.buf
        p = _fields_start(buf, s)
        count = buf[s + 5] if buf[s + 3] == 0xc0 else struct.unpack_from(">I", buf, s + 8)[0]
        if count < 7:
            return  # a session flow (no link fields)
        values = []
        for _ in range(7):
            if buf[p] == 0x40:
                values.append(None)
                p += 1
            else:
                v, p = _uint_at(buf, p)
                values.append(v)
        if values[4] is not None and values[5] is not None and values[6] is not None:
            self.limit = values[5] + values[6]


def run_settled(address: str, queue: str, n: int, size: int) -> tuple[float, float]:
    side = amqp_load.Conn(address)
    amqp_load.declare(side, queue)
    conn = Conn(address)
    sender = Sender(conn, size, settled=True, durable=False)
    sender.limit = attach_sender(conn, queue)
    start = time.perf_counter()
    while sender.sent < n:
        if not sender.send(min(1000, n - sender.sent)):
            conn._recv()
        for t, code, s, e in conn.frames():
            if code == _FLOW:
                sender.on_flow(s)
    sent = time.perf_counter()
    deadline = time.monotonic() + 300
    while True:
        count = amqp_load.declare(side, queue, passive=True)
        if count >= n:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {count}/{n} messages in {queue} after 300 s")
        time.sleep(0.002)
    elapsed = time.perf_counter() - start
    amqp_load.delete(side, queue)
    side.close()
    conn.close()
    return elapsed, sent - start


def run_unsettled(address: str, queue: str, n: int, size: int, delete: bool) -> tuple[float, None]:
    side = amqp_load.Conn(address)
    amqp_load.declare(side, queue)
    conn = Conn(address)
    sender = Sender(conn, size, settled=False, durable=True)
    sender.limit = attach_sender(conn, queue)
    settled = 0
    refused = 0
    buf = conn.buf
    start = time.perf_counter()
    while settled < n:
        while sender.sent < n and sender.sent - settled + CHUNK <= WINDOW:
            if not sender.send(min(CHUNK, n - sender.sent)):
                break
        conn._recv()
        buf = conn.buf
        for t, code, s, e in conn.frames():
            if code == _DISPOSITION:  # role, first, last, settled, state
                p = _fields_start(buf, s) + 1  # (role: true, one octet)
                first, p = _uint_at(buf, p)
                last = first if buf[p] == 0x40 else _uint_at(buf, p)[0]
                settled += last - first + 1
                if b"\x00\x53\x24" not in buf[p:e]:  # accepted
                    refused += last - first + 1
            elif code == _FLOW:
                sender.on_flow(s)
    elapsed = time.perf_counter() - start
    if refused:
        raise RuntimeError(f"{refused} deliveries not accepted")
    if delete:
        amqp_load.delete(side, queue)
    side.close()
    conn.close()
    return elapsed, None


def run_consume(address: str, queue: str, n: int) -> tuple[float, None]:
    conn = Conn(address)
    conn.send(Attach(name="bench-receiver", handle=0, role=True, snd_settle_mode=0, rcv_settle_mode=0,
                     source=Source(address=f"/queues/{queue}"), target=Target(address="bench")))
    conn.expect(0x12)
    got = accepted = 0
    first_id = last_id = None
    buf = conn.buf
    start = time.perf_counter()

    def top_up():
        conn.sock.sendall(
            encode_frame(0, Disposition(role=True, first=first_id, last=last_id, settled=True, state=Accepted()))
            + encode_frame(0, Flow(next_incoming_id=got, incoming_window=1 << 31, next_outgoing_id=1,
                                   outgoing_window=UINT - 1, handle=0, delivery_count=got, link_credit=CREDIT)))

    conn.send(Flow(next_incoming_id=0, incoming_window=1 << 31, next_outgoing_id=1, outgoing_window=UINT - 1,
                   handle=0, delivery_count=0, link_credit=CREDIT))
    while got < n:
        conn._recv()
        buf = conn.buf
        for t, code, s, e in conn.frames():
            if code != _TRANSFER:
                continue
            p = _fields_start(buf, s)
            _, p = _uint_at(buf, p)  # handle
            delivery_id = _uint_at(buf, p)[0]
            if first_id is None:
                first_id = delivery_id
            last_id = delivery_id
            got += 1
            if got - accepted >= ACCEPT_EVERY:
                top_up()
                accepted, first_id = got, None
    elapsed = time.perf_counter() - start
    if got > accepted:
        top_up()
    conn.close()
    side = amqp_load.Conn(address)
    amqp_load.delete(side, queue)
    side.close()
    return elapsed, None


def main(spec: dict) -> dict:
    n, q, mode = spec["messages"], spec["queue"], spec["mode"]
    if mode == "settled":
        elapsed, send_s = run_settled(spec["address"], q, n, spec["size"])
    elif mode == "unsettled":
        elapsed, send_s = run_unsettled(spec["address"], q, n, spec["size"], spec.get("delete", False))
    elif mode == "consume":
        elapsed, send_s = run_consume(spec["address"], q, n)
    else:
        raise SystemExit(f"unknown mode {mode}")
    out = {"mode": mode, "queue": q, "messages": n, "seconds": elapsed, "msgs_s": n / elapsed,
           "client_cpu_s": time.process_time()}  # (whether the client could be the bottleneck)
    if send_s is not None:
        out["send_seconds"] = send_s
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
