"""``/metrics``: the broker's metrics in the Prometheus text format (or OpenMetrics, when the
scraper asks for it), built per scrape by :class:`~rocketpy.web.collector.BrokerCollector`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from rocketpy.broker.overview import group_progress, store_time_lags
from rocketpy.web.collector import BrokerCollector

#: Runs a blocking call off the reactor thread: ``partial(deferToThreadPool, reactor, pool)``.
InThread = Callable[..., "Deferred[Any]"]


class MetricsResource(Resource):
    """GET renders one scrape of ``broker`` (a :class:`~rocketpy.broker.controller.BrokerService`).

    :param in_thread: formats the page off the reactor thread; None formats it inline.
    """

    isLeaf = True
    log = Logger()

    def __init__(self, broker: Any, in_thread: InThread | None = None) -> None:
        super().__init__()
        self._broker = broker
        self._in_thread = in_thread

    def render_GET(self, request: Request) -> int:
        gone: list[Failure] = []
        request.notifyFinish().addErrback(gone.append)  # the scraper hung up: nothing to write
        d = Deferred.fromCoroutine(self._scrape(request.getHeader("accept") or ""))
        d.addCallbacks(self._write, self._failed, callbackArgs=(request, gone), errbackArgs=(request, gone))
        return NOT_DONE_YET

    async def _scrape(self, accept: str) -> tuple[bytes, str]:
        return await render_metrics(self._broker, accept, self._in_thread)

    def _write(self, page: tuple[bytes, str], request: Request, gone: list[Failure]) -> None:
        if gone:
            return
        body, content_type = page
        request.setHeader(b"content-type", content_type.encode("ascii"))
        request.write(body)
        request.finish()

    def _failed(self, failure: Failure, request: Request, gone: list[Failure]) -> None:
        self.log.failure("metrics scrape failed", failure)
        if gone:
            return
        request.setResponseCode(500)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        request.write(f"metrics unavailable: {failure.getErrorMessage()}\n".encode())
        request.finish()


async def render_metrics(broker: Any, accept: str = "", in_thread: InThread | None = None) -> tuple[bytes, str]:
    """One scrape of ``broker``: the page in the format ``accept`` (an Accept header) asks for,
    and its content type.

    The metric families are read from the broker on the reactor thread (the consumer groups'
    store-time lags in the store's read pool); ``in_thread`` then formats them, which is most
    of a big scrape's work (tens of ms for thousands of samples).
    """
    progress = group_progress(broker.tables, broker.traffic.gets.table)
    lags = await store_time_lags(broker.tables, progress, int(broker.tables.clock.seconds() * 1000))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(BrokerCollector(broker, progress, lags).collect())))
    encode, content_type = choose_encoder(accept)
    page = encode(registry) if in_thread is None else await in_thread(encode, registry)
    return page, content_type


class _Families(Collector):
    """Metric families already read: what the formatting thread touches (nothing of the broker's)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families
