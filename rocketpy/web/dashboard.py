"""The dashboard (doc/dashboard.md): static pages shipped in the package at ``/`` and the JSON
API they read at ``/api/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.web.resource import ForbiddenResource, Resource
from twisted.web.static import File

from rocketpy.web.access import CHALLENGE, AdminAccess
from rocketpy.web.api import ApiResource

STATIC = Path(__file__).parent / "static"
#: Pages may load only what this endpoint serves: no CDN, works offline.
_CSP = b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


class Pages(File):
    """The static files; no directory listings, and a strict Content-Security-Policy. With
    ``asks_account`` (ACL on) a request without HTTP Basic credentials is asked for them, so the
    browser asks once and sends them with every API request after."""

    asks_account = False

    def directoryListing(self) -> Resource:
        return ForbiddenResource("no listings")

    def createSimilarFile(self, path: str) -> File:
        similar = super().createSimilarFile(path)
        similar.asks_account = self.asks_account
        return similar

    def render_GET(self, request: Any) -> Any:
        if self.asks_account and not request.getUser():
            request.setResponseCode(401)
            request.setHeader(b"www-authenticate", CHALLENGE)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"The broker checks ACL: sign in with an access key (user name) and its secret key (password).\n"
        request.setHeader(b"content-security-policy", _CSP)
        request.setHeader(b"x-content-type-options", b"nosniff")
        return super().render_GET(request)


def dashboard_resource(access: AdminAccess, clock: IReactorTime, writes: bool = False) -> Resource:
    """The dashboard's root: pages at ``/``, the API at ``/api/``.

    :param access: the admin client of each API request (:class:`~rocketpy.web.access.SharedAdmin`
        of the broker process's own name servers, or :class:`~rocketpy.web.access.AclAccounts`).
    :param writes: whether the API's write actions are enabled (``--http-admin``).
    """
    root = Pages(str(STATIC))
    root.asks_account = access.asks_account
    root.putChild(b"api", ApiResource(access, clock, writes))
    return root
