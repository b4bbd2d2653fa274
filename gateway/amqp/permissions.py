"""Which AMQP 0-9-1 methods need which vhost permission, as in RabbitMQ's access control.

A user's permissions on a vhost are three regular expressions (configure, write, read,
:class:`gateway.security.users.Permission`), matched against the name of the exchange or queue
a method touches (the default exchange is ``amq.default``):

=====================================  ===============  ==================  =============
method                                 configure        write               read
=====================================  ===============  ==================  =============
exchange.declare (not passive)         exchange
  ... with an alternate-exchange                        the AE              exchange
exchange.delete                        exchange
queue.declare (not passive)            queue
  ... with x-dead-letter-exchange                       the DLX             queue
queue.delete                           queue
exchange.bind / unbind                                  destination         source
queue.bind / unbind                                     queue               exchange
basic.publish                                           exchange
basic.get, basic.consume, queue.purge                                       queue
=====================================  ===============  ==================  =============

A denial closes the channel with 403 ACCESS_REFUSED ("write access to exchange 'x' in vhost
'/' refused for user 'u'") and is logged.
"""
from __future__ import annotations

import logging

from pamqp import commands as spec

from gateway.logs import fields
from routing.errors import ACCESS_REFUSED, ChannelError

log = logging.getLogger(__name__)

SERVER_NAMED = "amq.gen-"  # what a server-named queue's name starts with


def check(channel, kind: str, name: str, permission: str) -> None:
    """Raise 403 unless the channel's user holds ``permission`` on resource ``name`` of ``kind``."""
    connection = channel.connection
    if kind == "exchange" and name == "":
        name = "amq.default"
    vhost = channel.vhost.name
    granted = connection.permission(vhost)
    if granted is not None and granted.allows(permission, name):
        return
    text = f"{permission} access to {kind} '{name}' in vhost '{vhost}' refused for user '{connection.username}'"
    log.warning("AMQP access refused: %s", text, extra=fields(peer=connection.peer, conn=connection.conn_id, user=connection.username,
                                                             vhost=vhost, permission=permission,
                                                             resource=f"{kind}:{name}"))
    raise ChannelError(ACCESS_REFUSED, text)


def _exchange_declare(channel, m) -> None:
    if m.passive:
        return
    check(channel, "exchange", m.exchange, "configure")
    alternate = (m.arguments or {}).get("alternate-exchange")
    if isinstance(alternate, str):
        check(channel, "exchange", alternate, "write")
        check(channel, "exchange", m.exchange, "read")


def _queue_declare(channel, m) -> None:
    if m.passive:
        return
    name = m.queue or SERVER_NAMED
    check(channel, "queue", name, "configure")
    dlx = (m.arguments or {}).get("x-dead-letter-exchange")
    if isinstance(dlx, str):
        check(channel, "exchange", dlx, "write")
        check(channel, "queue", name, "read")


def _bind_exchange(channel, m) -> None:
    check(channel, "exchange", m.destination, "write")
    check(channel, "exchange", m.source, "read")


def _bind_queue(channel, m) -> None:
    check(channel, "queue", channel._queue_name(m.queue), "write")
    check(channel, "exchange", m.exchange, "read")


def _read_queue(channel, m) -> None:
    check(channel, "queue", channel._queue_name(m.queue), "read")


CHECKS = {
    spec.Exchange.Declare: _exchange_declare,
    spec.Exchange.Delete: lambda channel, m: check(channel, "exchange", m.exchange, "configure"),
    spec.Exchange.Bind: _bind_exchange,
    spec.Exchange.Unbind: _bind_exchange,
    spec.Queue.Declare: _queue_declare,
    spec.Queue.Delete: lambda channel, m: check(channel, "queue", channel._queue_name(m.queue), "configure"),
    spec.Queue.Bind: _bind_queue,
    spec.Queue.Unbind: _bind_queue,
    spec.Queue.Purge: _read_queue,
    spec.Basic.Get: _read_queue,
    spec.Basic.Consume: _read_queue,
}


def check_publish(channel, exchange: str) -> None:
    """Once per published message: the usual grant (write ``.*``) is settled without a match."""
    connection = channel.connection
    granted = connection.permission(channel.vhost.name)
    if granted is not None and granted.write == ".*":
        return
    check(channel, "exchange", exchange, "write")
