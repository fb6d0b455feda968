"""TLS on real name server and broker ports (loopback): each mode with rocketpy's clients, client
certificates, and ``openssl s_client``."""

from __future__ import annotations

import os
import shutil
from typing import Any

from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.protocol import Factory, ProcessProtocol, Protocol, connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.logger import capturedLogs
from twisted.trial.unittest import SkipTest, SynchronousTestCase, TestCase

from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.controller import BrokerService
from rocketpy.client import Producer, PullConsumer, PullStatus, new_message
from rocketpy.namesrv.service import NamesrvService
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingError
from rocketpy.remoting.tls import FIRST_BYTE_TIMEOUT, ClientTLS, ServerTLS, _SwitchFactory
from rocketpy.store.config import MessageStoreConfig
from tests.ports import free_port
from tests.remoting.certs import CertificateSet

ROUTE = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})


class _Collect(ProcessProtocol):
    """All a child writes (stdout and stderr) and its exit code; its stdin closed at once, so
    ``openssl s_client`` ends after the handshake."""

    def __init__(self, done: Deferred[tuple[bytes, int]]) -> None:
        self.done, self.output = done, b""

    def connectionMade(self) -> None:
        self.transport.closeStdin()  # type: ignore[union-attr]

    def childDataReceived(self, fd: int, data: bytes) -> None:
        self.output += data

    def processEnded(self, reason: Failure) -> None:
        self.done.callback((self.output, getattr(reason.value, "exitCode", -1)))


class TLSTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.certs = CertificateSet(os.path.abspath(self.mktemp()))

    async def cluster(self, mode: str, client_ca: bool = False) -> None:
        """A name server and a broker serving TLS in *mode*: with a self-signed certificate, or with
        *client_ca* a CA-signed one and client certificates required. :attr:`trust` is what clients trust."""
        root = self.mktemp()
        if client_ca:
            tls = ServerTLS(self.certs.server, self.certs.server_key, self.certs.ca, mode)
            self.trust = self.certs.ca
        else:
            tls = ServerTLS(self.certs.self_signed, self.certs.self_signed_key, None, mode)
            self.trust = self.certs.self_signed
        namesrv = NamesrvService(reactor, "tcp:0:interface=127.0.0.1", os.path.join(root, "ns"), tls=tls)
        namesrv.startService()
        self.addCleanup(namesrv.stopService)
        await namesrv.when_started()
        self.namesrv = f"127.0.0.1:{namesrv.listening_port.getHost().port}"  # type: ignore[union-attr]
        port = free_port()
        self.broker = f"127.0.0.1:{port}"
        config = BrokerConfig(listen=f"tcp:{port}:interface=127.0.0.1", advertised_address=self.broker,
                              namesrv_addr=[self.namesrv], ha_listen=f"tcp:{free_port()}:interface=127.0.0.1")
        store = MessageStoreConfig(store_path_root_dir=os.path.join(root, "broker"),
                                   mapped_file_size_commit_log=1024 * 1024, mapped_file_size_consume_queue=6000,
                                   max_hash_slot_num=100, max_index_num=400)
        broker = BrokerService(reactor, config, store, tls=tls)  # enforcing: it registers over TLS too
        broker.startService()
        self.addCleanup(broker.stopService)
        await broker.when_started()

    def remoting(self, tls: ClientTLS | None) -> RemotingClient:
        client = RemotingClient(reactor, tls=tls)
        self.addCleanup(client.close)
        return client

    async def send_and_pull(self, **client: Any) -> None:
        """rocketpy's producer and pull consumer, with *client* options, through the name server and broker."""
        producer = Producer("PG", self.namesrv, reactor, **client)
        await producer.start()
        self.addCleanup(producer.shutdown)
        result = await producer.send(new_message("TopicTLS", b"secret"))
        consumer = PullConsumer("CG", self.namesrv, reactor, **client)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        pulled = await consumer.pull(result.queue, "*", result.queue_offset, 1)
        self.assertEqual(pulled.status, PullStatus.FOUND)
        self.assertEqual([m.body for m in pulled.messages], [b"secret"])

    async def assert_refused(self, client: RemotingClient, address: str) -> None:
        try:
            await client.invoke_sync(address, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                      {"topic": "TBW102"}), 3)
        except RemotingError:
            return
        self.fail(f"{address} answered")

    async def test_enforcing(self) -> None:
        """Enforcing: rocketpy's clients work over TLS; a plain client gets no answer and is logged once."""
        await self.cluster("enforcing")
        await self.send_and_pull(tls=True, tls_ca=self.trust)
        plain = self.remoting(None)
        with capturedLogs() as logs:
            for address in (self.namesrv, self.broker):
                await self.assert_refused(plain, address)
        self.assertEqual(len([e for e in logs if "TLS is enforced" in e.get("log_format", "")]), 2)

    async def test_permissive(self) -> None:
        """Permissive: TLS and plain clients on the same ports."""
        await self.cluster("permissive")
        await self.send_and_pull(tls=True, tls_ca=self.trust)
        await self.send_and_pull()
        for tls in (None, ClientTLS(ca=self.trust)):
            for address in (self.namesrv, self.broker):
                response = await self.remoting(tls).invoke_sync(address, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC if address == self.namesrv else RequestCode.GET_BROKER_RUNTIME_INFO,
                    {"topic": "TBW102"}), 3)
                self.assertEqual(response.code, ResponseCode.SUCCESS)

    async def test_disabled(self) -> None:
        """Disabled: plain only; a TLS client fails."""
        await self.cluster("disabled")
        await self.send_and_pull()
        await self.assert_refused(self.remoting(ClientTLS(ca=self.trust)), self.namesrv)

    async def test_untrusted_server_is_refused(self) -> None:
        """A client trusting another CA does not talk to the server."""
        await self.cluster("enforcing")
        await self.assert_refused(self.remoting(ClientTLS(ca=self.certs.ca)), self.namesrv)

    async def test_client_certificates(self) -> None:
        """With a client CA the servers want a certificate it signed: without one the client is refused."""
        await self.cluster("enforcing", client_ca=True)
        await self.assert_refused(self.remoting(ClientTLS(ca=self.certs.ca)), self.namesrv)
        with_cert = ClientTLS(ca=self.certs.ca, cert=self.certs.client, key=self.certs.client_key)
        await self.send_and_pull(tls=with_cert)

    async def test_openssl_s_client(self) -> None:
        """``openssl s_client`` completes a verified handshake with the broker's port."""
        openssl = shutil.which("openssl")
        if openssl is None:
            raise SkipTest("the openssl command is not installed")
        await self.cluster("enforcing")
        host, port = self.broker.split(":")
        done: Deferred[tuple[bytes, int]] = Deferred()
        reactor.spawnProcess(
            _Collect(done), openssl, [openssl, "s_client", "-connect", f"{host}:{port}", "-CAfile", self.trust,
                                      "-verify_return_error", "-verify_ip", "127.0.0.1"], env=dict(os.environ))
        output, code = await done
        text = output.decode("utf-8", "replace")
        self.assertEqual(code, 0, text)
        self.assertIn("Verify return code: 0 (ok)", text)
        self.assertRegex(text, r"subject=\s*CN\s*=\s*127\.0\.0\.1")


class _Recording(Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.lost = False

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost = True


class FirstByteSwitchTests(SynchronousTestCase):
    """The permissive/enforcing switch in memory: which protocol gets the connection, and when it is dropped."""

    def connect(self, plain_allowed: bool) -> tuple[Any, StringTransport, dict[str, _Recording], Clock]:
        built: dict[str, _Recording] = {}

        def factory(kind: str) -> Factory:
            return Factory.forProtocol(lambda: built.setdefault(kind, _Recording()))

        clock = Clock()
        switch = _SwitchFactory(factory("plain"), factory("tls"), plain_allowed, clock)
        protocol = switch.buildProtocol(IPv4Address("TCP", "10.0.0.1", 4000))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport, built, clock

    def test_first_byte_picks_the_protocol(self) -> None:
        """0x16 goes to TLS, anything else to the plain protocol (permissive); later data follows."""
        for first, kind in ((b"\x16\x03\x01", "tls"), (b"\x00\x00\x00\x10", "plain")):
            protocol, transport, built, clock = self.connect(plain_allowed=True)
            protocol.dataReceived(first)
            protocol.dataReceived(b"more")
            self.assertEqual(list(built), [kind])
            self.assertEqual(built[kind].data, first + b"more")
            self.assertIs(built[kind].transport, transport)
            self.assertEqual(clock.getDelayedCalls(), [])
            protocol.connectionLost(Failure(ConnectionDone()))
            self.assertTrue(built[kind].lost)

    def test_enforcing_drops_plain(self) -> None:
        """Enforcing: a plain first byte aborts the connection, logged once."""
        protocol, transport, built, _ = self.connect(plain_allowed=False)
        with capturedLogs() as logs:
            protocol.dataReceived(b"\x00\x00\x00\x10")
            protocol.dataReceived(b"\x00\x00\x00\x10")
        self.assertEqual(built, {})
        self.assertTrue(transport.disconnecting)
        self.assertEqual([e["peer"] for e in logs if "TLS is enforced" in e["log_format"]], ["10.0.0.1:4000"])

    def test_silent_client_is_dropped(self) -> None:
        """A connection that sends nothing is closed after the first-byte timeout; none is left behind."""
        protocol, transport, _, clock = self.connect(plain_allowed=True)
        clock.advance(FIRST_BYTE_TIMEOUT - 1)
        self.assertFalse(transport.disconnecting)
        clock.advance(1)
        self.assertTrue(transport.disconnecting)
        protocol.connectionLost(Failure(ConnectionDone()))
        self.assertEqual(clock.getDelayedCalls(), [])
