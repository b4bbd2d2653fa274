"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it (KIP-84): credentials and the server side of
the exchange, without I/O.

A credential is what Kafka stores, never the password: the salt, the iteration count,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` with ``SaltedPassword = PBKDF2(password,
salt, iterations)``. A PLAIN password is checked against the same credential (by deriving
StoredKey from it), so there is one salted hash per user and mechanism, nothing else.

The exchange is two round trips:

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>

:class:`ScramServer` takes the two client messages and returns the two server messages, or
raises :class:`ScramError` (the authentication fails; the message is for the log only).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Callable

# mechanism name -> (hash name, Kafka's mechanism id in Describe/AlterUserScramCredentials)
MECHANISMS: dict[str, tuple[str, int]] = {"SCRAM-SHA-256": ("sha256", 1), "SCRAM-SHA-512": ("sha512", 2)}
MECHANISM_BY_ID = {kafka_id: name for name, (_, kafka_id) in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds for SCRAM credentials
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 16


class ScramError(Exception):
    """The SCRAM exchange failed: bad message, unknown user or wrong proof."""


@dataclass(frozen=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @property
    def hash_name(self) -> str:
        return MECHANISMS[self.mechanism][0]

    def to_json(self) -> dict:
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return {"salt": b64(self.salt), "iterations": self.iterations,
                "stored_key": b64(self.stored_key), "server_key": b64(self.server_key)}

    @classmethod
    def from_json(cls, mechanism: str, doc: dict) -> "ScramCredential":
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        d = lambda k: base64.b64decode(doc[k], validate=True)  # noqa: E731
        return cls(mechanism, d("salt"), int(doc["iterations"]), d("stored_key"), d("server_key"))


def credential_from_salted_password(mechanism: str, salt: bytes, iterations: int, salted: bytes) -> ScramCredential:
    hash_name = MECHANISMS[mechanism][0]
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    return ScramCredential(mechanism, salt, iterations, stored_key, server_key)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS}, not {iterations}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(MECHANISMS[mechanism][0], password.encode("utf-8"), salt, iterations)
    return credential_from_salted_password(mechanism, salt, iterations, salted)


def password_matches(credential: ScramCredential, password: str) -> bool:
    """A PLAIN password checked against a SCRAM credential (derive StoredKey, compare)."""
    hash_name = credential.hash_name
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), credential.salt, credential.iterations)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), credential.stored_key)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        out.append((part[0], part[2:]))
    return out


def _sasl_name(text: str) -> str:
    """RFC 5802 saslname: ',' is sent as '=2C' and '=' as '=3D'; any other '=' is an error."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            code = text[i + 1:i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("malformed user name escape")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class ScramServer:
    """One SCRAM exchange on the server side. ``lookup(user)`` gives the user's credential for
    this mechanism, or None (unknown user or no credential for this mechanism)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.lookup = lookup
        self.server_nonce = server_nonce
        self.username: str | None = None
        self.done = False
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def client_first(self, data: bytes) -> bytes:
        try:
            message = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-first message is not UTF-8") from None
        flag, sep, rest = message.partition(",")
        if not sep or flag not in ("n", "y"):
            raise ScramError("channel binding is not supported" if flag.startswith("p=") else
                             "malformed gs2 header")
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise ScramError("malformed gs2 header")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("client-first message needs n= and r=")
        if attrs[0][1] == "" or any(k == "m" for k, _ in attrs):
            raise ScramError("empty user name or mandatory extension")
        user = _sasl_name(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or _sasl_name(authzid[2:]) != user):
            raise ScramError("authorization id differs from the user name")
        for key, value in attrs[2:]:  # extensions: Kafka's delegation tokens are not supported
            if key == "t" or value == "tokenauth=true":
                raise ScramError("delegation tokens are not supported")
        credential = self.lookup(user)
        self.username = user
        if credential is None:
            raise ScramError(f"no {self.mechanism} credential for user {user!r}")
        self._credential = credential
        self._gs2_header = message[:len(flag) + 1 + len(authzid) + 1]
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self.server_nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def client_final(self, data: bytes) -> bytes:
        if self._credential is None or self.done:
            raise ScramError("client-final message out of order")
        try:
            message = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        without_proof, sep, proof_b64 = message.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message has no proof")
        attrs = dict(_attributes(without_proof))
        expected_c = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs.get("c") != expected_c:
            raise ScramError("channel binding attribute does not match the gs2 header")
        if attrs.get("r") != self._nonce:
            raise ScramError("nonce does not match")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise ScramError("proof is not base64") from None
        cred = self._credential
        hash_name = cred.hash_name
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(cred.stored_key, auth_message, hash_name)
        if len(proof) != len(signature):
            raise ScramError("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(), cred.stored_key):
            raise ScramError("invalid proof (wrong password)")
        self.done = True
        server_signature = hmac.digest(cred.server_key, auth_message, hash_name)
        return b"v=" + base64.b64encode(server_signature)
