"""SQL92 property filters end to end: rocketpy's push and pull consumers against a loopback broker."""

from __future__ import annotations

from twisted.internet import reactor

from rocketpy.client import (
    ConsumeFromWhere, MessageExt, MessageSelector, MQBrokerError, MQClientError, PullConsumer, PullStatus, PushConsumer, new_message,
)
from rocketpy.client.results import ConsumeResult
from rocketpy.remoting.codes import ResponseCode
from tests.features.test_features import FeatureTestCase, until

#: (a, color, tag) of the messages sent; the selector below keeps b"m1" and b"m4".
SENT = [("1", "red", "TagA"), ("7", "red", "TagB"), ("9", "blue", "TagA"), (None, "red", "TagA"), ("12", "red", "TagC")]
SQL = "a > 5 AND color = 'red'"


class SqlFilterTests(FeatureTestCase):
    async def send_all(self, cluster: object) -> None:
        p = await self.producer(cluster)  # type: ignore[arg-type]
        for i, (a, color, tag) in enumerate(SENT):
            msg = new_message("Sql", b"m%d" % i, tags=tag)
            msg.properties["color"] = color
            if a is not None:
                msg.properties["a"] = a
            await p.send(msg)

    async def test_push_consumer(self) -> None:
        """A push consumer subscribed by SQL receives exactly the matching messages, and the group's
        committed offsets move past the filtered ones too."""
        cluster = await self.cluster_with(enable_property_filter=True)
        await self.send_all(cluster)
        await cluster.wait_for_route("Sql")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: object) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        c = await self.push(cluster, listener, "Sql", MessageSelector.by_sql(SQL), "SQLCG",
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        await until(lambda: len(got) >= 2, "two matching messages")
        self.assertEqual(sorted(got), [b"m1", b"m4"])
        await c.shutdown()
        offsets = cluster.brokers["broker-a"].offsets
        await until(lambda: sum(offsets.query_offsets("SQLCG", "Sql").values()) == len(SENT), "offsets at the end")
        self.assertEqual(sorted(got), [b"m1", b"m4"])

    async def test_pull_consumer(self) -> None:
        """PullConsumer.pull with a MessageSelector: only matches, and by_tag behaves like a tag string."""
        cluster = await self.cluster_with(enable_property_filter=True)
        await self.send_all(cluster)
        await cluster.wait_for_route("Sql")
        c = PullConsumer("SQLPULL", cluster.namesrv_addr, reactor)
        await c.start()
        self.addCleanup(c.shutdown)
        by_sql: list[bytes] = []
        by_tag: list[bytes] = []
        for mq in await c.fetch_subscribe_queues("Sql"):
            offset = 0
            while True:  # NO_MATCHED answers advance the offset like FOUND ones
                result = await c.pull(mq, MessageSelector.by_sql("TAGS IN ('TagA', 'TagC') AND a IS NOT NULL"),
                                      offset)
                by_sql += [m.body for m in result.messages]
                if result.status is PullStatus.NO_NEW_MSG:
                    break
                offset = result.next_begin_offset
            tagged = await c.pull(mq, MessageSelector.by_tag("TagB"), 0)
            by_tag += [m.body for m in tagged.messages]
        self.assertEqual(sorted(by_sql), [b"m0", b"m2", b"m4"])
        self.assertEqual(by_tag, [b"m1"])

    async def test_refused_without_property_filter(self) -> None:
        """On a broker without --enable-property-filter the push consumer does not start: the broker's
        code and remark reach the caller; a malformed expression names the problem."""
        cluster = await self.cluster_with()
        await self.send_all(cluster)
        await cluster.wait_for_route("Sql")
        c = PushConsumer("SQLOFF", cluster.namesrv_addr, reactor)
        c.subscribe("Sql", MessageSelector.by_sql(SQL))
        c.register_listener(lambda msgs, context: ConsumeResult.CONSUME_SUCCESS)
        with self.assertRaises(MQClientError) as caught:
            await c.start()
        self.assertEqual(caught.exception.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("The broker does not support consumer to filter message by SQL92", str(caught.exception))
        self.assertFalse(c.running)
        p = PullConsumer("SQLOFFPULL", cluster.namesrv_addr, reactor)
        await p.start()
        self.addCleanup(p.shutdown)
        mq = (await p.fetch_subscribe_queues("Sql"))[0]
        with self.assertRaises(MQBrokerError) as refused:
            await p.pull(mq, MessageSelector.by_sql(SQL), 0)
        self.assertIn("does not support consumer to filter message by SQL92", str(refused.exception))

    async def test_malformed_expression(self) -> None:
        """A malformed expression: the consumer does not start, and the reason says where it broke."""
        cluster = await self.cluster_with(enable_property_filter=True)
        await self.send_all(cluster)
        await cluster.wait_for_route("Sql")
        c = PushConsumer("SQLBAD", cluster.namesrv_addr, reactor)
        c.subscribe("Sql", MessageSelector.by_sql("a > AND"))
        c.register_listener(lambda msgs, context: ConsumeResult.CONSUME_SUCCESS)
        with self.assertRaises(MQClientError) as caught:
            await c.start()
        self.assertEqual(caught.exception.code, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
        self.assertIn("Invalid MessageSelector.", str(caught.exception))
        self.assertIn("position 4", str(caught.exception))
