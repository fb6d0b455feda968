"""Tests for RemotingServer dispatch rules, through a RemotingClient over iosim."""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting.codes import ONEWAY_FLAG, ResponseCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import ProtocolError, RequestRefused
from rocketpy.remoting.server import RemotingServer
from tests.remoting.helpers import (
    ADDRESS,
    DenyingHook,
    Pair,
    RecordingHook,
    RecordingListener,
    RecordingProcessor,
    echo,
    fail_processing,
)


class ManualPool:
    """A stand-in ThreadPool: work runs only when the test calls :meth:`run_one`."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = []

    def callInThreadWithCallback(self, on_result: Callable[..., Any], f: Callable[..., Any], *args: Any) -> None:
        self.queue.append((on_result, f, args))

    def run_one(self) -> None:
        on_result, f, args = self.queue.pop(0)
        try:
            result = f(*args)
        except Exception as e:
            on_result(False, e)
        else:
            on_result(True, result)


class ThreadlessClock(Clock):
    """A Clock whose callFromThread calls straight through (for deferToThreadPool)."""

    def callFromThread(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)


class DispatchTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.pair = Pair()
        self.processor = RecordingProcessor()
        self.pair.server.register_processor(10, self.processor)

    def test_processor_answers_with_request_opaque(self) -> None:
        """A registered processor's response comes back to the waiting request."""
        response = self.successResultOf(self.pair.call(10, body=b"ping"))
        self.assertEqual((response.code, response.body), (ResponseCode.SUCCESS, b"ping"))
        (_, request) = self.processor.requests[0]
        self.assertEqual(response.opaque, request.opaque)

    def test_unknown_code_is_not_supported(self) -> None:
        """An unregistered code is answered with 3 and Java's remark."""
        response = self.successResultOf(self.pair.call(999))
        self.assertEqual((response.code, response.remark), (3, " request type 999 not supported"))

    def test_default_processor_takes_unknown_codes(self) -> None:
        """With a default processor, unregistered codes go to it."""
        default = RecordingProcessor()
        self.pair.server.register_default_processor(default)
        self.assertEqual(self.successResultOf(self.pair.call(999)).code, 0)
        self.assertEqual(default.requests[0][1].code, 999)

    def test_processor_exception_is_system_error(self) -> None:
        """A raising processor gives SYSTEM_ERROR with a remark, logs at error level, keeps the connection."""
        self.processor.respond = fail_processing
        with capturedLogs() as events:
            response = self.successResultOf(self.pair.call(10))
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("ZeroDivisionError", response.remark)
        self.assertEqual([e["log_level"] for e in events if "log_failure" in e], [LogLevel.error])
        self.flushLoggedErrors(ZeroDivisionError)
        self.processor.respond = lambda channel, request: request.make_response(0)
        self.assertEqual(self.successResultOf(self.pair.call(10)).code, 0)

    def test_failed_deferred_is_system_error(self) -> None:
        """A processor's failed Deferred becomes SYSTEM_ERROR."""
        self.processor.respond = lambda channel, request: fail(KeyError("topic"))
        response = self.successResultOf(self.pair.call(10))
        self.assertEqual((response.code, response.remark), (1, "KeyError: 'topic'"))
        self.assertEqual(len(self.flushLoggedErrors(KeyError)), 1)

    def test_deferred_and_coroutine_results(self) -> None:
        """A processor may answer with a Deferred (fired later) or a coroutine."""
        later: Deferred[RemotingCommand] = Deferred()
        self.processor.respond = lambda channel, request: later
        d = self.pair.call(10)
        self.assertNoResult(d)
        later.callback(RemotingCommand(code=0, remark="later"))
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(d).remark, "later")

        async def answer(channel: Any, request: RemotingCommand) -> RemotingCommand:
            return await succeed(request.make_response(0, remark="async"))

        self.processor.respond = answer
        self.assertEqual(self.successResultOf(self.pair.call(10)).remark, "async")

    def test_non_command_result_is_system_error(self) -> None:
        """Returning something that is not a RemotingCommand is a processor bug: SYSTEM_ERROR."""
        self.processor.respond = lambda channel, request: "oops"
        self.assertEqual(self.successResultOf(self.pair.call(10)).code, ResponseCode.SYSTEM_ERROR)
        self.assertEqual(len(self.flushLoggedErrors(TypeError)), 1)

    def test_unencodable_response_is_system_error(self) -> None:
        """A response the codec cannot encode is replaced by SYSTEM_ERROR naming the problem."""
        bad: Any = {"a": [1]}
        self.processor.respond = lambda channel, request: request.make_response(0, ext_fields=bad)
        response = self.successResultOf(self.pair.call(10))
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("ProtocolError", str(response.remark))
        self.assertEqual(len(self.flushLoggedErrors(ProtocolError)), 1)

    def test_none_result_sends_nothing(self) -> None:
        """A processor returning None sends no reply: the request waits."""
        self.processor.respond = lambda channel, request: None
        self.assertNoResult(self.pair.call(10))

    def test_reject_request_is_system_busy(self) -> None:
        """An overloaded processor (reject_request true) is answered SYSTEM_BUSY without running."""
        self.processor.busy = True
        response = self.successResultOf(self.pair.call(10))
        self.assertEqual(response.code, ResponseCode.SYSTEM_BUSY)
        self.assertTrue(str(response.remark).startswith("[REJECTREQUEST]"))
        self.assertEqual(self.processor.requests, [])

    def test_response_fields_are_fixed_up(self) -> None:
        """A hand-built response gets the request's opaque, the response flag and its serialize type."""
        self.processor.respond = lambda channel, request: RemotingCommand(code=0, opaque=12345)
        for serialize_type in SerializeType:
            request = RemotingCommand.request(10, serialize_type=serialize_type)
            pair = Pair(serialize_type=serialize_type)
            pair.server.register_processor(10, self.processor)
            d = pair.client.invoke_sync(ADDRESS, request, 3.0)
            pair.endpoint.flush()
            response = self.successResultOf(d)
            self.assertEqual((response.serialize_type, response.opaque, response.is_response),
                             (serialize_type, request.opaque, True))

    def test_oneway_requests_get_no_reply(self) -> None:
        """Oneway requests are processed but never answered, even on errors or unknown codes."""

        def fail_with_body(channel: Any, request: RemotingCommand) -> RemotingCommand:
            return fail_processing(channel, request) if request.body else echo(channel, request)

        self.processor.respond = fail_with_body
        for code, body in ((10, b""), (10, b"boom"), (999, b"")):
            self.pair.client.invoke_oneway(ADDRESS, RemotingCommand.request(code, body=body), 3.0)
        (pump,) = self.pair.endpoint.pumps
        pump.pump()  # the requests reach the server, which answers synchronously if at all
        self.assertIsNone(pump.serverIO.getOutBuffer())
        self.assertEqual(len(self.processor.requests), 2)
        self.assertTrue(all(r.flag & ONEWAY_FLAG for _, r in self.processor.requests))
        self.flushLoggedErrors(ZeroDivisionError)

    def test_hooks_and_listeners_on_the_server(self) -> None:
        """Server hooks see each processed request and its response; listeners see CONNECT/CLOSE."""
        hook, listener = RecordingHook(), RecordingListener()
        pair = Pair(server_kwargs={"rpc_hooks": [hook], "listeners": [listener]})
        pair.server.register_processor(10, self.processor)
        self.successResultOf(pair.call(10))
        peer = pair.server_channel().remote_address
        self.assertEqual(hook.calls, [("before", peer, 10), ("after", peer, 10, 0)])
        d = pair.server.close()
        pair.endpoint.flush()
        self.successResultOf(d)
        self.assertEqual(listener.events, [("connect", peer), ("close", peer)])

    def test_hook_exception_is_system_error(self) -> None:
        """A server before-hook that raises (an ACL denial) gives SYSTEM_ERROR and skips the processor."""
        pair = Pair(server_kwargs={"rpc_hooks": [DenyingHook()]})
        pair.server.register_processor(10, self.processor)
        self.assertEqual(self.successResultOf(pair.call(10)).code, ResponseCode.SYSTEM_ERROR)
        self.assertEqual(self.processor.requests, [])
        self.assertEqual(len(self.flushLoggedErrors(PermissionError)), 1)

    def test_refusal_is_one_warning(self) -> None:
        """A hook raising RequestRefused: that code and remark, one warning line, no traceback."""

        class Refusing(RecordingHook):
            def before_request(self, remote_address: str, request: RemotingCommand) -> None:
                raise RequestRefused("not you", 16)

        pair = Pair(server_kwargs={"rpc_hooks": [Refusing()]})
        pair.server.register_processor(10, self.processor)
        with capturedLogs() as logs:
            response = self.successResultOf(pair.call(10))
        self.assertEqual((response.code, response.remark), (16, "not you"))
        self.assertEqual([e["log_level"] for e in logs if "refused" in e["log_format"]], [LogLevel.warn])
        self.assertFalse([e for e in logs if "log_failure" in e])

    def test_repeated_refusals_are_rate_limited(self) -> None:
        """The same refusal of the same peer logs once per 10 s, then says how many it stood for; every
        request is still answered."""

        class Refusing(RecordingHook):
            def before_request(self, remote_address: str, request: RemotingCommand) -> None:
                raise RequestRefused(f"not you ({request.code})", 16)

        pair = Pair(server_kwargs={"rpc_hooks": [Refusing()]})
        for code in (10, 11):
            pair.server.register_processor(code, self.processor)
        with capturedLogs() as logs:
            answers = [self.successResultOf(pair.call(code)).code for code in (10, 10, 10, 11)]
            pair.clock.advance(10)
            answers.append(self.successResultOf(pair.call(10)).code)
        self.assertEqual(answers, [16] * 5)
        lines = [(e["remark"], e["held_back"]) for e in logs if "refused" in e["log_format"]]
        self.assertEqual(lines, [("not you (10)", ""), ("not you (11)", ""),
                                 ("not you (10)", " (2 more like it in the last 10 s)")])

    def test_server_hooks_skip_what_it_sends(self) -> None:
        """As Java's NettyRemotingServer: a server's hooks (the ACL check) do not see the requests it
        sends to clients (NOTIFY_CONSUMER_IDS_CHANGED …)."""
        hook = RecordingHook()
        pair = Pair(server_kwargs={"rpc_hooks": [hook]})
        pair.server.register_processor(10, self.processor)
        pair.client.register_processor(40, RecordingProcessor())
        self.successResultOf(pair.call(10))
        d = pair.server_channel().invoke_sync(RemotingCommand.request(40, {"consumerGroup": "g"}), 3.0)
        pair.endpoint.flush()
        self.successResultOf(d)
        self.assertEqual([call[2] for call in hook.calls], [10, 10])  # before and after of the one received

    def test_server_invokes_the_client(self) -> None:
        """The server can invoke_sync on a channel; the client's processor answers it."""
        notify = RecordingProcessor()
        self.pair.client.register_processor(40, notify)
        self.successResultOf(self.pair.call(10))
        channel = self.pair.server_channel()
        d = channel.invoke_sync(RemotingCommand.request(40, {"consumerGroup": "g"}), 3.0)
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(d).ext_fields, {"consumerGroup": "g"})
        self.assertEqual(channel.pending_count, 0)


class ThreadPoolExecutorTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.pair = Pair()
        self.server_clock = ThreadlessClock()
        self.pair.server = RemotingServer(self.server_clock)
        self.pool = ManualPool()
        self.processor = RecordingProcessor()
        pool: Any = self.pool
        self.pair.server.register_processor(10, self.processor, executor=pool, max_queue=1)
        self.pair.endpoint.server_factory = self.pair.server.factory()

    def test_queue_bound_is_overload(self) -> None:
        """Beyond max_queue queued requests the server answers SYSTEM_BUSY [OVERLOAD] at once."""
        first = self.pair.call(10)
        second = self.pair.call(10)
        busy = self.successResultOf(second)
        self.assertEqual(busy.code, ResponseCode.SYSTEM_BUSY)
        self.assertTrue(str(busy.remark).startswith("[OVERLOAD]"))
        self.assertNoResult(first)
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(first).code, 0)
        third = self.pair.call(10)
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(third).code, 0)

    def test_pool_exception_is_system_error(self) -> None:
        """An exception raised in the pool becomes SYSTEM_ERROR and frees the queue slot."""
        self.processor.respond = fail_processing
        d = self.pair.call(10)
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(d).code, ResponseCode.SYSTEM_ERROR)
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)
        self.pair.call(10)
        self.assertEqual(len(self.pool.queue), 1)


class QueueWaitTests(ThreadPoolExecutorTests):
    """Requests that waited in a pool's queue at least ``max_wait`` are answered SYSTEM_BUSY unprocessed."""

    def setUp(self) -> None:
        super().setUp()
        pool: Any = self.pool
        self.pair.server.register_processor(11, self.processor, executor=pool, max_queue=2, max_wait=0.2)

    def test_stale_request_is_timeout_clean_queue(self) -> None:
        """Picked up 200 ms after it was queued: SYSTEM_BUSY with Java's remark; a fresher one runs."""
        stale = self.pair.call(11)
        self.server_clock.advance(0.15)
        fresh = self.pair.call(11)
        self.server_clock.advance(0.05)
        self.pool.run_one()
        self.pair.endpoint.flush()
        busy = self.successResultOf(stale)
        self.assertEqual(busy.code, ResponseCode.SYSTEM_BUSY)
        self.assertEqual(busy.remark, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                                      "period in queue: 200ms, size of queue: 1")
        self.assertEqual(self.processor.requests, [])
        self.assertNoResult(fresh)
        self.pool.run_one()
        self.pair.endpoint.flush()
        response = self.successResultOf(fresh)
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        (_, request), = self.processor.requests
        self.assertEqual(request.opaque, response.opaque)

    def test_just_under_the_bound_is_processed(self) -> None:
        """A request picked up before max_wait has passed is processed."""
        d = self.pair.call(11)
        self.server_clock.advance(0.199)
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(d).code, ResponseCode.SUCCESS)

    def test_stale_request_frees_its_queue_slot(self) -> None:
        """A request dropped as stale no longer counts against max_queue."""
        first, second = self.pair.call(11), self.pair.call(11)
        self.assertTrue(str(self.successResultOf(self.pair.call(11)).remark).startswith("[OVERLOAD]"))
        self.server_clock.advance(1.0)
        self.pool.run_one()
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual([self.successResultOf(d).code for d in (first, second)], [ResponseCode.SYSTEM_BUSY] * 2)
        third = self.pair.call(11)
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(third).code, ResponseCode.SUCCESS)

    def test_stale_oneway_gets_no_reply(self) -> None:
        """A stale oneway request is neither processed nor answered."""
        self.pair.client.invoke_oneway(ADDRESS, RemotingCommand.request(11), 3.0)
        (pump,) = self.pair.endpoint.pumps
        pump.pump()
        self.server_clock.advance(0.2)
        self.pool.run_one()
        pump.pump()
        self.assertIsNone(pump.serverIO.getOutBuffer())
        self.assertEqual(self.processor.requests, [])

    def test_no_bound_by_default(self) -> None:
        """Without max_wait (code 10 here) a request is processed however long it waited."""
        d = self.pair.call(10)
        self.server_clock.advance(100)  # under the 120 s idle timeout the server clock also drives
        self.pool.run_one()
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(d).code, ResponseCode.SUCCESS)
        self.assertEqual(len(self.processor.requests), 1)
