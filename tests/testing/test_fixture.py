"""rocketpy.testing: the in-process broker from trial, from a script and from pytest."""

from __future__ import annotations

import os
import sys
import threading

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SynchronousTestCase, TestCase

import rocketpy.testing
from rocketpy.blocking import Message, Producer, PullConsumer
from rocketpy.client import Producer as DeferredProducer
from rocketpy.client import PushConsumer, new_message
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult, SendStatus
from rocketpy.common.message import MessageExt
from rocketpy.testing import BrokerFixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(ROOT, "tests", "testing", "pytest_sample.py")


async def refused(addr: str) -> bool:
    """Whether a TCP connection to ``addr`` is refused (nothing listens there any more)."""
    host, port = addr.rsplit(":", 1)
    try:
        protocol = await TCP4ClientEndpoint(reactor, host, int(port)).connect(Factory.forProtocol(Protocol))
    except ConnectionRefusedError:
        return True
    protocol.transport.loseConnection()  # type: ignore[attr-defined]
    return False


def disk_bytes(root: str) -> int:
    """The bytes the files under ``root`` take on disk."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, files in os.walk(root) for f in files)


class BrokerFixtureTests(TestCase):
    timeout = 60

    async def test_produce_and_consume(self) -> None:
        """Inside ``async with``, a producer and a push consumer of the Deferred client work through the
        fixture's name server, on a store of a few MB; afterwards its ports refuse connections and its
        directory is gone."""
        fixture = BrokerFixture(reactor)
        async with fixture as namesrv_addr:
            self.assertEqual(namesrv_addr, fixture.namesrv_addr)
            root = fixture.root
            assert root is not None
            producer = DeferredProducer("PG", namesrv_addr, reactor)
            await producer.start()
            sent = await producer.send(new_message("Orders", b"order-1", tags="new"))
            await producer.shutdown()
            self.assertEqual(sent.status, SendStatus.SEND_OK)
            received: Deferred[MessageExt] = Deferred()

            def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
                if not received.called:
                    received.callback(msgs[0])
                return ConsumeResult.CONSUME_SUCCESS

            consumer = PushConsumer("CG", namesrv_addr, reactor)
            consumer.subscribe("Orders", "new")
            consumer.register_listener(listener)
            await consumer.start()
            message = await received
            await consumer.shutdown()
            self.assertEqual((message.body, message.msg_id), (b"order-1", sent.offset_msg_id))
            self.assertLess(disk_bytes(root), 8 * 1024 * 1024)
        self.assertFalse(os.path.exists(root))
        for addr in (fixture.namesrv_addr, fixture.broker_addr):
            self.assertTrue(await refused(addr), addr)

    async def test_options(self) -> None:
        """``options`` are ``twistd rocketpy`` options, by their long names."""
        async with BrokerFixture(reactor, {"broker-name": "orders-broker"}) as namesrv_addr:
            producer = DeferredProducer("PG", namesrv_addr, reactor)
            await producer.start()
            sent = await producer.send(new_message("Named", b"x"))
            await producer.shutdown()
        self.assertEqual(sent.queue.broker_name, "orders-broker")

    async def test_failed_start_cleans_up(self) -> None:
        """A start that fails (a bad option) raises, and leaves no directory behind."""
        fixture = BrokerFixture(reactor, {"flush-disk-type": "NEVER"})
        with self.assertRaises(Exception) as raised:
            await fixture.start()
        self.assertIn("--flush-disk-type", str(raised.exception))
        self.assertIsNone(fixture.root)


class BlockingBrokerTests(SynchronousTestCase):
    def test_script(self) -> None:
        """``with rocketpy.testing.broker()``: a script sends and pulls back with the blocking client; once
        the block ends, the broker's thread pools are gone."""
        before = {t.ident for t in threading.enumerate()}
        with rocketpy.testing.broker() as namesrv_addr:
            self.assertTrue({t.name for t in threading.enumerate()} >= {"PoolThread-rocketpy-store-0"})
            with Producer("PG", namesrv_addr) as producer:
                sent = producer.send(Message("Script", b"hello"))
            with PullConsumer("CG", namesrv_addr) as consumer:
                pulled = consumer.pull(sent.queue, "*", 0)
        self.assertEqual([m.body for m in pulled.messages], [b"hello"])
        left = [t.name for t in threading.enumerate() if t.ident not in before and t.name != "rocketpy-reactor"]
        self.assertEqual(left, [])


class PytestTests(TestCase):
    timeout = 120

    async def test_pytest_fixture(self) -> None:
        """A user's pytest file gets a working, fresh broker per test from the ``rocketpy_broker`` fixture."""
        # -p loads this checkout's plugin (the installed entry point may belong to another checkout).
        args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:rocketpy",
                "-p", "rocketpy.testing.pytest_plugin", SAMPLE]
        env = {**os.environ, "PYTHONPATH": ROOT}
        out, err, code = await getProcessOutputAndValue(sys.executable, args, env=env, path=self.mktemp_dir())
        self.assertEqual(code, 0, (out + err).decode(errors="replace")[-3000:])
        self.assertIn(b"2 passed", out)

    def mktemp_dir(self) -> str:
        path = self.mktemp()
        os.makedirs(path)
        return path
