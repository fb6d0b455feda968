"""ACL on a real broker on loopback: rocketpy's clients with and without the right keys, and raw frames."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet import reactor
from twisted.logger import capturedLogs
from twisted.trial.unittest import TestCase

from rocketpy.acl.signing import AclClientHook
from rocketpy.client import ConsumeFromWhere, Producer, PushConsumer, new_message
from rocketpy.client.results import ConsumeResult
from rocketpy.client.errors import MQBrokerError, SendFailedError
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.client.test_integration import LoopbackCluster, pause

ACL = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - TopicA=PUB|SUB
      - TopicB=SUB
    groupPerms:
      - GroupA=SUB
  - accessKey: rocketmq2
    secretKey: "87654321"
    admin: true
"""
USER = ("RocketMQ", "12345678")
ADMIN = ("rocketmq2", "87654321")
REFUSED = "org.apache.rocketmq.acl.common.AclException: "


def send_request(topic: str, body: bytes = b"payload") -> RemotingCommand:
    """A SEND_MESSAGE_V2 for queue 0 of *topic*."""
    fields = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "i": "",
              "j": "0", "k": "false", "m": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, body)


class AclBrokerTestCase(TestCase):
    """A name server and one broker (``self.broker``: its address) on loopback, with ACL on by default."""

    timeout = 60

    async def start(self, acl: str = ACL, acl_enable: bool = True) -> None:
        self.acl_path = os.path.abspath(self.mktemp())
        with open(self.acl_path, "w") as f:
            f.write(acl)
        self.cluster = LoopbackCluster(self)
        self.addCleanup(self.cluster.close)
        settings: dict[str, Any] = {"acl_enable": True, "acl_file": self.acl_path} if acl_enable else {}
        self.broker = await self.cluster.add_broker("broker-a", **settings)
        self.raw = RemotingClient(reactor)
        self.addCleanup(self.raw.close)

    async def call(self, request: RemotingCommand, credentials: tuple[str, str] | None = None,
                   ) -> RemotingCommand:
        """One request to the broker, signed with *credentials* if given."""
        if credentials is not None:
            AclClientHook(*credentials).before_request(self.broker, request)
        return await self.raw.invoke_sync(self.broker, request, 5)

    def assert_refused(self, response: RemotingCommand, message: str) -> None:
        self.assertEqual((response.code, response.remark), (ResponseCode.SYSTEM_ERROR, REFUSED + message))

    async def producer(self, credentials: Any) -> Producer:
        producer = Producer("PG", self.cluster.namesrv_addr, reactor, credentials=credentials, retry_times=0)
        await producer.start()
        self.addCleanup(producer.shutdown)
        return producer


class BrokerAclTests(AclBrokerTestCase):

    async def test_right_key_sends_and_consumes(self) -> None:
        """With the right key a producer sends to TopicA and a consumer of GroupA receives it."""
        await self.start()
        producer = await self.producer(USER)
        result = await producer.send(new_message("TopicA", b"hello acl"))
        self.assertTrue(result.msg_id)
        got: list[Any] = []
        consumer = PushConsumer("GroupA", self.cluster.namesrv_addr, reactor, credentials=USER,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("TopicA")

        def listener(msgs: list[Any], context: Any) -> ConsumeResult:
            got.extend(msgs)
            return ConsumeResult.CONSUME_SUCCESS

        consumer.register_listener(listener)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        for _ in range(200):
            if got:
                break
            await pause()
        self.assertEqual([m.body for m in got], [b"hello acl"])

    async def test_wrong_secret_and_no_credentials_are_refused(self) -> None:
        """A wrong secret key, an unknown access key and no credentials at all: each send refused."""
        await self.start()
        cases = [(("RocketMQ", "wrong-secret"), "Check signature failed for accessKey=RocketMQ"),
                 (("Nobody123", "12345678"), "No acl config for Nobody123"),
                 (None, "No accessKey is configured")]
        for credentials, message in cases:
            producer = await self.producer(credentials)
            error: Any = await self.assertFailure(producer.send(new_message("TopicA", b"x")), SendFailedError)
            refusal = error.last_error
            self.assertIsInstance(refusal, MQBrokerError)
            self.assertEqual((refusal.code, refusal.remark), (ResponseCode.SYSTEM_ERROR, REFUSED + message))

    async def test_wrong_permission_is_refused(self) -> None:
        """The right key without PUB on the topic: refused, naming the topic."""
        await self.start()
        producer = await self.producer(USER)
        for topic in ("TopicB", "TopicC"):  # listed with SUB only; not listed (default DENY)
            error: Any = await self.assertFailure(producer.send(new_message(topic, b"x")), SendFailedError)
            self.assertEqual(error.last_error.remark, REFUSED + f"No default permission for topic:{topic}")
            batch = [new_message(topic, b"b1"), new_message(topic, b"b2")]  # SEND_BATCH_MESSAGE: checked too
            error = await self.assertFailure(producer.send_batch(batch), SendFailedError)
            self.assertEqual(error.last_error.remark, REFUSED + f"No default permission for topic:{topic}")
        result = await producer.send_batch([new_message("TopicA", b"b1"), new_message("TopicA", b"b2")])
        self.assertTrue(result.msg_id)

    async def test_raw_frames_unsigned_missigned_unpermitted(self) -> None:
        """Raw frames: none of the unsigned, mis-signed or unpermitted requests is accepted."""
        await self.start()
        self.assert_refused(await self.call(send_request("TopicA")), "No accessKey is configured")
        tampered = send_request("TopicA")
        AclClientHook(*USER).before_request(self.broker, tampered)
        tampered.body = b"changed after signing"
        self.assert_refused(await self.raw.invoke_sync(self.broker, tampered, 5),
                            "Check signature failed for accessKey=RocketMQ")
        forged = send_request("TopicA")
        forged.ext_fields.update(AccessKey="RocketMQ", Signature="bm90IGEgc2lnbmF0dXJl")
        self.assert_refused(await self.call(forged), "Check signature failed for accessKey=RocketMQ")
        self.assert_refused(await self.call(send_request("TopicB"), USER), "No default permission for topic:TopicB")
        for code in (RequestCode.SEND_REPLY_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            other = send_request("TopicB")
            other.code = code
            self.assert_refused(await self.call(other, USER), "No default permission for topic:TopicB")
        pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "GroupB", "topic": "TopicA", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"})
        self.assert_refused(await self.call(pull, USER), "No default permission for group:GroupB")
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "TopicA", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
            "topicFilterType": "SINGLE_TAG"})
        self.assert_refused(await self.call(create, USER),
                            "Need admin permission for request code=17, but accessKey=RocketMQ is not")
        # nothing of the above was stored: the admin sees no message in TopicA or TopicB
        for topic in ("TopicA", "TopicB"):
            offset = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
            response = await self.call(offset, ADMIN)
            self.assertIn(response.code, (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
            self.assertEqual(response.ext_fields.get("offset", "0"), "0")
        # and a signed, permitted request on the same connection works
        self.assertEqual((await self.call(send_request("TopicA"), USER)).code, ResponseCode.SUCCESS)

    async def test_every_request_code_unsigned_or_missigned(self) -> None:
        """Every request code, unsigned and then with a wrong signature: none is processed (each is
        refused, or not supported at all)."""
        await self.start()
        accepted = []
        for code in RequestCode:
            for fields in ({"topic": "TopicA", "consumerGroup": "GroupA"},
                           {"topic": "TopicA", "consumerGroup": "GroupA", "AccessKey": "RocketMQ", "Signature": "eA=="}):
                response = await self.call(RemotingCommand.request(code, dict(fields), b"{}"))
                if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    continue
                expected = "Check signature failed for accessKey=RocketMQ" if "Signature" in fields \
                    else "No accessKey is configured"
                if (response.code, response.remark) != (ResponseCode.SYSTEM_ERROR, REFUSED + expected):
                    accepted.append((code, response.code, response.remark))
        self.assertEqual(accepted, [])

    async def test_admin_account(self) -> None:
        """An admin account without resource lists may create topics and send anywhere."""
        await self.start()
        create = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "TopicZ", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
            "topicFilterType": "SINGLE_TAG"})
        self.assertEqual((await self.call(create, ADMIN)).code, ResponseCode.SUCCESS)
        self.assertEqual((await self.call(send_request("TopicZ"), ADMIN)).code, ResponseCode.SUCCESS)

    async def until(self, predicate: Any, what: str) -> None:
        for _ in range(100):  # the watcher looks every second
            if await predicate():
                return
            await pause(0.05)
        self.fail(f"not {what} in 5 s")

    async def test_file_reload_and_broken_file(self) -> None:
        """A changed file applies without restart (here: a white-listed loopback address skips the check);
        a broken file keeps the last good ACL and logs why."""
        await self.start()

        async def unsigned_accepted() -> bool:
            return (await self.call(send_request("TopicC"))).code == ResponseCode.SUCCESS

        self.assertFalse(await unsigned_accepted())
        with open(self.acl_path, "w") as f:
            f.write(ACL.replace("  - 10.10.103.*", "  - 127.0.0.1"))
        await self.until(unsigned_accepted, "reloaded")
        with capturedLogs() as logs:
            with open(self.acl_path, "w") as f:
                f.write("accounts:\n  - accessKey: short\n    secretKey: x\n")
            for _ in range(100):
                if any("not applied" in str(e.get("log_format")) for e in logs):
                    break
                await pause(0.05)
        warnings = [e for e in logs if "not applied" in str(e.get("log_format"))]
        self.assertEqual(len(warnings), 1)
        self.assertIn("The accessKey=short and secretKey=(1 characters) cannot be null", str(warnings[0]["error"]))
        self.assertTrue(await unsigned_accepted())  # the last good file still applies

    async def test_disabled_acl_adds_no_hook(self) -> None:
        """Without aclEnable the broker's server has no RPC hook: no per-request work, signed or not."""
        cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        addr = await cluster.add_broker("broker-b")
        self.assertEqual(cluster.brokers["broker-b"].server.rpc_hooks, ())
        raw = RemotingClient(reactor, rpc_hooks=[AclClientHook(*USER)])
        self.addCleanup(raw.close)
        self.assertEqual((await raw.invoke_sync(addr, send_request("TopicA"), 5)).code, ResponseCode.SUCCESS)

