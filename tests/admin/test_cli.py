"""``rocketpy-admin``'s sub-commands run in-process against a real name server and broker on
loopback: each test starts one cluster and drives many sub-commands through it."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

from twisted.internet import reactor
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from rocketpy.admin.cli import execute
from rocketpy.admin.render import human_time
from rocketpy.client.admin import AdminClient
from rocketpy.client import ConsumeFromWhere, ConsumeResult, Message, MessageExt, PushConsumer
from rocketpy.client.process import ConsumeContext
from rocketpy.remoting.codes import RequestCode
from rocketpy.store.retention import used_ratio
from tests.acl.test_broker import ACL, ADMIN, USER
from tests.common.fastjson import fastjson_loads
from tests.client.test_integration import IntegrationTestCase, LoopbackCluster
from tests.ports import free_port


class AdminTestCase(IntegrationTestCase):
    cluster_: LoopbackCluster

    async def admin(self, *argv: str, ok: bool = True) -> str:
        """Run ``rocketpy-admin argv -n <name server>``; the output (stderr when it failed)."""
        out, err = io.StringIO(), io.StringIO()
        status = await execute(reactor, [*argv, "-n", self.cluster_.namesrv_addr], out, err)
        if ok:
            self.assertEqual((status, err.getvalue()), (0, ""), f"rocketpy-admin {' '.join(argv)}")
            return out.getvalue()
        self.assertEqual((status, out.getvalue()), (1, ""))
        self.assertEqual(err.getvalue().count("\n"), 1, err.getvalue())
        return err.getvalue()

    async def admin_json(self, *argv: str) -> Any:
        return json.loads(await self.admin(*argv, "--json"))


def rows(text: str) -> list[list[str]]:
    """The data rows of an aligned table (header and blank lines left out)."""
    return [line.split() for line in text.splitlines() if line.strip() and not line.startswith("#")]


class TopicAndMessageTests(AdminTestCase):
    async def test_topic_and_message_commands(self) -> None:
        """updateTopic, topicList/Route/Status, sendMessage, the message queries, printMsg,
        consumeMessage, clusterList, brokerStatus, getBrokerConfig and deleteTopic on one broker."""
        self.cluster_ = await self.cluster()
        addr = self.cluster_.brokers["broker-a"].config.advertised_address
        self.assertIn(f"create topic to {addr} success.",
                      await self.admin("updateTopic", "-b", addr, "-t", "Orders", "-r", "2", "-w", "2"))
        await self.cluster_.wait_for_route("Orders")
        self.assertIn("Orders", (await self.admin("topicList")).split())
        route = await self.admin_json("topicRoute", "-t", "Orders")
        self.assertEqual([(q["broker_name"], q["read_queue_nums"], q["write_queue_nums"], q["perm"])
                          for q in route["queue_datas"]], [("broker-a", 2, 2, 6)])

        sent = [await self.admin_json("sendMessage", "-t", "Orders", "-p", body, "-k", key, "-c", tag,
                                      "-b", "broker-a", "-i", qid)
                for body, key, tag, qid in (("one", "K1", "TagA", "0"), ("two", "K2", "TagB", "0"),
                                            ("three", "K1", "TagB", "1"))]
        self.assertEqual([(s["status"], s["queue"]["queue_id"], s["queue_offset"]) for s in sent],
                         [("SEND_OK", 0, 0), ("SEND_OK", 0, 1), ("SEND_OK", 1, 0)])
        stored = [(await self.admin_json("queryMsgByOffset", "-t", "Orders", "-b", "broker-a", "-i", qid, "-o",
                                         offset))["store_timestamp"] for qid, offset in (("0", "0"), ("0", "1"), ("1", "0"))]
        newest = {0: stored[1], 1: stored[2]}  # #Last Updated: the queue's newest message's store time
        self.assertEqual([r[:4] + [" ".join(r[4:])] for r in rows(await self.admin("topicStatus", "-t", "Orders"))],
                         [["broker-a", str(qid), "0", str(high), human_time(newest[qid])]
                          for qid, high in ((0, 2), (1, 1))])

        detail = await self.admin("queryMsgById", "-i", sent[1]["offset_msg_id"])
        self.assertIn("Message Body        : two", detail)
        self.assertIn("Keys                : [K2]", detail)
        by_uniq = await self.admin_json("queryMsgById", "-i", sent[2]["msg_id"], "-t", "Orders")
        self.assertEqual((by_uniq["body"], by_uniq["offset_msg_id"]), ("three", sent[2]["offset_msg_id"]))
        by_key = rows(await self.admin("queryMsgByKey", "-t", "Orders", "-k", "K1"))
        self.assertEqual(sorted((r[0], r[2], r[3]) for r in by_key),
                         sorted([(sent[0]["msg_id"], "0", "0"), (sent[2]["msg_id"], "1", "0")]))
        at = await self.admin_json("queryMsgByOffset", "-t", "Orders", "-b", "broker-a", "-i", "0", "-o", "1")
        self.assertEqual((at["body"], at["msg_id"], at["tags"]), ("two", sent[1]["msg_id"], "TagB"))

        now_ms = int(reactor.seconds() * 1000)
        everything = await self.admin("printMsg", "-t", "Orders", "-b", "0", "-e", str(now_ms + 60000))
        self.assertEqual(sorted(line.rsplit("BODY: ", 1)[1] for line in everything.splitlines()),
                         ["one", "three", "two"])
        tagged = await self.admin_json("printMsg", "-t", "Orders", "-s", "TagB")
        self.assertEqual(sorted(m["body"] for m in tagged), ["three", "two"])
        self.assertEqual(await self.admin_json("printMsg", "-t", "Orders", "-b", str(now_ms + 60000)), [])
        queue0 = await self.admin_json("consumeMessage", "-t", "Orders", "-b", "broker-a", "-i", "0", "-o", "1")
        self.assertEqual([m["body"] for m in queue0], ["two"])

        clusters = rows(await self.admin("clusterList"))
        self.assertEqual([r[:5] for r in clusters], [["DefaultCluster", "broker-a", "0", addr, "V4_9_4"]])
        [status] = await self.admin_json("clusterList")  # #Hour from the oldest message, #SPACE the disk
        self.assertEqual(int(status["stats"]["earliestMessageTimeStamp"]), stored[0])
        store_dir = os.path.join(self.cluster_.root, "broker-a")
        self.assertEqual(clusters[0][-1], f"{used_ratio(store_dir):.4f}")
        self.assertGreater(float(clusters[0][-1]), 0)
        self.assertEqual(clusters[0][-2], f"{(int(reactor.seconds() * 1000) - stored[0]) / 3600000:.2f}")
        self.assertIn("msgPutTotalTodayNow             : 3", await self.admin("brokerStatus", "-b", addr))
        config = await self.admin_json("getBrokerConfig", "-c", "DefaultCluster")
        self.assertEqual(config[addr]["brokerName"], "broker-a")

        self.assertIn("delete topic [Orders] from NameServer success.",
                      await self.admin("deleteTopic", "-t", "Orders", "-c", "DefaultCluster"))
        self.assertIsNone(self.cluster_.brokers["broker-a"].topics.select_topic_config("Orders"))
        self.assertEqual(await self.admin("topicRoute", "-t", "Orders", ok=False),
                         "rocketpy-admin topicRoute: topic 'Orders' does not exist\n")

    async def test_names_that_do_not_exist(self) -> None:
        """An unknown topic, group, cluster or message id: one line, exit status 1."""
        self.cluster_ = await self.cluster()
        for argv, error in [
            (("topicStatus", "-t", "Nope"), "topic 'Nope' does not exist"),
            (("consumerProgress", "-g", "Nobody"), "consumer group 'Nobody' does not exist"),
            (("consumerConnection", "-g", "Nobody"), "consumer group 'Nobody' does not exist"),
            (("deleteTopic", "-t", "TBW102", "-c", "NoCluster"), "cluster 'NoCluster' does not exist"),
            (("queryMsgById", "-i", "not-an-id"), "'not-an-id' is not an offset message id"),
            (("updateTopic", "-t", "T"), "give exactly one of --brokerAddr or --clusterName"),
            (("printMsg", "-t", "TBW102", "-b", "yesterday"), "bad timestamp 'yesterday'"),
        ]:
            self.assertIn(error, await self.admin(*argv, ok=False))

    async def test_first_name_server_down(self) -> None:
        """``-n a;b``: name server calls go to the next address when one cannot be reached."""
        self.cluster_ = await self.cluster()
        out, err = io.StringIO(), io.StringIO()
        addrs = f"127.0.0.1:{free_port()};{self.cluster_.namesrv_addr}"
        self.assertEqual(await execute(reactor, ["topicList", "-n", addrs], out, err), 0, err.getvalue())
        self.assertIn("TBW102", out.getvalue().split())


class ConsumerTests(AdminTestCase):
    async def test_group_commands(self) -> None:
        """consumerConnection, producerConnection, consumerProgress (offsets, lag, last time),
        direct consumption, brokerConsumeStats, resetOffsetByTime (online and offline) and the
        subscription-group commands against a live push consumer."""
        self.cluster_ = cluster = await self.cluster()
        addr = cluster.brokers["broker-a"].config.advertised_address
        producer = await self.producer(cluster)
        sent = [await producer.send(Message("Watched", b"m%d" % i)) for i in range(4)]
        await cluster.wait_for_route("Watched")
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            return ConsumeResult.CONSUME_SUCCESS

        consumer = PushConsumer("CG", cluster.namesrv_addr, reactor, persist_interval=0.2,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("Watched", "*")
        consumer.register_listener(listener)
        await consumer.start()
        self.addCleanup(consumer.shutdown)
        offsets = cluster.brokers["broker-a"].offsets
        await self.until(lambda: sum(offsets.query_offsets("CG", "Watched").values()) == 4)
        await cluster.wait_for_route("%RETRY%CG")

        client_id = consumer.instance.client_id
        connection = await self.admin("consumerConnection", "-g", "CG")
        self.assertEqual(rows(connection)[0][0], client_id)
        self.assertIn("ConsumeType: CONSUME_PASSIVELY\nMessageModel: CLUSTERING", connection)
        subscriptions = (await self.admin_json("consumerConnection", "-g", "CG"))["subscriptions"]
        self.assertEqual(subscriptions, {"Watched": "*", "%RETRY%CG": "*"})
        producers = await self.admin_json("producerConnection", "-g", "PG", "-t", "Watched")
        self.assertEqual([p["client_id"] for p in producers], [producer.instance.client_id])

        progress = await self.admin_json("consumerProgress", "-g", "CG")
        watched = [q for q in progress["queues"] if q["topic"] == "Watched"]
        self.assertEqual(sum(q["broker_offset"] for q in watched), 4)
        self.assertEqual([q["consumer_offset"] for q in watched], [q["broker_offset"] for q in watched])
        self.assertEqual(progress["total_lag"], 0)
        stored = {s.queue.queue_id: s for s in sent}
        for q in watched:  # the last consumed message's store time, from GET_CONSUME_STATS
            self.assertEqual(q["last_timestamp"] > 0, q["queue_id"] in stored)
        await self.assert_broker_reports_last_times(addr, "CG", "Watched")
        held = await self.admin_json("consumerProgress", "-g", "CG", "-s", "true")  # through 307 to the client
        self.assertEqual({q["queue_id"]: q["client_id"] for q in held["queues"] if q["topic"] == "Watched"},
                         dict.fromkeys(range(4), client_id))
        self.assertIn("#Client", await self.admin("consumerProgress", "-g", "CG", "-s", "true"))
        self.assertIn(["DefaultCluster", "Watched", "CG"], rows(await self.admin("topicList", "-c")))
        summary = rows(await self.admin("consumerProgress"))
        [row] = [r for r in summary if r[0] == "CG"]
        self.assertEqual(row[:5] + row[6:], ["CG", "1", "401", "CONSUME_PASSIVELY", "CLUSTERING", "0"])
        self.assertGreater(float(row[5]), 0)  # TPS: the group's pull rate over the last minute

        direct = await self.admin_json("queryMsgById", "-i", sent[0].offset_msg_id, "-g", "CG", "-d", client_id)
        self.assertEqual(direct["consume"]["consume_result"], "CR_SUCCESS")
        self.assertEqual(got.count(b"m0"), 2)

        resets = await self.admin_json("resetOffsetByTime", "-t", "Watched", "-g", "CG", "-s", "1000")
        self.assertEqual({(r["queue_id"], r["offset"], r["online"]) for r in resets},
                         {(qid, 0, True) for qid in range(4)})
        await self.until(lambda: len(got) == 9)  # 4, the direct one, 4 again
        self.assertEqual(sorted(got), sorted([b"m0", b"m1", b"m2", b"m3"] * 2 + [b"m0"]))

        await self.until(lambda: sum(offsets.query_offsets("CG", "Watched").values()) == 4)
        await consumer.shutdown()
        self.assertIn("consumer group 'CG' is not online", await self.admin("consumerConnection", "-g", "CG", ok=False))
        for i in range(2):
            await producer.send(Message("Watched", b"late%d" % i))
        text = await self.admin("consumerProgress", "-g", "CG")
        self.assertIn("Diff Total: 2", text)
        lagging = [r for r in rows(text) if r[0] == "Watched" and r[5] != "0"]
        self.assertEqual(sum(int(r[5]) for r in lagging), 2)
        self.assertEqual([int(r[3]) - int(r[4]) for r in lagging], [int(r[5]) for r in lagging])
        stats = await self.admin("brokerConsumeStats", "-b", addr)
        self.assertIn("Diff Total: 2", stats)
        watched_rows = [r for r in rows(stats) if r[:2] == ["Watched", "CG"]]
        self.assertEqual(sum(int(r[6]) for r in watched_rows), 2)
        self.assertEqual([r[7] != "-" for r in watched_rows], [int(r[5]) > 0 for r in watched_rows])

        offline = await self.admin_json("resetOffsetByTime", "-t", "Watched", "-g", "CG", "-s", "-1")
        self.assertEqual({r["online"] for r in offline}, {False})
        self.assertEqual(sum(offsets.query_offsets("CG", "Watched").values()), 6)
        self.assertIn("Diff Total: 0", await self.admin("consumerProgress", "-g", "CG"))

        await self.admin("updateSubGroup", "-b", addr, "-g", "NewGroup", "-r", "3", "-s", "false", "-o", "true")
        config = cluster.brokers["broker-a"].subscriptions.find_subscription_group_config("NewGroup")
        assert config is not None
        self.assertEqual((config.retry_max_times, config.consume_enable, config.consume_message_orderly),
                         (3, False, True))
        await self.admin("deleteSubGroup", "-b", addr, "-g", "NewGroup", "-r", "true")
        self.assertNotIn("NewGroup", cluster.brokers["broker-a"].subscriptions.groups())


    async def assert_broker_reports_last_times(self, addr: str, group: str, topic: str) -> None:
        """GET_CONSUME_STATS itself (no QUERY_CONSUME_TIME_SPAN): per queue the store time of the
        message at the consumer offset - 1 (0 when nothing was consumed), and a numeric TPS."""
        admin = AdminClient(reactor, self.cluster_.namesrv_addr)
        self.addCleanup(admin.close)
        response = await admin.call(addr, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
        raw = fastjson_loads(response.body)
        self.assertIsInstance(raw["consumeTps"], float)
        for key, progress in raw["offsetTable"].items():
            offset = progress["consumerOffset"]
            expected = 0
            if offset > 0:
                queue_id = dict(key)["queueId"]
                last = await admin.query_message_by_offset(topic, "broker-a", queue_id, offset - 1)
                expected = last.store_timestamp
            self.assertEqual(progress["lastTimestamp"], expected, key)
        self.assertGreater(sum(p["lastTimestamp"] > 0 for p in raw["offsetTable"].values()), 0)


class AclTests(AdminTestCase):
    async def test_keys_sign_the_requests(self) -> None:
        """``--accessKey``/``--secretKey`` sign every request: a broker with ACL on refuses
        updateTopic without them or with a non-admin account, and takes it with the admin's."""
        acl_path = os.path.abspath(self.mktemp())
        with open(acl_path, "w") as f:
            f.write(ACL)
        self.cluster_ = cluster = LoopbackCluster(self)
        self.addCleanup(cluster.close)
        addr = await cluster.add_broker("broker-a", acl_enable=True, acl_file=acl_path)
        create = ("updateTopic", "-b", addr, "-t", "Guarded")
        self.assertIn("AclException", await self.admin(*create, ok=False))
        user = ("--accessKey", USER[0], "--secretKey", USER[1])
        self.assertIn("AclException", await self.admin(*create, *user, ok=False))
        self.assertIsNone(cluster.brokers["broker-a"].topics.select_topic_config("Guarded"))
        admin = ("--accessKey", ADMIN[0], "--secretKey", ADMIN[1])
        self.assertIn(f"create topic to {addr} success.", await self.admin(*create, *admin))
        self.assertIsNotNone(cluster.brokers["broker-a"].topics.select_topic_config("Guarded"))
        self.assertIn("msgPutTotalTodayNow", await self.admin("brokerStatus", "-b", addr, *admin))
        self.assertEqual(await self.admin(*create, "--accessKey", ADMIN[0], ok=False),
                         "rocketpy-admin updateTopic: give both --accessKey and --secretKey, or neither\n")


class ProcessTests(TestCase):
    timeout = 60

    async def test_unreachable_name_server(self) -> None:
        """``python -m rocketpy.admin`` against a port nobody listens on: exit status 1 and one line
        on stderr, no traceback; ``--help`` exits 0."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        argv = ["-m", "rocketpy.admin", "topicList", "-n", f"127.0.0.1:{free_port()}"]
        out, err, status = await getProcessOutputAndValue(sys.executable, argv, env=env, reactor=reactor)
        self.assertEqual((status, out), (1, b""))
        self.assertEqual(err.count(b"\n"), 1, err)
        self.assertTrue(err.startswith(b"rocketpy-admin topicList: cannot reach the name server or broker: "), err)
        self.assertIn(b"Connection refused", err)
        out, err, status = await getProcessOutputAndValue(sys.executable, ["-m", "rocketpy.admin", "--help"],
                                                          env=env, reactor=reactor)
        self.assertEqual(status, 0, err)
        self.assertIn(b"consumerProgress", out)


class TwoBrokerTests(AdminTestCase):
    async def test_cluster_wide_commands(self) -> None:
        """With two brokers in the cluster, ``-c`` reaches both (the order conf names both), and
        topicStatus and printMsg gather every broker's queues."""
        self.cluster_ = cluster = await self.cluster("broker-a", "broker-b")
        created = await self.admin_json("updateTopic", "-c", "DefaultCluster", "-t", "Spread", "-r", "2", "-w", "2",
                                        "-o", "true")
        addrs = sorted(b.config.advertised_address for b in cluster.brokers.values())
        self.assertEqual(sorted(created["brokers"]), addrs)
        await cluster.wait_for_route("Spread", brokers=2)
        self.assertEqual(len(rows(await self.admin("clusterList"))), 2)
        route = await self.admin_json("topicRoute", "-t", "Spread")
        self.assertEqual(route["order_topic_conf"], "broker-a:2;broker-b:2")
        for name, qid in (("broker-a", "1"), ("broker-b", "0"), ("broker-b", "0")):
            await self.admin("sendMessage", "-t", "Spread", "-p", f"to {name}", "-b", name, "-i", qid)
        self.assertEqual([r[:4] for r in rows(await self.admin("topicStatus", "-t", "Spread"))],
                         [["broker-a", "0", "0", "0"], ["broker-a", "1", "0", "1"],
                          ["broker-b", "0", "0", "2"], ["broker-b", "1", "0", "0"]])
        bodies = [m["body"] for m in await self.admin_json("printMsg", "-t", "Spread")]
        self.assertEqual(sorted(bodies), ["to broker-a", "to broker-b", "to broker-b"])

        await self.admin("updateSubGroup", "-c", "DefaultCluster", "-g", "Everywhere")
        self.assertEqual(["Everywhere" in b.subscriptions.groups() for b in cluster.brokers.values()], [True, True])
        await self.admin("deleteSubGroup", "-c", "DefaultCluster", "-g", "Everywhere")
        self.assertEqual(["Everywhere" in b.subscriptions.groups() for b in cluster.brokers.values()], [False, False])

        await self.admin("deleteTopic", "-t", "Spread", "-c", "DefaultCluster")
        for broker in cluster.brokers.values():
            self.assertIsNone(broker.topics.select_topic_config("Spread"))
        self.assertIn("topic 'Spread' does not exist", await self.admin("topicStatus", "-t", "Spread", ok=False))
