"""The pure parts of the dashboard's views: body previews and consumption states."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client.admintypes import ConsumerConnection
from rocketpy.common.message import MessageExt
from rocketpy.web.views import body_preview, consumption_state


class BodyPreviewTests(SynchronousTestCase):
    def test_text_binary_and_cut(self) -> None:
        """UTF-8 bodies are text (a character cut by the limit is dropped), others hex; the size
        is the whole body's."""
        self.assertEqual(body_preview(b"hello"),
                         {"size": 5, "encoding": "utf-8", "preview": "hello", "truncated": False})
        self.assertEqual(body_preview(b"\xff\x00\x01"), {"size": 3, "encoding": "hex", "preview": "ff0001",
                                                          "truncated": False})
        self.assertEqual(body_preview("ab\u2713".encode(), limit=3),
                         {"size": 5, "encoding": "utf-8", "preview": "ab", "truncated": True})
        self.assertEqual(body_preview(b"\xffabcdef", limit=4)["encoding"], "hex")


class ConsumptionStateTests(SynchronousTestCase):
    def test_states(self) -> None:
        """A committed offset past the message is CONSUMED (or CONSUMED_BUT_FILTERED when the
        group's expression leaves its tag out); before it, NOT_CONSUME_YET or NOT_ONLINE."""
        msg = MessageExt("T", b"", 0, {"TAGS": "TagA"}, queue_offset=5)
        online = ConsumerConnection("G", [], {"T": "TagB || TagC"}, "", "", "")
        everything = ConsumerConnection("G", [], {"T": "*"}, "", "", "")
        self.assertEqual(consumption_state(msg, 6, everything), "CONSUMED")
        self.assertEqual(consumption_state(msg, 6, None), "CONSUMED")
        self.assertEqual(consumption_state(msg, 6, online), "CONSUMED_BUT_FILTERED")
        self.assertEqual(consumption_state(msg, 5, everything), "NOT_CONSUME_YET")
        self.assertEqual(consumption_state(msg, None, None), "NOT_ONLINE")
