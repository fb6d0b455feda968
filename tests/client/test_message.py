"""Tests for rocketpy.client.message and rocketpy.client.errors."""

from __future__ import annotations

import random

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import errors
from rocketpy.client.message import UniqKeyGenerator, new_message, validate_message
from rocketpy.common.message import Message
from rocketpy.common.route import MessageQueue
from rocketpy.remoting.errors import RemotingConnectError, RemotingTimeoutError


class NewMessageTests(SynchronousTestCase):
    def test_properties(self) -> None:
        """Tags, keys, delay level and wait-store-ok become RocketMQ properties."""
        msg = new_message("T", b"x", tags="TagA", keys=["k1", "k2"], delay_level=3, wait_store_ok=False)
        self.assertEqual(
            msg.properties, {"TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3", "WAIT": "false"}
        )
        self.assertEqual((msg.tags, msg.keys), ("TagA", "k1 k2"))

    def test_plain(self) -> None:
        """A plain message carries no properties."""
        self.assertEqual(new_message("T", b"x").properties, {})


class ValidateTests(SynchronousTestCase):
    def assertInvalid(self, msg: Message, text: str) -> None:
        e = self.assertRaises(errors.MessageInvalidError, validate_message, msg)
        self.assertEqual(e.code, 13)
        self.assertIn(text, e.message)

    def test_topic_rules(self) -> None:
        """Blank, badly spelled, too long, reserved and system topics are refused."""
        self.assertInvalid(Message(" ", b"x"), "blank")
        self.assertInvalid(Message("a b", b"x"), "characters")
        self.assertInvalid(Message("a" * 128, b"x"), "longer than 127")
        self.assertInvalid(Message("TBW102", b"x"), "reserved")
        self.assertInvalid(Message("SCHEDULE_TOPIC_XXXX", b"x"), "system topic")

    def test_body_rules(self) -> None:
        """Empty and oversized bodies are refused; the limit itself is fine."""
        self.assertInvalid(Message("T", b""), "empty")
        self.assertInvalid(Message("T", b"x" * (4 * 1024 * 1024 + 1)), "over the limit")
        validate_message(Message("%RETRY%G|a-b_1", b"x" * (4 * 1024 * 1024)))
        self.assertRaises(errors.MessageInvalidError, validate_message, Message("T", b"xx"), 1)


class UniqKeyTests(SynchronousTestCase):
    def test_layout(self) -> None:
        """32 hex chars: ip, pid, random hash, ms since month start, counter."""
        gen = UniqKeyGenerator("10.0.0.9", 0x1234, random.Random(1))
        now = 1_700_000_000.5  # 2023-11-14T22:13:20.5Z
        key = gen.next_id(now)
        self.assertEqual(len(key), 32)
        self.assertEqual(key, key.upper())
        self.assertEqual(key[:12], "0A0000091234")
        month_start = 1_698_796_800  # 2023-11-01T00:00:00Z
        self.assertEqual(int(key[20:28], 16), int((now - month_start) * 1000))
        second = gen.next_id(now)
        self.assertEqual(second[:28], key[:28])
        self.assertEqual((int(second[28:], 16) - int(key[28:], 16)) & 0xFFFF, 1)

    def test_time_field_follows_the_clock(self) -> None:
        """Ids made within one ms share its time field; the next ms gets the next value."""
        gen = UniqKeyGenerator("127.0.0.1", 1, random.Random(3))
        keys = [gen.next_id(t) for t in (1_700_000_000.0, 1_700_000_000.0004, 1_700_000_000.0012)]
        times = [int(key[20:28], 16) for key in keys]
        self.assertEqual((times[1] - times[0], times[2] - times[0]), (0, 1))
        self.assertEqual([int(key[28:], 16) for key in keys[1:]],
                         [(int(keys[0][28:], 16) + n) & 0xFFFF for n in (1, 2)])

    def test_month_rollover(self) -> None:
        """The time field restarts at the start of the next month."""
        gen = UniqKeyGenerator("127.0.0.1", 1, random.Random(2))
        gen.next_id(1_698_796_799.0)
        key = gen.next_id(1_698_796_800.25)
        self.assertEqual(int(key[20:28], 16), 250)


class ErrorTests(SynchronousTestCase):
    def test_send_failed_codes(self) -> None:
        """A failed retry loop reports Java's code for the last error."""
        broker = errors.MQBrokerError(14, "busy", "1.2.3.4:10911")
        cases = [
            (broker, 14),
            (RemotingConnectError("1.2.3.4:10911", "refused"), 10001),
            (RemotingTimeoutError("late"), 10002),
            (errors.BrokerNotFoundError("b"), 10003),
        ]
        for last, code in cases:
            e = errors.SendFailedError("T", 3, 0.1, last)
            self.assertEqual((e.code, e.attempts, e.last_error), (code, 3, last))

    def test_broker_error_text(self) -> None:
        """A broker error names the code, the remark and the broker."""
        e = errors.MQBrokerError(17, "no topic", "1.2.3.4:10911")
        self.assertEqual(str(e), "broker 1.2.3.4:10911 answered TOPIC_NOT_EXIST (17): no topic")

    def test_message_queue_order(self) -> None:
        """Queues sort by topic, broker name, queue id."""
        qs = [MessageQueue("T", "b", 0), MessageQueue("T", "a", 1), MessageQueue("T", "a", 0)]
        self.assertEqual(sorted(qs)[0], MessageQueue("T", "a", 0))
