"""The HTTP resource tree: ``/metrics`` now; the dashboard (``/``) and its JSON API (``/api/``)
go beside it as further children of :func:`root_resource`."""

from __future__ import annotations

from typing import Any

from twisted.web.resource import EncodingResourceWrapper, Resource
from twisted.web.server import GzipEncoderFactory, Site

from rocketpy.web.metrics import InThread, MetricsResource


def root_resource(broker: Any, in_thread: InThread | None = None) -> Resource:
    """The tree served for ``broker`` (a :class:`~rocketpy.broker.controller.BrokerService`).

    :param in_thread: runs pure formatting work off the reactor thread (None: inline).
    """
    root = Resource()
    root.putChild(b"metrics", EncodingResourceWrapper(MetricsResource(broker, in_thread), [GzipEncoderFactory()]))
    return root


class QuietSite(Site):
    """A ``Site`` without an access log: a scrape every 15 s would fill the broker's log."""

    def log(self, request: Any) -> None:
        pass
