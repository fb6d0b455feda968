"""``twistd rocketpy``: options and the service tree."""

from __future__ import annotations

from twisted.application.service import MultiService
from twisted.python import usage


class Options(usage.Options):
    optParameters: list[list[object]] = []


def makeService(options: Options, reactor: object = None) -> MultiService:
    return MultiService()
