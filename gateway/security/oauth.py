"""OAuth 2 access tokens (signed JWTs) as RabbitMQ's OAuth 2 backend and Kafka's OAUTHBEARER read them.

The broker never talks to the identity provider: it checks a token it is handed against the
provider's public signing keys (a JWKS document, :class:`KeySet`) and reads the grants out of it.
:meth:`OAuthValidator.validate` accepts a token only if

- its header names an asymmetric algorithm (RS256/384/512, PS256, ES256/384; never ``none`` or
  an HMAC one, which would let a public key be used as a shared secret) and a key of the set
  (``kid``; a token without one may use a set holding exactly one key) of the matching type;
- the signature verifies;
- ``exp`` is present and not past, ``nbf`` (if present) is reached, both give or take the clock
  skew allowance; ``iss`` equals the configured issuer (if one is configured); ``aud`` contains
  the resource server id;
- one of the user-name claims is a non-empty string.

Scopes come from the ``scope`` claim (a space-separated string or a list). Only those starting
with ``<resource server id>.`` count, as in RabbitMQ::

    <rs>.configure:<vhost>/<name>   <rs>.write:<vhost>/<name>   <rs>.read:<vhost>/<name>
    <rs>.tag:<tag>

``*`` in a pattern matches any run of characters, everything else is literal and %-decoded (the
default vhost ``/`` is written ``%2F``). For one vhost, the name patterns of the scopes whose
vhost pattern matches become the user's configure/write/read regular expressions
(:class:`gateway.security.users.Permission`), so the AMQP access-control table applies to token
users unchanged; a vhost no scope matches is not open to them. A third ``/<routing key>`` part
(RabbitMQ's topic permissions) is accepted and ignored.

The broker honours a token until ``exp`` plus the clock skew allowance
(:attr:`TokenGrant.deadline`): AMQP closes the connection then, Kafka ends the SASL session.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from urllib.parse import unquote

import jwt

from gateway.security.users import Permission

log = logging.getLogger(__name__)

ALGORITHMS = {"RS256": "RSA", "RS384": "RSA", "RS512": "RSA", "PS256": "RSA", "ES256": "EC", "ES384": "EC"}
KINDS = ("configure", "write", "read")
JWKS_FETCH_TIMEOUT_S = 10.0
JWKS_REFETCH_MIN_S = 30.0  # an unknown kid triggers a refetch at most this often (key rotation)
JWKS_MAX_AGE_S = 3600.0
_JWT_SHAPE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")


class OAuthConfigError(ValueError):
    """The OAuth settings cannot be used (no such JWKS file, a malformed key set, ...)."""


class TokenError(Exception):
    """A token is refused; the message says why (for the log, and for Kafka clients)."""


def looks_like_jwt(secret: str) -> bool:
    """True for the compact JWS shape (three base64url parts) that a password hardly ever has:
    such a password is checked as a token, anything else against the user store."""
    return secret.startswith("eyJ") and _JWT_SHAPE.match(secret) is not None


# --- keys ---------------------------------------------------------------------------------
class KeySet:
    """The provider's public keys from a JWKS file (re-read when it changes) or an https URL
    (fetched at start, then in a background thread when a token names an unknown key or the
    set is an hour old, so that a slow provider never stalls the reactor)."""

    def __init__(self, source: str):
        self.source = source
        self.is_url = source.startswith("https://")
        if "://" in source and not self.is_url:
            raise OAuthConfigError(f"--oauth-jwks {source!r}: a JWKS URL must be https://")
        self._keys: dict[str | None, tuple[jwt.PyJWK, str | None]] = {}  # kid -> (key, the alg it is pinned to)
        self._stamp = None
        self._last_error: str | None = None
        self._fetched_at = 0.0
        self._fetching = False
        if self.is_url:
            try:
                self._fetch()
            except (OSError, ValueError) as exc:  # the provider may come up later
                log.error("OAuth JWKS not fetched from %s (retried when a token arrives): %s", source, exc)
        else:
            self._reload_file(strict=True)

    def _parse(self, raw: bytes) -> dict[str | None, tuple[jwt.PyJWK, str | None]]:
        doc = json.loads(raw)
        keys = {}
        for entry in doc.get("keys", []) if isinstance(doc, dict) else []:
            # Only public signing keys: a symmetric ("oct") key would turn a published set into
            # shared secrets anyone could sign with.
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") not in ("RSA", "EC"):
                continue
            try:
                keys[entry.get("kid")] = (jwt.PyJWK(entry), entry.get("alg"))
            except jwt.PyJWTError as exc:  # one odd key (another algorithm family) must not hide the rest
                log.warning("OAuth JWKS key %r skipped: %s", entry.get("kid"), exc)
        if not keys:
            raise ValueError("the JWKS holds no usable signing key")
        return keys

    def _reload_file(self, strict: bool = False) -> None:
        stamp = None
        try:
            st = os.stat(self.source)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            with open(self.source, "rb") as fh:
                self._keys = self._parse(fh.read())
        except (OSError, ValueError) as exc:
            if strict:
                raise OAuthConfigError(f"--oauth-jwks {self.source}: {exc}") from None
            if str(exc) != self._last_error:  # once per kind of trouble, not once per login
                log.error("OAuth JWKS file not reloaded, keeping the previous keys: %s", exc)
            self._last_error = str(exc)
        else:
            self._last_error = None
        self._stamp = stamp  # a broken file is not re-read until it changes again

    def _fetch(self) -> None:
        with urllib.request.urlopen(self.source, timeout=JWKS_FETCH_TIMEOUT_S) as answer:
            keys = self._parse(answer.read())
        self._keys, self._fetched_at = keys, time.monotonic()  # one assignment: readers see old or new
        log.info("OAuth JWKS fetched", extra={"fields": {"url": self.source, "keys": len(keys)}})

    def _fetch_in_background(self) -> None:
        if self._fetching or time.monotonic() - self._fetched_at < JWKS_REFETCH_MIN_S:
            return
        self._fetching = True

        def run():
            try:
                self._fetch()
            except (OSError, ValueError) as exc:
                log.error("OAuth JWKS not fetched from %s: %s", self.source, exc)
                self._fetched_at = time.monotonic()
            finally:
                self._fetching = False
        threading.Thread(target=run, name="oauth-jwks", daemon=True).start()

    def key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        if self.is_url:
            if time.monotonic() - self._fetched_at > JWKS_MAX_AGE_S:
                self._fetch_in_background()
        else:
            self._reload_file()
        keys = self._keys
        entry = keys.get(kid) if kid is not None else (next(iter(keys.values())) if len(keys) == 1 else None)
        if entry is None:
            if self.is_url:
                self._fetch_in_background()
            raise TokenError(f"unknown signing key {kid!r}" if kid is not None
                             else "the token names no key (kid) and the key set holds several")
        # The header's alg must suit the key: its type, and the alg the set pins it to, if any.
        key, pinned = entry
        if key.key_type != ALGORITHMS[alg] or pinned not in (None, alg):
            raise TokenError(f"key {kid!r} is not a key for {alg}")
        return key


# --- grants -------------------------------------------------------------------------------
def _wildcard(pattern: str) -> str:
    """A RabbitMQ scope pattern as a regular expression matching the whole name."""
    return "".join(".*" if part == "*" else re.escape(unquote(part)) for part in re.split(r"(\*)", pattern))


@dataclass(frozen=True)
class TokenGrant:
    """What a valid token says: who, until when, which permissions and tags."""
    username: str
    expires_at: float  # exp, Unix seconds
    deadline: float  # exp + the clock skew allowance: the broker honours the token until then
    scopes: tuple[str, ...]  # with the resource server prefix removed
    tags: tuple[str, ...]
    rules: tuple[tuple[str, re.Pattern, str], ...] = field(repr=False)  # (kind, vhost regex, name regex)

    def permission(self, vhost: str) -> Permission | None:
        """The configure/write/read expressions for ``vhost``; None if no scope names the vhost."""
        names = {kind: [] for kind in KINDS}
        matched = False
        for kind, vhost_re, name in self.rules:
            if vhost_re.fullmatch(vhost):
                matched = True
                names[kind].append(name)
        if not matched:
            return None

        def join(patterns: list[str]) -> str:
            if ".*" in patterns:
                return ".*"  # the store's "allow all" spelling, which permission checks short-cut
            return f"^(?:{'|'.join(patterns)})$" if patterns else ""
        return Permission(*(join(names[kind]) for kind in KINDS))

    def seconds_left(self) -> float:
        return self.deadline - time.time()


def read_scopes(claims: dict, resource_server_id: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple]:
    """(scopes, tags, rules) of the token's ``scope`` claim; scopes without the prefix are ignored."""
    raw = claims.get("scope", "")
    items = raw.split() if isinstance(raw, str) else [s for s in raw if isinstance(s, str)] \
        if isinstance(raw, list) else []
    prefix = resource_server_id + "."
    scopes, tags, rules = [], [], []
    for item in items:
        if not item.startswith(prefix):
            continue
        scope = item[len(prefix):]
        scopes.append(scope)
        action, sep, resource = scope.partition(":")
        if not sep:
            continue
        if action == "tag":
            tags.append(resource)
        elif action in KINDS:
            parts = resource.split("/")
            if len(parts) in (2, 3) and parts[0] and parts[1]:
                rules.append((action, re.compile(_wildcard(parts[0])), _wildcard(parts[1])))
    return tuple(scopes), tuple(tags), tuple(rules)


class OAuthValidator:
    """Checks tokens (see the module docstring); one per broker, shared by AMQP, Kafka and HTTP."""

    def __init__(self, jwks: str, issuer: str = "", audience: str = "rabbitmq",
                 username_claims: tuple[str, ...] = ("sub", "client_id"), clock_skew_s: int = 60):
        if not audience:
            raise OAuthConfigError("--oauth-audience must name the resource server (e.g. rabbitmq)")
        if not username_claims:
            raise OAuthConfigError("--oauth-username-claims must name at least one claim")
        self.keys = KeySet(jwks)
        self.issuer = issuer or None
        self.audience = audience
        self.username_claims = tuple(username_claims)
        self.clock_skew_s = clock_skew_s

    def check(self, token: str | bytes) -> tuple[TokenGrant | None, str | None]:
        """(grant, None) for a valid token, (None, why) for a refused one."""
        try:
            return self.validate(token), None
        except TokenError as exc:
            return None, f"OAuth 2 token refused: {exc}"

    def validate(self, token: str | bytes) -> TokenGrant:
        """The grant of a valid token; raises :class:`TokenError` saying why one is refused."""
        if isinstance(token, bytes):
            token = token.decode("ascii", "replace")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenError("not a signed JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise TokenError(f"signing algorithm {alg!r} is not accepted")
        key = self.keys.key(header.get("kid"), alg)
        try:
            claims = jwt.decode(token, key.key, algorithms=[alg], audience=self.audience, issuer=self.issuer,
                                leeway=self.clock_skew_s, options={"require": ["exp"]})
        except jwt.ExpiredSignatureError:
            raise TokenError("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenError("the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise TokenError(f"the token's audience does not include {self.audience!r}") from None
        except jwt.InvalidIssuerError:
            raise TokenError("the token's issuer is not the configured one") from None
        except jwt.InvalidSignatureError:
            raise TokenError("the signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise TokenError(f"invalid token: {exc}") from None
        username = next((claims[c] for c in self.username_claims if isinstance(claims.get(c), str) and claims[c]),
                        None)
        if username is None:
            raise TokenError(f"the token has none of the user name claims {', '.join(self.username_claims)}")
        scopes, tags, rules = read_scopes(claims, self.audience)
        exp = float(claims["exp"])
        return TokenGrant(username, exp, exp + self.clock_skew_s, scopes, tags, rules)


# --- SASL OAUTHBEARER (RFC 7628 as KIP-255 uses it) -------------------------------------------
def parse_oauthbearer(message: bytes) -> tuple[str | None, str]:
    """(authorization id or None, token) of a client's first message
    ``gs2-header \\x01 auth=Bearer <token> \\x01 [key=value \\x01]... \\x01``; ValueError if malformed.
    Extensions (KIP-342) are accepted and ignored."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not rest.endswith("\x01\x01"):
        raise ValueError("not an OAUTHBEARER client message")
    flag, _, authz = gs2.partition(",")
    if flag not in ("n", "y") or not authz.endswith(","):
        raise ValueError("bad GS2 header")
    authz = authz[:-1]
    authzid = authz[2:] if authz.startswith("a=") else None
    token = None
    for pair in rest[:-2].split("\x01"):
        key, eq, value = pair.partition("=")
        if not eq:
            raise ValueError(f"bad key/value pair {key!r}")
        if key == "auth":
            scheme, _, token = value.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise ValueError("the auth value is not 'Bearer <token>'")
    if token is None:
        raise ValueError("no auth=Bearer value")
    return authzid, token.strip()
