"""CONSUMER_SEND_MSG_BACK: retry topic and delay level, dead-letter queue, header variants, errors."""

from __future__ import annotations

import random
from typing import Any

from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.broker.sendback import SendBackProcessor, max_reconsume_times
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.group import SubscriptionGroupConfig
from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.topic import PERM_READ, PERM_WRITE, SCHEDULE_TOPIC
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import PutMessageStatus
from tests.fakes import FakeChannel, FakeStoreService
from tests.broker.featurestore import new_clock, open_store, put, read_queue


def send_back(fields: dict[str, str], version: int = 401) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, fields)
    request.version = version
    return request


class SendBackTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.store = open_store(self, self.clock)
        self.topics = TopicConfigManager(self.clock)
        self.groups = SubscriptionGroupManager(self.clock)
        self.processor = SendBackProcessor(self.store, self.topics, self.groups, rng=random.Random(1))
        original = MessageExt(topic="Orders", body=b"payload", flag=7, queue_id=2, born_timestamp=123,
                              born_host=("10.1.1.1", 4000), properties={MessageConst.TAGS: "TagA", "k": "v"})
        self.offset = put(self, self.store, original).append.wrote_offset  # type: ignore[union-attr]
        self.original_id = original.msg_id

    def call(self, fields: dict[str, str], version: int = 401, processor: Any = None) -> RemotingCommand:
        response = (processor or self.processor).process_request(FakeChannel(), send_back(fields, version))
        result: RemotingCommand = self.successResultOf(response)
        return result

    def cpp12(self, offset: int | None = None, delay: int = 0, group: str = "CG") -> dict[str, str]:
        """The C++ 1.2 client's header: offset, group and delayLevel only (doc/wire.md §6)."""
        return {"delayLevel": str(delay), "group": group, "offset": str(self.offset if offset is None else offset)}

    def parked(self, level: int) -> list[MessageExt]:
        return read_queue(self, self.store, SCHEDULE_TOPIC, level - 1)

    def test_interface(self) -> None:
        """The processor provides IRequestProcessor and serves code 36."""
        self.assertTrue(verifyObject(IRequestProcessor, self.processor))
        self.assertEqual(self.processor.codes, (RequestCode.CONSUMER_SEND_MSG_BACK,))

    def test_retry_with_broker_chosen_delay(self) -> None:
        """delayLevel 0 ⇒ level 3 + reconsumeTimes on %RETRY%CG; the copy keeps body, flag, born info, properties."""
        response = self.call(self.cpp12())
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        [copy] = self.parked(3)
        self.assertEqual(copy.properties[MessageConst.REAL_TOPIC], "%RETRY%CG")
        self.assertEqual(copy.properties[MessageConst.RETRY_TOPIC], "Orders")
        self.assertEqual(copy.properties[MessageConst.ORIGIN_MESSAGE_ID], self.original_id)
        self.assertEqual(copy.properties["k"], "v")
        self.assertEqual((copy.body, copy.flag, copy.reconsume_times), (b"payload", 7, 1))
        self.assertEqual((copy.born_timestamp, copy.born_host), (123, ("10.1.1.1", 4000)))
        retry = self.topics.select_topic_config("%RETRY%CG")
        assert retry is not None
        self.assertEqual((retry.read_queue_nums, retry.perm), (1, PERM_READ | PERM_WRITE))

    def test_requested_delay_level(self) -> None:
        """A positive delayLevel is used as it is."""
        self.assertEqual(self.call(self.cpp12(delay=5)).code, ResponseCode.SUCCESS)
        self.assertEqual(len(self.parked(5)), 1)
        self.assertEqual(self.parked(3), [])

    def test_second_retry_keeps_origin(self) -> None:
        """Sending a retried message back again keeps RETRY_TOPIC and ORIGIN_MESSAGE_ID; reconsumeTimes 2, level 4."""
        self.call(self.cpp12())
        [first] = self.parked(3)
        self.call(self.cpp12(offset=first.commit_log_offset))
        [second] = self.parked(4)
        self.assertEqual(second.properties[MessageConst.RETRY_TOPIC], "Orders")
        self.assertEqual(second.properties[MessageConst.ORIGIN_MESSAGE_ID], self.original_id)
        self.assertEqual(second.reconsume_times, 2)

    def dead_letters(self) -> list[MessageExt]:
        return read_queue(self, self.store, "%DLQ%CG")

    def test_dead_letter_after_group_limit(self) -> None:
        """reconsumeTimes ≥ the group's retryMaxTimes ⇒ %DLQ%CG (1 queue, readable), stored at once."""
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("CG", retry_max_times=0))
        self.assertEqual(self.call(self.cpp12()).code, ResponseCode.SUCCESS)
        [dead] = self.dead_letters()
        self.assertNotIn(MessageConst.DELAY_TIME_LEVEL, dead.properties)
        self.assertEqual(dead.properties[MessageConst.RETRY_TOPIC], "Orders")
        dlq = self.topics.select_topic_config("%DLQ%CG")
        assert dlq is not None
        self.assertEqual((dlq.read_queue_nums, dlq.perm), (1, PERM_READ | PERM_WRITE))

    def test_negative_delay_level_is_dead_letter(self) -> None:
        """delayLevel < 0 sends straight to the DLQ."""
        self.call(self.cpp12(delay=-1))
        self.assertEqual(len(self.dead_letters()), 1)

    def test_header_limit_honoured_from_v3_4_9(self) -> None:
        """maxReconsumeTimes=0 from a client ≥ V3_4_9 ⇒ DLQ; from an older client the group's 16 applies."""
        fields = {**self.cpp12(), "maxReconsumeTimes": "0", "originMsgId": "X", "originTopic": "Orders",
                  "unitMode": "false"}
        self.call(fields, version=120)
        self.assertEqual(self.dead_letters(), [])
        self.call(fields, version=121)
        self.assertEqual(len(self.dead_letters()), 1)

    def test_cpp2_swapped_limit_is_ignored(self) -> None:
        """The C++ 2.0 client's maxReconsumeTimes=3000 (its timeout) falls back to the group's limit."""
        self.assertEqual(max_reconsume_times(16, 3000, 401), 16)
        self.assertEqual(max_reconsume_times(16, -1, 401), 16)
        self.assertEqual(max_reconsume_times(16, 5, 401), 5)
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("CG", retry_max_times=0))
        self.call({**self.cpp12(), "maxReconsumeTimes": "3000"})
        self.assertEqual(len(self.dead_letters()), 1)

    def test_unknown_group(self) -> None:
        """Without auto-creation an unknown group is SUBSCRIPTION_GROUP_NOT_EXIST."""
        groups = SubscriptionGroupManager(self.clock, auto_create=False)
        processor = SendBackProcessor(self.store, self.topics, groups)
        self.assertEqual(self.call(self.cpp12(), processor=processor).code, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST)

    def test_missing_message(self) -> None:
        """An offset with no message is SYSTEM_ERROR; a missing offset field too."""
        self.assertEqual(self.call(self.cpp12(offset=self.offset + 5)).code, ResponseCode.SYSTEM_ERROR)
        response = self.call({"group": "CG", "delayLevel": "0"})
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("offset", response.remark or "")

    def test_put_failure_names_status(self) -> None:
        """A refused put answers SYSTEM_ERROR with the status as remark."""
        refusing = FakeStoreService()
        original = MessageExt(topic="Orders", body=b"payload", born_host=("10.1.1.1", 4000))
        offset = self.successResultOf(refusing.put_message(original)).append.wrote_offset  # type: ignore[union-attr]
        refusing.put_status = PutMessageStatus.OS_PAGECACHE_BUSY
        processor = SendBackProcessor(refusing, self.topics, self.groups)
        response = self.call(self.cpp12(offset), processor=processor)
        self.assertEqual((response.code, response.remark), (ResponseCode.SYSTEM_ERROR, "OS_PAGECACHE_BUSY"))

    def test_slave_and_no_retry_queues(self) -> None:
        """A broker that takes no writes answers NO_PERMISSION; retryQueueNums 0 drops the message (SUCCESS)."""
        slave = SendBackProcessor(self.store, self.topics, self.groups, writable=lambda: False)
        self.assertEqual(self.call(self.cpp12(), processor=slave).code, ResponseCode.NO_PERMISSION)
        self.groups.update_subscription_group_config(SubscriptionGroupConfig("CG", retry_queue_nums=0))
        self.assertEqual(self.call(self.cpp12()).code, ResponseCode.SUCCESS)
        self.assertEqual(self.parked(3), [])
