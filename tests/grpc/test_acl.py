"""Plain ACL on the gRPC endpoint: metadata signed as the 5.x clients sign it, against a broker with --acl-enable."""

from __future__ import annotations

import hashlib
import hmac
import os

from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.acl.plain import parse_acl
from rocketpy.grpc.acl import GrpcAccessCheck, needed_resources, parse_authorization
from rocketpy.grpc.status import GrpcError
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from tests.acl.test_broker import ACL, USER
from tests.grpc.test_endpoint import CLIENT_ID, GrpcCalls

DATE_TIME = "20261201T164500Z"


def signed(access_key: str, secret_key: str, date_time: str = DATE_TIME) -> list[tuple[str, str]]:
    """The metadata of a 5.x client with ``SessionCredentials(access_key, secret_key)``."""
    signature = hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest().upper()
    return [("x-mq-client-id", CLIENT_ID), ("x-mq-date-time", date_time),
            ("authorization", f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, "
                              f"Signature={signature}")]


def _group(name: str) -> pb.Resource:
    return pb.Resource(name=name)


class GrpcAclTests(GrpcCalls):
    timeout = 60

    async def _start_acl(self, acl: str = ACL) -> None:
        path = os.path.abspath(self.mktemp())
        with open(path, "w") as f:
            f.write(acl)
        await self._start(acl_enable=True, acl_file=path)

    async def test_signed_client_sends_and_receives(self) -> None:
        """Signed with the right secret: settings, send, receive and ack on TopicA / GroupA go through."""
        await self._start_acl()
        self.metadata = signed(*USER)
        answer = await self._settings(pb.Settings(client_type=pb.ClientType.SIMPLE_CONSUMER,
                                                  subscription=pb.Subscription(group=_group("GroupA"))))
        self.assertEqual(answer.status.code, pb.Code.OK, answer)
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TopicA", b"a")]))
        self.assertEqual(sent.status.code, pb.Code.OK, sent)
        stream = await self._receive("GroupA", "TopicA")
        self.assertEqual(stream[0].status.code, pb.Code.OK, stream[0])
        message = stream[1].message
        self.assertEqual(message.body, b"a")
        ack = await self._unary("AckMessage", rpc.AckMessageRequest(
            group=_group("GroupA"), topic=pb.Resource(name="TopicA"),
            entries=[rpc.AckMessageEntry(message_id=message.system_properties.message_id,
                                         receipt_handle=message.system_properties.receipt_handle)]))
        self.assertEqual(ack.status.code, pb.Code.OK, ack)

    async def test_refusals(self) -> None:
        """Wrong secret, unknown key, no credentials: UNAUTHORIZED; no permission: FORBIDDEN; one warning each
        (per peer, RPC and reason every 10 s)."""
        await self._start_acl()
        send = rpc.SendMessageRequest(messages=[self._message("TopicA", b"a")])
        cases = [
            (signed(USER[0], "wrong-secret"), send, pb.Code.UNAUTHORIZED, "Check signature failed for accessKey=RocketMQ"),
            (signed("nobody-here", "12345678"), send, pb.Code.UNAUTHORIZED, "No acl config for nobody-here"),
            ([("x-mq-client-id", CLIENT_ID)], send, pb.Code.UNAUTHORIZED, "No accessKey is configured"),
            ([("x-mq-client-id", CLIENT_ID), ("authorization", "garbage")], send, pb.Code.UNAUTHORIZED,
             "authorization header is incorrect"),
            (signed(*USER), rpc.SendMessageRequest(messages=[self._message("TopicB", b"b")]), pb.Code.FORBIDDEN,
             "No default permission for topic:TopicB"),
            (signed(*USER), rpc.SendMessageRequest(messages=[self._message("TopicC", b"c")]), pb.Code.FORBIDDEN,
             "No default permission for topic:TopicC"),
        ]
        for metadata, request, code, message in cases:
            self.metadata = metadata
            with capturedLogs() as events:
                answer = await self._unary("SendMessage", request)
            self.assertEqual((answer.status.code, answer.status.message), (code, message))
            warnings = [e for e in events if "gRPC ACL refused" in e.get("log_format", "")]
            self.assertEqual(len(warnings), 1)
            self.assertNotIn("log_failure", warnings[0])
        self.metadata = signed(USER[0], "wrong-secret")  # the same refusal again: answered, not logged again
        with capturedLogs() as events:
            again = [await self._unary("SendMessage", send) for _ in range(2)]
        self.assertEqual([a.status.code for a in again], [pb.Code.UNAUTHORIZED] * 2)
        self.assertFalse([e for e in events if "gRPC ACL refused" in e.get("log_format", "")])
        self.metadata = signed(*USER)
        stream = await self._receive("GroupB", "TopicA")  # a group not granted
        self.assertEqual([r.status.code for r in stream], [pb.Code.FORBIDDEN])
        self.assertEqual(stream[0].status.message, "No default permission for group:GroupB")
        answer = await self._settings(pb.Settings(client_type=pb.ClientType.PRODUCER,
                                                  publishing=pb.Publishing(topics=[pb.Resource(name="TopicB")])))
        self.assertEqual(answer.status.code, pb.Code.FORBIDDEN)

    async def test_whitelisted_address_skips_the_check(self) -> None:
        """A client from a globalWhiteRemoteAddresses address needs no credentials."""
        await self._start_acl(ACL.replace("  - 10.10.103.*", "  - 127.0.0.1"))
        sent = await self._unary("SendMessage", rpc.SendMessageRequest(messages=[self._message("TopicC", b"c")]))
        self.assertEqual(sent.status.code, pb.Code.OK, sent)


class GrpcAclUnitTests(SynchronousTestCase):
    def test_authorization_header(self) -> None:
        """Credential (before any ``/``) and the hex Signature as Base64; bad headers are refusals."""
        key, signature = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=AK/x, SignedHeaders=x-mq-date-time, Signature=00ff")
        self.assertEqual((key, signature), ("AK", "AP8="))
        for bad in ("nospace", "MQv2-HMAC-SHA1 Credential", "MQv2-HMAC-SHA1 Signature=zz"):
            self.assertRaises(Exception, parse_authorization, bad)

    def test_needed_resources(self) -> None:
        """Java's table: PUB on a sent topic, SUB on topic and %RETRY%group for consuming RPCs."""
        topic, group = pb.Resource(name="T"), pb.Resource(name="G")
        self.assertEqual(needed_resources(rpc.SendMessageRequest(messages=[pb.Message(topic=topic)])), {"T": 4})
        for request in (rpc.AckMessageRequest(group=group, topic=topic),
                        rpc.ChangeInvisibleDurationRequest(group=group, topic=topic),
                        rpc.ForwardMessageToDeadLetterQueueRequest(group=group, topic=topic),
                        rpc.ReceiveMessageRequest(group=group, message_queue=pb.MessageQueue(topic=topic)),
                        rpc.PullMessageRequest(group=group, message_queue=pb.MessageQueue(topic=topic)),
                        rpc.UpdateOffsetRequest(group=group, message_queue=pb.MessageQueue(topic=topic)),
                        rpc.GetOffsetRequest(group=group, message_queue=pb.MessageQueue(topic=topic))):
            self.assertEqual(needed_resources(request), {"T": 8, "%RETRY%G": 8})
        self.assertEqual(needed_resources(rpc.QueryOffsetRequest(message_queue=pb.MessageQueue(topic=topic))),
                         {"T": 8})
        self.assertEqual(needed_resources(rpc.HeartbeatRequest(group=group)), {"%RETRY%G": 8})
        self.assertEqual(needed_resources(rpc.EndTransactionRequest(topic=topic)), {"T": 4})
        self.assertEqual(needed_resources(rpc.RecallMessageRequest(topic=topic)), {"T": 4})
        self.assertEqual(needed_resources(rpc.QueryRouteRequest(topic=topic)), {})
        self.assertEqual(needed_resources(rpc.QueryAssignmentRequest(topic=topic, group=group)), {})

    def test_mixed_topics_refused(self) -> None:
        """A SendMessage over two topics is refused (the check could not name one)."""
        check = GrpcAccessCheck(lambda: parse_acl(ACL))
        request = rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="TopicA")),
                                                   pb.Message(topic=pb.Resource(name="TopicB"))])
        error = self.assertRaises(GrpcError, check, dict(signed(*USER)), "127.0.0.1", request)
        self.assertEqual(error.code, pb.Code.FORBIDDEN)
