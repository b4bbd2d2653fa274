"""Delay and drop packets from user space: what ``tc netem delay 50ms loss 5%`` does, on a kernel
without sch_netem (CONFIG_NET_SCH_NETEM is not set here, CONFIG_NETFILTER_NETLINK_QUEUE is).

An iptables rule in a host's namespace hands its outgoing packets to netfilter queue N
(``-j NFQUEUE --queue-num N --queue-bypass``); this process, run in the same namespace, binds
that queue over a netlink socket, and for each packet gives the verdict ACCEPT ``delay`` ms
later, or DROP at once for ``loss`` percent of them. A constant delay keeps the packets in order,
as netem without jitter does. ``--queue-bypass`` lets packets through untouched when no process
is bound, so a dead delayer never becomes a partition.

    ip netns exec gw142-b1 python -m compat_tests.cluster.nfqdelay --queue 7 --delay-ms 50 --loss 5

The nfnetlink_queue messages are built by hand (they are a few fixed structs and attributes;
see the kernel's include/uapi/linux/netfilter/nfnetlink_queue.h), so no C library is needed.
"""
from __future__ import annotations

import argparse
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid (host order)
_NFGEN = struct.Struct("!BBH")  # family, version, queue number (network order)
_ATTR = struct.Struct("=HH")


def _attr(kind: int, payload: bytes) -> bytes:
    raw = _ATTR.pack(_ATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _message(kind: int, queue: int, attrs: bytes, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, queue) + attrs
    return _NLMSG.pack(_NLMSG.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


class Delayer:
    def __init__(self, queue: int, delay_s: float, loss: float, seed: int):
        self.queue, self.delay_s, self.loss = queue, delay_s, loss
        self.rng = random.Random(seed)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.seq = 0
        self.due: list[tuple[float, int]] = []  # (when, packet id), in arrival order
        self.passed = self.dropped = 0

    def _send(self, kind: int, attrs: bytes, flags: int = NLM_F_REQUEST) -> None:
        self.seq += 1
        self.sock.send(_message(kind, self.queue, attrs, self.seq, flags))

    def bind(self) -> None:
        self._send(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)),
                   NLM_F_REQUEST | NLM_F_ACK)
        self._expect_ack("bind")
        self._send(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
                   + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 1 << 16)), NLM_F_REQUEST | NLM_F_ACK)
        self._expect_ack("configure")

    def _expect_ack(self, what: str) -> None:
        data = self.sock.recv(65536)
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data)
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, _NLMSG.size)
            if code != 0:
                raise OSError(-code, f"netfilter queue {self.queue}: {what} refused: {os.strerror(-code)}")

    def _verdict(self, packet_id: int, verdict: int) -> None:
        self._send(NFQNL_MSG_VERDICT, _attr(NFQA_VERDICT_HDR, struct.pack("!II", verdict, packet_id)))

    def _packets(self, data: bytes):
        pos = 0
        while pos + _NLMSG.size <= len(data):
            length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, pos)
            if length < _NLMSG.size:
                return
            if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                at, end = pos + _NLMSG.size + _NFGEN.size, pos + length
                while at + _ATTR.size <= end:
                    alen, akind = _ATTR.unpack_from(data, at)
                    if alen < _ATTR.size:
                        break
                    if akind & 0x7FFF == NFQA_PACKET_HDR:
                        yield struct.unpack_from("!I", data, at + _ATTR.size)[0]
                        break
                    at += (alen + 3) & ~3
            pos += (length + 3) & ~3

    def run(self, stop) -> None:
        while not stop():
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                self._verdict(heapq.heappop(self.due)[1], NF_ACCEPT)
                self.passed += 1
            timeout = max(0.0, self.due[0][0] - now) if self.due else 0.2
            readable, _, _ = select.select([self.sock], [], [], timeout)
            if not readable:
                continue
            try:
                data = self.sock.recv(1 << 18)
            except OSError:  # ENOBUFS: the kernel dropped queue messages; those packets are lost, as on a wire
                continue
            arrived = time.monotonic()
            for packet_id in self._packets(data):
                if self.loss and self.rng.random() * 100 < self.loss:
                    self._verdict(packet_id, NF_DROP)
                    self.dropped += 1
                else:
                    heapq.heappush(self.due, (arrived + self.delay_s, packet_id))
        for _when, packet_id in self.due:  # let the held ones go on the way out
            self._verdict(packet_id, NF_ACCEPT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=50)
    parser.add_argument("--loss", type=float, default=0, help="percent of packets dropped")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    delayer = Delayer(args.queue, args.delay_ms / 1000, args.loss, args.seed)
    delayer.bind()
    print(f"nfqdelay: queue {args.queue} bound, delay {args.delay_ms} ms, loss {args.loss} %", flush=True)
    try:
        delayer.run(lambda: bool(stopping))
    except KeyboardInterrupt:
        pass
    print(f"nfqdelay: passed {delayer.passed}, dropped {delayer.dropped}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
