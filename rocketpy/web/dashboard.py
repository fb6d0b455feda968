"""The dashboard (doc/dashboard.md): static pages shipped in the package at ``/`` and the JSON
API they read at ``/api/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import ForbiddenResource, Resource
from twisted.web.static import File

from rocketpy.client.admin import AdminClient
from rocketpy.web.api import ApiResource, WriteGuard
from rocketpy.web.views import Views

STATIC = Path(__file__).parent / "static"
#: Pages may load only what this endpoint serves: no CDN, works offline.
_CSP = b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


class Pages(File):
    """The static files; no directory listings, and a strict Content-Security-Policy."""

    def directoryListing(self) -> Resource:
        return ForbiddenResource("no listings")

    def render_GET(self, request: Any) -> Any:
        request.setHeader(b"content-security-policy", _CSP)
        request.setHeader(b"x-content-type-options", b"nosniff")
        return super().render_GET(request)


def dashboard_resource(admin: AdminClient, clock: IReactorTime, writes: WriteGuard | None = None) -> Resource:
    """The dashboard's root: pages at ``/``, the API at ``/api/``.

    :param admin: every API call goes through it (the broker process's own name servers).
    :param writes: allows the API's write actions (``--http-admin``); None refuses them.
    """
    root = Pages(str(STATIC))
    root.putChild(b"api", ApiResource(Views(admin, clock), writes))
    return root
