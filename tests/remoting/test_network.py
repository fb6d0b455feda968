"""Real loopback tests (127.0.0.1, port 0): oversize frames, thread-pool processors, direct writes."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase, TestCase

from rocketpy.remoting import protocol, writenow
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codec import MAX_FRAME_LENGTH
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import RecordingProcessor


class _Watcher(Protocol):
    """A raw connection that reports when it is closed."""

    def __init__(self) -> None:
        self.lost: Deferred[None] = Deferred()

    def connectionLost(self, reason: Failure | None = None) -> None:
        self.lost.callback(None)


class LoopbackTests(TestCase):
    def setUp(self) -> None:
        from twisted.internet import reactor  # real I/O: this TestCase runs the global reactor

        self.reactor: Any = reactor
        self.processor = RecordingProcessor()
        self.server = RemotingServer(reactor)
        self.server.register_processor(10, self.processor)
        self.client = RemotingClient(reactor)

    async def listen(self) -> str:
        """Serve on 127.0.0.1, port 0; clean up server, client and port; return "ip:port"."""
        port = await TCP4ServerEndpoint(self.reactor, 0, interface="127.0.0.1").listen(self.server.factory())
        self.addCleanup(port.stopListening)
        self.addCleanup(self.server.close)
        self.addCleanup(self.client.close)
        return f"127.0.0.1:{port.getHost().port}"

    def test_oversize_frame_closes_only_its_connection(self) -> None:
        """A frame announcing 16 MiB + 1 bytes closes that connection; other clients keep working."""

        async def run() -> None:
            address = await self.listen()
            ok = await self.client.invoke_sync(address, RemotingCommand.request(10, body=b"a"), 5.0)
            self.assertEqual(ok.code, ResponseCode.SUCCESS)
            host, port = address.split(":")
            raw = await connectProtocol(TCP4ClientEndpoint(self.reactor, host, int(port)), _Watcher())
            raw.transport.write(struct.pack(">i", MAX_FRAME_LENGTH + 1) + b"x" * 64)
            await raw.lost
            again = await self.client.invoke_sync(address, RemotingCommand.request(10, body=b"b"), 5.0)
            self.assertEqual((again.code, again.body), (ResponseCode.SUCCESS, b"b"))
            self.assertEqual(len(self.server.channels), 1)

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]

    def test_thread_pool_executor(self) -> None:
        """A processor registered with a ThreadPool runs off the reactor thread; its errors are SYSTEM_ERROR."""
        pool = ThreadPool(1, 1, "test-remoting")
        pool.start()
        self.addCleanup(pool.stop)
        threads: list[int] = []

        def respond(channel: Any, request: RemotingCommand) -> RemotingCommand:
            threads.append(threading.get_ident())
            if request.body == b"fail":
                raise ValueError("bad request")
            return request.make_response(0, body=request.body)

        self.server.register_processor(11, RecordingProcessor(respond), executor=pool)

        async def run() -> None:
            address = await self.listen()
            response = await self.client.invoke_sync(address, RemotingCommand.request(11, body=b"pool"), 5.0)
            self.assertEqual((response.code, response.body), (ResponseCode.SUCCESS, b"pool"))
            failed = await self.client.invoke_sync(address, RemotingCommand.request(11, body=b"fail"), 5.0)
            self.assertEqual((failed.code, failed.remark), (ResponseCode.SYSTEM_ERROR, "ValueError: bad request"))
            self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)
            self.assertNotIn(threading.get_ident(), threads)
            self.assertEqual(len(threads), 2)

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]

    def test_large_writes_under_backpressure_keep_order(self) -> None:
        """Frames larger than the socket buffers: each write goes out at once only while nothing is
        queued before it (``writenow``); the rest queues behind, and every echo comes back whole."""

        async def run() -> None:
            address = await self.listen()
            bodies = [bytes([i]) * (1 << 20) for i in range(24)]
            responses = await gatherResults(
                [self.client.invoke_sync(address, RemotingCommand.request(10, body=b), 30.0) for b in bodies]
            )
            self.assertEqual([r.body for r in responses], bodies)
            [channel] = self.server.channels
            self.assertTrue(channel._write_now)  # a plain TCP transport takes the direct path
            self.assertEqual(len(self.processor.requests), 24)

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]

    def test_direct_sends_below_the_send_limit_taken_in_part_keep_order(self) -> None:
        """Responses under Twisted's ``SEND_LIMIT`` go to ``socket.send`` directly (``writenow``): with a
        4 KiB send buffer on the server's socket each is taken in part, the rest queues behind, and
        every echo comes back whole and in order."""

        async def run() -> None:
            address = await self.listen()
            await self.client.invoke_sync(address, RemotingCommand.request(10, body=b"hi"), 5.0)
            [channel] = self.server.channels
            channel.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            bodies = [bytes([i]) * (100 * 1024 + i) for i in range(40)]
            self.assertLess(len(bodies[-1]) + 1024, channel.transport.SEND_LIMIT)
            responses = await gatherResults(
                [self.client.invoke_sync(address, RemotingCommand.request(10, body=b), 30.0) for b in bodies]
            )
            self.assertEqual([r.body for r in responses], bodies)

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]


    def test_large_requests_collected_in_a_read_leave_unjoined_in_order(self) -> None:
        """Requests of 4 KiB or more sent from an answer's callback (collected while the channel reads)
        leave by one ``sendmsg`` (``write_all_now``), not joined; with a 4 KiB send buffer on the client's
        socket the socket takes them in part (a frame cut, the rest queued as it is), and every echo comes
        back whole and in order, also for requests sent after them."""
        calls: list[tuple[Any, int]] = []

        def recorded(transport: Any, frames: list[bytes]) -> None:
            calls.append((transport, len(frames)))
            writenow.write_all_now(transport, frames)

        self.patch(protocol, "write_all_now", recorded)

        async def run() -> None:
            address = await self.listen()
            await self.client.invoke_sync(address, RemotingCommand.request(10, body=b"hi"), 5.0)
            channel = self.client._by_address[address]
            channel.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            bodies = [bytes([i]) * (4096 + 7919 * i) for i in range(30)]
            sent: list[Deferred[RemotingCommand]] = []

            def send_all(_: object) -> None:  # runs while the channel reads the answer
                sent.extend(self.client.invoke_sync(address, RemotingCommand.request(10, body=b), 30.0)
                            for b in bodies)

            await self.client.invoke_sync(address, RemotingCommand.request(10, body=b"go"), 5.0).addCallback(send_all)
            later = self.client.invoke_sync(address, RemotingCommand.request(10, body=b"after"), 30.0)
            responses = await gatherResults(sent + [later])
            self.assertEqual([r.body for r in responses], bodies + [b"after"])
            # the coroutine goes on in the same read: "after" is collected with them
            self.assertEqual([n for transport, n in calls if transport is channel.transport], [len(bodies) + 1])

        return Deferred.fromCoroutine(run())  # type: ignore[return-value]


class PythonWriteLoopbackTests(LoopbackTests):
    """The loopback tests with the read's answers written by ``write_now`` in Python (no ``send_now``)."""

    def setUp(self) -> None:
        self.patch(protocol, "send_now", None)
        super().setUp()


class SendNowTests(SynchronousTestCase):
    skip = None if writenow.send_now is not None else "no compiled accelerator (writenow.send_now is None)"

    def test_not_plain_left_alone(self) -> None:
        """A transport that is not a plain TCP connection, or bytes it should not take, are left to
        ``write_now``: nothing written, None."""
        assert writenow.send_now is not None
        transport = StringTransport()
        self.assertIsNone(writenow.send_now(transport, b"frame"))
        self.assertIsNone(writenow.send_now(transport, bytearray(b"frame")))  # type: ignore[arg-type]
        self.assertEqual(transport.value(), b"")
