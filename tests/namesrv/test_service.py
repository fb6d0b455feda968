"""Tests for rocketpy.namesrv.service: start-up, the expiry loop, channel events, stop."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.protocol import ServerFactory
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.common.fastjson import BodyError
from rocketpy.interfaces import IChannelEventListener
from rocketpy.namesrv.service import NamesrvService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.util.fileio import write_atomically
from tests.fakes import FakeChannel, Registry
from tests.namesrv.helpers import register_request
from tests.store.fakes import InlinePool, ThreadlessReactor


class FakeServer(Registry):
    """Records what the service registers; ``close()`` fires at once."""

    def __init__(self, reactor: Any, listeners: Sequence[IChannelEventListener]) -> None:
        super().__init__()
        self.reactor = reactor
        self.listeners = list(listeners)
        self.closed = False

    def factory(self) -> ServerFactory:
        return ServerFactory()

    def close(self) -> Deferred[None]:
        self.closed = True
        return succeed(None)


class NamesrvServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = ThreadlessReactor()
        self.pool = InlinePool()
        self.config_dir = self.mktemp()
        self.servers: list[FakeServer] = []

    def make_service(self, **kwargs: Any) -> NamesrvService:
        def make_server(reactor: Any, listeners: Sequence[IChannelEventListener]) -> FakeServer:
            self.servers.append(FakeServer(reactor, listeners))
            return self.servers[-1]

        return NamesrvService(
            self.reactor, "tcp:0:interface=127.0.0.1", self.config_dir, make_server=make_server,
            config_pool=self.pool, **kwargs  # type: ignore[arg-type]
        )

    def start(self, **kwargs: Any) -> NamesrvService:
        service = self.make_service(**kwargs)
        service.startService()
        self.addCleanup(lambda: service.running and service.stopService())
        return service

    def call(self, service: NamesrvService, request: RemotingCommand, channel: FakeChannel | None = None) -> RemotingCommand:
        server = self.servers[-1]
        response = server.answer(channel or FakeChannel(), request)
        if isinstance(response, Deferred):
            response = self.successResultOf(response)
        assert isinstance(response, RemotingCommand)
        return response

    def route_code(self, service: NamesrvService, topic: str = "T") -> int:
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return self.call(service, request).code

    def test_start_listens_and_registers(self) -> None:
        """Starting listens on the endpoint and registers every name server code, with itself as listener."""
        service = self.start()
        [(port, _, _, interface)] = self.reactor.tcpServers
        self.assertEqual((port, interface), (0, "127.0.0.1"))
        self.assertIsNotNone(service.listening_port)
        server = self.servers[-1]
        self.assertEqual(server.listeners, [service])
        self.assertEqual(sorted(server.processors), sorted(service.processor.responders()))
        self.assertIn(RequestCode.REGISTER_BROKER, server.processors)
        self.assertTrue(verifyObject(IChannelEventListener, service))

    def test_construction_does_nothing(self) -> None:
        """Building the service neither listens nor schedules (twistd forks after makeService)."""
        self.make_service()
        self.assertEqual((self.reactor.tcpServers, self.reactor.getDelayedCalls()), ([], []))
        self.assertFalse(os.path.exists(self.config_dir))

    def test_expiry_loop(self) -> None:
        """A broker is routed for 120 s of silence and dropped by the next scan after that."""
        service = self.start()
        self.call(service, register_request())
        self.reactor.pump([1.0] * 119)
        self.assertEqual(self.route_code(service), ResponseCode.SUCCESS)
        self.reactor.pump([1.0] * 6)  # scans run at 5, 15, ..., 125 s
        self.assertEqual(self.route_code(service), ResponseCode.TOPIC_NOT_EXIST)

    def test_first_scan_after_five_seconds(self) -> None:
        """The first scan runs 5 s after start, then every 10 s."""
        service = self.start(broker_expiry=1.0)
        self.call(service, register_request())
        self.reactor.advance(4.9)
        self.assertEqual(self.route_code(service), ResponseCode.SUCCESS)
        self.reactor.advance(0.1)
        self.assertEqual(self.route_code(service), ResponseCode.TOPIC_NOT_EXIST)
        self.call(service, register_request())
        self.reactor.advance(9.9)
        self.assertEqual(self.route_code(service), ResponseCode.SUCCESS)
        self.reactor.advance(0.1)
        self.assertEqual(self.route_code(service), ResponseCode.TOPIC_NOT_EXIST)

    def test_channel_close_drops_broker(self) -> None:
        """A broker's channel closing removes the broker without waiting for the scan."""
        service = self.start()
        channel = FakeChannel("127.0.0.1:45000")
        self.call(service, register_request(), channel)
        service.on_channel_connect(channel.remote_address, channel)
        self.assertEqual(self.route_code(service), ResponseCode.SUCCESS)
        service.on_channel_close(channel.remote_address, channel)
        self.assertEqual(self.route_code(service), ResponseCode.TOPIC_NOT_EXIST)

    def test_idle_and_exception_drop_broker(self) -> None:
        """Idle and exception events drop the broker too, as in Java's housekeeping service."""
        service = self.start()
        for event in (service.on_channel_idle, service.on_channel_exception):
            channel = FakeChannel()
            self.call(service, register_request(), channel)
            event(channel.remote_address, channel)
            self.assertEqual(self.route_code(service), ResponseCode.TOPIC_NOT_EXIST)

    def test_kv_loaded_at_start(self) -> None:
        """KV config written before start is served after start."""
        write_atomically(os.path.join(self.config_dir, "kvConfig.json"), b'{"configTable":{"ns":{"k":"v"}}}')
        service = self.start()
        request = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
        self.assertEqual(self.call(service, request).ext_fields, {"value": "v"})

    def test_corrupt_kv_fails_start(self) -> None:
        """A corrupt KV file makes start fail before anything listens."""
        write_atomically(os.path.join(self.config_dir, "kvConfig.json"), b"[]")
        service = self.make_service()
        self.assertRaises(BodyError, service.startService)
        self.assertFalse(service.running)
        self.assertEqual(self.reactor.tcpServers, [])

    def test_stop(self) -> None:
        """Stopping closes the server's channels, stops listening and leaves no timers."""
        service = self.start()
        self.reactor.advance(5)
        self.successResultOf(service.stopService())
        self.assertTrue(self.servers[-1].closed)
        self.assertIsNone(service.listening_port)
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_stop_before_first_scan(self) -> None:
        """Stopping before the first scan cancels it."""
        service = self.start()
        self.successResultOf(service.stopService())
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_kv_writes_go_through_the_config_pool(self) -> None:
        """PUT/DELETE_KV_CONFIG write kvConfig.json in the config pool (not on the reactor thread)
        and answer once written; stopping the service stops the pool."""
        service = self.start()
        self.assertTrue(self.pool.started)
        put = {"namespace": "ns", "key": "k", "value": "v"}
        self.assertEqual(self.call(service, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, put)).code,
                         ResponseCode.SUCCESS)
        self.assertEqual(self.pool.calls, 1)
        self.assertTrue(os.path.exists(os.path.join(self.config_dir, "kvConfig.json")))
        delete = RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"})
        self.assertEqual(self.call(service, delete).code, ResponseCode.SUCCESS)
        self.assertEqual(self.pool.calls, 2)
        self.successResultOf(service.stopService())
        self.assertFalse(self.pool.started)

    def test_restart_keeps_kv(self) -> None:
        """A KV value put before a stop is there after a new service starts on the same directory."""
        service = self.start()
        put = {"namespace": "ns", "key": "k", "value": "v"}
        self.call(service, RemotingCommand.request(RequestCode.PUT_KV_CONFIG, put))
        self.successResultOf(service.stopService())
        again = self.start()
        self.assertEqual(again.kv_config.get("ns", "k"), "v")
