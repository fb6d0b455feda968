"""An admin's requests to a 5.x consumer (consume a message directly, running info with thread
stacks) as Telemetry commands, the client's answers mapped back, and the timeout of a silent client."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import ensureDeferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client.admin import AdminClient
from rocketpy.client.admintypes import parse_running_info
from rocketpy.common.message import MessageExt, encode_record
from rocketpy.grpc.channel import GrpcClientChannel, NotDeliverable
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingTimeoutError
from tests.grpc.test_endpoint import CLIENT_ID, GrpcCalls

CONSUMER = pb.Settings(
    client_type=pb.ClientType.PUSH_CONSUMER, user_agent=pb.UA(language=pb.Language.PYTHON, version="5.1.2"),
    subscription=pb.Subscription(group=pb.Resource(name="GV"), subscriptions=[pb.SubscriptionEntry(
        topic=pb.Resource(name="TV"), expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="TagA"))]))


class TelemetryCommandTests(GrpcCalls):
    """mqadmin-style calls (rocketpy's AdminClient) to a 5.x consumer with an open Telemetry stream."""

    async def _consumer(self) -> tuple[Any, Any, AdminClient]:
        await self._start()
        stream, requests = self._open_telemetry(CONSUMER)
        self.assertTrue((await self._call(next, stream)).HasField("settings"))
        admin = AdminClient(reactor, self.cluster.namesrv_addr)
        self.addCleanup(admin.close)
        return stream, requests, admin

    async def test_consume_message_directly_is_a_verify_message_command(self) -> None:
        """CONSUME_MESSAGE_DIRECTLY → VerifyMessageCommand with the message; the client's
        VerifyMessageResult status is the ConsumeMessageDirectlyResult."""
        stream, requests, admin = await self._consumer()
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TV", b"verify me")]))
        message_id = sent.entries[0].message_id
        for status, expected in ((pb.Code.OK, "CR_SUCCESS"), (pb.Code.FAILED_TO_CONSUME_MESSAGE, "CR_LATER")):
            result = admin.consume_message_directly("GV", CLIENT_ID, message_id, topic="TV")
            command = (await self._call(next, stream)).verify_message_command
            self.assertEqual((command.message.body, command.message.system_properties.message_id),
                             (b"verify me", message_id))
            requests.put(rpc.TelemetryCommand(status=pb.Status(code=status),
                                              verify_message_result=rpc.VerifyMessageResult(nonce=command.nonce)))
            answer = await result
            self.assertEqual((answer.consume_result, answer.remark), (expected, "from gRPC client"))

    async def test_running_info_and_thread_stack(self) -> None:
        """GET_CONSUMER_RUNNING_INFO: from the settings at once; with jstackEnable the client's
        ThreadStackTrace answers a PrintThreadStackTraceCommand."""
        stream, requests, admin = await self._consumer()
        await self._unary("Heartbeat", rpc.HeartbeatRequest(group=pb.Resource(name="GV"),
                                                           client_type=pb.ClientType.PUSH_CONSUMER))
        # (AdminClient.consumer_running_info finds the broker by the group's %RETRY% route, which a
        # 5.x group does not have yet: ask the broker directly, as mqadmin -b does)
        addr = self.broker.config.advertised_address
        fields = {"consumerGroup": "GV", "clientId": CLIENT_ID, "jstackEnable": "false"}
        info = parse_running_info((await admin.call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, fields)).body)
        self.assertEqual(info.properties["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY")
        self.assertEqual(info.properties["PROP_CLIENT_VERSION"], "5.1.2")
        self.assertEqual([(s.topic, s.sub_string) for s in info.subscriptions], [("TV", "TagA")])
        self.assertIsNone(info.jstack)

        response = ensureDeferred(admin.call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO,
                                             dict(fields, jstackEnable="true")))
        command = (await self._call(next, stream)).print_thread_stack_trace_command
        requests.put(rpc.TelemetryCommand(status=pb.Status(code=pb.Code.OK), thread_stack_trace=rpc.ThreadStackTrace(
            nonce=command.nonce, thread_stack_trace='"main" waiting')))
        body = json.loads((await response).body)
        self.assertEqual(body["jstack"], '"main" waiting')
        self.assertEqual(body["subscriptionSet"][0]["topic"], "TV")


class _Stream:
    def __init__(self) -> None:
        self.written: list[rpc.TelemetryCommand] = []
        self.open = True

    def write(self, command: rpc.TelemetryCommand) -> bool:
        self.written.append(command)
        return self.open


class GrpcClientChannelTests(SynchronousTestCase):
    """Calls waiting on a client's answer: matched by nonce, timed out on the reactor's clock."""

    def _verify(self) -> RemotingCommand:
        record = bytes(encode_record(MessageExt(topic="TV", body=b"m", store_host=("127.0.0.1", 10911))))
        return RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": "GV"}, record)

    def test_silent_client_times_out_and_late_answer_is_dropped(self) -> None:
        clock, stream = Clock(), _Stream()
        channel = GrpcClientChannel(CLIENT_ID, "127.0.0.1:1", "broker-a", clock)
        channel.attach(stream)
        d = channel.invoke_sync(self._verify(), 5.0)
        clock.advance(4.9)
        self.assertNoResult(d)
        clock.advance(0.1)
        error = self.failureResultOf(d, RemotingTimeoutError)
        self.assertIn("verify_message_command within 5.0 s", str(error.value))
        nonce = stream.written[0].verify_message_command.nonce
        channel.answered(rpc.TelemetryCommand(verify_message_result=rpc.VerifyMessageResult(nonce=nonce)))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_answers_matched_by_nonce(self) -> None:
        clock, stream = Clock(), _Stream()
        channel = GrpcClientChannel(CLIENT_ID, "127.0.0.1:1", "broker-a", clock)
        channel.attach(stream)
        first, second = channel.invoke_sync(self._verify(), 5.0), channel.invoke_sync(self._verify(), 5.0)
        nonces = [c.verify_message_command.nonce for c in stream.written]
        self.assertEqual(len(set(nonces)), 2)
        channel.answered(rpc.TelemetryCommand(status=pb.Status(code=pb.Code.MESSAGE_CORRUPTED),
                                              verify_message_result=rpc.VerifyMessageResult(nonce=nonces[1])))
        self.assertNoResult(first)
        answer = self.successResultOf(second)
        self.assertEqual((answer.code, json.loads(answer.body)["consumeResult"]), (ResponseCode.SUCCESS,
                                                                                   "CR_RETURN_NULL"))
        channel.answered(rpc.TelemetryCommand(status=pb.Status(code=pb.Code.INTERNAL_SERVER_ERROR, message="boom"),
                                              verify_message_result=rpc.VerifyMessageResult(nonce=nonces[0])))
        self.assertIn("INTERNAL_SERVER_ERROR boom", json.loads(self.successResultOf(first).body)["remark"])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_no_stream(self) -> None:
        """Without an open Telemetry stream (never opened, or ended) a call fails at once."""
        channel = GrpcClientChannel(CLIENT_ID, "127.0.0.1:1", "broker-a", Clock())
        self.failureResultOf(channel.invoke_sync(self._verify(), 5.0), NotDeliverable)
        stream = _Stream()
        channel.attach(stream)
        channel.detach(_Stream())  # another stream's end leaves this one
        stream.open = False
        self.failureResultOf(channel.invoke_sync(self._verify(), 5.0), NotDeliverable)
        running = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"jstackEnable": "false"})
        self.assertEqual(self.successResultOf(channel.invoke_sync(running, 5.0)).code, ResponseCode.SUCCESS)
