"""The ``rocketpy`` reactor (rocketpy/remoting/reactor.py): Twisted's own reactor tests on it, its inline
read's log context and errors, and ``twistd rocketpy`` running on it end to end."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable

from twisted.internet import reactor as global_reactor
from twisted.internet.abstract import FileDescriptor
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.error import ConnectionDone, ConnectionFdescWentAway
from twisted.internet.interfaces import IHalfCloseableProtocol
from twisted.internet.protocol import ClientFactory, Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.test.reactormixins import ReactorBuilder
from twisted.python import context, log
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SkipTest, SynchronousTestCase, TestCase

from zope.interface import implementer

from rocketpy.client import Producer, PullConsumer, PullStatus, SendStatus, new_message
from rocketpy.common import speedups
from rocketpy.remoting import codec
from rocketpy.remoting.reactor import LeanEPollReactor
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import PythonLeanEPollReactor
from tests.remoting.test_lone_read import LONE_CODE, Echo, LoneProcessor, request
from tests.ports import free_port
from tests.processes import LogWatcher
from tests.store.test_crash import ROOT

LEAN = "rocketpy.remoting.reactor.LeanEPollReactor"
LEAN_PYTHON = "tests.remoting.helpers.PythonLeanEPollReactor"


def for_lean_reactor(builder: type[ReactorBuilder]) -> dict[str, Any]:
    """Twisted's test cases of ``builder`` for the lean reactor only (its C turn where built, and its Python)."""
    ours: Any = type(builder.__name__, (builder,), {"_reactors": [LEAN, LEAN_PYTHON], "__module__": __name__})
    return dict(ours.makeTestCaseClasses())


try:  # Twisted's TCP and TLS reactor tests import PyHamcrest (the test extra)
    from twisted.internet.test import test_core, test_tcp, test_threads, test_time, test_tls
except ImportError as missing:  # pragma: no cover - the test extra installs it
    _why = f"Twisted's reactor tests need PyHamcrest: {missing}"

    class TwistedReactorTests(SynchronousTestCase):
        def test_skipped(self) -> None:
            raise SkipTest(_why)
else:
    for _builder in (
        test_core.SystemEventTestsBuilder, test_time.TimeTestsBuilder, test_threads.ThreadTestsBuilder,
        test_tcp.TCP4ClientTestsBuilder, test_tcp.TCP6ClientTestsBuilder, test_tcp.TCPPortTestsBuilder,
        test_tcp.TCPConnectionTestsBuilder, test_tcp.TCP4ConnectorTestsBuilder, test_tcp.TCP6ConnectorTestsBuilder,
        test_tcp.TCPTransportTestsBuilder, test_tcp.AdoptStreamConnectionTestsBuilder, test_tcp.AbortConnectionTests,
        test_tls.SSLClientTestsMixin, test_tls.StartTLSClientTestsMixin, test_tls.TLSPortTestsBuilder,
        test_tls.AbortSSLConnectionTests,
    ):
        globals().update(for_lean_reactor(_builder))


class _Recorder(Protocol):
    """Keeps what it read and the log system it read it under; raises on ``b"boom"``."""

    def __init__(self, seen: list[tuple[bytes, str]], lost: list[Failure]) -> None:
        self.seen, self.lost = seen, lost

    def dataReceived(self, data: bytes) -> None:
        log_context = context.get(log.ILogContext)
        self.seen.append((data, f"{log_context['system']} {log_context.get('outer')} {context.get('request')}"))
        if b"boom" in data:
            raise ValueError("boom")

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        self.lost.append(reason)


@implementer(IHalfCloseableProtocol)
class _HalfClosing(_Recorder):
    """Answers ``b"bye"`` when the peer shuts its writing side, and closes then."""

    def readConnectionLost(self) -> None:
        self.seen.append((b"", "read side closed"))
        assert self.transport is not None
        self.transport.write(b"bye")
        self.transport.loseConnection()

    def writeConnectionLost(self) -> None:
        pass


class _Peer(Protocol):
    """The client end: calls ``on_connect(self)`` once connected, keeps what it receives and its loss."""

    def __init__(self, on_connect: Callable[[_Peer], None]) -> None:
        self.on_connect = on_connect
        self.received = b""
        self.lost: list[Failure] = []

    def connectionMade(self) -> None:
        self.on_connect(self)

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        self.lost.append(reason)


class _ReadPathMixin:
    """Reads on the lean reactor (its C turn where built, and its Python one) against Twisted's EPollReactor
    (StockReadTests): the same protocol calls, log context, errors and disconnections."""

    reactor_class: type[EPollReactor] = LeanEPollReactor

    def connected(self, make_server: Any, on_connect: Any, done: Any,
                  outer: Any = None) -> tuple[EPollReactor, list[dict[str, Any]]]:
        """Run a reactor of ``reactor_class`` with a loopback connection to a ``make_server()`` protocol:
        ``on_connect(reactor, client transport, peer)`` once connected, until ``done()`` (checked every 10 ms,
        10 s at most); returns the reactor and the log events (legacy log) seen meanwhile."""
        case: Any = self
        reactor = self.reactor_class()
        events: list[dict[str, Any]] = []
        log.addObserver(events.append)
        case.addCleanup(log.removeObserver, events.append)
        port = reactor.listenTCP(0, Factory.forProtocol(make_server), interface="127.0.0.1")
        peer = _Peer(lambda peer: on_connect(reactor, peer.transport, peer))
        connector: list[Any] = []

        def step() -> None:
            if done() or reactor.seconds() > deadline:
                if connector:
                    connector[0].disconnect()
                port.stopListening()
                reactor.stop()
            else:
                reactor.callLater(0.01, step)

        deadline = reactor.seconds() + 10
        client: Any = ClientFactory.forProtocol(lambda: peer)
        connector.append(reactor.connectTCP("127.0.0.1", port.getHost().port, client))
        reactor.callLater(0.01, step)
        context.call({"request": "r1"}, log.callWithContext, {"outer": "kept"}, reactor.run,
                     installSignalHandlers=False)
        return reactor, events

    def test_read_carries_the_connection_log_context(self) -> None:
        """Data reaches the protocol under ``system`` = the connection's log prefix, on the log context the
        reactor runs in and with the other context keys set around it visible, as ``log.callWithLogger``
        gives it; a ``dataReceived`` that raises is logged there and its connection is lost with that
        exception, as on the stock reactor."""
        seen: list[tuple[bytes, str]] = []
        lost: list[Failure] = []

        def on_connect(reactor: Any, transport: Any, peer: _Peer) -> None:
            transport.write(b"hello")
            reactor.callLater(0.05, transport.write, b"again")
            reactor.callLater(0.1, rename, reactor)
            reactor.callLater(0.15, transport.write, b"boom")

        def rename(reactor: Any) -> None:  # the connection's log prefix is read at every read
            for reader in reactor.getReaders():
                if isinstance(getattr(reader, "protocol", None), _Recorder):
                    reader.logstr = "renamed"

        _, events = self.connected(lambda: _Recorder(seen, lost), on_connect, lambda: bool(lost))
        case: Any = self
        case.assertEqual([data for data, _ in seen], [b"hello", b"again", b"boom"])
        case.assertTrue(seen[0][1].startswith("_Recorder,") and seen[0][1].endswith(" kept r1"), seen)
        case.assertEqual(seen[1][1], seen[0][1])
        case.assertEqual(seen[2][1], "renamed kept r1")
        case.assertEqual(len(lost), 1)
        case.assertTrue(lost[0].check(ValueError), lost[0])
        boom = [e for e in events if e.get("isError") and e.get("failure") and e["failure"].check(ValueError)]
        case.assertEqual(len(boom), 1)
        case.assertEqual(f"{boom[0]['system']} {boom[0]['outer']} r1", "renamed kept r1")
        case.flushLoggedErrors(ValueError)

    def test_half_close(self) -> None:
        """The peer shutting its writing side reaches a half-closeable protocol as ``readConnectionLost``
        (the connection stays writable); a plain protocol's connection ends with ConnectionDone."""
        seen: list[tuple[bytes, str]] = []
        lost: list[Failure] = []
        peers: list[_Peer] = []

        def on_connect(reactor: Any, transport: Any, peer: _Peer) -> None:
            peers.append(peer)
            transport.write(b"last words")
            reactor.callLater(0.05, transport.loseWriteConnection)

        self.connected(lambda: _HalfClosing(seen, lost), on_connect, lambda: bool(lost and peers[0].lost))
        case: Any = self
        case.assertEqual([data for data, _ in seen], [b"last words", b""])
        case.assertEqual(seen[1][1], "read side closed")
        case.assertEqual(peers[0].received, b"bye")
        case.assertTrue(lost[0].check(ConnectionDone), lost[0])

        seen.clear()
        lost.clear()
        self.connected(lambda: _Recorder(seen, lost),
                       lambda reactor, transport, peer: transport.loseWriteConnection(), lambda: bool(lost))
        case.assertEqual(seen, [])
        case.assertTrue(lost[0].check(ConnectionDone), lost[0])

    def test_read_failing(self) -> None:
        """A read that raises before the protocol (here ``socket.recv`` refusing a negative size) is logged
        and loses the connection with that exception; a descriptor gone (``fileno()`` is -1) loses it with
        ConnectionFdescWentAway; a connection whose loss raises is logged under its log prefix and the
        reactor runs on."""
        lost: list[Failure] = []
        case: Any = self

        def breaking(attribute: str, value: Any) -> Any:
            def on_connect(reactor: Any, transport: Any, peer: _Peer) -> None:
                server = [c for c in reactor.getReaders() if getattr(c, "protocol", None) not in (None, peer)
                          and not hasattr(c, "factory")]
                setattr(server[0], attribute, value)
                transport.write(b"data")
            return on_connect

        _, events = self.connected(lambda: _Recorder([], lost), breaking("bufferSize", -1), lambda: bool(lost))
        case.assertTrue(lost[0].check(ValueError), lost[0])
        case.assertEqual(len(case.flushLoggedErrors(ValueError)), 1)

        lost.clear()
        self.connected(lambda: _Recorder([], lost), breaking("fileno", lambda: -1), lambda: bool(lost))
        case.assertTrue(lost[0].check(ConnectionFdescWentAway), lost[0])

        class Raising(_Recorder):
            def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
                super().connectionLost(reason)
                raise ZeroDivisionError("in connectionLost")

        lost.clear()
        reactor, events = self.connected(
            lambda: Raising([], lost), lambda reactor, transport, peer: transport.loseConnection(), lambda: bool(lost))
        case.assertTrue(lost[0].check(ConnectionDone), lost[0])
        logged = [e for e in events if e.get("failure") and e["failure"].check(ZeroDivisionError)]
        case.assertEqual(len(logged), 1)
        case.assertTrue(logged[0]["system"].startswith("Raising,"), logged[0])
        case.assertEqual(len(case.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_other_events(self) -> None:
        """A read event on another descriptor (a pipe's reader) runs its ``doRead`` under ``system`` = its
        ``logPrefix()`` (called at each event) in the reactor's outer context; an exception from ``doRead`` is
        logged there and loses it with that exception; one from its loss is logged under that prefix; a
        ``logPrefix`` that raises is logged as Twisted logs it and the read still runs."""
        reactor = self.reactor_class()
        read_fd, write_fd = os.pipe()
        self.addCleanup(os.close, write_fd)  # type: ignore[attr-defined]
        os.set_blocking(read_fd, False)
        seen: list[str] = []
        lost: list[Failure] = []

        class PipeReader(FileDescriptor):
            calls = 0

            def fileno(self) -> int:
                return read_fd if not self.disconnected else -1

            def logPrefix(self) -> str:
                self.calls += 1
                if self.calls == 3:
                    raise KeyError("a buggy prefix")
                return f"pipe-{self.calls // 2}"  # a new string each time

            def doRead(self) -> None:
                data = os.read(read_fd, 10)
                log_context = context.get(log.ILogContext)
                seen.append(f"{data!r} {log_context['system']} {log_context.get('outer')} {context.get('request')}")
                if data == b"boom":
                    raise ValueError("boom")

            def connectionLost(self, reason: Failure) -> None:
                super().connectionLost(reason)
                os.close(read_fd)
                lost.append(reason)
                raise ZeroDivisionError("in connectionLost")

        reader = PipeReader(reactor)
        steps = [b"one", b"two", b"three", b"boom"]

        def step() -> None:
            if steps:
                os.write(write_fd, steps.pop(0))
                reactor.callLater(0.02, step)
            elif lost or reactor.seconds() > deadline:
                reactor.stop()
            else:
                reactor.callLater(0.02, step)

        deadline = reactor.seconds() + 10
        reactor.callWhenRunning(reader.startReading)
        reactor.callLater(0.02, step)
        events: list[dict[str, Any]] = []
        log.addObserver(events.append)
        self.addCleanup(log.removeObserver, events.append)  # type: ignore[attr-defined]
        context.call({"request": "r1"}, log.callWithContext, {"outer": "kept"}, reactor.run,
                     installSignalHandlers=False)
        case: Any = self
        case.assertEqual(seen, ["b'one' pipe-0 kept r1", "b'two' pipe-1 kept r1",
                                "b'three' (buggy logPrefix method) kept r1", "b'boom' pipe-2 kept r1"])
        case.assertEqual(len(lost), 1)
        case.assertTrue(lost[0].check(ValueError), lost[0])
        failed = {e["failure"].type: e.get("system") for e in events if e.get("failure")}
        case.assertEqual(failed, {KeyError: "(buggy logPrefix method)", ValueError: "pipe-2",
                                  ZeroDivisionError: "pipe-2"})
        case.flushLoggedErrors(KeyError, ValueError, ZeroDivisionError)

    def test_remoting_request_alone_in_a_read(self) -> None:
        """A RemotingProtocol's requests, one whole frame per read (taken by the C turn's lone_read where
        built) or two in a read, answered every way a processor's lone_request may answer (written at once,
        a frame, declined, a Deferred, a command, raising) and by another processor: the same answers in the
        same order on each reactor."""
        events: list[Any] = []
        server = RemotingServer(Clock(), idle_timeout=None)
        server.register_processor(LONE_CODE, LoneProcessor(events))  # type: ignore[arg-type]
        server.register_default_processor(Echo(events))  # type: ignore[arg-type]
        reads = [request(opaque) for opaque in range(2, 14)] + [request(20, code=11), request(21) + request(22)]
        wanted = len(reads) + 1

        def answers(received: bytes) -> list[tuple[int, str | None]]:
            out = []
            while len(received) >= 4:
                length = int.from_bytes(received[:4], "big")
                command = codec.decode(received[4:4 + length])
                out.append((command.opaque, command.remark))
                received = received[4 + length:]
            return out

        peers: list[_Peer] = []
        sent = [0]

        def answered() -> bool:  # checked every 10 ms: the next read written once the last one is answered
            if not peers:
                return False
            count = len(answers(peers[0].received))
            if count == sent[0] and sent[0] < len(reads):
                transport: Any = peers[0].transport
                transport.write(reads[sent[0]])
                sent[0] += 1
            return count >= wanted

        self.connected(server.build_channel, lambda reactor, transport, peer: peers.append(peer), answered)
        case: Any = self
        got = answers(peers[0].received)
        ways = ["processed", "later", "command", "ValueError: lone boom", "lone 0", "lone 1"]  # opaque % 6 from 2
        case.assertEqual(got, [(opaque, ways[(opaque - 2) % 6]) for opaque in range(2, 14)]
                         + [(20, "echo"), (21, "processed"), (22, "processed")])  # two in a read: no lone_request
        case.assertEqual(len(case.flushLoggedErrors(ValueError)), 2)

    def test_main_loop(self) -> None:
        """``doIteration`` replaced on the reactor is what the loop calls, with ``running and delay`` (None
        with nothing timed, else the seconds to the next timed call); an exception from it is logged as an
        unexpected error in the main loop, and the loop goes on; a thread's ``callFromThread`` wakes a
        reactor waiting with nothing timed."""
        reactor = self.reactor_class()
        polled: list[float | None] = []
        real = reactor.doIteration

        def iteration(delay: float | None) -> None:
            polled.append(delay)
            if len(polled) == 2:
                raise RuntimeError("a broken poll")
            if len(polled) == 4:
                reactor.doIteration = real  # type: ignore[method-assign]
                threading.Thread(target=reactor.callFromThread, args=(reactor.stop,)).start()
            real(delay)

        reactor.doIteration = iteration  # type: ignore[method-assign]
        guard = threading.Timer(10, reactor.callFromThread, (reactor.stop,))  # a failing loop ends too
        guard.start()
        self.addCleanup(guard.cancel)  # type: ignore[attr-defined]
        reactor.callLater(0.02, lambda: None)
        reactor.callLater(0.04, lambda: None)
        with capturedLogs() as events:
            reactor.run(installSignalHandlers=False)
        case: Any = self
        case.assertTrue(all(isinstance(delay, float) and 0 < delay <= 0.04 for delay in polled[:2]), polled)
        case.assertIn(None, polled)
        case.assertFalse(reactor.running)
        unexpected = [e for e in events if e.get("log_format") == "Unexpected error in main loop"]
        case.assertEqual(len(unexpected), 1)
        case.assertTrue(unexpected[0]["log_failure"].check(RuntimeError))
        case.assertEqual(len(case.flushLoggedErrors(RuntimeError)), 1)


class InlineReadTests(_ReadPathMixin, SynchronousTestCase):
    """:class:`_ReadPathMixin` on LeanEPollReactor: its C turn where built."""


class PythonReadTests(_ReadPathMixin, SynchronousTestCase):
    """:class:`_ReadPathMixin` on LeanEPollReactor's Python turn."""

    reactor_class = PythonLeanEPollReactor


class StockReadTests(_ReadPathMixin, SynchronousTestCase):
    """:class:`_ReadPathMixin` on Twisted's EPollReactor: the reference."""

    reactor_class = EPollReactor


class CompiledTurnTests(SynchronousTestCase):
    """Which turn runs."""

    def test_compiled_turn(self) -> None:
        """With the C module built, LeanEPollReactor's doIteration is the C turn; without it, its Python."""
        reactor = LeanEPollReactor()
        if speedups.compiled is None:
            self.assertEqual(reactor.doIteration.__func__, LeanEPollReactor.doPoll)  # type: ignore[attr-defined]
        else:
            self.assertEqual(type(reactor.doIteration.__self__).__name__, "ReactorTurn")  # type: ignore[attr-defined]
        self.assertEqual(PythonLeanEPollReactor().doIteration.__func__,  # type: ignore[attr-defined]
                         LeanEPollReactor.doPoll)


class TwistdOnLeanReactorTests(TestCase):
    """``twistd -n rocketpy`` installs the rocketpy reactor and serves the 4.x clients on it."""

    timeout = 60

    async def test_twistd_runs_the_broker_on_the_rocketpy_reactor(self) -> None:
        root = os.path.abspath(self.mktemp())
        namesrv = free_port()
        watcher = LogWatcher()
        args = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--logfile=-",
                "--pidfile=", "rocketpy", "--namesrv-listen", f"tcp:{namesrv}:interface=127.0.0.1",
                "--listen", f"tcp:{free_port()}:interface=127.0.0.1",
                "--ha-listen", f"tcp:{free_port()}:interface=127.0.0.1",
                "--store-dir", os.path.join(root, "store"), "--namesrv-config-dir", os.path.join(root, "ns"),
                "--commit-log-file-size", str(1024 * 1024), "--consume-queue-file-size", "6000",
                "--max-hash-slot-num", "100", "--max-index-num", "400", "--grpc-listen", "none", "--http", "none"]
        global_reactor.spawnProcess(watcher, sys.executable, args, env={**os.environ, "PYTHONPATH": ROOT}, path=ROOT)
        self.addCleanup(watcher.kill)
        await watcher.wait_for("broker broker-a listening")
        self.assertIn("reactor class: rocketpy.remoting.reactor.LeanEPollReactor", watcher.output)
        producer = Producer("PG", f"127.0.0.1:{namesrv}", global_reactor)
        consumer = PullConsumer("CG", f"127.0.0.1:{namesrv}", global_reactor)
        await producer.start()
        self.addCleanup(producer.shutdown)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        sent = [await producer.send(new_message("LeanTopic", b"m%d" % i)) for i in range(20)]
        self.assertEqual({s.status for s in sent}, {SendStatus.SEND_OK})
        bodies = []
        for mq in {s.queue for s in sent}:
            pulled = await consumer.pull(mq, "*", 0, 32)
            self.assertEqual(pulled.status, PullStatus.FOUND)
            bodies += [m.body for m in pulled.messages]
        self.assertEqual(sorted(bodies), sorted(b"m%d" % i for i in range(20)))
