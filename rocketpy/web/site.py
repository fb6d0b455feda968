"""The HTTP resource tree: ``/metrics``, and the dashboard's pages (``/``) and JSON API (``/api/``)."""

from __future__ import annotations

from typing import Any

from twisted.web.resource import EncodingResourceWrapper, Resource
from twisted.web.server import GzipEncoderFactory, Site

from rocketpy.web.access import AdminAccess
from rocketpy.web.dashboard import dashboard_resource
from rocketpy.web.metrics import InThread, MetricsResource


def root_resource(broker: Any, in_thread: InThread | None = None, access: AdminAccess | None = None,
                  writes: bool = False) -> Resource:
    """The tree served for ``broker`` (a :class:`~rocketpy.broker.controller.BrokerService`).

    :param in_thread: runs pure formatting work off the reactor thread (None: inline).
    :param access: the admin clients of the dashboard's API (doc/dashboard.md); None: no dashboard.
    :param writes: whether the dashboard's write actions are enabled (``--http-admin``).
    """
    root = Resource() if access is None else dashboard_resource(access, broker.tables.clock, writes)
    root.putChild(b"metrics", EncodingResourceWrapper(MetricsResource(broker, in_thread), [GzipEncoderFactory()]))
    return root


class QuietSite(Site):
    """A ``Site`` without an access log: a scrape every 15 s would fill the broker's log."""

    def log(self, request: Any) -> None:
        pass
