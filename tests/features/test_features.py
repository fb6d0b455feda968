"""Retry/DLQ, delayed delivery, transactions and query end to end: rocketpy's client against a
loopback name server and broker (fixtures of :mod:`tests.client.test_integration`), including
broker restarts in the middle of a delay and of a pending transaction.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import reactor

from rocketpy.client import ConsumeFromWhere, Message, MessageExt, PullConsumer, PullStatus, PushConsumer, new_message
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult
from rocketpy.client.transaction import LocalTransactionState, TransactionProducer
from rocketpy.common.message import MessageConst, decode_offset_msg_id, decode_records
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.client.test_integration import IntegrationTestCase, LoopbackCluster, pause
from tests.common.fastjson import fastjson_loads

#: Short transaction timings so a check-back comes within a second.
FAST_CHECKS: dict[str, Any] = {"transaction_check_interval": 0.3, "transaction_timeout": 0.2}


async def until(condition: Any, what: str, rounds: int = 300) -> None:
    for _ in range(rounds):
        if condition():
            return
        await pause()
    raise AssertionError(f"{what}: not reached")


class FeatureTestCase(IntegrationTestCase):
    async def cluster_with(self, **settings: Any) -> LoopbackCluster:
        """A name server and broker-a with broker or store ``settings``."""
        cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        await cluster.add_broker("broker-a", **settings)
        return cluster

    async def pull_all(self, cluster: LoopbackCluster, topic: str) -> list[MessageExt]:
        """Every message of ``topic`` on every queue, from offset 0."""
        c = PullConsumer("CHECKER", cluster.namesrv_addr, reactor)
        await c.start()
        try:
            msgs: list[MessageExt] = []
            for mq in await c.fetch_subscribe_queues(topic):
                result = await c.pull(mq, "*", 0, 32)
                if result.status is PullStatus.FOUND:
                    msgs += result.messages
            return msgs
        finally:
            await c.shutdown()

    async def bodies(self, cluster: LoopbackCluster, topic: str) -> list[bytes]:
        return sorted(m.body for m in await self.pull_all(cluster, topic))

    async def restart(self, cluster: LoopbackCluster, name: str = "broker-a", **settings: Any) -> None:
        """Stop a broker cleanly and start it again on the same port and store."""
        broker = cluster.brokers[name]
        port = broker.config.advertised_port
        await broker.stopService()
        await cluster.add_broker(name, port, **settings)


class RetryTests(FeatureTestCase):
    async def test_dead_letter_after_max_reconsume(self) -> None:
        """With maxReconsumeTimes 1 a failing message is retried once, then lands in %DLQ%CG, unconsumed."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        await p.send(new_message("Fails", b"poison", keys="poison-1"))
        await cluster.wait_for_route("Fails")
        seen: list[int] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            seen.extend(m.reconsume_times for m in msgs)
            context.delay_level = 1
            return ConsumeResult.RECONSUME_LATER

        c = PushConsumer("CG", cluster.namesrv_addr, reactor, max_reconsume_times=1,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe("Fails", "*")
        c.register_listener(listener)
        await c.start()
        self.addCleanup(c.shutdown)
        store = cluster.brokers["broker-a"].store
        await until(lambda: store.get_max_offset_in_queue("%DLQ%CG", 0) > 0, "dead letter stored")
        await cluster.wait_for_route("%DLQ%CG")
        [dead] = await self.pull_all(cluster, "%DLQ%CG")
        self.assertEqual((dead.body, dead.reconsume_times), (b"poison", 2))
        self.assertEqual(dead.properties[MessageConst.RETRY_TOPIC], "Fails")
        self.assertEqual(seen, [0, 1])


class DelayTests(FeatureTestCase):
    async def test_delayed_message(self) -> None:
        """A DELAY=1 message reaches its queue about a second after it was sent, once."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        sent_at = reactor.seconds()
        result = await p.send(new_message("Later", b"soon", delay_level=1))
        await cluster.wait_for_route("Later")
        self.assertEqual(await self.bodies(cluster, "Later"), [])
        await until(lambda: cluster.brokers["broker-a"].store.get_max_offset_in_queue("Later", result.queue.queue_id),
                    "delivery")
        self.assertGreaterEqual(reactor.seconds() - sent_at, 0.9)
        [msg] = await self.pull_all(cluster, "Later")
        self.assertNotIn(MessageConst.DELAY_TIME_LEVEL, msg.properties)

    async def test_restart_during_delay(self) -> None:
        """A restart with one delayed message delivered and one pending delivers each exactly once."""
        cluster = await self.cluster_with(message_delay_level="1s 3s")
        p = await self.producer(cluster)
        first = await p.send(new_message("Later", b"first", delay_level=1))
        await p.send_to_queue(new_message("Later", b"second", delay_level=2), first.queue)
        store = cluster.brokers["broker-a"].store
        await until(lambda: store.get_max_offset_in_queue("Later", first.queue.queue_id) == 1, "first delivery")
        await self.restart(cluster, message_delay_level="1s 3s")
        store = cluster.brokers["broker-a"].store
        await until(lambda: store.get_max_offset_in_queue("Later", first.queue.queue_id) == 2, "second delivery")
        await pause(1.5)  # time for a wrongly repeated delivery to show
        await cluster.wait_for_route("Later")
        self.assertEqual(await self.bodies(cluster, "Later"), [b"first", b"second"])


class _Listener:
    """Local transactions decided by message body; ``checks`` records check-backs."""

    def __init__(self) -> None:
        self.states = {b"commit": LocalTransactionState.COMMIT_MESSAGE,
                       b"rollback": LocalTransactionState.ROLLBACK_MESSAGE}
        self.later = LocalTransactionState.COMMIT_MESSAGE
        self.checks: list[bytes] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return self.states.get(msg.body, LocalTransactionState.UNKNOW)

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checks.append(msg.body)
        return self.later


class TransactionTests(FeatureTestCase):
    async def tx_producer(self, cluster: LoopbackCluster, listener: _Listener) -> TransactionProducer:
        p = TransactionProducer("TXG", cluster.namesrv_addr, reactor, listener=listener)
        await p.start()
        self.addCleanup(p.shutdown)
        return p

    async def test_commit_rollback_and_check_back(self) -> None:
        """Commit is delivered, rollback never; an UNKNOW one is committed when the broker checks back."""
        cluster = await self.cluster_with(**FAST_CHECKS)
        listener = _Listener()
        p = await self.tx_producer(cluster, listener)
        bodies = (b"commit", b"rollback", b"ask")
        results = [await p.send_message_in_transaction(Message("Tx", body)) for body in bodies]
        self.assertEqual([r.local_state for r in results], [LocalTransactionState.COMMIT_MESSAGE,
                                                           LocalTransactionState.ROLLBACK_MESSAGE,
                                                           LocalTransactionState.UNKNOW])
        await cluster.wait_for_route("Tx")
        await until(lambda: listener.checks, "a check-back")
        await until(lambda: sum(cluster.brokers["broker-a"].store.get_max_offset_in_queue("Tx", q)
                                for q in range(8)) == 2, "two committed messages")
        await pause(1.0)  # more passes: nothing asked or delivered twice
        self.assertEqual(listener.checks, [b"ask"])
        self.assertEqual(await self.bodies(cluster, "Tx"), [b"ask", b"commit"])

    async def test_restart_with_pending_transaction(self) -> None:
        """A half message left undecided survives a restart and is committed once after the check-back."""
        cluster = await self.cluster_with()
        listener = _Listener()
        p = await self.tx_producer(cluster, listener)
        await p.send_message_in_transaction(Message("Tx", b"pending"))
        await self.restart(cluster, **FAST_CHECKS)
        await p.instance.send_heartbeat()  # the new broker learns the producer's connection
        await until(lambda: listener.checks, "a check-back after the restart")
        await cluster.wait_for_route("Tx")
        await pause(1.0)
        self.assertEqual(await self.bodies(cluster, "Tx"), [b"pending"])
        self.assertEqual(listener.checks, [b"pending"])


    async def test_commit_repeated_after_restart(self) -> None:
        """A commit repeated after the broker restarted (a late answer, a retried END_TRANSACTION) is
        answered SUCCESS, as Java answers a commit, and no second copy is delivered: the broker
        rebuilt the ended transactions from its op queue."""
        cluster = await self.cluster_with()
        p = await self.tx_producer(cluster, _Listener())
        result = (await p.send_message_in_transaction(Message("TxR", b"commit"))).send_result
        broker = cluster.brokers["broker-a"]
        queue = result.queue.queue_id
        await until(lambda: broker.store.get_max_offset_in_queue("TxR", queue) == 1, "the commit")
        await self.restart(cluster)
        _host, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        fields = {"producerGroup": "TXG", "tranStateTableOffset": str(result.queue_offset),
                  "commitLogOffset": str(commit_log_offset), "commitOrRollback": "8",
                  "fromTransactionCheck": "false", "msgId": result.msg_id}
        addr = cluster.brokers["broker-a"].config.advertised_address
        response = await cluster.admin.invoke_sync(
            addr, RemotingCommand.request(RequestCode.END_TRANSACTION, fields), 5)
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        await cluster.wait_for_route("TxR")
        self.assertEqual(cluster.brokers["broker-a"].store.get_max_offset_in_queue("TxR", queue), 1)
        self.assertEqual(await self.bodies(cluster, "TxR"), [b"commit"])


class QueryTests(FeatureTestCase):
    async def test_query_by_key_and_by_id(self) -> None:
        """QUERY_MESSAGE finds a message by KEYS word and by UNIQ_KEY; VIEW_MESSAGE_BY_ID by its offset id."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        result = await p.send(new_message("Find", b"needle", keys=["order-7", "customer-3"]))
        addr = cluster.brokers["broker-a"].config.advertised_address
        (host, port), offset = decode_offset_msg_id(result.offset_msg_id)
        self.assertEqual(f"{host}:{port}", addr)

        async def call(code: int, **fields: str) -> RemotingCommand:
            response = await cluster.admin.invoke_sync(addr, RemotingCommand.request(code, fields), 5)
            self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
            return response

        now = str(int(reactor.seconds() * 1000) + 1000)
        by_key = await call(RequestCode.QUERY_MESSAGE, topic="Find", key="customer-3", maxNum="10",
                            beginTimestamp="0", endTimestamp=now)
        self.assertEqual([m.body for m in decode_records(by_key.body)], [b"needle"])
        by_uniq = await call(RequestCode.QUERY_MESSAGE, topic="Find", key=result.msg_id, maxNum="1",
                             beginTimestamp="0", endTimestamp=now, _UNIQUE_KEY_QUERY="true")
        self.assertEqual(len(decode_records(by_uniq.body)), 1)
        [viewed] = decode_records((await call(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(offset))).body)
        self.assertEqual((viewed.body, viewed.msg_id), (b"needle", result.offset_msg_id))


class AdminTests(FeatureTestCase):
    async def test_consumer_running_info_and_progress(self) -> None:
        """An admin finds a push consumer by connection list, gets its running info through the broker
        (subscriptions, held queues, offsets), and its progress from GET_CONSUME_STATS."""
        cluster = await self.cluster()
        p = await self.producer(cluster)
        for i in range(3):
            await p.send(new_message("Watched", b"w%d" % i, tags="TagA"))
        await cluster.wait_for_route("Watched")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        c = PushConsumer("CG", cluster.namesrv_addr, reactor,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe("Watched", "TagA || TagB")
        c.register_listener(listener)
        await c.start()
        self.addCleanup(c.shutdown)
        await until(lambda: len(got) == 3, "3 messages consumed")
        addr = cluster.brokers["broker-a"].config.advertised_address

        async def call(code: int, **fields: str) -> RemotingCommand:
            return await cluster.admin.invoke_sync(addr, RemotingCommand.request(code, fields), 10)

        connections = json.loads((await call(RequestCode.GET_CONSUMER_CONNECTION_LIST, consumerGroup="CG")).body)
        [client_id] = [conn["clientId"] for conn in connections["connectionSet"]]
        self.assertEqual(client_id, c.instance.client_id)
        response = await call(RequestCode.GET_CONSUMER_RUNNING_INFO, consumerGroup="CG", clientId=client_id,
                              jstackEnable="false")
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        info = fastjson_loads(response.body)
        self.assertEqual(info["properties"]["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY")
        self.assertEqual(info["properties"]["PROP_NAMESERVER_ADDR"], cluster.namesrv_addr + ";")
        self.assertEqual({s["topic"]: s["subString"] for s in info["subscriptionSet"]},
                         {"Watched": "TagA || TagB", "%RETRY%CG": "*"})
        watched = {k: v for k, v in info["mqTable"].items() if dict(k)["topic"] == "Watched"}
        self.assertEqual(sorted(dict(k)["queueId"] for k in watched), [0, 1, 2, 3])
        self.assertEqual({dict(k)["brokerName"] for k in watched}, {"broker-a"})
        self.assertEqual(sum(max(v["commitOffset"], 0) for v in watched.values()), 3)
        self.assertEqual(sum(v["cachedMsgCount"] for v in watched.values()), 0)
        self.assertEqual(info["statusTable"]["Watched"]["consumeOKTPS"], 3 / 60)

        offline = await call(RequestCode.GET_CONSUMER_RUNNING_INFO, consumerGroup="CG", clientId="10.9.9.9@1")
        self.assertEqual((offline.code, offline.remark),
                         (ResponseCode.SYSTEM_ERROR, "The Consumer <10.9.9.9@1> not online"))

        await c.shutdown()  # persists the offsets (oneway)

        async def progress() -> dict[Any, Any]:
            response = await call(RequestCode.GET_CONSUME_STATS, consumerGroup="CG", topic="Watched")
            stats = fastjson_loads(response.body)
            return stats["offsetTable"]

        for _ in range(100):
            table = await progress()
            if sum(v["consumerOffset"] for v in table.values()) == 3:
                break
            await pause()
        self.assertEqual(sum(v["brokerOffset"] for v in table.values()), 3)
        self.assertEqual({dict(k)["topic"] for k in table}, {"Watched"})
        self.assertEqual(sum(v["consumerOffset"] for v in table.values()), 3)
