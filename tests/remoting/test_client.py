"""Tests for RemotingClient: connections, the response table, timeouts, permits, close."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.logger import LogLevel, capturedLogs
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import ONEWAY_FLAG, RequestCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import (
    RemotingConnectError,
    RemotingConnectionLost,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RemotingTooMuchRequestError,
)
from tests.remoting.helpers import (
    ADDRESS,
    DenyingHook,
    Pair,
    RecordingHook,
    RecordingListener,
    RecordingProcessor,
    ThenClient,
)


class ClientTestCase(SynchronousTestCase):
    #: the client under test (ThenClient: the same tests through invoke_then)
    client_class: type[RemotingClient] = RemotingClient

    def setUp(self) -> None:
        self.processor = RecordingProcessor()
        self.pair = self.new_pair()

    def new_pair(self, **client_kwargs: Any) -> Pair:
        """A Pair whose server routes code 10 to this test's processor."""
        pair = Pair(client_class=self.client_class, **client_kwargs)
        pair.server.register_processor(10, self.processor)
        return pair

    def stall(self) -> list[Deferred[None]]:
        """Make the processor answer only when the test fires the returned Deferreds."""
        stalled: list[Deferred[None]] = []

        def respond(channel: Any, request: RemotingCommand) -> Deferred[RemotingCommand]:
            stalled.append(Deferred())
            return stalled[-1].addCallback(lambda _: request.make_response(0))

        self.processor.respond = respond
        return stalled


class ConnectionTests(ClientTestCase):
    def test_concurrent_first_calls_share_one_connect(self) -> None:
        """Requests made while connecting wait for one shared connection attempt."""
        self.pair.endpoint.hold = True
        first, second = self.pair.call(10), self.pair.call(10)
        self.assertEqual(self.pair.endpoint.attempts, 1)
        self.pair.endpoint.complete()
        self.pair.endpoint.flush()
        self.assertEqual([self.successResultOf(d).code for d in (first, second)], [0, 0])
        self.assertEqual(len(self.pair.client.channels), 1)

    def test_connect_failure_reaches_every_waiter_and_is_retried(self) -> None:
        """A refused connect fails all waiters with RemotingConnectError; the next call tries again."""
        self.pair.endpoint.hold = True
        first, second = self.pair.call(10), self.pair.call(10)
        (_, attempt), = self.pair.endpoint.held
        attempt.errback(ConnectionRefusedError())
        for d in (first, second):
            self.failureResultOf(d, RemotingConnectError)
        self.pair.endpoint.hold = False
        self.pair.endpoint.held = []
        self.assertEqual(self.successResultOf(self.pair.call(10)).code, 0)
        self.assertEqual(self.pair.endpoint.attempts, 2)

    def test_connect_timeout(self) -> None:
        """A connect that does not finish within connect_timeout fails with RemotingConnectError."""
        self.pair.endpoint.hold = True
        d = self.pair.client.invoke_sync(ADDRESS, RemotingCommand.request(10), 10.0)
        self.pair.clock.advance(2.9)
        self.assertNoResult(d)
        self.pair.clock.advance(0.1)
        self.failureResultOf(d, RemotingConnectError)

    def test_slow_connect_uses_up_the_request_timeout(self) -> None:
        """The request timeout counts from the call: a connect that took all of it is a timeout."""
        self.pair.endpoint.hold = True
        d = self.pair.client.invoke_sync(ADDRESS, RemotingCommand.request(10), 1.0)
        self.pair.clock.advance(1.5)
        self.pair.endpoint.complete()
        self.failureResultOf(d, RemotingTimeoutError)

    def test_bad_address_is_a_connect_error(self) -> None:
        """An address that is not host:port fails with RemotingConnectError (default TCP endpoints)."""
        client = RemotingClient(self.pair.clock)
        self.failureResultOf(client.invoke_sync("no-port", RemotingCommand.request(10), 1.0), RemotingConnectError)

    def test_disconnect_fails_all_pending_and_reconnects(self) -> None:
        """Losing the connection fails every pending request at once; the next call reconnects."""
        self.stall()
        pending = [self.pair.call(10) for _ in range(3)]
        self.pair.server_channel().transport.loseConnection()
        self.pair.endpoint.flush()
        errors = {id(self.failureResultOf(d, RemotingConnectionLost).value) for d in pending}
        self.assertEqual(len(errors), 1)
        self.assertEqual(self.pair.client.channels, ())
        self.processor.respond = lambda channel, request: request.make_response(0)
        self.assertEqual(self.successResultOf(self.pair.call(10)).code, 0)
        self.assertEqual(self.pair.endpoint.attempts, 2)

    def test_closing_channel_is_replaced(self) -> None:
        """Once a channel starts closing (here: idle), the next call opens a new connection."""
        pair = self.new_pair(idle_timeout=30.0)
        self.successResultOf(pair.call(10))
        pair.clock.advance(30)  # the idle close has begun; the peer has not gone yet
        self.assertTrue(pair.client_channel().closing)
        self.assertEqual(self.successResultOf(pair.call(10)).code, 0)
        self.assertEqual(pair.endpoint.attempts, 2)
        self.assertEqual(len(pair.client.channels), 1)

    def test_listeners_on_the_client(self) -> None:
        """Client listeners see CONNECT, IDLE and CLOSE of client channels."""
        listener = RecordingListener()
        pair = self.new_pair(listeners=[listener], idle_timeout=30.0)
        self.successResultOf(pair.call(10))
        pair.clock.advance(30)
        pair.endpoint.flush()
        self.assertEqual(listener.events, [("connect", ADDRESS), ("idle", ADDRESS), ("close", ADDRESS)])

    def test_server_requests_reach_client_processors(self) -> None:
        """A request the broker sends on the client's connection is dispatched to the client's processor."""
        notify = RecordingProcessor(respond=lambda channel, request: None)
        self.pair.client.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, notify)
        self.successResultOf(self.pair.call(10))
        self.pair.server_channel().invoke_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                                         {"consumerGroup": "g"}))
        self.pair.endpoint.flush()
        (channel, request), = notify.requests
        self.assertIs(channel, self.pair.client_channel())
        self.assertEqual(request.ext_fields, {"consumerGroup": "g"})

    def test_close(self) -> None:
        """close() fails pending requests, closes channels, stops the scan and refuses new requests."""
        self.stall()
        pending = self.pair.call(10)
        closed = self.pair.client.close()
        self.pair.endpoint.flush()
        self.successResultOf(closed)
        self.failureResultOf(pending, RemotingConnectionLost)
        self.assertEqual(self.pair.clock.getDelayedCalls(), [])
        self.failureResultOf(self.pair.call(10), RemotingConnectError)

    def test_close_cancels_connect_attempts(self) -> None:
        """close() during a connect fails its waiters with RemotingConnectError."""
        self.pair.endpoint.hold = True
        d = self.pair.call(10)
        self.successResultOf(self.pair.client.close())
        self.failureResultOf(d, RemotingConnectError)


class TimeoutTests(ClientTestCase):
    def test_timeout_then_late_response_is_harmless(self) -> None:
        """A request without answer fails with RemotingTimeoutError; its late answer is dropped."""
        pair = self.new_pair(close_channel_on_timeout=False)
        stalled = self.stall()
        d = pair.call(10, timeout=2.0)
        pair.clock.advance(1.0)
        self.assertNoResult(d)
        pair.clock.advance(1.0)
        self.failureResultOf(d, RemotingTimeoutError)
        with capturedLogs() as events:
            stalled[0].callback(None)
            pair.endpoint.flush()
        self.assertEqual([e["log_level"] for e in events], [LogLevel.debug])
        self.processor.respond = lambda channel, request: request.make_response(0)
        self.assertEqual(self.successResultOf(pair.call(10)).code, 0)
        self.assertEqual(pair.endpoint.attempts, 1)

    def test_sync_timeout_closes_the_channel(self) -> None:
        """An invoke_sync timeout closes its channel: the others pending on it fail with
        RemotingConnectionLost, and the next call reconnects."""
        self.stall()
        timed_out = self.pair.call(10, timeout=1.0)
        other_sync = self.pair.call(10, timeout=30.0)
        other_async = self.pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), 30.0)
        self.pair.endpoint.flush()
        channel = self.pair.client_channel()
        with capturedLogs() as events:
            self.pair.clock.advance(1.0)
        self.failureResultOf(timed_out, RemotingTimeoutError)
        self.assertEqual([e["log_level"] for e in events], [LogLevel.warn])
        self.assertTrue(channel.closing)
        self.pair.endpoint.flush()
        lost = {id(self.failureResultOf(d, RemotingConnectionLost).value) for d in (other_sync, other_async)}
        self.assertEqual(len(lost), 1)
        self.assertEqual(self.pair.client.channels, ())
        self.processor.respond = lambda channel, request: request.make_response(0)
        self.assertEqual(self.successResultOf(self.pair.call(10)).code, 0)
        self.assertEqual(self.pair.endpoint.attempts, 2)
        self.assertEqual(len(self.pair.client.channels), 1)

    def test_sync_timeout_on_a_new_connection_closes_it(self) -> None:
        """A call whose connect used up its timeout closes the channel it got (Java does too)."""
        self.pair.endpoint.hold = True
        d = self.pair.client.invoke_sync(ADDRESS, RemotingCommand.request(10), 1.0)
        self.pair.clock.advance(1.5)
        self.pair.endpoint.complete()
        self.failureResultOf(d, RemotingTimeoutError)
        self.assertTrue(self.pair.client_channel().closing)

    def test_async_timeout_keeps_the_channel(self) -> None:
        """invoke_async timeouts (long-poll pulls among them) leave the channel open, as Java's invokeAsync."""
        self.stall()
        timed_out = self.pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), 1.0)
        pending = self.pair.call(10, timeout=30.0)
        self.pair.clock.advance(1.0)
        self.failureResultOf(timed_out, RemotingTimeoutError)
        self.pair.endpoint.flush()
        self.assertFalse(self.pair.client_channel().closing)
        self.assertNoResult(pending)

    def test_close_channel_on_timeout_off(self) -> None:
        """With close_channel_on_timeout=False a sync timeout leaves the channel and its other requests alone."""
        pair = self.new_pair(close_channel_on_timeout=False)
        self.stall()
        timed_out, pending = pair.call(10, timeout=1.0), pair.call(10, timeout=30.0)
        pair.clock.advance(1.0)
        self.failureResultOf(timed_out, RemotingTimeoutError)
        pair.endpoint.flush()
        self.assertFalse(pair.client_channel().closing)
        self.assertNoResult(pending)

    def test_scan_expires_within_one_interval(self) -> None:
        """The 1 s scan fails a 0.5 s request at the first scan after its deadline."""
        self.stall()
        d = self.pair.call(10, timeout=0.5)
        self.pair.clock.advance(0.99)
        self.assertNoResult(d)
        self.pair.clock.advance(0.01)
        self.failureResultOf(d, RemotingTimeoutError)


class PermitTests(ClientTestCase):
    def send_async(self, pair: Pair, count: int, timeout: float = 3.0) -> list[Deferred[Any]]:
        """*count* invoke_async calls of code 10, bytes moved."""
        sent = [pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), timeout) for _ in range(count)]
        pair.endpoint.flush()
        return sent

    def test_async_permits_bound_requests_in_flight(self) -> None:
        """With one async permit a second invoke_async fails at once; the permit returns on reply."""
        pair = self.new_pair(async_permits=1)
        stalled = self.stall()
        first, second = self.send_async(pair, 2)
        self.failureResultOf(second, RemotingTooMuchRequestError)
        stalled[0].callback(None)
        pair.endpoint.flush()
        self.assertEqual(self.successResultOf(first).code, 0)
        (third,) = self.send_async(pair, 1)
        self.assertNoResult(third)

    def test_permit_released_once_on_timeout_and_late_reply(self) -> None:
        """A timed-out async request gives its permit back exactly once, late reply or not."""
        pair = self.new_pair(async_permits=2)
        stalled = self.stall()
        (timed_out,) = self.send_async(pair, 1, timeout=1.0)
        pair.clock.advance(1.0)
        self.failureResultOf(timed_out, RemotingTimeoutError)
        stalled[0].callback(None)
        pair.endpoint.flush()
        *accepted, refused = self.send_async(pair, 3)
        self.failureResultOf(refused, RemotingTooMuchRequestError)
        for d in accepted:
            self.assertNoResult(d)

    def test_permit_released_on_connect_failure(self) -> None:
        """An async request whose connect fails gives its permit back."""
        pair = self.new_pair(async_permits=1)
        pair.endpoint.connect = lambda factory: fail(ConnectionRefusedError())  # type: ignore[method-assign]
        for _ in range(2):
            self.failureResultOf(pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), 1.0),
                                 RemotingConnectError)

    def test_async_callback_called_once(self) -> None:
        """invoke_async's callback gets the response (or the Failure) once; the Deferred gets its result."""
        outcomes: list[Any] = []

        def seen(outcome: Any) -> str:
            outcomes.append(outcome)
            return "seen"

        d = self.pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), 3.0, callback=seen)
        self.pair.endpoint.flush()
        self.assertEqual(self.successResultOf(d), "seen")
        self.stall()
        failed = self.pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), 1.0, callback=outcomes.append)
        self.pair.endpoint.flush()
        self.pair.clock.advance(1.0)
        self.successResultOf(failed)
        self.assertEqual([type(o) for o in outcomes], [RemotingCommand, Failure])
        self.assertIsInstance(outcomes[1].value, RemotingTimeoutError)

    def test_oneway(self) -> None:
        """invoke_oneway sets the flag, fires once written, and is bounded by its own permits."""
        pair = self.new_pair(oneway_permits=1)
        pair.endpoint.hold = True
        waiting = pair.client.invoke_oneway(ADDRESS, RemotingCommand.request(10), 3.0)
        self.failureResultOf(pair.client.invoke_oneway(ADDRESS, RemotingCommand.request(10), 3.0),
                             RemotingTooMuchRequestError)
        pair.endpoint.complete()
        self.assertIsNone(self.successResultOf(waiting))
        self.assertIsNone(self.successResultOf(pair.client.invoke_oneway(ADDRESS, RemotingCommand.request(10), 3.0)))
        pair.endpoint.flush()
        self.assertEqual([r.flag & ONEWAY_FLAG for _, r in self.processor.requests], [ONEWAY_FLAG] * 2)


class HookTests(ClientTestCase):
    def test_hooks_on_both_sides(self) -> None:
        """Client hooks run before sending and after the response; server hooks around processing."""
        client_hook, server_hook = RecordingHook(), RecordingHook()
        pair = Pair(server_kwargs={"rpc_hooks": [server_hook]}, client_class=self.client_class, rpc_hooks=[client_hook])
        pair.server.register_processor(10, self.processor)
        self.successResultOf(pair.call(10))
        server_peer = pair.server_channel().remote_address
        self.assertEqual(client_hook.calls, [("before", ADDRESS, 10), ("after", ADDRESS, 10, 0)])
        self.assertEqual(server_hook.calls, [("before", server_peer, 10), ("after", server_peer, 10, 0)])

    def test_failing_client_hook_fails_the_request(self) -> None:
        """A before-request hook that raises (e.g. missing credentials) fails the call; nothing is sent."""
        pair = self.new_pair(rpc_hooks=[DenyingHook()], async_permits=1)
        for _ in range(2):
            self.failureResultOf(pair.client.invoke_async(ADDRESS, RemotingCommand.request(10), 1.0),
                                 PermissionError)
        pair.endpoint.flush()
        self.assertEqual(self.processor.requests, [])

    def test_client_serialize_type_is_used_and_echoed(self) -> None:
        """A msgpack client sends msgpack; the server's reply comes back in msgpack."""
        pair = self.new_pair(serialize_type=SerializeType.MSGPACK, language="GO")
        response = self.successResultOf(pair.call(10))
        (_, request), = self.processor.requests
        self.assertEqual((request.serialize_type, request.language), (SerializeType.MSGPACK, "GO"))
        self.assertEqual(response.serialize_type, SerializeType.MSGPACK)


class InvokeThenTests(ClientTestCase):
    """invoke_then: the outcome goes to a callable, exactly once, with no Deferred per request."""

    def test_outcome_once_with_its_arguments(self) -> None:
        """``then`` gets the response and its arguments once; a late duplicate answer reaches nothing."""
        outcomes: list[tuple[Any, ...]] = []
        self.successResultOf(self.pair.call(10))  # connected: the request takes the direct path
        self.pair.client.invoke_then(ADDRESS, RemotingCommand.request(10, {"k": "v"}), 3.0,
                                     lambda result, *args: outcomes.append((result, *args)), ("a", 1))
        self.pair.endpoint.flush()
        ((response, *args),) = outcomes
        self.assertEqual((response.code, response.ext_fields, args), (0, {"k": "v"}, ["a", 1]))
        self.assertEqual(self.pair.client_channel().pending_count, 0)

    def test_failure_before_sending_is_reported_at_once(self) -> None:
        """No free async permit, or a channel whose connection failed: ``then`` gets the Failure
        during the call, and the permit taken is given back."""
        pair = self.new_pair(async_permits=1)
        stalled = self.stall()
        outcomes: list[Any] = []
        pair.client.invoke_then(ADDRESS, RemotingCommand.request(10), 3.0, outcomes.append, (), bounded=True)
        pair.client.invoke_then(ADDRESS, RemotingCommand.request(10), 3.0, outcomes.append, (), bounded=True)
        self.assertEqual(len(outcomes), 1)
        self.assertIsInstance(outcomes[0].value, RemotingTooMuchRequestError)
        pair.endpoint.flush()
        stalled[0].callback(None)
        pair.endpoint.flush()
        self.assertEqual(outcomes[1].code, 0)
        pair.client_channel().transport.loseConnection()
        pair.endpoint.flush()
        pair.endpoint.connect = lambda factory: fail(ConnectionRefusedError())  # type: ignore[method-assign]
        pair.client.invoke_then(ADDRESS, RemotingCommand.request(10), 3.0, outcomes.append, (), bounded=True)
        self.assertIsInstance(outcomes[2].value, RemotingConnectError)
        self.assertEqual(pair.client._async_permits.available, 1)

    def test_raising_outcome_handler_is_logged_and_harmless(self) -> None:
        """An exception from ``then`` is logged once; the channel and its other requests go on."""
        def broken(result: Any) -> None:
            raise ZeroDivisionError("in then")

        self.successResultOf(self.pair.call(10))
        with capturedLogs() as events:
            self.pair.client.invoke_then(ADDRESS, RemotingCommand.request(10), 3.0, broken)
            after = self.pair.call(10)
        self.assertEqual(self.successResultOf(after).code, 0)
        self.assertFalse(self.pair.client_channel().closing)
        (error,) = [e for e in events if e["log_level"] == LogLevel.critical]
        self.assertIsInstance(error["log_failure"].value, ZeroDivisionError)
        self.flushLoggedErrors(ZeroDivisionError)

    def test_unencodable_request_fails_its_outcome(self) -> None:
        """A request the codec refuses fails with RemotingSendRequestError; nothing stays pending."""
        self.successResultOf(self.pair.call(10))
        outcomes: list[Any] = []
        self.pair.client.invoke_then(ADDRESS, RemotingCommand.request(10, {"k": object()}), 3.0,  # type: ignore[dict-item]
                                     outcomes.append)
        self.assertIsInstance(outcomes[0].value, RemotingSendRequestError)
        self.assertEqual(self.pair.client_channel().pending_count, 0)


class ThenConnectionTests(ConnectionTests):
    client_class = ThenClient


class ThenTimeoutTests(TimeoutTests):
    client_class = ThenClient


class ThenPermitTests(PermitTests):
    client_class = ThenClient


class ThenHookTests(HookTests):
    client_class = ThenClient
