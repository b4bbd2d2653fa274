"""RabbitMQ's password hashes, so that users move between RabbitMQ and this broker in
definition files (``password_hash`` + ``hashing_algorithm``) without their passwords.

RabbitMQ stores ``base64(salt || H(salt || password))`` with a 4-byte random salt; H is
SHA-256 by default (``rabbit_password_hashing_sha256``), SHA-512 or MD5 by configuration.
This broker keeps one such hash beside each user's SCRAM credentials: written whenever a
password is set, exported in definitions, and checked at PLAIN logins of imported users.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

DEFAULT_ALGORITHM = "rabbit_password_hashing_sha256"
ALGORITHMS = {
    "rabbit_password_hashing_sha256": hashlib.sha256,
    "rabbit_password_hashing_sha512": hashlib.sha512,
    "rabbit_password_hashing_md5": hashlib.md5,
}
SALT_BYTES = 4


def check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown hashing_algorithm {algorithm!r}: use one of {', '.join(sorted(ALGORITHMS))}")


def make_hash(password: str, algorithm: str = DEFAULT_ALGORITHM, salt: bytes | None = None) -> str:
    check_algorithm(algorithm)
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return base64.b64encode(salt + ALGORITHMS[algorithm](salt + password.encode()).digest()).decode()


def check_hash(password_hash: str, algorithm: str, password: str) -> bool:
    """True if ``password`` is the one hashed; an empty hash matches nothing (RabbitMQ: no password login)."""
    if not password_hash or algorithm not in ALGORITHMS:
        return False
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except binascii.Error:
        return False
    salt, digest = raw[:SALT_BYTES], raw[SALT_BYTES:]
    return hmac.compare_digest(ALGORITHMS[algorithm](salt + password.encode()).digest(), digest)


def check_hash_text(password_hash: str) -> None:
    """Raise ValueError if ``password_hash`` is not base64 of a salt and a digest."""
    if password_hash == "":
        return
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except binascii.Error:
        raise ValueError("password_hash is not base64") from None
    if len(raw) <= SALT_BYTES:
        raise ValueError("password_hash is too short to hold a salt and a digest")
