"""The name server as a Twisted service: KV config, broker expiry scan and the listening port."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger, LogLevel
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from rocketpy.interfaces import IChannelEventListener
from rocketpy.namesrv.kvconfig import KVConfigManager
from rocketpy.namesrv.processor import NamesrvProcessor
from rocketpy.namesrv.routeinfo import BROKER_EXPIRY_SECONDS, RouteInfoManager
from rocketpy.remoting.responders import register_responders
from rocketpy.remoting.tls import ServerTLS, server_factory
from rocketpy.util.endpoints import server_endpoint
from rocketpy.util.fileio import write_atomically
from rocketpy.util.service import ListeningService, OrderedMultiService, Steps

DEFAULT_LISTEN = "tcp:9876:interface=127.0.0.1"
DEFAULT_CONFIG_DIR = os.path.join("~", ".rocketpy", "namesrv")
#: Seconds before the first broker expiry scan, and between scans (Java's timing).
FIRST_SCAN_DELAY = 5.0
SCAN_INTERVAL = 10.0

#: Builds the remoting server: ``(reactor, channel listeners) -> server``. The
#: server needs ``register_processor(code, processor)``, ``factory()`` and ``close()``.
ServerMaker = Callable[[Any, Sequence[IChannelEventListener]], Any]


def _remoting_server(reactor: Any, listeners: Sequence[IChannelEventListener]) -> Any:
    # Imported here: the route logic and its tests do not need the transport.
    from rocketpy.remoting.server import RemotingServer

    return RemotingServer(reactor, listeners=listeners)


@implementer(IChannelEventListener)
class NamesrvService(OrderedMultiService):
    """A RocketMQ name server.

    An ordered service tree: the config pool, the expiry scans, then the port. Listens in
    :meth:`startService`; broker channels that close, idle out or
    fail drop their brokers at once, and brokers silent for 120 s are dropped
    by a scan every 10 s.

    :param reactor: the reactor (listening and time); a
        ``MemoryReactorClock`` in tests.
    :param listen: a server endpoint string; ``tcp:0`` picks a free port.
    :param config_dir: where ``kvConfig.json`` lives (``~`` is expanded).
    :param make_server: builds the remoting server (tests pass a fake).
    :param config_pool: writes ``kvConfig.json`` off the reactor thread; default a one-thread
        pool started and stopped by this service.
    :param tls: serve TLS in its mode (doc/security.md).
    """

    log = Logger()

    def __init__(
        self,
        reactor: Any,
        listen: str = DEFAULT_LISTEN,
        config_dir: str = DEFAULT_CONFIG_DIR,
        broker_expiry: float = BROKER_EXPIRY_SECONDS,
        make_server: ServerMaker = _remoting_server,
        config_pool: ThreadPool | None = None,
        tls: ServerTLS | None = None,
    ) -> None:
        super().__init__()
        self._reactor = reactor
        self._broker_expiry = broker_expiry
        kv_path = os.path.join(os.path.expanduser(config_dir), "kvConfig.json")
        self.route_info = RouteInfoManager()
        self.kv_config = KVConfigManager(kv_path)
        self._pool = config_pool if config_pool is not None else ThreadPool(1, 1, "rocketpy-namesrv-config")
        self.kv_config.writer = self._write_in_pool
        config = {"kvConfigPath": kv_path, "listen": listen, "productEnvName": "center", "clusterTest": "false"}
        self.processor = NamesrvProcessor(self.route_info, self.kv_config, reactor, config)
        self._scanner = LoopingCall(self.scan_not_active_brokers)
        self._scanner.clock = reactor
        self._first_scan: IDelayedCall | None = None
        self._server = make_server(reactor, [self])
        register_responders(self._server, self.processor)
        factory = server_factory(self._server.factory(), tls, reactor)
        self._listener = ListeningService(server_endpoint(reactor, listen), factory, "name server")
        # start order (stopped in reverse): config pool → expiry scans → connections → port
        self.add("config pool", Steps(self._pool.start, self._pool.stop))
        self.add("broker expiry scan", Steps(self._schedule_scans, self._stop_scans))
        self.add("connections", Steps(stop=self._server.close))
        self.add("listener", self._listener)

    @property
    def listening_port(self) -> IListeningPort | None:
        """The port once listening (``getHost().port`` gives the number), else None."""
        return self._listener.port

    def startService(self) -> Deferred[None]:
        """Load the KV config (a corrupt file raises here, before anything starts), then start the
        tree; fires once listening (fails if the port cannot be opened)."""
        self.kv_config.load()
        return super().startService()

    def _write_in_pool(self, path: str | os.PathLike[str], data: bytes) -> Deferred[None]:
        """The KV config's writer: one atomic file write in the config pool, in call order."""
        return deferToThreadPool(self._reactor, self._pool, write_atomically, path, data)

    def _schedule_scans(self) -> None:
        clock: IReactorTime = self._reactor
        self._first_scan = clock.callLater(FIRST_SCAN_DELAY, self._start_scanner)

    def _start_scanner(self) -> None:
        self._first_scan = None
        self._scanner.start(SCAN_INTERVAL, now=True)

    def _stop_scans(self) -> None:
        if self._first_scan is not None and self._first_scan.active():
            self._first_scan.cancel()
        self._first_scan = None
        if self._scanner.running:
            self._scanner.stop()

    def scan_not_active_brokers(self) -> None:
        """Drop brokers silent for longer than the expiry (run by the loop)."""
        try:
            expired = self.route_info.scan_not_active_broker(self._reactor.seconds(), self._broker_expiry)
        except Exception:  # an escaping exception would end the LoopingCall
            self.log.failure("broker expiry scan failed", level=LogLevel.error)
            return
        for addr in expired:
            self.log.warn("broker {addr} silent for {expiry} s: removed", addr=addr, expiry=self._broker_expiry)

    # IChannelEventListener: a broker's channel ending drops that broker at once.

    def on_channel_connect(self, remote_address: str, channel: object) -> None:
        pass

    def on_channel_close(self, remote_address: str, channel: object) -> None:
        self._channel_gone(remote_address, channel)

    def on_channel_idle(self, remote_address: str, channel: object) -> None:
        self._channel_gone(remote_address, channel)

    def on_channel_exception(self, remote_address: str, channel: object) -> None:
        self._channel_gone(remote_address, channel)

    def _channel_gone(self, remote_address: str, channel: object) -> None:
        for addr in self.route_info.on_channel_destroy(remote_address, channel):
            self.log.info("broker {addr} removed: its channel {peer} ended", addr=addr, peer=remote_address)
