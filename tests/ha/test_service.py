"""``HAService`` (master side) on a Clock, a fake store and StringTransport links."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.ha.config import HAConfig, ha_listen_endpoint
from rocketpy.ha.protocol import ACK, FrameReader, MasterProtocol
from rocketpy.ha.service import HAService
from rocketpy.store.status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus
from tests.fakes import FakeMasterStore

FILE = 1000
CONFIG = HAConfig(transfer_batch_size=64, slave_fall_behind_max=500)


def appended(next_offset: int) -> PutMessageResult:
    append = AppendMessageResult(AppendMessageStatus.PUT_OK, next_offset - 10, 10, [], 0, 1, 0)
    return PutMessageResult(PutMessageStatus.PUT_OK, append)


class Link:
    """A slave link as the master sees it."""

    def __init__(self, service: HAService) -> None:
        self.proto: MasterProtocol = service.build_protocol()
        self.transport = StringTransport()
        self.proto.makeConnection(self.transport)
        self.reader = FrameReader()

    def ack(self, offset: int) -> None:
        self.proto.dataReceived(ACK.pack(offset))

    def frames(self) -> list[tuple[int, bytes]]:
        frames = self.reader.feed(self.transport.value())
        self.transport.clear()
        return frames


class TransferTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.store = FakeMasterStore(base=2 * FILE, log=bytes(range(256)) * 4)  # 1024 bytes: into the 4th file
        self.service = HAService(self.clock, self.store, CONFIG, FILE, None, sync_master=True)

    def test_empty_slave_starts_at_last_file(self) -> None:
        """A report of 0 starts at the master's last file; blocks never cross a file and hold <= 64 bytes."""
        link = Link(self.service)
        link.ack(0)
        frames = link.frames()
        self.assertEqual(frames[0][0], 3 * FILE)
        self.assertTrue(all(len(data) <= 64 for _, data in frames))
        self.assertEqual(b"".join(d for _, d in frames), bytes(self.store.log[FILE:]))
        self.assertEqual(frames[-1][0] + len(frames[-1][1]), self.store.max_physical_offset)

    def test_starts_at_reported_offset_and_stops_at_file_end(self) -> None:
        """A slave at 2990 gets 10 bytes (end of that file), then the next file from its start."""
        link = Link(self.service)
        link.ack(2 * FILE + 990)
        frames = link.frames()
        log = bytes(self.store.log)
        self.assertEqual(frames[:2], [(2990, log[990:1000]), (3000, log[1000:1024])])

    def test_new_data_wakes_the_transfer(self) -> None:
        """Once caught up nothing is sent; an append is sent at once."""
        link = Link(self.service)
        link.ack(self.store.max_physical_offset)
        self.assertEqual(link.frames(), [])
        end = self.store.max_physical_offset
        self.store.append(b"new")
        self.assertEqual(link.frames(), [(end, b"new")])

    def test_idle_heartbeat(self) -> None:
        """5 s without a frame gives an empty frame at the next offset; none before the first report."""
        link = Link(self.service)
        self.clock.advance(5)
        self.assertEqual(link.frames(), [])
        link.ack(self.store.max_physical_offset)
        self.clock.advance(5)
        self.assertEqual(link.frames(), [(self.store.max_physical_offset, b"")])

    def test_one_read_at_a_time_and_backpressure(self) -> None:
        """Reads are sequential; a paused transport stops them until resumed."""
        self.store.manual_reads = True
        link = Link(self.service)
        link.ack(3 * FILE)
        self.assertEqual(len(self.store.manual), 1)
        self.store.append(b"more")
        self.assertEqual(len(self.store.manual), 1)
        producer = link.transport.producer
        assert producer is not None
        producer.pauseProducing()
        offset, size, d = self.store.manual.pop()
        d.callback(bytes(self.store.log[offset - 2000:offset - 2000 + size]))
        self.assertEqual(self.store.manual, [])
        producer.resumeProducing()
        self.assertEqual(len(self.store.manual), 1)

    def test_ack_beyond_log_drops(self) -> None:
        """After the first report, an ack past the master's end drops the slave."""
        link = Link(self.service)
        link.ack(self.store.max_physical_offset)
        link.ack(self.store.max_physical_offset + 1)
        self.assertTrue(link.transport.disconnected)

    def test_slave_ahead_is_kept_and_warned(self) -> None:
        """A first report past the master's end is logged; the slave stays and gets only heartbeats."""
        link = Link(self.service)
        with capturedLogs() as events:
            link.ack(self.store.max_physical_offset + 100)
        self.assertEqual([e["log_level"] for e in events if "ahead" in e["log_format"]], [LogLevel.warn])
        self.clock.advance(5)
        self.assertEqual(link.frames(), [(self.store.max_physical_offset + 100, b"")])
        self.assertFalse(link.transport.disconnecting)
        self.assertEqual(self.service.push_to_slave_max_offset, 0)  # acknowledges nothing

    def test_missing_data_drops(self) -> None:
        """A slave asking for bytes the master no longer has is dropped."""
        link = Link(self.service)
        link.ack(FILE)
        self.assertTrue(link.transport.disconnected)

    def test_slave_lags(self) -> None:
        """A slave's lag: the bytes it lacks, and the seconds since it last had everything."""
        link = Link(self.service)
        end = self.store.max_physical_offset
        self.clock.advance(3)
        link.ack(end - 24)
        [(address, behind, seconds)] = self.service.slave_lags()
        self.assertEqual((address, behind, seconds), ("192.168.1.1:54321", 24, 3.0))
        link.ack(end)
        self.assertEqual(self.service.slave_lags(), [(address, 0, 0.0)])
        self.store.append(b"new")
        self.clock.advance(2)
        self.assertEqual(self.service.slave_lags(), [(address, 3, 2.0)])

    def test_slave_offsets(self) -> None:
        """Each slave's last report, -1 until the first one is taken."""
        first, second = Link(self.service), Link(self.service)
        self.assertEqual(self.service.slave_offsets, [-1, -1])
        second.ack(3 * FILE)
        self.assertEqual(self.service.slave_offsets, [-1, 3 * FILE])
        first.ack(0)
        self.assertEqual(self.service.slave_offsets, [0, 3 * FILE])
        first.ack(3 * FILE + 10)
        self.assertEqual(self.service.slave_offsets, [3 * FILE, 3 * FILE + 10])

    def test_lost_link_leaves_no_timer(self) -> None:
        """A closed link is forgotten and its heartbeat timer cancelled; the store's appends call the HA
        listener only while a slave is connected."""
        self.assertFalse(self.service._arrival.wanted)
        link = Link(self.service)
        self.assertEqual(self.service.slave_count, 1)
        self.assertTrue(self.service._arrival.wanted)
        link.proto.connectionLost()
        self.assertEqual((self.service.slave_count, self.clock.getDelayedCalls()), (0, []))
        self.assertFalse(self.service._arrival.wanted)

    def test_connected_and_lost_are_logged_with_the_slave(self) -> None:
        """Both lines name the slave's address; the second says how far it had acknowledged."""
        with capturedLogs() as events:
            link = Link(self.service)
            link.ack(2 * FILE + 100)
            link.proto.connectionLost()
        lines = [formatEvent(e) for e in events if "HA slave 192.168.1.1:54321" in formatEvent(e)]
        self.assertEqual(lines, ["HA slave 192.168.1.1:54321 connected (1 now)",
                                 "HA slave 192.168.1.1:54321 lost, acknowledged up to 2100 (0 left)"])


class SyncMasterTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.store = FakeMasterStore(log=b"x" * 600)
        self.service = HAService(self.clock, self.store, CONFIG, FILE, None, sync_master=True)
        [hook] = self.store.put_hooks
        # a SYNC_MASTER's hook answers every put that waits with a Deferred
        self.hook = cast(Callable[[PutMessageResult], Deferred[PutMessageStatus]], hook)

    def test_no_slave(self) -> None:
        """Without a slave a SYNC_MASTER put is SLAVE_NOT_AVAILABLE at once."""
        self.assertEqual(self.successResultOf(self.hook(appended(600))), PutMessageStatus.SLAVE_NOT_AVAILABLE)

    def test_slave_too_far_behind(self) -> None:
        """A slave more than slave_fall_behind_max behind counts as not available."""
        link = Link(self.service)
        link.ack(50)
        self.assertEqual(self.successResultOf(self.hook(appended(600))), PutMessageStatus.SLAVE_NOT_AVAILABLE)
        link.ack(150)
        self.assertNoResult(self.hook(appended(600)))

    def test_grouped_waiters(self) -> None:
        """One ack fires every waiter it covers, in one go; the others keep waiting."""
        link = Link(self.service)
        link.ack(500)
        waits = [self.hook(appended(n)) for n in (520, 560, 600)]
        for d in waits:
            self.assertNoResult(d)
        link.ack(560)
        self.assertEqual([self.successResultOf(d) for d in waits[:2]], [PutMessageStatus.PUT_OK] * 2)
        self.assertNoResult(waits[2])
        self.assertEqual(self.service.push_to_slave_max_offset, 560)

    def test_slave_timeout(self) -> None:
        """No ack within 3 s: FLUSH_SLAVE_TIMEOUT."""
        link = Link(self.service)
        link.ack(500)
        d = self.hook(appended(600))
        self.clock.advance(2.9)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        self.assertEqual(self.successResultOf(d), PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def test_async_master_has_no_hook(self) -> None:
        """An ASYNC_MASTER registers no put hook: sends do not wait."""
        store = FakeMasterStore()
        HAService(self.clock, store, CONFIG, FILE, None, sync_master=False)
        self.assertEqual((store.put_hooks, len(store.listeners)), ([], 1))

    def test_stop_ends_waiters_and_links(self) -> None:
        """Stopping drops the links and answers pending waiters FLUSH_SLAVE_TIMEOUT."""
        self.service.startService()
        link = Link(self.service)
        link.ack(500)
        d = self.hook(appended(600))
        stopped = self.service.stopService()
        self.assertTrue(link.transport.disconnected)
        link.proto.connectionLost()
        self.successResultOf(stopped)
        self.assertEqual(self.successResultOf(d), PutMessageStatus.FLUSH_SLAVE_TIMEOUT)


class EndpointTests(SynchronousTestCase):
    def test_ha_port(self) -> None:
        """The HA endpoint is the listen port + 1; port 0 stays 0; other endpoints are refused."""
        self.assertEqual(ha_listen_endpoint("tcp:10911:interface=127.0.0.1"), "tcp:10912:interface=127.0.0.1")
        self.assertEqual(ha_listen_endpoint("tcp:port=0"), "tcp:port=0")
        self.assertRaises(ValueError, ha_listen_endpoint, "unix:/tmp/x")
