"""The HTTP listener: ``/healthz``, the management API (``/api/``), ``/metrics`` (also
``/metrics/per-object`` and ``/metrics/detailed``, RabbitMQ's) and the dashboard."""
from __future__ import annotations

import json
from typing import Callable

from twisted.web import resource, server


def _json(request, status: int, doc: dict) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return json.dumps(doc).encode() + b"\n"


class Health(resource.Resource):
    isLeaf = True

    def __init__(self, status: Callable[[], tuple[bool, dict]]):
        super().__init__()
        self.status = status

    def render_GET(self, request):
        ready, doc = self.status()
        return _json(request, 200 if ready else 503, doc)


class NotFound(resource.Resource):
    isLeaf = True

    def render(self, request):
        return _json(request, 404, {"error": "not found", "path": request.path.decode("utf-8", "replace")})


class Root(resource.Resource):
    def __init__(self, status: Callable[[], tuple[bool, dict]], broker=None):
        super().__init__()
        self.putChild(b"healthz", Health(status))
        if broker is not None:  # imported here: the health check alone needs none of it
            from gateway.management.api import ManagementApi
            from gateway.management.dashboard import Dashboard, RootRedirect
            from gateway.management.detailed_metrics import DetailedMetricsResource
            from gateway.management.metrics import MetricsResource
            self.putChild(b"api", ManagementApi(broker))
            metrics = MetricsResource(broker)
            metrics.putChild(b"per-object", MetricsResource(broker, per_object=True))
            metrics.putChild(b"detailed", DetailedMetricsResource(broker))
            self.putChild(b"metrics", metrics)
            self.putChild(b"dashboard", Dashboard())
            self.putChild(b"", RootRedirect())

    def getChild(self, path, request):
        return NotFound()

    def render(self, request):
        return NotFound().render(request)


def site(status: Callable[[], tuple[bool, dict]], broker=None) -> server.Site:
    """``status()`` returns (ready, document): 200 with the document when ready, else 503.
    With ``broker`` (a gateway.server.Broker) the management API, metrics and dashboard are served too."""
    from gateway.management.limits import limited_site  # body size and read time, before authentication
    return limited_site(Root(status, broker), logPath=None)
