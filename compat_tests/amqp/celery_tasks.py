"""A small Celery app for the compatibility suite: run by a real ``celery worker`` process.

The broker URL and the queue name come from the environment (``COMPAT_CELERY_BROKER``,
``COMPAT_CELERY_QUEUE``), so the worker and the test agree without a config file. Results go
back over AMQP with the ``rpc://`` backend.
"""
from __future__ import annotations

import os

from celery import Celery

BROKER_ENV = "COMPAT_CELERY_BROKER"
QUEUE_ENV = "COMPAT_CELERY_QUEUE"


def make_app(broker_url: str, queue: str) -> Celery:
    app = Celery("compat_tasks", broker=broker_url, backend="rpc://")
    app.conf.update(
        task_default_queue=queue,
        task_default_exchange=queue,
        task_default_routing_key=queue,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=False,
        broker_connection_max_retries=0,
        worker_hijack_root_logger=False,
        task_acks_late=True,
    )

    @app.task(name="compat.add", shared=False)
    def add(x, y):
        return x + y

    @app.task(name="compat.flaky", bind=True, max_retries=3, default_retry_delay=0, shared=False)
    def flaky(self, value):
        """Fails its first attempt and asks to be retried; reports how many retries it took."""
        if self.request.retries == 0:
            raise self.retry(exc=RuntimeError("first attempt fails on purpose"), countdown=0)
        return {"value": value, "retries": self.request.retries}

    return app


app = make_app(os.environ.get(BROKER_ENV, "amqp://guest:guest@127.0.0.1:5672//"),
               os.environ.get(QUEUE_ENV, "compat-celery"))
