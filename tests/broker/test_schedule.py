"""ScheduleMessageService: delayed messages become due on a Clock, offsets persist across restarts."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.schedule import DelayOffsetProcessor, DelayOffsetTable, ScheduleMessageService
from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.topic import SCHEDULE_TOPIC
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.service import StoreService
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from tests.fakes import FakeChannel
from tests.broker.featurestore import new_clock, open_store, put, read_queue

LEVELS = "1s 5s 1m"


def delayed(body: bytes, level: int, topic: str = "Orders", queue_id: int = 1) -> MessageExt:
    return MessageExt(topic=topic, body=body, queue_id=queue_id,
                      properties={MessageConst.DELAY_TIME_LEVEL: str(level), MessageConst.KEYS: "k"})


class _FailingPuts:
    """A store whose puts fail with ``status`` while ``failing`` is set; reads pass through."""

    def __init__(self, store: StoreService) -> None:
        self._store = store
        self.failing: PutMessageStatus | None = PutMessageStatus.OS_PAGECACHE_BUSY

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def put_message(self, msg: MessageExt) -> Deferred[PutMessageResult]:
        if self.failing is not None:
            return succeed(PutMessageResult(self.failing))
        return self._store.put_message(msg)


class ScheduleTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.root = self.mktemp()
        self.store = open_store(self, self.clock, self.root, message_delay_level=LEVELS)
        self.path = os.path.join(self.root, "config", "delayOffset.json")

    def service(self, store: Any = None) -> ScheduleMessageService:
        table = DelayOffsetTable(self.path)
        service = ScheduleMessageService(store or self.store, self.clock, [1.0, 5.0, 60.0], table)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        return service

    def delivered(self, topic: str = "Orders", queue_id: int = 1) -> list[MessageExt]:
        return read_queue(self, self.store, topic, queue_id)

    def test_parked_then_delivered_when_due(self) -> None:
        """A DELAY=2 message waits on queue 1 of SCHEDULE_TOPIC_XXXX and reaches its real queue after 5 s."""
        put(self, self.store, delayed(b"later", 2))
        [parked] = read_queue(self, self.store, SCHEDULE_TOPIC, 1)
        self.assertEqual(parked.properties[MessageConst.REAL_TOPIC], "Orders")
        service = self.service()
        self.clock.advance(4.9)
        self.assertEqual(self.delivered(), [])
        self.clock.advance(0.1)
        [msg] = self.delivered()
        self.assertEqual(msg.body, b"later")
        self.assertNotIn(MessageConst.DELAY_TIME_LEVEL, msg.properties)
        self.assertEqual(msg.properties[MessageConst.WAIT_STORE_MSG_OK], "false")
        self.assertEqual(msg.properties[MessageConst.KEYS], "k")
        self.assertEqual(service.offsets.offsets[2], 1)

    def test_levels_are_independent(self) -> None:
        """A 1 s message behind nothing is delivered before an earlier-sent 1 m message."""
        put(self, self.store, delayed(b"slow", 3))
        put(self, self.store, delayed(b"fast", 1))
        self.service()
        self.clock.pump([0.5] * 4)
        self.assertEqual([m.body for m in self.delivered()], [b"fast"])
        self.clock.pump([1.0] * 60)
        self.assertEqual([m.body for m in self.delivered()], [b"fast", b"slow"])

    def test_idle_levels_run_no_task_and_still_deliver(self) -> None:
        """A level with nothing parked starts no delivery task (a coroutine every 100 ms per level
        was broker CPU under load) but keeps checking every RECHECK: a message parked later is
        delivered when due."""
        service = self.service()
        tasks: list[int] = []
        deliver = service._deliver

        def counted(level: int) -> Any:
            tasks.append(level)
            return deliver(level)

        service._deliver = counted  # type: ignore[method-assign]
        self.clock.pump([0.1] * 30)
        self.assertEqual(tasks, [])
        self.assertEqual(service.offsets.offsets, {1: 0, 2: 0, 3: 0})
        put(self, self.store, delayed(b"m", 1))
        self.clock.pump([0.1] * 11)
        self.assertEqual([m.body for m in self.delivered()], [b"m"])
        self.assertEqual(tasks[:1], [1])
        self.assertEqual(service.offsets.offsets[1], 1)

    def test_failed_put_is_retried_at_the_same_offset(self) -> None:
        """While puts fail the offset stays; once they work the message is delivered exactly once."""
        put(self, self.store, delayed(b"m", 1))
        store = _FailingPuts(self.store)
        service = self.service(store)
        self.clock.pump([0.1] * 20)
        self.assertEqual((self.delivered(), service.offsets.offsets[1]), ([], 0))
        store.failing = None
        self.clock.advance(0.1)
        self.assertEqual(len(self.delivered()), 1)
        self.clock.pump([0.1] * 20)
        self.assertEqual(len(self.delivered()), 1)

    def test_hopeless_put_is_skipped(self) -> None:
        """A message the store can never take (MESSAGE_ILLEGAL) is dropped so the level moves on."""
        put(self, self.store, delayed(b"m", 1))
        store = _FailingPuts(self.store)
        store.failing = PutMessageStatus.MESSAGE_ILLEGAL
        service = self.service(store)
        self.clock.advance(1.0)
        self.assertEqual(service.offsets.offsets[1], 1)

    def test_offsets_persisted_every_ten_seconds_and_on_stop(self) -> None:
        """delayOffset.json holds {"offsetTable":{level:offset}} after 10 s and after stop."""
        put(self, self.store, delayed(b"a", 1))
        service = self.service()
        self.clock.advance(1.0)
        self.assertFalse(os.path.exists(self.path))
        self.clock.advance(9.0)
        with open(self.path) as f:
            self.assertEqual(json.load(f)["offsetTable"]["1"], 1)
        put(self, self.store, delayed(b"b", 1))
        self.clock.advance(1.0)
        self.successResultOf(service.stopService())
        with open(self.path) as f:
            self.assertEqual(json.load(f)["offsetTable"]["1"], 2)
        self.successResultOf(self.store.stopService())
        self.assertEqual(self.clock.getDelayedCalls(), [])  # no timer of a level or of the persist loop left

    def test_restart_neither_loses_nor_repeats(self) -> None:
        """Stop with one message delivered and one pending; after a restart only the pending one comes."""
        put(self, self.store, delayed(b"first", 1))
        self.clock.advance(0.5)
        put(self, self.store, delayed(b"second", 2))
        service = self.service()
        self.clock.advance(1.0)
        self.assertEqual([m.body for m in self.delivered()], [b"first"])
        self.successResultOf(service.stopService())
        self.successResultOf(self.store.stopService())
        self.store = open_store(self, self.clock, self.root, message_delay_level=LEVELS)
        self.service()
        self.clock.pump([0.1] * 60)
        self.assertEqual([m.body for m in self.delivered()], [b"first", b"second"])

    def test_get_all_delay_offset(self) -> None:
        """GET_ALL_DELAY_OFFSET returns the table as delayOffset.json holds it."""
        table = DelayOffsetTable()
        table.offsets.update({1: 4, 3: 2})
        processor = DelayOffsetProcessor(table)
        response = processor.process_request(FakeChannel(), RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
        self.assertEqual(response.code, ResponseCode.SUCCESS)
        self.assertEqual(json.loads(response.body), {"offsetTable": {"1": 4, "3": 2}})
