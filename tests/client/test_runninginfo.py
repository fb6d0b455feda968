"""GET_CONSUMER_RUNNING_INFO (307) answered by the client: the ConsumerRunningInfo body, and the
per-topic statistics behind its ``statusTable`` (fake cluster, timers on a Clock)."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.client.consumer import PullConsumer
from rocketpy.client.push import PushConsumer
from rocketpy.client.results import ConsumeResult
from rocketpy.client.stats import ConsumerStats, Window
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.common.fastjson import fastjson_loads, mq_key

from .fakes import NAMESRV
from .test_push import PushTestCase

START = 1_700_000_000


def _ask(c: Any, group: str = "CG", jstack: str = "false") -> RemotingCommand:
    """Call the client's 307 processor as a broker would."""
    processor = c.instance.remoting.processors[RequestCode.GET_CONSUMER_RUNNING_INFO]
    verifyObject(IRequestProcessor, processor)
    ext = {"consumerGroup": group, "clientId": "me", "jstackEnable": jstack}
    request = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, ext, language="JAVA")
    request.opaque = 9
    response = processor.process_request(None, request)
    assert isinstance(response, RemotingCommand)
    return response


class PushRunningInfoTests(PushTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.pending: list[Deferred[ConsumeResult]] = []

    def hold(self) -> Deferred[ConsumeResult]:
        self.pending.append(Deferred())
        return self.pending[-1]

    def info(self, c: PushConsumer) -> dict[str, Any]:
        response = _ask(c)
        self.assertEqual((response.code, response.opaque), (ResponseCode.SUCCESS, 9))
        return fastjson_loads(response.body)

    def test_body_while_consuming_and_after(self) -> None:
        """Properties, subscriptions, the held queues with their cache and offsets, and statistics."""
        self.result = self.hold
        c = self.consumer()
        self.cluster.publish("broker-a", "T", 0, b"a")
        self.cluster.publish("broker-a", "T", 0, b"bb")
        self.clock.advance(0)  # delivered now; both listener calls pending
        self.clock.advance(2)
        info = self.info(c)
        self.assertEqual(sorted(info), ["mqTable", "properties", "statusTable", "subscriptionSet"])
        props = info["properties"]
        expected = {
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CLIENT_VERSION": "V4_9_4",
            "PROP_NAMESERVER_ADDR": NAMESRV + ";", "PROP_CONSUMER_START_TIMESTAMP": str(START * 1000),
            "PROP_THREADPOOL_CORE_SIZE": "20", "PROP_CONSUMEORDERLY": "false", "consumerGroup": "CG",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "pullBatchSize": "32",
        }
        self.assertEqual({k: props.get(k) for k in expected}, expected)
        self.assertTrue(all(isinstance(v, str) for v in props.values()), props)
        self.assertEqual([s["topic"] for s in info["subscriptionSet"]], ["%RETRY%CG", "T"])
        self.assertEqual(info["subscriptionSet"][1]["subString"], "*")
        queues = [mq_key(topic, "broker-a", qid) for topic in ("%RETRY%CG", "T") for qid in (0, 1)]
        self.assertEqual(sorted(info["mqTable"]), sorted(queues))
        q0 = info["mqTable"][mq_key("T", "broker-a", 0)]
        self.assertEqual(
            {k: q0[k] for k in ("cachedMsgCount", "cachedMsgMinOffset", "cachedMsgMaxOffset", "cachedMsgSizeInMiB",
                                "commitOffset", "locked", "droped", "lastConsumeTimestamp")},
            {"cachedMsgCount": 2, "cachedMsgMinOffset": 0, "cachedMsgMaxOffset": 1, "cachedMsgSizeInMiB": 0,
             "commitOffset": -1, "locked": False, "droped": False, "lastConsumeTimestamp": START * 1000},
        )
        self.assertEqual(q0["lastPullTimestamp"], START * 1000)  # the next (held) pull began on delivery
        self.assertEqual(info["statusTable"]["T"]["pullTPS"], 2 / 60)
        self.assertEqual(info["statusTable"]["%RETRY%CG"]["pullTPS"], 0.0)

        self.pending[0].callback(ConsumeResult.RECONSUME_LATER)  # sent back, counts as failed
        self.clock.advance(1)  # the second listener call took 3 s
        self.pending[1].callback(ConsumeResult.CONSUME_SUCCESS)
        info = self.info(c)
        q0 = info["mqTable"][mq_key("T", "broker-a", 0)]
        self.assertEqual((q0["cachedMsgCount"], q0["commitOffset"]), (0, 2))
        status = info["statusTable"]["T"]
        self.assertEqual((status["consumeOKTPS"], status["consumeFailedTPS"], status["consumeFailedMsgs"]),
                         (1 / 60, 1 / 60, 1))
        self.assertEqual(status["consumeRT"], 2500.0)  # 2 s and 3 s

    def test_fastjson_shape(self) -> None:
        """``mqTable`` has queue objects as keys, fields sorted, as a Java client's fastjson writes it."""
        c = self.consumer()
        body = _ask(c).body.decode()
        self.assertTrue(body.startswith('{"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"%RETRY%CG"}:'
                                        '{"cachedMsgCount":0,'), body)
        self.assertIn('"properties":{"PROP_CLIENT_VERSION":"V4_9_4",', body)

    def test_orderly_properties(self) -> None:
        """An orderly consumer says so, locks show, and its core size is its number of queues."""
        c = self.consumer(orderly=True)
        info = self.info(c)
        self.assertEqual((info["properties"]["PROP_CONSUMEORDERLY"], info["properties"]["PROP_THREADPOOL_CORE_SIZE"]),
                         ("true", "4"))
        q0 = info["mqTable"][mq_key("T", "broker-a", 0)]
        self.assertEqual((q0["locked"], q0["lastLockTimestamp"]), (True, START * 1000))

    def test_jstack_and_unknown_group(self) -> None:
        """``jstackEnable=true`` adds every thread's stack; another group is SYSTEM_ERROR."""
        c = self.consumer()
        info = fastjson_loads(_ask(c, jstack="true").body)
        self.assertIn('"MainThread"', info["jstack"])
        self.assertIn("process_request", info["jstack"])
        response = _ask(c, group="OTHER")
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertEqual(response.remark, "The Consumer Group <OTHER> not exist in this consumer")


class PullRunningInfoTests(PushTestCase):
    def test_pull_consumer(self) -> None:
        """A pull consumer answers too: actively consuming, no held queues."""
        c = PullConsumer("PULLG", NAMESRV, self.clock, self.remoting, client_id="me")
        self.successResultOf(c.start())
        self.addCleanup(lambda: self.successResultOf(c.shutdown()))
        info = fastjson_loads(_ask(c, group="PULLG").body)
        self.assertEqual(info["properties"]["PROP_CONSUME_TYPE"], "CONSUME_ACTIVELY")
        self.assertEqual(info["properties"]["PROP_CONSUMER_START_TIMESTAMP"], str(START * 1000))
        self.assertEqual((info["mqTable"], info["statusTable"], info["subscriptionSet"]), ({}, {}, []))


class StatsTests(SynchronousTestCase):
    def test_window(self) -> None:
        """Values older than the span drop out, bucket by bucket."""
        w = Window(60, 1)
        w.add(5, 100.2)
        w.add(7, 100.9)
        w.add(1, 130)
        self.assertEqual(w.totals(130), (13, 3))
        self.assertEqual(w.totals(160.5), (1, 1))
        self.assertEqual(w.totals(191), (0, 0))

    def test_minute_and_hour(self) -> None:
        """Rates cover the last minute; failed messages the last hour; unknown topics are all zero."""
        clock = Clock()
        clock.advance(1000)
        stats = ConsumerStats(clock)
        stats.pulled("T", 30, 10)
        stats.pulled("T", 0, 30)
        stats.consume_time("T", 4)
        stats.consumed("T", 6, 3)
        self.assertEqual(stats.status("T"), {"consumeFailedMsgs": 3, "consumeFailedTPS": 0.05, "consumeOKTPS": 0.1,
                                             "consumeRT": 4.0, "pullRT": 20.0, "pullTPS": 0.5})
        clock.advance(61)
        self.assertEqual(stats.status("T"), {"consumeFailedMsgs": 3, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0,
                                             "consumeRT": 0.0, "pullRT": 0.0, "pullTPS": 0.0})
        clock.advance(3600)
        self.assertEqual(stats.status("T")["consumeFailedMsgs"], 0)
        self.assertEqual(stats.status("U"), stats.status("T"))
