"""The ``rocketpy`` reactor (rocketpy/remoting/reactor.py): Twisted's own reactor tests on it, its inline
read's log context and errors, and ``twistd rocketpy`` running on it end to end."""

from __future__ import annotations

import os
import sys
from typing import Any

from twisted.internet import reactor as global_reactor
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.protocol import ClientFactory, Factory, Protocol
from twisted.internet.test.reactormixins import ReactorBuilder
from twisted.python import context, log
from twisted.python.failure import Failure
from twisted.trial.unittest import SkipTest, SynchronousTestCase, TestCase

from rocketpy.client import Producer, PullConsumer, PullStatus, SendStatus, new_message
from rocketpy.remoting.reactor import LeanEPollReactor
from tests.ports import free_port
from tests.processes import LogWatcher
from tests.store.test_crash import ROOT

LEAN = "rocketpy.remoting.reactor.LeanEPollReactor"


def for_lean_reactor(builder: type[ReactorBuilder]) -> dict[str, Any]:
    """Twisted's test cases of ``builder`` for the lean reactor only."""
    ours: Any = type(builder.__name__, (builder,), {"_reactors": [LEAN], "__module__": __name__})
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
        self.seen.append((data, f"{log_context['system']} {log_context.get('outer')}"))
        if b"boom" in data:
            raise ValueError("boom")

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:
        self.lost.append(reason)


class InlineReadTests(SynchronousTestCase):
    """The inline read path: the same log context and error handling as Twisted's ``_doReadOrWrite``
    (:class:`StockReadTests` runs the same test on Twisted's ``EPollReactor``)."""

    reactor_class: type[EPollReactor] = LeanEPollReactor

    def test_read_carries_the_connection_log_prefix(self) -> None:
        """Data read inline reaches the protocol under ``system`` = the connection's log prefix, in a
        copy of the log context the reactor runs in, as ``log.callWithLogger`` gives it; a
        ``dataReceived`` that raises is logged there and its connection is closed (connectionLost),
        as on the stock reactor."""
        reactor = self.reactor_class()
        seen: list[tuple[bytes, str]] = []
        lost: list[Failure] = []
        errors: list[dict[str, Any]] = []
        log.addObserver(errors.append)
        self.addCleanup(log.removeObserver, errors.append)
        port = reactor.listenTCP(0, Factory.forProtocol(lambda: _Recorder(seen, lost)), interface="127.0.0.1")
        sender: list[Any] = []

        class Sender(Protocol):
            def connectionMade(self) -> None:
                sender.append(self.transport)
                sender[0].write(b"hello")

        def step() -> None:
            if len(seen) == 1 and len(sender) == 1:
                sender[0].write(b"boom")
            if lost or reactor.seconds() > deadline:
                port.stopListening()
                reactor.stop()
            else:
                reactor.callLater(0.01, step)

        deadline = reactor.seconds() + 10
        client = ClientFactory()
        client.protocol = Sender
        reactor.connectTCP("127.0.0.1", port.getHost().port, client)
        reactor.callLater(0.01, step)
        log.callWithContext({"outer": "kept"}, reactor.run, installSignalHandlers=False)
        self.assertEqual(seen[0][0], b"hello")
        self.assertTrue(seen[0][1].startswith("_Recorder,") and seen[0][1].endswith(" kept"), seen)
        self.assertEqual(seen[1][0], b"boom")
        self.assertEqual(len(lost), 1)
        boom = [e for e in errors if e.get("isError") and e.get("failure") and e["failure"].check(ValueError)]
        self.assertEqual(len(boom), 1)
        self.assertEqual(f"{boom[0]['system']} {boom[0]['outer']}", seen[0][1])
        self.flushLoggedErrors(ValueError)




class StockReadTests(InlineReadTests):
    reactor_class = EPollReactor


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
