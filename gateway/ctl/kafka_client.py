"""A small blocking Kafka protocol client for the ``gateway`` admin commands.

It speaks to one broker (this project's, or any Kafka) with kio's request and response
codecs: ApiVersions first, then each call at the highest version both sides know, up to a
cap per API (the versions this module's callers fill in). SASL is not offered: the admin
commands are meant for a listener that takes them (see the README's Security section).
"""
from __future__ import annotations

import socket
import struct

from wire.kafka import decode_response, encode_request, response_correlation

API_VERSIONS = 18
# api key -> the highest version the admin commands build requests for
CAPS = {3: 12, 2: 7, 8: 8, 9: 8, 15: 5, 16: 5, 19: 7, 20: 6, 29: 3, 30: 3, 31: 3, 32: 4, 37: 3, 44: 1, 42: 2}


class KafkaClientError(RuntimeError):
    """The broker could not be reached or answered something unreadable; the message says which."""


class KafkaAdmin:
    def __init__(self, bootstrap: str, timeout: float = 15.0, client_id: str = "gateway-cli"):
        self.addresses = []  # HOST:PORT[,HOST:PORT...]: the first that answers is used, as Kafka's tools do
        for item in bootstrap.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                raise KafkaClientError(f"--bootstrap {bootstrap!r} is not HOST:PORT[,HOST:PORT...]")
            self.addresses.append((host.strip("[]"), int(port)))
        self.address = self.addresses[0]
        self.timeout = timeout
        self.client_id = client_id.encode()
        self._sock: socket.socket | None = None
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._others: dict[int, KafkaAdmin] = {}  # connections to other brokers of a cluster, by node id

    def __enter__(self) -> "KafkaAdmin":
        failure = None
        for address in self.addresses:
            try:
                self._sock = socket.create_connection(address, timeout=self.timeout)
                self.address = address
                break
            except OSError as exc:
                failure = exc
        else:
            raise KafkaClientError(f"cannot connect to the Kafka listener at {self.address[0]}:{self.address[1]}: "
                                   f"{failure.strerror or failure}; is the broker running? (--bootstrap HOST:PORT)")
        answer = self._call(API_VERSIONS, 0, {})
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        return self

    def __exit__(self, *exc) -> None:
        for other in self._others.values():
            other.__exit__(*exc)
        self._others.clear()
        if self._sock is not None:
            self._sock.close()

    # --- a cluster: requests that only a partition's leader or a group's coordinator serves ----
    def node(self, node_id: int, host: str, port: int) -> "KafkaAdmin":
        """A client for broker ``node_id`` at host:port (this one if it is the same address)."""
        if (host, port) == self.address:
            return self
        other = self._others.get(node_id)
        if other is None:
            other = self._others[node_id] = KafkaAdmin(f"{host}:{port}", self.timeout,
                                                       self.client_id.decode()).__enter__()
        return other

    def leaders(self, topic: str) -> dict[int, "KafkaAdmin"]:
        """partition -> a client connected to its leader (Metadata from this broker)."""
        answer = self.call(3, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        out = {}
        for t in answer.topics:
            for p in t.partitions:
                address = brokers.get(p.leader_id)
                out[p.partition_index] = self.node(p.leader_id, *address) if address else self
        return out

    def brokers(self) -> list["KafkaAdmin"]:
        """A client for every live broker of the cluster (this one alone on a single broker)."""
        answer = self.call(3, {"topics": [], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        return [self.node(b.node_id, b.host, b.port) for b in sorted(answer.brokers, key=lambda b: b.node_id)] \
            or [self]

    def coordinator(self, group: str) -> "KafkaAdmin":
        answer = self.call(10, {"key": group, "key_type": 0, "coordinator_keys": [group]})
        found = answer.coordinators[0] if getattr(answer, "coordinators", None) else answer
        if found.error_code or found.node_id < 0:
            return self
        return self.node(found.node_id, found.host, found.port)

    def version(self, api_key: int) -> int:
        low, high = self.versions.get(api_key, (0, -1))
        chosen = min(high, CAPS.get(api_key, high))
        if chosen < low:
            raise KafkaClientError(f"the broker does not offer API {api_key} in a version this tool speaks")
        return chosen

    def call(self, api_key: int, data: dict, version: int | None = None):
        """Send one request (fields as a dict) at ``version`` (default: the newest both sides
        speak) and return the decoded response entity."""
        return self._call(api_key, self.version(api_key) if version is None else version, data)

    def _call(self, api_key: int, version: int, data: dict):
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, self.client_id, data)
        try:
            self._sock.sendall(frame)
            (size,) = struct.unpack(">i", self._read(4))
            payload = self._read(size)
        except OSError as exc:
            raise KafkaClientError(f"the broker at {self.address[0]}:{self.address[1]} closed the connection or "
                                   f"timed out during API {api_key}: {exc}") from None
        correlation = response_correlation(payload)
        if correlation != self._correlation:
            raise KafkaClientError(f"response to correlation id {correlation}, expected {self._correlation}")
        return decode_response(api_key, version, payload)

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self._sock.recv(left)
            if not chunk:
                raise OSError("connection closed")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
