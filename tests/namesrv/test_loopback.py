"""The name server behind the real RemotingServer, driven by a RemotingClient over TCP loopback."""

from __future__ import annotations

import json

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase

from rocketpy.namesrv.service import NamesrvService
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.namesrv.helpers import register_request

TIMEOUT = 5.0


class LoopbackTests(TestCase):
    def setUp(self) -> None:
        from twisted.internet import reactor  # real TCP needs the running reactor

        self.reactor = reactor
        self.service = NamesrvService(reactor, "tcp:0:interface=127.0.0.1", self.mktemp())
        self.service.startService()
        self.addCleanup(self.service.stopService)
        port = self.service.listening_port
        assert port is not None
        host = port.getHost()
        assert isinstance(host, IPv4Address)
        self.address = f"127.0.0.1:{host.port}"

    def client(self) -> RemotingClient:
        client = RemotingClient(self.reactor)
        self.addCleanup(client.close)
        return client

    def route(self, client: RemotingClient, topic: str) -> Deferred[RemotingCommand]:
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return client.invoke_sync(self.address, request, TIMEOUT)

    async def test_register_route_and_channel_close(self) -> None:
        """A broker registers over TCP, its topic is routed with quoted ids, and closing its connection drops it."""
        closed: Deferred[None] = Deferred()
        on_close = self.service.on_channel_close

        def observe_close(remote_address: str, channel: object) -> None:
            on_close(remote_address, channel)
            if not closed.called:
                closed.callback(None)

        self.service.on_channel_close = observe_close  # type: ignore[method-assign]
        broker = RemotingClient(self.reactor)
        registered = await broker.invoke_sync(self.address, register_request(topics={"T": 4}), TIMEOUT)
        self.assertEqual(registered.code, ResponseCode.SUCCESS)

        client = self.client()
        route = await self.route(client, "T")
        self.assertEqual(route.code, ResponseCode.SUCCESS)
        self.assertEqual(json.loads(route.body)["brokerDatas"][0]["brokerAddrs"], {"0": "127.0.0.1:10911"})

        await broker.close()
        await closed
        gone = await self.route(client, "T")
        self.assertEqual(gone.code, ResponseCode.TOPIC_NOT_EXIST)

    async def test_bad_requests_answered(self) -> None:
        """Unknown codes and missing fields get error responses and the connection stays usable."""
        client = self.client()
        unknown = await client.invoke_sync(self.address, RemotingCommand.request(RequestCode.SEND_MESSAGE), TIMEOUT)
        self.assertEqual(unknown.code, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        missing = await client.invoke_sync(self.address, RemotingCommand.request(RequestCode.GET_KV_CONFIG), TIMEOUT)
        self.assertEqual(missing.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("namespace", missing.remark or "")
        route = await self.route(client, "nope")
        self.assertEqual(route.code, ResponseCode.TOPIC_NOT_EXIST)
