"""Recall handles: Java's ``RecallMessageHandle`` layout and checks, and which sends get one."""

from __future__ import annotations

import base64

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.grpc.convert import timestamp
from rocketpy.grpc.recall import RecallHandle, sent_handle
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.timer import TimerRules


def _java(raw: str) -> str:
    """What Java's ``Base64.getUrlEncoder().encodeToString`` gives (URL alphabet, padded)."""
    return base64.urlsafe_b64encode(raw.encode()).decode()


class RecallHandleTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """``HandleV1.buildHandle``'s layout: base64 of the five space-separated fields."""
        handle = RecallHandle("topic", "broker-0", "1700000000001", "7F0000010001ABCD")
        self.assertEqual(handle.encode(), _java("v1 topic broker-0 1700000000001 7F0000010001ABCD"))
        self.assertEqual(RecallHandle.decode(handle.encode()), handle)
        self.assertEqual(RecallHandle.decode(handle.encode().rstrip("=")), handle)

    def test_invalid(self) -> None:
        """As ``RecallMessageHandleTest.testHandleInvalid``: empty, too few fields, another version,
        not base64; also bytes that are not UTF-8."""
        for bad in ("", _java("v1 a b c"), _java("v2 a b c d"), "v1 a b c d",
                    base64.urlsafe_b64encode(b"\xff\xfe v1").decode()):
            with self.assertRaises(ValueError, msg=bad) as caught:
                RecallHandle.decode(bad)
            self.assertEqual(str(caught.exception), "recall handle is invalid")


class SentHandleTests(SynchronousTestCase):
    def _message(self, deliver_ms: int | None, kind: int = pb.MessageType.DELAY) -> pb.Message:
        sysp = pb.SystemProperties(message_id="ID1", message_type=kind)  # type: ignore[arg-type]
        if deliver_ms is not None:
            sysp.delivery_timestamp.CopyFrom(timestamp(deliver_ms))
        return pb.Message(topic=pb.Resource(name="T"), body=b"x", system_properties=sysp)

    def test_timestamp_is_the_slot_plus_one(self) -> None:
        """``TIMER_OUT_MS`` + 1: the precision step before the delivery time (one step less on a multiple)."""
        timer = TimerRules(MessageStoreConfig(timer_precision_ms=1000))
        for deliver_ms, slot in ((5500, 5000), (6000, 5000), (5001, 5000)):
            handle = RecallHandle.decode(sent_handle(self._message(deliver_ms), "b", timer, 1000))
            self.assertEqual(handle, RecallHandle("T", "b", str(slot + 1), "ID1"))

    def test_no_handle(self) -> None:
        """No delivery time, one not in the future, a transaction, or no timer: no handle."""
        timer = TimerRules(MessageStoreConfig())
        self.assertEqual(sent_handle(self._message(None), "b", timer, 1000), "")
        self.assertEqual(sent_handle(self._message(1000), "b", timer, 1000), "")
        self.assertEqual(sent_handle(self._message(9000, pb.MessageType.TRANSACTION), "b", timer, 1000), "")
        self.assertEqual(sent_handle(self._message(9000), "b", None, 1000), "")
