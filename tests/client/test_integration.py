"""The client against real name server and brokers on loopback (real reactor, temp store dirs)."""

from __future__ import annotations

import json
import os
from typing import Any, cast

from twisted.internet import reactor
from twisted.internet.defer import gatherResults
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool
from twisted.trial.unittest import TestCase

from rocketpy.broker.config import BrokerConfig
from rocketpy.broker.controller import BrokerService
from rocketpy.client import (
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageModel,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
    new_message,
    select_by_hash,
)
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult
from rocketpy.namesrv.service import NamesrvService
from rocketpy.remoting.client import RemotingClient
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.config import MessageStoreConfig
from tests.ports import free_port



async def pause(seconds: float = 0.05) -> None:
    await deferLater(reactor, seconds, lambda: None)


class LoopbackCluster:
    """A name server and brokers in this process; everything stops in the test's cleanup."""

    def __init__(self, test: TestCase) -> None:
        self.test = test
        self.root = test.mktemp()
        self.brokers: dict[str, BrokerService] = {}
        self.namesrv = NamesrvService(reactor, "tcp:0:interface=127.0.0.1", os.path.join(self.root, "ns"))
        self.namesrv.startService()
        test.addCleanup(self.namesrv.stopService)
        port = self.namesrv.listening_port
        assert port is not None
        self.namesrv_addr = f"127.0.0.1:{port.getHost().port}"  # type: ignore[attr-defined]
        self.admin = RemotingClient(reactor)

    async def add_broker(self, name: str, port: int | None = None, **settings: Any) -> str:
        """Start a broker; ``settings`` override BrokerConfig or MessageStoreConfig fields by name.

        A broker stopped earlier restarts on its old store when given the same name and ``port``.
        """
        port = port or free_port()
        config = BrokerConfig(broker_name=name, listen=f"tcp:{port}:interface=127.0.0.1",
                              advertised_address=f"127.0.0.1:{port}", namesrv_addr=[self.namesrv_addr])
        store = MessageStoreConfig(
            store_path_root_dir=os.path.join(self.root, name), mapped_file_size_commit_log=4 * 1024 * 1024,
            mapped_file_size_consume_queue=6000, max_hash_slot_num=100, max_index_num=400,
        )
        settings.setdefault("ha_listen", f"tcp:{free_port()}:interface=127.0.0.1")  # port + 1 may be taken
        for key, value in settings.items():
            target = config if hasattr(config, key) else store
            if not hasattr(target, key):
                raise TypeError(f"no broker or store setting {key!r}")
            setattr(target, key, value)
        broker = BrokerService(reactor, config, store)
        broker.startService()
        self.test.addCleanup(broker.stopService)  # before the name server's cleanup
        await broker.when_started()
        self.brokers[name] = broker
        return config.advertised_address

    async def wait_for_route(self, topic: str, brokers: int = 1) -> None:
        """Until the name server routes ``topic`` to ``brokers`` brokers (registration is asynchronous)."""
        for _ in range(200):
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            response = await self.admin.invoke_sync(self.namesrv_addr, request, 5)
            if response.code == ResponseCode.SUCCESS and response.body.count(b"brokerName") >= 2 * brokers:
                return
            await pause()
        raise AssertionError(f"no route for {topic}")

    async def supports(self, code: int) -> bool:
        """Whether the first broker has a processor for ``code``."""
        addr = next(iter(self.brokers.values())).config.advertised_address
        response = await self.admin.invoke_sync(addr, RemotingCommand.request(code, {}, b"{}"), 5)
        return response.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    async def close(self) -> None:
        await self.admin.close()


class CodeCounter:
    """An RPC hook that counts the requests a client sends, by code."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def before_request(self, remote_address: str, request: RemotingCommand) -> None:
        self.sent.append(request.code)

    def after_response(self, remote_address: str, request: RemotingCommand, response: RemotingCommand) -> None:
        pass

    def count(self, *codes: int) -> int:
        return sum(code in codes for code in self.sent)


class IntegrationTestCase(TestCase):
    timeout = 60

    async def cluster(self, *brokers: str) -> LoopbackCluster:
        cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        for name in brokers or ("broker-a",):
            await cluster.add_broker(name)
        return cluster

    async def until(self, condition: Any) -> None:
        for _ in range(400):
            if condition():
                return
            await pause()
        raise AssertionError("condition not reached")

    async def producer(self, cluster: LoopbackCluster, **kwargs: Any) -> Producer:
        p = Producer("PG", cluster.namesrv_addr, reactor, **kwargs)
        await p.start()
        self.addCleanup(p.shutdown)
        return p

    async def push(self, cluster: LoopbackCluster, listener: Any, topic: str = "Push", selector: Any = "*",
                   group: str = "CG", **kwargs: Any) -> PushConsumer:
        c = PushConsumer(group, cluster.namesrv_addr, reactor, **kwargs)
        c.subscribe(topic, selector)
        c.register_listener(listener)
        await c.start()
        self.addCleanup(c.shutdown)
        return c


class SendModesTests(IntegrationTestCase):
    async def test_every_send_mode_then_pull(self) -> None:
        """SYNC, ASYNC, ONEWAY, a batch and a compressed body all land and pull back intact."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        big = bytes(range(256)) * 40
        first = await p.send(new_message("Modes", b"sync", tags="A"))
        self.assertEqual(first.status, SendStatus.SEND_OK)
        queue = first.queue
        await p.send_to_queue(Message("Modes", big), queue)
        await p.send_async(Message("Modes", b"async"))
        await p.send_oneway(Message("Modes", b"oneway"))
        batch = await p.send_batch([Message("Modes", b"b1"), Message("Modes", b"b2")])
        self.assertEqual(len(batch.msg_id.split(",")), 2)
        await cluster.wait_for_route("Modes")
        c = PullConsumer("CG", cluster.namesrv_addr, reactor)
        await c.start()
        self.addCleanup(c.shutdown)
        bodies: list[bytes] = []
        for _ in range(100):
            bodies = []
            for mq in await c.fetch_subscribe_queues("Modes"):
                result = await c.pull(mq, "*", 0, 32)
                bodies += [m.body for m in result.messages]
            if len(bodies) == 6:
                break
            await pause()  # the oneway send may still be on its way
        self.assertEqual(sorted(bodies), sorted([b"sync", big, b"async", b"oneway", b"b1", b"b2"]))
        tagged = await c.pull(queue, "A", 0, 32)
        self.assertEqual([m.body for m in tagged.messages], [b"sync"])
        empty = await c.pull(queue, "*", tagged.max_offset, 32)
        self.assertEqual(empty.status, PullStatus.NO_NEW_MSG)

    async def test_pipelined_sends_both_flush_modes(self) -> None:
        """300 sends in flight on one connection (the broker takes each read's sends as one run and
        one store call): every one answered SEND_OK, each queue's offsets contiguous, all stored."""
        cluster = await self.cluster("async-broker")
        await cluster.add_broker("sync-broker", flush_disk_type="SYNC_FLUSH")
        for broker in cluster.brokers.values():
            fields = {"topic": "Piped", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
                      "perm": "6", "topicFilterType": "SINGLE_TAG", "order": "false"}
            request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
            created = await cluster.admin.invoke_sync(broker.config.advertised_address, request, 5)
            self.assertEqual(created.code, ResponseCode.SUCCESS)
        await cluster.wait_for_route("Piped", brokers=2)
        codes = CodeCounter()
        p = await self.producer(cluster, rpc_hooks=[codes])
        msgs = [Message("Piped", b"m%d" % i) for i in range(300)]
        results = await gatherResults([p.send_async(m) for m in msgs])
        self.assertEqual({r.status for r in results}, {SendStatus.SEND_OK})
        self.assertLess(codes.count(RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE), 30)
        by_queue: dict[Any, list[int]] = {}
        for r in results:
            by_queue.setdefault(r.queue, []).append(r.queue_offset)
        self.assertEqual({q.broker_name for q in by_queue}, {"async-broker", "sync-broker"})
        c = PullConsumer("CG", cluster.namesrv_addr, reactor)
        await c.start()
        self.addCleanup(c.shutdown)
        bodies: set[bytes] = set()
        for mq, offsets in by_queue.items():
            self.assertEqual(len(set(offsets)), len(offsets), mq)
            got: dict[int, MessageExt] = {}
            offset = min(offsets)
            while offset <= max(offsets):  # a pull brings at most 32
                pulled = await c.pull(mq, "*", offset, 32)
                got.update((m.queue_offset, m) for m in pulled.messages)
                self.assertGreater(pulled.next_begin_offset, offset, mq)
                offset = pulled.next_begin_offset
            self.assertTrue(set(offsets) <= set(got), mq)
            bodies |= {got[o].body for o in offsets}
        self.assertEqual(bodies, {b"m%d" % i for i in range(300)})
        for msg, result in zip(msgs, results):  # each send's own result: its offset, its ids
            stored = await c.pull(result.queue, "*", result.queue_offset, 1)
            self.assertEqual(stored.messages[0].body, msg.body)
            self.assertEqual(result.msg_id, msg.properties["UNIQ_KEY"])
            self.assertEqual(stored.messages[0].properties["UNIQ_KEY"], result.msg_id)
            self.assertEqual(stored.messages[0].msg_id, result.offset_msg_id)

    async def test_orderly_sends_keep_order(self) -> None:
        """send_orderly with one key puts every message on one queue, in order."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        results = [await p.send_orderly(Message("Ordered", b"%d" % i), select_by_hash, "order-1") for i in range(10)]
        self.assertEqual(len({r.queue for r in results}), 1)
        self.assertEqual([r.queue_offset for r in results], list(range(10)))
        c = PullConsumer("CG", cluster.namesrv_addr, reactor)
        await c.start()
        self.addCleanup(c.shutdown)
        pulled = await c.pull(results[0].queue, "*", 0, 32)
        self.assertEqual([m.body for m in pulled.messages], [b"%d" % i for i in range(10)])

    async def test_failover_to_other_broker(self) -> None:
        """With broker-a stopped, sends go to broker-b (retries, then the fault strategy avoids a)."""
        cluster = await self.cluster("broker-a", "broker-b")
        p = await self.producer(cluster, send_latency_fault_enable=True)
        names = {(await p.send(Message("Fail", b"x"))).queue.broker_name for _ in range(8)}
        self.assertEqual(names, {"broker-a", "broker-b"})
        await cluster.brokers["broker-a"].stopService()
        results = [await p.send(Message("Fail", b"y")) for _ in range(6)]
        self.assertEqual({r.queue.broker_name for r in results}, {"broker-b"})


class PushConsumerTests(IntegrationTestCase):
    async def test_push_consumes_and_commits(self) -> None:
        """A push consumer receives what was sent before and after it started, and commits offsets."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        await p.send(Message("Push", b"before"))
        await cluster.wait_for_route("Push")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        c = await self.push(cluster, listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        for i in range(5):
            await p.send(Message("Push", b"after%d" % i))
        await self.until(lambda: len(got) == 6)
        self.assertEqual(sorted(got), sorted([b"before"] + [b"after%d" % i for i in range(5)]))
        await c.shutdown()  # persists offsets (oneway: they reach the broker a moment later)
        offsets = cluster.brokers["broker-a"].offsets
        await self.until(lambda: sum(offsets.query_offsets("CG", "Push").values()) == 6)

    async def test_retry_after_reconsume_later(self) -> None:
        """RECONSUME_LATER sends the message back; it comes again through %RETRY%CG under its own topic."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        await p.send(Message("Push", b"retry-me"))
        await cluster.wait_for_route("Push")
        seen: list[tuple[str, int]] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            seen.extend((m.topic, m.reconsume_times) for m in msgs)
            context.delay_level = 1  # retry after 1 s
            return ConsumeResult.RECONSUME_LATER if len(seen) == 1 else ConsumeResult.CONSUME_SUCCESS

        await self.push(cluster, listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        await self.until(lambda: len(seen) >= 2)
        self.assertEqual(seen[:2], [("Push", 0), ("Push", 1)])

    async def test_orderly_push(self) -> None:
        """An orderly consumer locks its queues and sees one key's messages in send order."""
        cluster = await self.cluster()
        if not await cluster.supports(RequestCode.LOCK_BATCH_MQ):
            raise self.skipTest("the broker does not handle LOCK_BATCH_MQ yet")
        p = await self.producer(cluster)
        for i in range(10):
            await p.send_orderly(Message("Push", b"%d" % i), select_by_hash, "k")
        await cluster.wait_for_route("Push")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        await self.push(cluster, listener, orderly=True,
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        await self.until(lambda: len(got) == 10)
        self.assertEqual(got, [b"%d" % i for i in range(10)])


    async def test_consume_message_directly(self) -> None:
        """CONSUME_MESSAGE_DIRECTLY (``mqadmin consumeMessage``): the broker hands a stored message to
        the consumer, whose listener's outcome comes back as a ConsumeMessageDirectlyResult."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        await p.send(Message("Push", b"pulled as usual"))
        sent = [await p.send(Message("Direct", body)) for body in (b"direct", b"boom")]  # not subscribed
        await cluster.wait_for_route("Push")
        calls: list[tuple[bytes, str, str]] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            if msgs[0].topic != "Direct":
                return ConsumeResult.CONSUME_SUCCESS
            calls.append((msgs[0].body, msgs[0].msg_id, context.queue.broker_name))
            if msgs[0].body == b"boom":
                raise ValueError("cannot handle it")
            return ConsumeResult.CONSUME_SUCCESS

        c = await self.push(cluster, listener)
        broker = cluster.brokers["broker-a"].config.advertised_address
        results = []
        for each in sent:
            request = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {
                "consumerGroup": "CG", "clientId": c.instance.client_id, "msgId": each.offset_msg_id})
            response = await cluster.admin.invoke_sync(broker, request, 10)
            self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
            results.append(json.loads(response.body))
        self.assertEqual([(r["consumeResult"], r["order"], r["autoCommit"]) for r in results],
                         [("CR_SUCCESS", False, True), ("CR_THROW_EXCEPTION", False, True)])
        self.assertIn("cannot handle it", results[1]["remark"])
        self.assertEqual(calls, [(b"direct", sent[0].offset_msg_id, "broker-a"),
                                 (b"boom", sent[1].offset_msg_id, "broker-a")])
        request = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, {
            "consumerGroup": "OTHER", "clientId": c.instance.client_id, "msgId": sent[0].offset_msg_id})
        response = await cluster.admin.invoke_sync(broker, request, 10)
        self.assertEqual((response.code, response.remark), (ResponseCode.SYSTEM_ERROR,
                         f"The Consumer <{c.instance.client_id}> not online"))


    async def test_reset_offset_by_time(self) -> None:
        """INVOKE_BROKER_TO_RESET_OFFSET (``mqadmin resetOffsetByTime``) to a time before every
        message: the broker tells the consumer, which consumes the topic again from there."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        for i in range(3):
            await p.send(Message("Push", b"m%d" % i))
        await cluster.wait_for_route("Push")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        await self.push(cluster, listener, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                        persist_interval=0.2)
        offsets = cluster.brokers["broker-a"].offsets
        await self.until(lambda: sum(offsets.query_offsets("CG", "Push").values()) == 3)
        broker = cluster.brokers["broker-a"].config.advertised_address
        request = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": "Push", "group": "CG", "timestamp": "1000", "isForce": "true"})
        response = await cluster.admin.invoke_sync(broker, request, 10)
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        await self.until(lambda: len(got) == 6)
        self.assertEqual(sorted(got), sorted([b"m0", b"m1", b"m2"] * 2))

    async def test_broadcasting_resumes_from_its_local_offsets(self) -> None:
        """A broadcasting consumer keeps its offsets in a local file (written in the reactor's
        thread pool) and resumes from them after a restart."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        await p.send(Message("Push", b"first"))
        await cluster.wait_for_route("Push")
        directory = os.path.abspath(self.mktemp())
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        options = dict(message_model=MessageModel.BROADCASTING, local_offset_dir=directory, client_id="10.9.9.9@app",
                       consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c = await self.push(cluster, listener, **options)
        await self.until(lambda: got == [b"first"])
        await c.shutdown()
        self.assertTrue(os.path.exists(os.path.join(directory, "10.9.9.9@app", "CG", "offsets.json")))
        await p.send(Message("Push", b"second"))
        await self.push(cluster, listener, **options)
        await self.until(lambda: len(got) >= 2)
        await pause(0.2)
        self.assertEqual(got, [b"first", b"second"])


class BlockingTests(IntegrationTestCase):
    async def test_five_line_script(self) -> None:
        """The blocking facade sends and receives from a plain thread, as in doc/client.md."""
        cluster = await self.cluster()
        await (await self.producer(cluster)).send(Message("Blocking", b"warm-up"))
        await cluster.wait_for_route("Blocking")
        addr = cluster.namesrv_addr

        def script() -> list[bytes]:
            from rocketpy.blocking import Message as BMessage, Producer as BProducer, PushConsumer as BPush

            producer = BProducer("PG2", addr).start()
            producer.send(BMessage("Blocking", b"hello"))
            consumer = BPush("CG2", addr, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe("Blocking").start()
            try:
                return sorted(m.body for m in (consumer.receive(timeout=20), consumer.receive(timeout=20)) if m)
            finally:
                consumer.shutdown()
                producer.shutdown()

        pool = ThreadPool(1, 1, "blocking-test")
        pool.start()
        self.addCleanup(pool.stop)
        self.assertEqual(await deferToThreadPool(cast(IReactorFromThreads, reactor), pool, script), [b"hello", b"warm-up"])
