"""Retry after RECONSUME_LATER, delayed sends, orderly consumption and GET_CONSUMER_RUNNING_INFO
with the official C++ client.

Uses the harness of :mod:`tests.interop.test_cpp` (a rocketpy process, C++ children). The C++
1.2 client sends CONSUMER_SEND_MSG_BACK with only offset/group/delayLevel 0, so the broker
chooses level 3 (10 s by default, 3 s with the short level table used here); its wrapper
exposes no query by id and no SQL92 subscription (only messages it sends are filtered by SQL).
"""

from __future__ import annotations

import json
from typing import Any

from rocketpy.common.message import decode_records
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from tests.common.fastjson import fastjson_loads
from tests.interop.test_cpp import CppHarness, query


class CppFeatureTests(CppHarness):
    def test_retry_after_reconsume_later(self) -> None:
        """RECONSUME_LATER once: the message comes back at level 3 (3 s here) under its own topic, reconsumeTimes 1."""
        self.start(extra=("--message-delay-level", "1s 2s 3s 4s"))
        topic = "InteropRetry"
        [sent] = self.produce(topic, "sync", 1, "--keys", "retry", "--body-prefix", "again")
        got = self.consume(topic, "CID_INTEROP_RETRY", 2, "--fail-times", "1", "--timeout", "40", "--linger", "1")
        self.assertEqual([(m["topic"], m["reconsume_times"]) for m in got[:2]], [(topic, 0), (topic, 1)])
        first, second = got[0], got[1]
        self.assertEqual([self.body(m) for m in (first, second)], [b"again-0", b"again-0"])
        self.assertEqual(second["keys"], "retry-0")
        self.assertGreaterEqual(second["store_timestamp"] - first["store_timestamp"], 2_900)  # not level 1 or 2
        self.assertEqual(first["msg_id"], sent["msg_id"])
        self.assertEqual(len(got), 2)

    def test_delay_level_on_send(self) -> None:
        """A message sent with delay level 2 (5 s) is stored on its topic about 5 s after it was born."""
        self.start()
        topic = "InteropDelay"
        self.produce(topic, "sync", 1, "--keys", "late", "--delay-level", "2")
        [msg] = self.consume(topic, "CID_INTEROP_DELAY", 1, "--timeout", "30", "--linger", "0.5")
        self.assertEqual((self.body(msg), msg["keys"]), (b"body-0", "late-0"))
        self.assertGreaterEqual(msg["store_timestamp"] - msg["born_timestamp"], 4_900)

    def test_orderly_consumer_holds_its_queue(self) -> None:
        """An orderly C++ consumer locks the queue (another client cannot) and gets one key's messages in order."""
        self.start()
        topic, group = "InteropOrderly", "CID_INTEROP_ORDERLY"
        sent = self.produce(topic, "orderly", 5, "--keys", "o", "--order-key", "3")
        consumer = self.spawn("consume", "--topic", topic, "--group", group, "--expect", "5", "--orderly",
                              "--linger", "2", "--timeout", "40")
        got: list[dict[str, Any]] = []
        assert consumer.stdout is not None
        while len(got) < 5:
            line = consumer.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            if event["event"] == "message":
                got.append(event)
        queue_id = got[0]["queue_id"] if got else 0
        body = {"consumerGroup": group, "clientId": "intruder@1",
                "mqSet": [{"brokerName": "broker-a", "queueId": queue_id, "topic": topic}]}
        lock = query(self.rocketpy.broker_port,
                     RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, {}, json.dumps(body).encode()))
        self.finish(consumer)
        self.assertEqual([m["keys"] for m in got], [f"o-{i}" for i in range(5)])
        self.assertEqual([m["queue_offset"] for m in got], [e["offset"] for e in sent])
        self.assertEqual(json.loads(lock.body), {"lockOKMQSet": []})

    def test_consumer_running_info_through_the_broker(self) -> None:
        """An admin's GET_CONSUMER_RUNNING_INFO reaches a live C++ consumer and its answer comes back."""
        self.start()
        topic, group = "InteropStatus", "CID_INTEROP_STATUS"
        self.produce(topic, "sync", 1)
        consumer = self.spawn("consume", "--topic", topic, "--group", group, "--expect", "1",
                              "--linger", "3", "--timeout", "40")
        assert consumer.stdout is not None
        while True:  # the consumer holds its queues once it has consumed
            line = consumer.stdout.readline()
            if not line or json.loads(line)["event"] == "message":
                break
        port = self.rocketpy.broker_port
        connections = query(port, RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                          {"consumerGroup": group}))
        [client_id] = [c["clientId"] for c in json.loads(connections.body)["connectionSet"]]
        ext = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
        response = query(port, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, ext), timeout=10)
        self.finish(consumer)
        self.assertEqual(response.code, 0, response.remark)
        info = fastjson_loads(response.body)  # the C++ client writes queue objects as keys too
        self.assertEqual(info["properties"]["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY")
        self.assertEqual(sorted(s["topic"] for s in info["subscriptionSet"]), [f"%RETRY%{group}", topic])
        self.assertEqual(sorted(dict(k)["queueId"] for k in info["mqTable"] if dict(k)["topic"] == topic), [0, 1, 2, 3])

    def test_sql92_pull_of_cpp_properties(self) -> None:
        """The C++ 1.2 client cannot subscribe by SQL (its wrapper's subscribe takes a tag expression
        only), but the user properties it sends are what a broker-side SQL92 filter evaluates."""
        self.start(extra=("--enable-property-filter", "true"))
        topic = "InteropSql"
        for a, color in (("3", "red"), ("7", "red"), ("9", "blue")):
            self.produce(topic, "orderly", 1, "--order-key", "0", "--keys", f"k{a}", "--tag", "TagA",
                         "--prop", f"a={a}", "--prop", f"color={color}")
        fields = {"consumerGroup": "CID_INTEROP_SQL", "topic": topic, "queueId": "0", "queueOffset": "0",
                  "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                  "subscription": "a > 5 AND color = 'red' AND TAGS = 'TagA'", "subVersion": "1",
                  "expressionType": "SQL92"}
        response = query(self.rocketpy.broker_port, RemotingCommand.request(RequestCode.PULL_MESSAGE, fields))
        self.assertEqual(response.code, 0, response.remark)
        self.assertEqual([m.keys for m in decode_records(response.body)], ["k7-0"])
        self.assertEqual(response.ext_fields["nextBeginOffset"], "3")
