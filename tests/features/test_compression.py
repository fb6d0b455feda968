"""LZ4 and ZSTD bodies end to end: rocketpy's producer compresses, the broker stores the type bits,
rocketpy's consumers inflate."""

from __future__ import annotations

from twisted.internet import reactor

from rocketpy.client import ConsumeFromWhere, Message, MessageExt, PullConsumer, Producer
from rocketpy.client.results import ConsumeResult
from rocketpy.common.message import decode_offset_msg_id
from tests.features.test_features import FeatureTestCase, until

BIG = bytes(range(256)) * 64  # 16 KiB: over the 4 KiB threshold


class CompressionTests(FeatureTestCase):
    async def test_lz4_and_zstd_round_trip(self) -> None:
        """Bodies sent with compression="lz4" / "zstd" are stored compressed with their type bits and
        come back to a pull and a push consumer as sent; a small body is not compressed."""
        cluster = await self.cluster_with()
        sent = {}
        for codec in ("lz4", "zstd"):
            p = Producer("PG_" + codec, cluster.namesrv_addr, reactor, compression=codec)
            await p.start()
            self.addCleanup(p.shutdown)
            result = await p.send(Message("Packed", BIG + codec.encode()))
            sent[codec] = result
            small = await p.send(Message("Packed", b"tiny-" + codec.encode()))
            _, small_offset = decode_offset_msg_id(small.offset_msg_id)
            stored_small = await cluster.brokers["broker-a"].store.look_message_by_offset(small_offset)
            self.assertEqual(stored_small.sys_flag & 0x701, 0)
        for codec, type_bits in (("lz4", 0x100), ("zstd", 0x200)):
            _, offset = decode_offset_msg_id(sent[codec].offset_msg_id)
            stored = await cluster.brokers["broker-a"].store.look_message_by_offset(offset)
            self.assertEqual(stored.sys_flag & 0x701, 0x1 | type_bits)
            self.assertLess(len(stored.body), len(BIG) // 4)
        await cluster.wait_for_route("Packed")
        c = PullConsumer("PACKPULL", cluster.namesrv_addr, reactor)
        await c.start()
        self.addCleanup(c.shutdown)
        pulled = []
        for mq in await c.fetch_subscribe_queues("Packed"):
            pulled += (await c.pull(mq, "*", 0)).messages
        self.assertEqual(sorted(m.body for m in pulled if len(m.body) > 100), [BIG + b"lz4", BIG + b"zstd"])
        self.assertEqual({m.sys_flag & 0x701 for m in pulled}, {0})
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: object) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        await self.push(cluster, listener, "Packed", group="PACKPUSH",
                        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        await until(lambda: len(got) >= 4, "four messages pushed")
        self.assertEqual(sorted(got), sorted([BIG + b"lz4", BIG + b"zstd", b"tiny-lz4", b"tiny-zstd"]))
