from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import headers as h


class HeaderTests(SynchronousTestCase):
    def test_required_fields(self) -> None:
        """Missing or non-numeric required fields raise HeaderError naming the field."""
        fields = {"topic": "T", "queueId": "x"}
        self.assertEqual(h.get_str(fields, "topic"), "T")
        e = self.assertRaises(h.HeaderError, h.get_str, fields, "group")
        self.assertEqual(e.field_name, "group")
        e = self.assertRaises(h.HeaderError, h.get_int, fields, "queueId")
        self.assertIn("queueId", str(e))
        self.assertEqual(h.get_int(fields, "maxMsgNums", 32), 32)
        for bad in ("1_000", " 7", "\u0661", "1.5"):
            self.assertRaises(h.HeaderError, h.get_int, {"n": bad}, "n")
        self.assertEqual(h.get_int({"n": "-12"}, "n"), -12)

    def test_booleans(self) -> None:
        """true in any case and the C++ client's "1" are true; anything else false."""
        self.assertTrue(h.get_bool({"m": "TRUE"}, "m"))
        self.assertTrue(h.get_bool({"m": "1"}, "m"))
        self.assertFalse(h.get_bool({"m": "0"}, "m"))
        self.assertFalse(h.get_bool({}, "m"))

    def test_to_fields_are_strings(self) -> None:
        """Outgoing fields are strings, booleans lower-case, None dropped."""
        self.assertEqual(
            h.to_fields(queueId=3, batch=True, remark=None, topic="T"),
            {"queueId": "3", "batch": "true", "topic": "T"},
        )

    def test_v2_names(self) -> None:
        """The one-letter V2 header expands to the V1 names and back."""
        v2 = {"a": "PG", "b": "T", "m": "true", "bname": "x"}
        v1 = h.expand_send_v2(v2)
        self.assertEqual(v1, {"producerGroup": "PG", "topic": "T", "batch": "true", "bname": "x"})
        self.assertEqual(h.compact_send_v1(v1), v2)

    def test_integers_within_their_java_type(self) -> None:
        """A Long field takes every 64-bit value and an Integer field every 32-bit one; beyond (or a
        number of any length) is a HeaderError naming the field, never a ValueError of int()."""
        fields = {"big": "-9223372036854775808", "over": "9223372036854775808", "int": "2147483647",
                  "long": "9" * 5000, "huge": "-493370966749666776861"}
        self.assertEqual(h.get_int(fields, "big"), -(2**63))
        self.assertEqual(h.get_int(fields, "int", bits=32), 2**31 - 1)
        for name, bits in (("over", 64), ("long", 64), ("huge", 64), ("big", 32)):
            with self.assertRaises(h.HeaderError) as raised:
                h.get_int(fields, name, bits=bits)
            self.assertIn(f"'{name}' is out of range of a {bits}-bit integer", str(raised.exception))
        self.assertLess(len(str(raised.exception)), 100)  # the value is shortened in the remark
