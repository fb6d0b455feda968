"""``PullHeader.parse``'s shortcut for the usual header against the reference parser: the same
header or the same refusal for random and damaged fields."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker.pull import PullHeader
from rocketpy.common.headers import HeaderError

NAMES = ["consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
         "suspendTimeoutMillis", "subscription", "subVersion", "expressionType"]
NUMBER = (st.integers(-(1 << 64), 1 << 64).map(str) | st.integers(-10**9, 10**9).map(str)
          | st.sampled_from(["", "-", "+5", "0x1", " 1", "1_0", "\u0661", "²", "-0", "999999999", "2147483648"]))
VALUE = NUMBER | st.text(max_size=6)


def both(fields: dict[str, str]) -> list[object]:
    """What the shortcut and the reference make of ``fields``: headers, or refusals' texts."""
    results: list[object] = []
    for parse in (PullHeader.parse, PullHeader._parse):
        try:
            results.append(parse(fields))
        except HeaderError as e:
            results.append(str(e))
    return results


class PullHeaderParseTests(SynchronousTestCase):
    def test_usual_header(self) -> None:
        fields = {"consumerGroup": "G", "topic": "T", "queueId": "3", "queueOffset": "-1", "maxMsgNums": "32",
                  "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "15000", "subscription": "*",
                  "subVersion": "1700000000000"}
        header = PullHeader.parse(fields)
        self.assertEqual((header.queue_id, header.queue_offset, header.max_msg_nums, header.sys_flag,
                          header.suspend_timeout_millis, header.sub_version), (3, -1, 32, 6, 15000, 1700000000000))

    @settings(max_examples=400, deadline=None)
    @given(st.dictionaries(st.sampled_from(NAMES), VALUE), st.dictionaries(st.sampled_from(NAMES), NUMBER))
    def test_same_as_reference(self, base: dict[str, str], numbers: dict[str, str]) -> None:
        fields = {**{name: "1" for name in NAMES}, **base, **numbers}
        self.assertEqual(*both(fields))

    @settings(max_examples=100, deadline=None)
    @given(st.sets(st.sampled_from(NAMES)))
    def test_missing_fields(self, missing: set[str]) -> None:
        fields = {name: "7" for name in NAMES if name not in missing}
        self.assertEqual(*both(fields))
