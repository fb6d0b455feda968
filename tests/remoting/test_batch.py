"""The requests of one read: runs for a batch processor (IBatchRequestProcessor), in order."""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer
from zope.interface.verify import verifyObject

from rocketpy.interfaces import IBatchRequestProcessor
from rocketpy.remoting.codec import encode
from rocketpy.remoting.codes import ONEWAY_FLAG, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import RecordingHook, RecordingProcessor, echo
from tests.remoting.test_protocol import read_commands


@implementer(IBatchRequestProcessor)
class RunProcessor(RecordingProcessor):
    """Records each run it gets; answers it with ``results`` (a list, a Deferred, or an exception)."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[list[int]] = []
        self.results: Any = None

    def process_requests(self, channel: Any, requests: list[RemotingCommand]) -> Any:
        self.runs.append([r.opaque for r in requests])
        if isinstance(self.results, Exception):
            raise self.results
        if self.results is not None:
            return self.results
        return [echo(channel, r) for r in requests]


class WriteCounter(StringTransport):
    """Counts write calls (a writeSequence is one)."""

    writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)

    def writeSequence(self, seq: Any) -> None:
        self.writes += 1
        super().write(b"".join(seq))


def frames(*codes_and_opaques: tuple[int, int], flag: int = 0) -> bytes:
    return b"".join(encode(RemotingCommand(code=code, opaque=opaque, flag=flag, body=b"%d" % opaque))
                    for code, opaque in codes_and_opaques)


class RunTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.hook = RecordingHook()
        self.server = RemotingServer(Clock(), rpc_hooks=[self.hook])
        self.runs = RunProcessor()
        self.single = RecordingProcessor()
        for code in (10, 310):
            self.server.register_processor(code, self.runs)
        self.server.register_processor(11, self.single)
        self.protocol = self.server.build_channel()
        self.transport = WriteCounter(peerAddress=IPv4Address("TCP", "10.0.0.1", 4000))
        self.protocol.makeConnection(self.transport)
        self.addCleanup(self.protocol.connectionLost, Failure(ConnectionDone()))

    def test_interface(self) -> None:
        self.assertTrue(verifyObject(IBatchRequestProcessor, self.runs))

    def test_consecutive_requests_are_one_run(self) -> None:
        """Requests of one read for the same batch processor (any of its codes) are one call;
        another processor's request ends the run; every request is answered, in order."""
        self.protocol.dataReceived(frames((10, 1), (310, 2), (10, 3), (11, 4), (10, 5), (10, 6), (11, 7), (10, 8)))
        self.assertEqual(self.runs.runs, [[1, 2, 3], [5, 6]])
        self.assertEqual([r.opaque for _, r in self.runs.requests + self.single.requests], [8, 4, 7])
        self.assertEqual([(c.opaque, c.body) for c in read_commands(self.transport)],
                         [(i, b"%d" % i) for i in range(1, 9)])
        self.assertEqual(self.transport.writes, 1, "one writeSequence for the whole read")
        self.assertEqual([c for c in self.hook.calls if c[0] == "before"], [("before", "10.0.0.1:4000", code)
                         for code in (10, 310, 10, 11, 10, 10, 11, 10)])

    def test_deferred_results_leave_together(self) -> None:
        """A Deferred list of responses: written once it fires, in one writeSequence."""
        self.runs.results = Deferred()
        self.protocol.dataReceived(frames((10, 1), (10, 2), (10, 3)))
        self.assertEqual(self.transport.value(), b"")
        writes = self.transport.writes
        request = RemotingCommand(code=10)
        self.runs.results.callback([request.make_response(0, body=b"a"), None, request.make_response(1)])
        self.assertEqual([(c.opaque, c.code, c.body) for c in read_commands(self.transport)],
                         [(1, 0, b"a"), (3, 1, b"")])
        self.assertEqual(self.transport.writes, writes + 1)

    def test_failures_answer_every_request(self) -> None:
        """An exception, a failed Deferred or a result of the wrong shape: SYSTEM_ERROR to each."""
        failures: list[object] = [ZeroDivisionError("boom"), Deferred(), [None]]
        for results in failures:
            self.runs.results = results
            self.protocol.dataReceived(frames((10, 1), (10, 2)))
            if isinstance(results, Deferred):
                results.errback(ZeroDivisionError("later"))
            codes = [(c.opaque, c.code) for c in read_commands(self.transport)]
            self.assertEqual(codes, [(1, ResponseCode.SYSTEM_ERROR), (2, ResponseCode.SYSTEM_ERROR)])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError, TypeError)), 3)

    def test_busy_processor_rejects_the_run(self) -> None:
        self.runs.busy = True
        self.protocol.dataReceived(frames((10, 1), (10, 2)))
        self.assertEqual(self.runs.runs, [])
        self.assertEqual([c.code for c in read_commands(self.transport)], [ResponseCode.SYSTEM_BUSY] * 2)

    def test_oneway_requests_in_a_run_get_no_reply(self) -> None:
        self.protocol.dataReceived(frames((10, 1), (10, 2), flag=ONEWAY_FLAG))
        self.assertEqual(self.runs.runs, [[1, 2]])
        self.assertEqual(self.transport.value(), b"")

    def test_a_lone_request_takes_process_request(self) -> None:
        self.protocol.dataReceived(frames((10, 1)))
        self.assertEqual((self.runs.runs, [r.opaque for _, r in self.runs.requests]), ([], [1]))

    def test_requests_before_a_bad_frame_are_processed(self) -> None:
        """They arrived whole: processed (a send is stored) and answered, then the connection closes."""
        bad = b"\x00\x00\x00\x06\x00\x00\x00\x02{x"
        self.flushLoggedErrors()
        self.protocol.dataReceived(frames((10, 1), (10, 2)) + bad + frames((10, 3)))
        self.assertEqual(self.runs.runs, [[1, 2]])
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual([c.opaque for c in read_commands(self.transport)], [1, 2])

    def test_a_run_answered_later_closes_the_connection_after_a_bad_frame(self) -> None:
        """A run stored asynchronously (a send's Deferred) is answered when it fires, then the
        connection closes: it does not wait for the abort."""
        later: Deferred[list[RemotingCommand]] = Deferred()
        self.runs.results = later
        self.protocol.dataReceived(frames((10, 1), (10, 2)) + b"\0\0\0\0")
        self.assertFalse(self.transport.disconnecting)
        later.callback([RemotingCommand(code=0), RemotingCommand(code=0)])
        self.assertEqual([c.opaque for c in read_commands(self.transport)], [1, 2])
        self.assertTrue(self.transport.disconnecting)

    def test_a_refusing_hook_answers_only_its_request(self) -> None:
        """An RPC hook refusing one request of a run (an ACL check): SYSTEM_ERROR for that one,
        the others are processed as a run."""

        class DenyTwo(RecordingHook):
            def before_request(self, remote_address: str, request: RemotingCommand) -> None:
                if request.opaque == 2:
                    raise PermissionError("denied")

        server = RemotingServer(Clock(), rpc_hooks=[DenyTwo()])
        server.register_processor(10, self.runs)
        protocol = server.build_channel()
        transport = WriteCounter(peerAddress=IPv4Address("TCP", "10.0.0.1", 4001))
        protocol.makeConnection(transport)
        self.addCleanup(protocol.connectionLost, Failure(ConnectionDone()))
        protocol.dataReceived(frames((10, 1), (10, 2), (10, 3)))
        self.assertEqual(self.runs.runs, [[1, 3]])
        self.assertEqual([(c.opaque, c.code) for c in read_commands(transport)],
                         [(2, ResponseCode.SYSTEM_ERROR), (1, ResponseCode.SUCCESS), (3, ResponseCode.SUCCESS)])
        self.assertEqual(len(self.flushLoggedErrors(PermissionError)), 1)
