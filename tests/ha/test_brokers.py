"""A master and a slave broker with a name server on loopback, used through the rocketpy client."""

from __future__ import annotations

import json
import os
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor
from twisted.internet.defer import gatherResults
from twisted.trial.unittest import TestCase

from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.controller import BrokerService
from rocketpy.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer, PullStatus, PushConsumer
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult, SendStatus
from rocketpy.common.message import decode_record, decode_records
from rocketpy.common.topic import TIMER_TOPIC
from rocketpy.namesrv.service import NamesrvService
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService
from rocketpy.web.metrics import render_metrics
from tests.features.test_timer_features import send_soon_and_later
from tests.ports import free_port
from tests.ha.test_replication import caught_up, until


class BrokerPairTests(TestCase):
    timeout = 120

    async def pair(self, role: str, **master_settings: Any) -> tuple[BrokerService, BrokerService]:
        """Name server, then the master (registered), then its slave, linked and copying config."""
        self.root = self.mktemp()
        self.namesrv = namesrv = NamesrvService(reactor, "tcp:0:interface=127.0.0.1", os.path.join(self.root, "ns"))
        namesrv.startService()
        self.addCleanup(lambda: namesrv.stopService() if namesrv.running else None)
        port = namesrv.listening_port
        assert port is not None
        self.namesrv_addr = f"127.0.0.1:{port.getHost().port}"  # type: ignore[attr-defined]
        master = await self.broker("master", role, 0, ha_listen=f"tcp:{free_port()}:interface=127.0.0.1",
                                   **master_settings)
        await master.registration.register_all()
        slave = await self.broker("slave", "SLAVE", 1)
        assert slave.ha_client is not None and slave.slave_sync is not None
        await until(lambda: slave.ha_client is not None and slave.ha_client.connected)
        self.assertEqual(slave.slave_sync.master_address, master.config.advertised_address)
        self.assertEqual(slave.ha_client.master_address, master.config.ha_server_addr)
        return master, slave

    async def broker(self, name: str, role: str, broker_id: int, ha_listen: str | None = None,
                     slave_read_enable: bool = False, memory: int | None = None,
                     flush_least_pages: int = 4) -> BrokerService:
        """A broker on a free port; ``memory`` is the RAM its store's "lagging" rule assumes; 0
        ``flush_least_pages`` flushes whatever was written every 0.5 s."""
        port = free_port()
        config = BrokerConfig(listen=f"tcp:{port}:interface=127.0.0.1", advertised_address=f"127.0.0.1:{port}",
                              namesrv_addr=[self.namesrv_addr], broker_role=role, broker_id=broker_id,
                              ha_listen=ha_listen, default_topic_queue_nums=2, slave_read_enable=slave_read_enable)
        store = MessageStoreConfig(
            store_path_root_dir=os.path.join(self.root, name), mapped_file_size_commit_log=256 * 1024,
            mapped_file_size_consume_queue=6000, max_hash_slot_num=100, max_index_num=400,
            flush_commit_log_least_pages=flush_least_pages)
        broker = BrokerService(reactor, config, store,
                               make_store=lambda r, c: StoreService(MessageStore(c, total_memory=memory), r))
        broker.startService()
        self.addCleanup(broker.stopService)
        await broker.when_started()
        return broker

    async def producer(self) -> Producer:
        p = Producer("PG", self.namesrv_addr, reactor, retry_another_broker_when_not_store_ok=False)
        await p.start()
        self.addCleanup(p.shutdown)
        return p

    async def push_all(self, group: str, count: int) -> list[bytes]:
        """Bodies a new push consumer of ``group`` receives from topic HA, once it has ``count``."""
        pushed: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            pushed.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        push = PushConsumer(group, self.namesrv_addr, reactor,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        push.subscribe("HA", "*")
        push.register_listener(listener)
        await push.start()
        self.addCleanup(push.shutdown)
        await until(lambda: len(pushed) >= count)
        return pushed

    async def test_sync_master_through_the_client(self) -> None:
        """SYNC_MASTER sends are SEND_OK with the slave up (and it has them); with it down, SLAVE_NOT_AVAILABLE."""
        master, slave = await self.pair("SYNC_MASTER")
        p = await self.producer()
        results = [await p.send(Message("HA", b"m%d" % i)) for i in range(50)]
        self.assertEqual({r.status for r in results}, {SendStatus.SEND_OK})
        self.assertEqual(slave.store.max_physical_offset, master.store.max_physical_offset)
        # pipelined: the broker takes runs of them with one put_many; each waits for the slave
        piped = await gatherResults([p.send_async(Message("HA", b"p%d" % i)) for i in range(200)])
        self.assertEqual({r.status for r in piped}, {SendStatus.SEND_OK})
        self.assertEqual(slave.store.max_physical_offset, master.store.max_physical_offset)
        await slave.stopService()
        assert master.ha is not None
        await until(lambda: master.ha is not None and master.ha.slave_count == 0)
        result = await p.send(Message("HA", b"alone"))
        self.assertEqual(result.status, SendStatus.SLAVE_NOT_AVAILABLE)

    async def test_replication_metrics(self) -> None:
        """/metrics: the master sees its slave with nothing missing once SYNC_MASTER sends are
        answered; the slave reports its link to the master."""
        master, slave = await self.pair("SYNC_MASTER")
        p = await self.producer()
        for i in range(5):
            await p.send(Message("HA", b"m%d" % i))
        page = (await render_metrics(master))[0].decode()
        lags = {s.name: s for f in text_string_to_metric_families(page) for s in f.samples
                if s.name.startswith("rocketpy_slave_lag")}
        self.assertEqual({name: s.value for name, s in lags.items()},
                         {"rocketpy_slave_lag_bytes": 0, "rocketpy_slave_lag_seconds": 0})
        self.assertTrue(lags["rocketpy_slave_lag_bytes"].labels["slave"].startswith("127.0.0.1:"))
        self.assertIn("rocketpy_slave_master_link{broker=\"broker-a\",cluster=\"DefaultCluster\"} 1.0",
                      (await render_metrics(slave))[0].decode())

    async def test_consumers_read_from_slave_when_master_is_down(self) -> None:
        """With the master stopped, a pull consumer continues on the slave (also from a stale route with
        no name server), and a new push consumer reads everything there."""
        master, slave = await self.pair("ASYNC_MASTER")
        p = await self.producer()
        sent = [await p.send(Message("HA", b"m%d" % i)) for i in range(40)]
        await until(lambda: caught_up(slave.store, master.store, "HA", 2))
        assert slave.slave_sync is not None
        await slave.slave_sync.sync_all()
        self.assertIsNotNone(slave.topics.select_topic_config("HA"))
        consumer = PullConsumer("CG", self.namesrv_addr, reactor)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        queues = await consumer.fetch_subscribe_queues("HA")
        got: list[bytes] = []
        for mq in queues:
            first = await consumer.pull(mq, "*", 0, 5)
            got += [m.body for m in first.messages]
        await master.stopService()
        for mq in queues:
            rest = await consumer.pull(mq, "*", 5, 3)
            self.assertEqual(rest.status, PullStatus.FOUND)
            got += [m.body for m in rest.messages]

        pushed = await self.push_all("CG2", 40)

        # As after a kill: the client still knows the master and no name server answers.
        await self.namesrv.stopService()
        consumer.instance.broker_addrs["broker-a"][0] = master.config.advertised_address
        for mq in queues:
            rest = await consumer.pull(mq, "*", 8, 32)
            self.assertEqual(rest.status, PullStatus.FOUND)
            got += [m.body for m in rest.messages]
        everything = sorted(b"m%d" % i for i in range(40))
        self.assertEqual((sorted(got), len(sent)), (everything, 40))
        self.assertEqual(sorted(pushed[:40]), everything)

    async def test_lagging_pull_sent_to_the_slave(self) -> None:
        """With slaveReadEnable, a pull lagging past 40 % of RAM is told to use broker 1 (the slave);
        a caught-up one is told 0; a push consumer following the suggestions reads everything."""
        master, slave = await self.pair("ASYNC_MASTER", slave_read_enable=True, memory=2000)
        p = await self.producer()
        for i in range(40):
            await p.send(Message("HA", b"m%d" % i))
        await until(lambda: caught_up(slave.store, master.store, "HA", 2))
        assert slave.slave_sync is not None
        await slave.slave_sync.sync_all()
        consumer = PullConsumer("CG", self.namesrv_addr, reactor)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        mq = (await consumer.fetch_subscribe_queues("HA"))[0]
        behind = await consumer.pull(mq, "*", 0, 1)
        latest = await consumer.pull(mq, "*", 19, 1)
        self.assertEqual((behind.suggest_which_broker_id, latest.suggest_which_broker_id), (1, 0))
        served: list[str] = []
        read, read_now = slave.store.get_message, slave.store.get_message_resident

        def counted(group: str, *args: Any) -> Any:
            served.append(group)
            return read(group, *args)

        def counted_now(group: str, *args: Any) -> Any:  # a read of pages in memory, on the reactor
            served.append(group)
            return read_now(group, *args)

        slave.store.get_message = counted
        slave.store.get_message_resident = counted_now
        pushed = await self.push_all("CG2", 40)
        self.assertEqual(sorted(pushed), sorted(b"m%d" % i for i in range(40)))
        self.assertIn("CG2", served)

    async def test_slave_learns_a_topic_from_replicated_records(self) -> None:
        """Before its 10 s config copy the slave serves a new topic's messages (RocketMQ answers
        TOPIC_NOT_EXIST); the master's table, when copied, replaces what the slave learnt."""
        master, slave = await self.pair("ASYNC_MASTER")
        assert slave.slave_sync is not None
        await slave.slave_sync.stop()  # no config copy from here on unless asked
        self.assertIsNone(slave.topics.select_topic_config("Fresh"))
        p = await self.producer()
        for i in range(6):
            await p.send(Message("Fresh", b"f%d" % i))
        await until(lambda: caught_up(slave.store, master.store, "Fresh", 2))
        learnt = slave.topics.select_topic_config("Fresh")
        assert learnt is not None
        self.assertEqual((learnt.read_queue_nums, slave.topics.learnt), (2, {"Fresh"}))
        fields = {"consumerGroup": "CG", "topic": "Fresh", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
                  "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
                  "subVersion": "0"}
        client = RemotingClient(reactor)
        self.addCleanup(client.close)
        response = await client.invoke_sync(slave.config.advertised_address,
                                            RemotingCommand.request(RequestCode.PULL_MESSAGE, fields), 5)
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        self.assertEqual(len(decode_records(response.body)), master.store.get_max_offset_in_queue("Fresh", 0))
        await slave.slave_sync.sync_all()
        self.assertEqual(slave.topics.learnt, set())
        copied = slave.topics.select_topic_config("Fresh")
        mastered = master.topics.select_topic_config("Fresh")
        assert copied is not None and mastered is not None
        self.assertEqual(copied.to_json(), mastered.to_json())

    async def test_promoted_slave_resumes_timer_delivery(self) -> None:
        """The slave copies the master's timer checkpoint (GET_TIMER_CHECK_POINT); its store restarted as
        the master delivers the timer message still pending once, and not again the one the master
        delivered (without the copy it would read the timer queue from its start)."""
        master, slave = await self.pair("ASYNC_MASTER", flush_least_pages=0)  # a delivery counts once flushed
        p = await self.producer()
        sent = await send_soon_and_later(p, "Timed", b"soon", 100, b"later", 4)
        queue = sent.queue.queue_id
        await until(lambda: master.timer_checkpoint.low_offset == 1)  # "soon" delivered, flushed, checkpointed
        self.assertEqual(master.store.get_max_offset_in_queue("Timed", queue), 1)
        await until(lambda: caught_up(slave.store, master.store, "Timed", 2)
                    and slave.store.get_max_offset_in_queue(TIMER_TOPIC, 0) == 2)
        assert slave.slave_sync is not None
        await slave.slave_sync.sync_all()
        self.assertEqual(slave.timer_checkpoint.to_json(), master.timer_checkpoint.to_json())
        with open(os.path.join(self.root, "slave", "config", "timerCheckpoint.json")) as f:
            self.assertEqual(json.load(f)["lowOffset"], 1)
        await master.stopService()
        await slave.stopService()
        promoted = await self.broker("slave", "ASYNC_MASTER", 0, ha_listen=f"tcp:{free_port()}:interface=127.0.0.1")
        self.assertEqual(promoted.timer.backlog(), 1)
        await until(lambda: promoted.store.get_max_offset_in_queue("Timed", queue) == 2)
        found = await promoted.store.get_message("G", "Timed", queue, 0, 32)
        self.assertEqual([decode_record(r).body for r in found.records], [b"soon", b"later"])
        self.assertEqual(promoted.timer.delivered, 1)
