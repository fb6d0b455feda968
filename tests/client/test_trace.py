"""Trace records in RocketMQ's TraceDataEncoder format."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client.trace import decode_traces, encode


class TraceFormatTests(SynchronousTestCase):
    def test_pub_record(self) -> None:
        """Fields joined by \\x01, ended by \\x02; None is Java's "null", booleans lower case."""
        record = encode("Pub", 1700000000000, "DefaultRegion", "PG", "T", "ID1", None, "k", "1.2.3.4:10911",
                        5, 3, 0, "OFF", True)
        self.assertEqual(record, "Pub\x011700000000000\x01DefaultRegion\x01PG\x01T\x01ID1\x01null\x01k\x01"
                                 "1.2.3.4:10911\x015\x013\x010\x01OFF\x01true\x02")

    def test_decode_batch(self) -> None:
        """A trace message holds records of any kinds back to back; unknown kinds are skipped."""
        data = (encode("SubBefore", 1, "R", "CG", "REQ", "ID1", 0, "k")
                + encode("SubAfter", "REQ", "ID1", 7, False, "k", 4, 2, "CG") + encode("Other", 1))
        before, after = decode_traces(data)
        self.assertEqual((before["requestId"], before["msgId"], before["retryTimes"]), ("REQ", "ID1", "0"))
        self.assertEqual((after["costTime"], after["success"], after["contextCode"], after["groupName"]),
                         ("7", "false", "4", "CG"))
