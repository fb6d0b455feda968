"""TLS on the gRPC endpoint (``--tls-*``): grpcio clients with the test CA, plaintext refused when enforcing."""

from __future__ import annotations

from typing import Any, cast

import grpc
from twisted.internet import reactor
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import LogLevel
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import TestCase

from rocketpy.grpc.server import GrpcService, broker_messaging
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.grpc.v2.service_pb2_grpc import MessagingServiceStub
from rocketpy.remoting.tls import ServerTLS
from rocketpy.tap import Options, makeService
from tests.client.test_integration import LoopbackCluster
from tests.logs import assert_logs
from tests.remoting.certs import CertificateSet

METADATA = [("x-mq-client-id", "tls-client@1")]


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class GrpcTLSTests(TestCase):
    """A broker's gRPC endpoint under each ``--tls-mode``, called by grpcio channels."""

    def setUp(self) -> None:
        self.certs = CertificateSet(self.mktemp())
        self.pool = ThreadPool(1, 2, "grpc-tls-client")
        self.pool.start()
        self.addCleanup(self.pool.stop)

    async def _start(self, mode: str, client_ca: bool = False) -> None:
        cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        await cluster.add_broker("broker-a")
        broker = cluster.brokers["broker-a"]
        tls = ServerTLS(self.certs.server, self.certs.server_key, self.certs.ca if client_ca else None, mode)
        service = GrpcService(reactor, "tcp:0:interface=127.0.0.1",
                              lambda: broker_messaging(reactor, broker, [1000]), tls=tls)
        service.startService()
        self.addCleanup(service.stopService)
        await service.when_started()
        self.target = f"127.0.0.1:{service.port}"

    def _route(self, channel: grpc.Channel) -> Any:
        """QueryRoute over ``channel`` in the pool (closed after): the response, or the grpc.RpcError raised."""
        def call() -> Any:
            try:
                return MessagingServiceStub(channel).QueryRoute(
                    rpc.QueryRouteRequest(topic=pb.Resource(name="TLS5")), timeout=10, metadata=METADATA)
            except grpc.RpcError as e:
                return e
            finally:
                channel.close()
        return deferToThreadPool(cast(IReactorFromThreads, reactor), self.pool, call)

    def _secure(self, trust: str | None = None, client_cert: bool = False) -> grpc.Channel:
        credentials = grpc.ssl_channel_credentials(
            _read(trust or self.certs.ca),
            _read(self.certs.client_key) if client_cert else None,
            _read(self.certs.client) if client_cert else None)
        return grpc.secure_channel(self.target, credentials)

    async def _assert_ok(self, channel: grpc.Channel) -> None:
        answer = await self._route(channel)
        self.assertIsInstance(answer, rpc.QueryRouteResponse, answer)
        self.assertEqual(answer.status.code, pb.Code.OK)
        self.assertEqual(len(answer.message_queues), 8)

    async def _assert_refused(self, channel: grpc.Channel) -> None:
        answer = await self._route(channel)
        self.assertIsInstance(answer, grpc.RpcError, answer)
        self.assertEqual(answer.code(), grpc.StatusCode.UNAVAILABLE)

    async def test_enforcing(self) -> None:
        """A client trusting the CA completes the handshake and its RPC; a plaintext client and one that
        does not trust the server's certificate are refused."""
        await self._start("enforcing")
        await self._assert_ok(self._secure())
        await self._assert_refused(grpc.insecure_channel(self.target))
        await self._assert_refused(self._secure(trust=self.certs.self_signed))

    async def test_client_certificates(self) -> None:
        """With a client CA (``--tls-ca``) a client certificate it signed is required, as on the 4.x ports."""
        await self._start("enforcing", client_ca=True)
        await self._assert_ok(self._secure(client_cert=True))
        await self._assert_refused(self._secure())

    async def test_permissive_is_plaintext(self) -> None:
        """grpcio cannot tell TLS from plaintext on one port: permissive serves plaintext, and says so."""
        with assert_logs(self, "rocketpy.grpc.server", LogLevel.warn) as logged:
            await self._start("permissive")
        self.assertIn("speaks plaintext only", logged[0])
        await self._assert_ok(grpc.insecure_channel(self.target))
        await self._assert_refused(self._secure())

    async def test_disabled(self) -> None:
        await self._start("disabled")
        await self._assert_ok(grpc.insecure_channel(self.target))


class TLSOptionsTests(TestCase):
    """``twistd rocketpy``'s ``--tls-*`` options reach the gRPC endpoint."""

    def test_options_reach_the_endpoint(self) -> None:
        certs = CertificateSet(self.mktemp())
        root = self.mktemp()
        for mode, expected in (("enforcing", certs.self_signed), ("permissive", None), ("disabled", None)):
            options = Options()
            options.parseOptions(["--grpc-listen", "tcp:0:interface=127.0.0.1", "--http", "none",
                                  "--store-dir", root, "--tls-cert", certs.self_signed,
                                  "--tls-key", certs.self_signed_key, "--tls-mode", mode])
            endpoint = makeService(options, reactor).getServiceNamed("grpc")
            assert isinstance(endpoint, GrpcService)
            self.assertEqual(None if endpoint.tls is None else endpoint.tls.cert, expected, mode)
