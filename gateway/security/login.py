"""The login decision both the AMQP and the stream listener make once they have read a SASL
response: the user store for passwords, the verified certificate for EXTERNAL, the OAuth 2
validator when the password is a JWT (RabbitMQ's OAuth 2 backend: the token names the user)."""
from __future__ import annotations

from gateway.security.oauth import TokenGrant, looks_like_jwt


def check_login(users, oauth, mechanism: str, username: str | None, password: str | None,
                peer_host: str) -> tuple[str | None, TokenGrant | None, str | None]:
    """(user name, token grant or None, refusal reason or None)."""
    grant = None
    if username is None:
        reason = "malformed credentials"
    elif mechanism == "EXTERNAL":  # the certificate was verified; the user must exist
        users.maybe_reload()
        reason = None if users.get(username) is not None else f"user '{username}' does not exist"
        if reason is None and users.loopback_refused(username, peer_host):
            reason = f"user '{username}' can only connect via localhost"
    elif oauth is not None and looks_like_jwt(password):
        # the password is the token and names the user; the user name sent beside it is not looked at
        grant, reason = oauth.check(password)
        if grant is not None:
            username = grant.username
            if users.loopback_refused(username, peer_host):
                reason = f"user '{username}' can only connect via localhost"
    else:
        reason = users.authenticate(username, password, peer_host)
    return username, grant, reason
