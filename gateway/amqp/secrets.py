"""What an AMQP connection does with its credentials after login: OAuth 2 token scopes as its
permissions, the token's expiry (RabbitMQ closes with 320 "credential expired"), and
``connection.update-secret`` (RabbitMQ's way to refresh a token on a live connection).

A mixin of :class:`gateway.amqp.connection.AmqpConnection`, kept apart so that the
connection module stays about framing and the handshake.
"""
from __future__ import annotations

import logging

from pamqp import commands as spec

from gateway.logs import fields
from gateway.security.oauth import TokenGrant
from routing.errors import CONNECTION_FORCED, NOT_ALLOWED

log = logging.getLogger("gateway.amqp.connection")


class SecretsMixin:
    token: TokenGrant | None = None  # set at a token login; replaced by update-secret
    _expiry_timer = None

    def _token_login(self, grant: TokenGrant) -> None:
        """From now on this connection's permissions are the token's scopes (see :meth:`permission`)."""
        self.token = grant

    def permission(self, vhost: str):
        """This connection's grant on ``vhost``: the current token's scopes, or the user store's entry."""
        if self.token is not None:
            return self.token.permission(vhost)
        return self.service.users.permission(self.username, vhost)

    def _schedule_expiry(self) -> None:
        if self._expiry_timer is not None and self._expiry_timer.active():
            self._expiry_timer.cancel()
        self._expiry_timer = self.reactor.callLater(max(0.0, self.token.seconds_left()), self._token_expired)

    def _token_expired(self) -> None:
        self._expiry_timer = None
        if self.state in ("closing", "closed"):
            return
        log.warning("closing AMQP connection: its OAuth 2 token has expired",
                    extra=fields(peer=self.peer, conn=self.conn_id, user=self.username))
        self.close_connection(CONNECTION_FORCED, "credential expired")  # RabbitMQ's code and text

    def _update_secret(self, m: spec.Connection.UpdateSecret) -> None:
        """RabbitMQ's connection.update-secret: a token connection swaps in a new token of the
        same user (permissions and expiry follow it); a password connection's update is accepted
        as it is (identity unchanged). A refused token closes the connection with 530, as in RabbitMQ."""
        secret = m.new_secret
        if isinstance(secret, bytes):
            secret = secret.decode("utf-8", "replace")
        grant = None
        if self.token is not None:
            grant, reason = self.service.oauth.check(secret)
            if grant is not None and grant.username != self.username:
                reason = f"a token may not change the user name ('{self.username}' to '{grant.username}')"
            elif grant is not None and grant.permission(self.vhost.name) is None:
                log.warning("AMQP secret update refused: the new token grants nothing on the vhost",
                            extra=fields(peer=self.peer, conn=self.conn_id, user=self.username, vhost=self.vhost.name))
                self.close_connection(NOT_ALLOWED, f"access to vhost '{self.vhost.name}' refused for user "
                                                   f"'{self.username}'", 10, 70)
                return
        else:
            # RabbitMQ's internal backend keeps no per-connection state: it accepts any new secret
            # from a password user and nothing changes (the user was authenticated at login).
            reason = None
        if reason is not None:
            log.warning("AMQP secret update refused: %s", reason,
                        extra=fields(peer=self.peer, conn=self.conn_id, user=self.username))
            self.close_connection(NOT_ALLOWED, "New secret was refused by one of the backends", 10, 70)
            return
        if grant is not None:
            self.token = grant
            self._schedule_expiry()
        self.send_method(0, spec.Connection.UpdateSecretOk())
        log.info("AMQP connection secret updated", extra=fields(peer=self.peer, conn=self.conn_id, user=self.username,
                                                                reason=m.reason))

