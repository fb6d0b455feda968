"""``HAClient`` (slave side) on a Clock, a fake store and StringTransport links."""

from __future__ import annotations

import socket

from twisted.internet import reactor
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from rocketpy.ha.client import HAClient
from rocketpy.ha.config import HAConfig
from rocketpy.ha.protocol import ACK, SlaveProtocol, encode_frame
from tests.fakes import FakeSlaveStore
from tests.ha.test_replication import until


class ClientTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.store = FakeSlaveStore()
        self.client = HAClient(self.reactor, self.store, HAConfig(read_buffer_size=100))

    def connect(self) -> tuple[SlaveProtocol, StringTransport]:
        link = SlaveProtocol(self.client, self.reactor, 5.0, 20.0)
        transport = StringTransport()
        link.makeConnection(transport)
        return link, transport

    def reports(self, transport: StringTransport) -> list[int]:
        data = transport.value()
        transport.clear()
        return [ACK.unpack_from(data, i)[0] for i in range(0, len(data), 8)]

    def test_reports_on_connect_and_after_each_append(self) -> None:
        """The first report is the store's end; blocks are appended one at a time, each then reported."""
        self.store.max_physical_offset = 0
        link, transport = self.connect()
        self.assertEqual(self.reports(transport), [0])
        link.dataReceived(encode_frame(3000, b"a" * 10) + encode_frame(3010, b"b" * 5))
        self.assertEqual([p[:2] for p in self.store.pending], [(3000, b"a" * 10)])
        self.store.finish()
        self.assertEqual(self.reports(transport), [3010])
        self.assertEqual([p[:2] for p in self.store.pending], [(3010, b"b" * 5)])
        self.store.finish()
        self.assertEqual(self.reports(transport), [3015])
        self.assertEqual(self.store.appended, [(3000, b"a" * 10), (3010, b"b" * 5)])

    def test_offset_mismatch_drops_link(self) -> None:
        """A block not at the slave's end drops the link and is not appended."""
        self.store.max_physical_offset = 500
        link, transport = self.connect()
        link.dataReceived(encode_frame(400, b"old"))
        self.assertTrue(transport.disconnected)
        self.assertEqual(self.store.pending, [])

    def test_heartbeat_frame_not_appended(self) -> None:
        """An empty frame at the slave's end appends nothing and reports nothing."""
        self.store.max_physical_offset = 500
        link, transport = self.connect()
        self.reports(transport)
        link.dataReceived(encode_frame(500, b""))
        self.assertEqual((self.store.pending, self.reports(transport)), ([], []))

    def test_heartbeat_report(self) -> None:
        """5 s after the last report the current end is reported again."""
        self.store.max_physical_offset = 500
        _, transport = self.connect()
        self.reports(transport)
        self.reactor.advance(5)
        self.assertEqual(self.reports(transport), [500])

    def test_refused_append_drops_link(self) -> None:
        """A block the store refuses drops the link; nothing more is appended from it."""
        link, transport = self.connect()
        link.dataReceived(encode_frame(0, b"x") + encode_frame(1, b"y"))
        self.store.finish(ok=False)
        self.assertTrue(transport.disconnected)
        link.connectionLost()
        self.assertEqual((self.store.pending, self.client.connected), ([], False))

    def test_backpressure(self) -> None:
        """Over 100 queued bytes the link stops reading; it reads again once at most 50 are queued."""
        link, transport = self.connect()
        link.dataReceived(encode_frame(0, b"x" * 60) + encode_frame(60, b"y" * 60) + encode_frame(120, b"z" * 60))
        self.assertEqual(transport.producerState, "paused")  # 120 queued behind the first append
        self.store.finish()
        self.assertEqual(transport.producerState, "paused")  # 60 queued
        self.store.finish()
        self.assertEqual(transport.producerState, "producing")

    def test_redial_every_five_seconds(self) -> None:
        """Started with a master address it dials at once, and again 5 s after a failure."""
        self.client = HAClient(self.reactor, self.store, HAConfig(), "127.0.0.1:10912")
        self.client.startService()
        self.assertEqual([c[:2] for c in self.reactor.tcpClients], [("127.0.0.1", 10912)])
        connector = self.reactor.connectors[0]
        self.reactor.tcpClients[0][2].clientConnectionFailed(connector, Failure(ConnectionRefusedError()))
        self.reactor.advance(4.9)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.reactor.advance(0.1)
        self.assertEqual(len(self.reactor.tcpClients), 2)
        self.successResultOf(self.client.stopService())

    def test_black_holed_master(self) -> None:
        """A dial that never connects (a black-holed address) is given up after the 3 s connect
        timeout, not the 5 s redial interval: the redial still comes every 5 s, logged each time."""
        self.client = HAClient(self.reactor, self.store, HAConfig(), "192.0.2.1:10912")
        with capturedLogs() as events:
            self.client.startService()
            self.reactor.advance(2.9)
            self.assertFalse(self.reactor.connectors[0].stoppedConnecting)
            self.reactor.advance(0.1)
            self.assertTrue(self.reactor.connectors[0].stoppedConnecting)
            self.reactor.advance(2)
            self.assertEqual(len(self.reactor.tcpClients), 2)
            self.reactor.advance(5)
            self.assertEqual(len(self.reactor.tcpClients), 3)
        self.assertEqual(len([e for e in events if "unreachable" in e["log_format"]]), 2)
        self.successResultOf(self.client.stopService())
        self.assertEqual(self.reactor.getDelayedCalls(), [])

    def test_connect_timeout_setting(self) -> None:
        """``connect_timeout`` is its own setting, shorter or longer than the redial interval."""
        self.client = HAClient(self.reactor, self.store, HAConfig(connect_timeout=0.5), "192.0.2.1:10912")
        self.client.startService()
        self.reactor.advance(0.49)
        self.assertFalse(self.reactor.connectors[0].stoppedConnecting)
        self.reactor.advance(0.01)
        self.assertTrue(self.reactor.connectors[0].stoppedConnecting)
        self.successResultOf(self.client.stopService())

    def test_new_address_while_dialling_a_black_hole(self) -> None:
        """A new master address learnt while a dial to the old one hangs dials the new one at once."""
        self.client = HAClient(self.reactor, self.store, HAConfig(), "192.0.2.1:10912")
        self.client.startService()
        self.reactor.advance(1)
        self.client.update_master_address("127.0.0.1:10912")
        self.assertEqual([c[:2] for c in self.reactor.tcpClients], [("192.0.2.1", 10912), ("127.0.0.1", 10912)])
        self.assertTrue(self.reactor.connectors[0].stoppedConnecting)
        self.successResultOf(self.client.stopService())

    def test_new_master_address_drops_link(self) -> None:
        """A changed master address closes the current link (the redial goes to the new one)."""
        _, transport = self.connect()
        self.client.update_master_address("127.0.0.1:1")
        self.assertTrue(transport.disconnected)

    def test_learnt_address_dialled_at_once(self) -> None:
        """A running client without a master dials as soon as it learns the address."""
        self.client.startService()
        self.assertEqual(self.reactor.tcpClients, [])
        self.client.update_master_address("127.0.0.1:10912")
        self.assertEqual([c[:2] for c in self.reactor.tcpClients], [("127.0.0.1", 10912)])
        self.successResultOf(self.client.stopService())

    def test_no_dial_while_appending(self) -> None:
        """A link lost during an append is redialled only once the append is done."""
        self.client = HAClient(self.reactor, self.store, HAConfig(), "127.0.0.1:10912")
        link, _ = self.connect()
        link.dataReceived(encode_frame(0, b"x"))
        link.connectionLost()
        self.client.startService()
        self.assertEqual(self.reactor.tcpClients, [])
        self.store.finish()
        self.reactor.advance(5)
        self.assertEqual(len(self.reactor.tcpClients), 1)
        self.successResultOf(self.client.stopService())


class BlackHoleTests(TestCase):
    async def test_dial_to_a_black_hole_is_given_up(self) -> None:
        """On loopback, a listening socket whose accept queue is full drops SYNs: a dial there hangs.
        The client gives it up after ``connect_timeout`` (not the redial interval) and dials again on
        the redial beat; stopping it leaves nothing behind."""
        hole = socket.socket()
        self.addCleanup(hole.close)
        hole.bind(("127.0.0.1", 0))
        hole.listen(0)
        filler = socket.socket()  # fills the accept queue (never accepted)
        self.addCleanup(filler.close)
        filler.connect(hole.getsockname())
        port = hole.getsockname()[1]
        client = HAClient(reactor, FakeSlaveStore(), HAConfig(connect_timeout=0.2, reconnect_interval=1.0),
                          f"127.0.0.1:{port}")
        started = reactor.seconds()
        with capturedLogs() as events:
            client.startService()
            self.addCleanup(client.stopService)
            await until(lambda: len([e for e in events if "unreachable" in e["log_format"]]) >= 2)
        first, second = [e for e in events if "unreachable" in e["log_format"]][:2]
        self.assertLess(first["log_time"] - started, 0.7)  # 0.2 s, not the 1 s redial interval (the old timeout)
        self.assertGreaterEqual(second["log_time"] - first["log_time"], 0.5)  # the next dial: the redial beat
        self.assertIn("no connection within 0.2 s", first["error"])
        self.assertFalse(client.connected)
