"""The shared test doubles provide the interfaces they stand in for (so they cannot drift)."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase
from zope.interface import Interface
from zope.interface.verify import verifyClass, verifyObject

from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.interfaces import IChannel, IMessageStore, IStoreService
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from tests.test_tap import RecordingStore
from tests.fakes import (
    STORE_MS,
    CannedStoreService,
    FakeChannel,
    FakeMasterStore,
    FakeMessageStore,
    FakeSlaveStore,
    FakeStoreService,
)
from tests.store.fakes import InlinePool, ThreadlessClock, as_thread_pool


class InterfaceTests(SynchronousTestCase):
    def verify(self, interface: type[Interface], *objects: Any) -> None:
        for obj in objects:
            self.assertTrue(verifyObject(interface, obj), obj)

    def test_real_store_service(self) -> None:
        """StoreService provides every method and attribute of IStoreService."""
        self.assertTrue(verifyClass(IStoreService, StoreService))
        store = StoreService(FakeMessageStore(), ThreadlessClock(), as_thread_pool(InlinePool()))
        self.verify(IStoreService, store)

    def test_fake_stores(self) -> None:
        """Every fake store service, and each subclass the tests make, provides IStoreService."""
        self.verify(IStoreService, FakeStoreService(), CannedStoreService(), FakeMasterStore(), FakeSlaveStore(),
                    RecordingStore([]))

    def test_blocking_stores(self) -> None:
        """MessageStore and the fake the store-service tests run on provide IMessageStore."""
        self.assertTrue(verifyClass(IMessageStore, MessageStore))
        self.verify(IMessageStore, FakeMessageStore())

    def test_fake_channel(self) -> None:
        """The fake channel provides IChannel."""
        self.verify(IChannel, FakeChannel())


class FakeStoreServiceTests(SynchronousTestCase):
    """The reads the processors' tests do not use still answer as the real store would."""

    def setUp(self) -> None:
        self.store = FakeStoreService()
        self.first = MessageExt(topic="T", body=b"one", properties={MessageConst.KEYS: "k1 k2"})
        self.second = MessageExt(topic="T", body=b"two")
        for msg in (self.first, self.second):
            self.successResultOf(self.store.put_message(msg))

    def test_lookups_by_offset(self) -> None:
        """Records are found by commit-log offset, raw and decoded; the log is readable for HA."""
        offset = self.second.commit_log_offset
        looked = self.successResultOf(self.store.look_message_by_offset(offset))
        assert looked is not None
        self.assertEqual((looked.body, looked.queue_offset), (b"two", 1))
        self.assertEqual(self.successResultOf(self.store.get_commit_log_offset_in_queue("T", 0, 1)), offset)
        self.assertEqual(self.successResultOf(self.store.get_commit_log_data(offset)),
                         self.successResultOf(self.store.select_one_message_by_offset(offset)))
        self.assertIsNone(self.successResultOf(self.store.get_commit_log_data(self.store.max_physical_offset)))

    def test_times_keys_and_replication(self) -> None:
        """Times answer STORE_MS, keys are indexed, replicated bytes must continue the log."""
        self.assertEqual(self.successResultOf(self.store.get_earliest_message_time("T", 0)), STORE_MS)
        self.assertEqual(self.successResultOf(self.store.get_offset_in_queue_by_time("T", 0, STORE_MS + 1)), 2)
        found = self.successResultOf(self.store.query_message("T", "k2", 10, 0, STORE_MS))
        self.assertEqual(len(found.records), 1)
        end = self.store.max_physical_offset
        self.assertFalse(self.successResultOf(self.store.append_to_commit_log(end + 1, b"x")))
        self.assertTrue(self.successResultOf(self.store.append_to_commit_log(end, b"x")))
        self.assertEqual(self.store.max_physical_offset, end + 1)
