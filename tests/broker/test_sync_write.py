"""A lone SYNC_FLUSH send's answer written by the native sync thread itself while the lean reactor sleeps
(rocketpy/_speedups_syncwrite.h): a real broker on a ``LeanEPollReactor`` with its C turn (in a thread of its
own, as :mod:`rocketpy.blocking` runs one) and a raw socket client on loopback, so that what reaches the
client is read byte for byte. Every request gets one answer, in request order, with lone and pipelined
sends mixed on one connection; a closed connection's answer is not written (not to a new connection on the
same descriptor either); a failed sync and a timeout leave the answer to the reactor, once."""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher
from twisted.trial.unittest import SkipTest, SynchronousTestCase
from zope.interface import provider

from rocketpy.blocking import ReactorThread
from rocketpy.broker.controller import BrokerService
from rocketpy.client import Producer, new_message
from rocketpy.remoting.codec import decode, encode
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.aioflush import AioFdSync
from rocketpy.store.service import StoreService
from rocketpy.testing import BrokerFixture
from tests.broker.test_sync_answer import Held

TOPIC = "SyncW"


class RawClient:
    """SEND_MESSAGE requests written to a socket as they are, the answers read back one frame at a time."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._opaque = 0
        self._buffer = b""

    def request(self, body: bytes = b"x" * 1024) -> tuple[int, bytes]:
        """A new request's opaque and frame."""
        self._opaque += 1
        fields = {"producerGroup": "PG_RAW", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                  "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
                  "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
        command = RemotingCommand.request(RequestCode.SEND_MESSAGE, fields, body)
        command.opaque = self._opaque
        return self._opaque, encode(command)

    def send(self, count: int = 1) -> list[int]:
        """``count`` requests in one write (pipelined when more than one); their opaques."""
        made = [self.request() for _ in range(count)]
        self.sock.sendall(b"".join(frame for _, frame in made))
        return [opaque for opaque, _ in made]

    def _read(self, size: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self._buffer) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return False
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("the broker closed the connection")
            self._buffer += data
        return True

    def answer(self, timeout: float = 10.0) -> RemotingCommand:
        if not self._read(4, timeout):
            raise AssertionError("no answer")
        (length,) = struct.unpack(">I", self._buffer[:4])
        if not self._read(4 + length, timeout):
            raise AssertionError("a partial answer")
        frame, self._buffer = self._buffer[4:4 + length], self._buffer[4 + length:]
        return decode(frame)

    def answers(self, count: int) -> list[tuple[int, int]]:
        """The next ``count`` answers' (opaque, code)."""
        return [(a.opaque, a.code) for a in (self.answer() for _ in range(count))]

    def silent(self, wait: float = 0.3) -> bool:
        """True when nothing more arrives within ``wait`` seconds."""
        return not self._buffer and not self._read(1, wait)

    def close(self) -> None:
        self.sock.close()


class LeanBroker(SynchronousTestCase):
    """A SYNC_FLUSH broker (with :attr:`options`) on a lean reactor in a thread, its topic warm."""

    options: dict[str, str] = {}

    def setUp(self) -> None:
        self.thread = ReactorThread()
        self.addCleanup(self.thread.stop)
        reactor = self.thread.reactor
        if getattr(reactor, "sleeping_turn", None) is None:
            raise SkipTest("no lean reactor with its C turn here")
        self.fixture = BrokerFixture(reactor, {"flush-disk-type": "SYNC_FLUSH", **self.options})
        namesrv = self.call(self.fixture.start)
        self.addCleanup(self.call, self.fixture.stop)
        assert self.fixture._tree is not None
        broker = self.fixture._tree.getServiceNamed("broker")
        assert isinstance(broker, BrokerService) and isinstance(broker.store, StoreService)
        self.broker, self.store = broker, broker.store
        aio = self.store._aio
        if aio is None or aio.direct is None:
            raise SkipTest("no native sync thread writing answers here (compiled module, Linux)")
        self.aio: AioFdSync = aio
        producer = Producer("PG_WARM", namesrv, reactor)
        self.call(producer.start)
        for _ in range(8):  # the topic, its queues' files, the commit log's first zeros
            self.call(producer.send, new_message(TOPIC, b"warm"))
        self.call(producer.shutdown)
        self.until(lambda: not self.store._populating)
        self.errors: list[Any] = []

        @provider(ILogObserver)
        def observe(event: dict[str, Any]) -> None:
            if "log_failure" in event or event.get("log_level") in (LogLevel.error, LogLevel.critical):
                self.errors.append(event)
        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)

    def call(self, f: Callable[..., Any], *args: Any) -> Any:
        """f(*args) on the broker's reactor thread, its (Deferred or coroutine) result."""
        def run() -> Any:
            result = f(*args)
            return Deferred.fromCoroutine(result) if hasattr(result, "send") else result
        return self.thread.call(run, timeout=30)

    def until(self, condition: Callable[[], bool], limit: float = 10.0) -> None:
        """Wait until ``condition()`` holds, checked on the broker's reactor every 2 ms."""
        loops: list[LoopingCall] = []

        def check() -> None:
            if condition():
                loops[0].stop()

        def wait() -> Deferred[LoopingCall]:
            loop = LoopingCall(check)
            loop.clock = self.thread.reactor
            loops.append(loop)
            return loop.start(0.002)
        try:
            self.thread.call(wait, timeout=limit)
        except TimeoutError:
            self.call(lambda: loops[0].stop() if loops[0].running else None)
            raise AssertionError("timed out waiting") from None

    def client(self, code: int = ResponseCode.SUCCESS) -> RawClient:
        client = RawClient(self.fixture.broker_addr)
        self.addCleanup(client.close)
        opaque = client.send()  # the connection's first request: the full path (its peer noted)
        self.assertEqual(client.answers(1), [(opaque[0], code)])
        return client

    def written(self) -> int:
        return int(self.call(lambda: self.aio.written_by_thread))

    def hold(self) -> Held:
        held: Held = self.call(Held, self.aio)
        self.addCleanup(self.call, held.release)
        return held


class SyncMasterTests(LeanBroker):
    """SYNC_MASTER: a put waits for its slave too (a put hook), so its answer is never the sync thread's."""

    options = {"broker-role": "SYNC_MASTER"}

    def test_sync_master_answers_on_the_reactor(self) -> None:
        """No slave: every lone send answered SLAVE_NOT_AVAILABLE once, none by the sync thread."""
        client = self.client(ResponseCode.SLAVE_NOT_AVAILABLE)
        for _ in range(10):
            opaque = client.send()
            self.assertEqual(client.answers(1), [(opaque[0], ResponseCode.SLAVE_NOT_AVAILABLE)])
        self.assertTrue(client.silent())
        self.assertEqual(self.written(), 0)


class SyncWriteTests(LeanBroker):

    def test_lone_sends_answered_once_by_the_sync_thread(self) -> None:
        """Sends one at a time: each answered once, SUCCESS; most of them by the sync thread."""
        client = self.client()
        before = self.written()
        for _ in range(40):
            opaque = client.send()
            self.assertEqual(client.answers(1), [(opaque[0], ResponseCode.SUCCESS)])
        self.assertTrue(client.silent())
        self.assertGreater(self.written() - before, 0, "no answer written by the sync thread")
        self.assertEqual(self.call(lambda: self.aio.answers), [])
        self.assertEqual(self.errors, [])

    def test_answer_written_when_its_sync_ends(self) -> None:
        """A held sync: no answer before it ran; once it ran the thread writes the answer (where the reactor was
        asleep then: a few tries), and the store's bookkeeping afterwards writes nothing more."""
        client = self.client()
        by_thread = []
        for _ in range(10):
            held = self.hold()
            before = self.written()
            opaque = client.send()
            self.until(lambda: len(self.aio.answers or ()) == 1 and len(held.syncs) == 1)
            self.assertTrue(client.silent(0.1), "answered before its sync ran")
            self.call(held.submit)
            self.assertEqual(client.answers(1), [(opaque[0], ResponseCode.SUCCESS)])
            self.until(lambda: not self.aio._waiting)
            self.assertTrue(client.silent(0.05))
            self.assertGreaterEqual(self.call(lambda: self.store._store.flushed_offset),
                                    self.call(lambda: self.store._store.max_physical_offset))
            self.call(held.release)
            by_thread.append(self.written() - before)
            if by_thread[-1]:
                break
        self.assertIn(1, by_thread, "never written by the sync thread")
        self.assertLessEqual(set(by_thread), {0, 1})

    def test_mixed_pipelined_and_lone_sends_in_order(self) -> None:
        """Lone sends, pipelined runs (one write, one read) and a lone send written before the previous one was
        answered, on one connection: every request answered once, in request order."""
        client = self.client()
        sent: list[int] = []
        for count in (1, 3, 1, 1, 5, 1, 2, 1, 1, 8, 1):
            sent += client.send(count)
            if count == 2:  # another one before the answers: the connection then waits for three
                sent += client.send(1)
                count = 3
            self.assertEqual(client.answers(count), [(o, ResponseCode.SUCCESS) for o in sent[-count:]])
        self.assertTrue(client.silent())
        self.assertEqual(self.errors, [])

    def test_closed_connection(self) -> None:
        """A connection closed while its send's sync runs: the thread does not write its answer (nor to the next
        connection, likely on the same descriptor), which gets only its own answers."""
        first = self.client()
        held = self.hold()
        before = self.written()
        first.send()
        self.until(lambda: len(self.aio.answers or ()) == 1 and len(held.syncs) == 1)
        channels = self.call(lambda: len(self.broker.server._channels))
        first.close()
        self.until(lambda: len(self.broker.server._channels) < channels)
        second = RawClient(self.fixture.broker_addr)
        self.addCleanup(second.close)
        opaque = second.send()  # its put waits for the held sync's successor
        self.until(lambda: len(self.aio._waiting) >= 1)
        self.call(held.release)
        self.assertEqual(second.answers(1), [(opaque[0], ResponseCode.SUCCESS)])
        self.until(lambda: not self.aio._waiting)
        self.assertEqual(self.written() - before, 0, "the closed connection's answer was written")
        for _ in range(5):
            opaque = second.send()
            self.assertEqual(second.answers(1), [(opaque[0], ResponseCode.SUCCESS)])
        self.assertTrue(second.silent())

    def test_failed_sync(self) -> None:
        """A sync that fails writes nothing: the answer comes once, after a later flush made the put durable."""
        client = self.client()
        held = self.hold()
        opaque = client.send()
        self.until(lambda: len(held.syncs) == 1)
        read, write = os.pipe()  # fdatasync of a pipe: EINVAL, as a kernel refusing FDSYNC
        self.addCleanup(os.close, read)
        self.addCleanup(os.close, write)
        before = self.written()
        self.call(held.submit, write)
        self.assertEqual(client.answers(1), [(opaque[0], ResponseCode.SUCCESS)])
        self.assertTrue(client.silent())
        self.assertIsNone(self.call(lambda: self.store._aio), "the refused native sync stays on")
        self.assertEqual(self.call(self.aio._written, self.aio._handle) - before, 0)
        self.assertGreaterEqual(self.call(lambda: self.store._store.flushed_offset),
                                self.call(lambda: self.store._store.max_physical_offset))

    def test_timeout(self) -> None:
        """A sync still running at sync_flush_timeout: FLUSH_DISK_TIMEOUT once, and its end writes nothing."""
        client = self.client()
        self.call(lambda: setattr(self.store._completion, "_timeout", 0.05))
        held = self.hold()
        before = self.written()
        opaque = client.send()
        self.assertEqual(client.answers(1), [(opaque[0], ResponseCode.FLUSH_DISK_TIMEOUT)])
        self.call(held.release)
        self.until(lambda: not self.aio._waiting)
        self.assertTrue(client.silent())
        self.assertEqual(self.written() - before, 0)
        self.call(lambda: setattr(self.store._completion, "_timeout", 5.0))
        opaque = client.send()
        self.assertEqual(client.answers(1), [(opaque[0], ResponseCode.SUCCESS)])
