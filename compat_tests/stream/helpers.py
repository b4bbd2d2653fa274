"""Shared pieces of the stream-protocol suite: running rstream coroutines, and reading a stream."""
from __future__ import annotations

import asyncio

from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, MessageContext


def run(coro, timeout: float = 120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def client_args(address: tuple[str, int], **kw) -> dict:
    host, port = address
    return {"host": host, "port": port, "username": "guest", "password": "guest", **kw}


def numbered(message: AMQPMessage, publishing_id: int) -> AMQPMessage:
    """A message with its own publishing id (rstream numbers the others itself)."""
    message.publishing_id = publishing_id
    return message


async def read(address: tuple[str, int], stream: str, spec: ConsumerOffsetSpecification, count: int,
               decoder=None, timeout: float = 60) -> list:
    """The first ``count`` (offset, message) pairs a new subscription from ``spec`` receives."""
    got: list = []
    done = asyncio.Event()

    async def on_message(message, context: MessageContext):
        got.append((context.offset, message))
        if len(got) >= count:
            done.set()

    async with Consumer(**client_args(address)) as consumer:
        await consumer.start()
        await consumer.subscribe(stream, on_message, offset_specification=spec, decoder=decoder)
        await asyncio.wait_for(done.wait(), timeout)
    return got[:count]
