"""PullMessageProcessor: header shapes, status mapping, tag filtering, subscriptions, commit, long polling."""

from __future__ import annotations

from dataclasses import dataclass

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.broker.filter import build_tag_filter
from rocketpy.broker.longpoll import PullRequestHoldService
from rocketpy.broker.pull import PullMessageProcessor
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.message import MessageExt, decode_records, java_hash
from rocketpy.common.topic import PERM_WRITE, TopicConfig
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.fakes import FakeChannel, FakeStoreService

#: PULL_MESSAGE as the C++ client sends it (numbers already strings, doc/wire.md §14).
CPP_PULL = {
    "AccessKey": "",
    "OnsChannel": "ALIYUN",
    "Signature": "c2ln",
    "commitOffset": "0",
    "consumerGroup": "CID",
    "maxMsgNums": "32",
    "queueId": "0",
    "queueOffset": "0",
    "subVersion": "1795938075655",
    "subscription": "*",
    "suspendTimeoutMillis": "15000",
    "sysFlag": "6",
    "topic": "T",
}


@dataclass
class Sub:
    sub_string: str
    sub_version: int
    expression_type: str | None = None


class PullMessageProcessorTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.store = FakeStoreService()
        self.topics = TopicConfigManager(self.clock)
        self.topics.update_topic_config(TopicConfig("T", 4, 4))
        self.groups = SubscriptionGroupManager(self.clock)
        self.hold = PullRequestHoldService(self.clock, self.store.get_max_offset_in_queue)
        self.hold.startService()
        self.addCleanup(self.hold.stopService)
        self.hold.listen_to(self.store)  # called only while a pull is held
        self.subscriptions: dict[tuple[str, str], Sub] = {}
        self.commits: list[tuple[str, str, str, int, int]] = []
        self.channel = FakeChannel("10.0.0.9:4444")
        self.processor = PullMessageProcessor(
            self.store, self.topics, self.hold,
            find_subscription=lambda g, t: self.subscriptions.get((g, t)),
            commit_offset=lambda *args: self.commits.append(args),
            groups=self.groups,
        )

    def put(self, *tags: str | None, topic: str = "T", queue_id: int = 0) -> None:
        for i, tag in enumerate(tags):
            props = {"TAGS": tag} if tag else {}
            self.store.put_message(MessageExt(topic, b"body-%d" % i, properties=props, queue_id=queue_id))

    def pull(self, **fields: str) -> RemotingCommand | None:
        """Run a pull and return its response (None when it is still held)."""
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL, **fields))
        result = self.processor.process_request(self.channel, request)
        if isinstance(result, RemotingCommand):
            return result
        done: list[RemotingCommand | None] = []

        def record(response: RemotingCommand | None) -> RemotingCommand | None:
            done.append(response)
            return response

        result.addCallback(record)
        if not done:
            self.held = result
            return None
        return done[0]

    def assert_offsets(self, response: RemotingCommand | None, code: int, next_begin: int, low: int, high: int) -> None:
        assert response is not None
        self.assertEqual(response.code, code, response.remark)
        self.assertEqual(
            response.ext_fields,
            {"suggestWhichBrokerId": "0", "nextBeginOffset": str(next_begin), "minOffset": str(low),
             "maxOffset": str(high)},
        )

    def test_provides_interface(self) -> None:
        self.assertTrue(verifyObject(IRequestProcessor, self.processor))

    def test_found(self) -> None:
        """Messages are returned back to back with the four offsets as strings and remark FOUND."""
        self.put("TagA", None, "TagB")
        response = self.pull()
        self.assert_offsets(response, ResponseCode.SUCCESS, 3, 0, 3)
        assert response is not None
        self.assertEqual(response.remark, "FOUND")
        self.assertEqual([m.body for m in decode_records(response.body)], [b"body-0", b"body-1", b"body-2"])

    def test_max_msg_nums(self) -> None:
        """maxMsgNums caps the batch; nextBeginOffset follows it."""
        self.put(*["TagA"] * 5)
        response = self.pull(maxMsgNums="2", queueOffset="1")
        self.assert_offsets(response, ResponseCode.SUCCESS, 3, 0, 5)
        assert response is not None
        self.assertEqual([m.queue_offset for m in decode_records(response.body)], [1, 2])

    def test_tag_subscription(self) -> None:
        """A tag subscription filters by the tags' Java hash codes."""
        self.put("TagA", "TagB", None, "TagC", "TagA")
        response = self.pull(subscription="TagA || TagC")
        assert response is not None
        self.assertEqual([m.tags for m in decode_records(response.body)], ["TagA", "TagC", "TagA"])

    def test_no_matched_advances(self) -> None:
        """Everything filtered out: PULL_RETRY_IMMEDIATELY with nextBeginOffset past the scanned entries."""
        self.put("TagB", "TagB", None)
        response = self.pull(subscription="TagA")
        self.assert_offsets(response, ResponseCode.PULL_RETRY_IMMEDIATELY, 3, 0, 3)
        assert response is not None
        self.assertEqual((response.remark, response.body), ("NO_MATCHED_MESSAGE", b""))

    def test_empty_queue(self) -> None:
        """Empty queue: 19 at offset 0 without suspend, 21 with nextBeginOffset 0 at another offset."""
        self.assert_offsets(self.pull(sysFlag="4"), ResponseCode.PULL_NOT_FOUND, 0, 0, 0)
        self.assert_offsets(self.pull(sysFlag="4", queueOffset="5"), ResponseCode.PULL_OFFSET_MOVED, 0, 0, 0)

    def test_offset_out_of_range(self) -> None:
        """Beyond the end: 21 with max; below the minimum: 21 with min; at the end: 19 with the offset."""
        self.put("A", "B", "C")
        self.store.min_offsets[("T", 0)] = 1
        self.assert_offsets(self.pull(queueOffset="9"), ResponseCode.PULL_OFFSET_MOVED, 3, 1, 3)
        self.assert_offsets(self.pull(queueOffset="0"), ResponseCode.PULL_OFFSET_MOVED, 1, 1, 3)
        self.assert_offsets(self.pull(queueOffset="3", sysFlag="4"), ResponseCode.PULL_NOT_FOUND, 3, 1, 3)

    def test_topic_checks(self) -> None:
        """Unknown topic 17, unreadable topic 16, queue id out of range 1 — never an exception."""
        self.topics.update_topic_config(TopicConfig("W", 4, 4, PERM_WRITE))
        response = self.pull(topic="Missing")
        assert response is not None
        self.assertEqual(response.code, ResponseCode.TOPIC_NOT_EXIST)
        self.assertEqual(self.pull(topic="W").code, ResponseCode.NO_PERMISSION)  # type: ignore[union-attr]
        for qid in ("4", "-1"):
            self.assertEqual(self.pull(queueId=qid).code, ResponseCode.SYSTEM_ERROR)  # type: ignore[union-attr]
        self.assertEqual(self.store.reads, [])

    def test_bad_header(self) -> None:
        """A missing or non-numeric field: SYSTEM_ERROR naming it."""
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {k: v for k, v in CPP_PULL.items() if k != "topic"})
        response = self.processor.process_request(self.channel, request)
        assert isinstance(response, RemotingCommand)
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("topic", response.remark or "")
        response2 = self.pull(queueOffset="abc")
        assert response2 is not None
        self.assertEqual(response2.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("queueOffset", response2.remark or "")

    def test_sql92_without_property_filter(self) -> None:
        """An SQL92 subscription on a broker without enablePropertyFilter: SYSTEM_ERROR and Java's remark."""
        response = self.pull(expressionType="SQL92", subscription="a > 1")
        assert response is not None
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertEqual(response.remark, "The broker does not support consumer to filter message by SQL92")
        self.assertEqual(self.store.reads, [])

    def test_subscription_from_heartbeat(self) -> None:
        """Without the subscription flag the heartbeat's subscription (by tag strings) is used."""
        self.put("TagA", "TagB")
        self.subscriptions[("CID", "T")] = Sub("TagB", 100)
        response = self.pull(sysFlag="2", subscription="*", subVersion="100")
        assert response is not None
        self.assertEqual([m.tags for m in decode_records(response.body)], ["TagB"])

    def test_subscription_missing_or_old(self) -> None:
        """No registered subscription: 24; one older than the request's subVersion: 25."""
        self.assertEqual(self.pull(sysFlag="0").code, ResponseCode.SUBSCRIPTION_NOT_EXIST)  # type: ignore[union-attr]
        self.subscriptions[("CID", "T")] = Sub("*", 100)
        response = self.pull(sysFlag="0", subVersion="101")
        self.assertEqual(response.code, ResponseCode.SUBSCRIPTION_NOT_LATEST)  # type: ignore[union-attr]

    def test_group_checks(self) -> None:
        """A group that cannot consume: NO_PERMISSION; an unknown group without auto-create: 26."""
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("CID", consume_enable=False))
        self.assertEqual(self.pull().code, ResponseCode.NO_PERMISSION)  # type: ignore[union-attr]
        strict_groups = SubscriptionGroupManager(self.clock, auto_create=False)
        strict = PullMessageProcessor(self.store, self.topics, groups=strict_groups)
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL, consumerGroup="Other"))
        response = strict.process_request(self.channel, request)
        assert isinstance(response, RemotingCommand)
        self.assertEqual(response.code, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)

    def test_commit_offset(self) -> None:
        """Flag 0x1 commits commitOffset (once, before reading); a negative one is not committed."""
        self.put("A")
        self.pull(sysFlag="7", commitOffset="1", queueOffset="1")
        self.pull(sysFlag="5", commitOffset="-1")
        self.pull(sysFlag="6", commitOffset="3")
        self.assertEqual(self.commits, [("10.0.0.9:4444", "CID", "T", 0, 1)])

    def test_long_poll_woken_by_arrival(self) -> None:
        """A held pull is answered as soon as a message reaches its queue, without a second commit; the
        hold is the store's arrival listener only meanwhile."""
        arrival = self.hold._arrival
        self.assertFalse(arrival.wanted)
        self.assertIsNone(self.pull(sysFlag="7", commitOffset="0"))
        self.assertEqual(self.hold.parked_count("T", 0), 1)
        self.assertTrue(arrival.wanted)
        self.put("X", queue_id=1)
        self.assertNoResult(self.held)
        self.put("TagA")
        self.assertFalse(arrival.wanted)
        response = self.successResultOf(self.held)
        self.assert_offsets(response, ResponseCode.SUCCESS, 1, 0, 1)
        self.assertEqual(len(self.commits), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [self.hold._loop.call])  # only the re-check loop

    def test_long_poll_deadline(self) -> None:
        """Nothing arrives: PULL_NOT_FOUND at the requested suspend time, not before."""
        self.put("A")
        self.assertIsNone(self.pull(queueOffset="1", suspendTimeoutMillis="15000"))
        self.clock.advance(14.9)
        self.assertNoResult(self.held)
        self.clock.advance(0.1)
        self.assert_offsets(self.successResultOf(self.held), ResponseCode.PULL_NOT_FOUND, 1, 0, 1)

    def test_long_poll_capped(self) -> None:
        """A suspend time near the client's 30 s RPC timeout is cut to the hold maximum."""
        self.assertIsNone(self.pull(suspendTimeoutMillis="60000"))
        self.clock.advance(20)
        self.assertEqual(self.successResultOf(self.held).code, ResponseCode.PULL_NOT_FOUND)  # type: ignore[union-attr]

    def test_long_poll_recheck(self) -> None:
        """A message the store did not announce is found by the 5 s re-check."""
        self.store.notify = False
        self.assertIsNone(self.pull())
        self.put("A")
        self.assertNoResult(self.held)
        self.clock.advance(5)
        self.assertEqual(self.successResultOf(self.held).code, ResponseCode.SUCCESS)  # type: ignore[union-attr]

    def test_closed_channel_dropped(self) -> None:
        """Requests parked by a closed channel are dropped unanswered and their timers cancelled."""
        self.assertIsNone(self.pull())
        self.hold.on_channel_close(self.channel.remote_address, self.channel)
        self.assertIsNone(self.successResultOf(self.held))
        self.assertEqual(self.hold.parked_count(), 0)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_without_hold_service(self) -> None:
        """Without long polling a suspend pull is answered at once."""
        processor = PullMessageProcessor(self.store, self.topics)
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, dict(CPP_PULL))
        response = self.successResultOf(processor.process_request(self.channel, request))  # type: ignore[arg-type]
        assert response is not None
        self.assertEqual(response.code, ResponseCode.PULL_NOT_FOUND)


class TagFilterTests(SynchronousTestCase):
    def test_all(self) -> None:
        """*, empty and None accept every tag code."""
        for expression in ("*", "", None, " * "):
            f = build_tag_filter(expression)
            self.assertTrue(f.matches_all)
            self.assertTrue(f(0) and f(12345))

    def test_tags(self) -> None:
        """`A || B` accepts the Java hashes of A and B only, whatever spaces surround them."""
        f = build_tag_filter(" TagA ||TagB|| ")
        self.assertEqual(f.tags, {"TagA", "TagB"})
        self.assertEqual(f.codes, {2598919, 2598920})
        self.assertTrue(f(java_hash("TagA")) and f(java_hash("TagB")))
        self.assertFalse(f(0) or f(java_hash("TagC")))
        self.assertTrue(f.matches_tag("TagA"))
        self.assertFalse(f.matches_tag(None))
