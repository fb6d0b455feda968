import socket
import struct
import zlib

from typing import ClassVar

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import message as m
from tests.common.implementations import compiled_variant


class ImplementationTestCase(SynchronousTestCase):
    """Runs against the Python reference; its ``C...`` subclass runs the same tests against
    ``rocketpy._speedups`` (skipped when that is not built)."""

    impl: ClassVar[m.Implementation] = m.PYTHON


class JavaHashTests(ImplementationTestCase):
    def test_known_values(self) -> None:
        """java_hash matches Java's String.hashCode for ASCII, negative wrap and non-BMP text."""
        self.assertEqual(self.impl.java_hash("TagA"), 2598919)
        self.assertEqual(self.impl.java_hash("TagB"), 2598920)
        self.assertEqual(self.impl.java_hash(""), 0)
        self.assertEqual(self.impl.java_hash("polygenelubricants"), -2147483648)
        self.assertEqual(self.impl.java_hash("\U0001F600"), 0xD83D * 31 + 0xDE00)  # a UTF-16 surrogate pair

    def test_tags_code_empty(self) -> None:
        """No tag means tag code 0."""
        self.assertEqual(self.impl.tags_code(None), 0)
        self.assertEqual(self.impl.tags_code(""), 0)


class PropertiesTests(ImplementationTestCase):
    def test_round_trip(self) -> None:
        """Properties survive encode/decode, with Java's no-trailing-separator form."""
        props = {"TAGS": "TagA", "KEYS": "k1 k2"}
        text = self.impl.properties_to_string(props)
        self.assertEqual(text, "TAGS\x01TagA\x02KEYS\x01k1 k2")
        self.assertEqual(self.impl.string_to_properties(text), props)

    def test_trailing_separator_and_junk(self) -> None:
        """The C++ client's trailing separator and empty values are tolerated."""
        self.assertEqual(
            self.impl.string_to_properties("A\x011\x02B\x01\x02\x02C\x013\x02"), {"A": "1", "C": "3"}
        )


class RecordTests(ImplementationTestCase):
    def sample(self) -> m.MessageExt:
        return m.MessageExt(
            topic="T", body=b"hello", flag=7, properties={"TAGS": "a"}, queue_id=3,
            sys_flag=0, born_timestamp=1700000000000, born_host=("10.0.0.9", 5555),
            store_timestamp=1700000000001, store_host=("127.0.0.1", 10911),
            reconsume_times=2, prepared_transaction_offset=9, queue_offset=11,
            commit_log_offset=4096,
        )

    def test_every_field_at_its_byte_offset(self) -> None:
        """The encoded record puts each field at the offset of the RocketMQ v1 layout."""
        buf = bytes(self.impl.encode_record(self.sample()))
        props = b"TAGS\x01a"
        self.assertEqual(len(buf), 91 + 5 + 1 + len(props))
        self.assertEqual(struct.unpack_from(">i", buf, 0)[0], len(buf))
        self.assertEqual(buf[4:8], bytes.fromhex("DAA320A7"))
        self.assertEqual(struct.unpack_from(">i", buf, 8)[0], zlib.crc32(b"hello") & 0x7FFFFFFF)
        self.assertEqual(struct.unpack_from(">iiqqiq", buf, 12), (3, 7, 11, 4096, 0, 1700000000000))
        self.assertEqual(buf[48:52], bytes([10, 0, 0, 9]))
        self.assertEqual(struct.unpack_from(">iq", buf, 52), (5555, 1700000000001))
        self.assertEqual(buf[64:68], bytes([127, 0, 0, 1]))
        self.assertEqual(struct.unpack_from(">iiqi", buf, 68), (10911, 2, 9, 5))
        self.assertEqual(buf[88:93], b"hello")
        self.assertEqual(buf[93], 1)
        self.assertEqual(buf[94:95], b"T")
        self.assertEqual(struct.unpack_from(">h", buf, 95)[0], len(props))
        self.assertEqual(buf[97:], props)

    def test_round_trip_and_patch(self) -> None:
        """decode_record inverts encode_record, and patch_record rewrites the store fields."""
        buf = self.impl.encode_record(self.sample())
        self.impl.patch_record(buf, 42, 8192, 1234)
        out = self.impl.decode_record(bytes(buf), check_crc=True)
        self.assertEqual((out.queue_offset, out.commit_log_offset, out.store_timestamp), (42, 8192, 1234))
        self.assertEqual((out.topic, out.body, out.tags, out.born_host), ("T", b"hello", "a", ("10.0.0.9", 5555)))
        self.assertEqual(out.msg_id, "7F00000100002A9F0000000000002000")

    def test_ipv6_hosts_decoded(self) -> None:
        """A record with IPv6 born and store hosts (a Java broker's on IPv6) decodes every field."""
        born, store = socket.inet_pton(socket.AF_INET6, "fe80::1"), socket.inet_pton(socket.AF_INET6, "::1")
        sys_flag = m.MessageSysFlag.BORNHOST_V6 | m.MessageSysFlag.STOREHOST_V6
        body, topic, props = b"hello", b"T", b"TAGS\x01a"
        tail = struct.pack(">iqi", 2, 9, len(body)) + body + bytes([len(topic)]) + topic
        tail += struct.pack(">h", len(props)) + props
        hosts = born + struct.pack(">iq", 5555, 1700000000001) + store + struct.pack(">i", 10911)
        size = 48 + len(hosts) + len(tail)
        head = struct.pack(">iiiiiqqiq", size, 0xDAA320A7 - (1 << 32), zlib.crc32(body) & 0x7FFFFFFF, 3, 7, 11,
                           4096, sys_flag, 1700000000000)
        out = self.impl.decode_record(head + hosts + tail, check_crc=True)
        self.assertEqual((out.born_host, out.store_host), (("fe80::1", 5555), ("::1", 10911)))
        self.assertEqual((out.topic, out.body, out.tags, out.queue_id, out.flag), ("T", b"hello", "a", 3, 7))
        self.assertEqual((out.store_timestamp, out.reconsume_times, out.prepared_transaction_offset), (1700000000001, 2, 9))
        self.assertEqual(out.store_size, size)

    def test_corruption_detected(self) -> None:
        """A flipped body byte fails the CRC check; a bad magic or truncation fails decoding."""
        buf = self.impl.encode_record(self.sample())
        buf[88] ^= 0xFF
        self.assertRaises(m.RecordError, self.impl.decode_record, bytes(buf), 0, True)
        self.assertRaises(m.RecordError, self.impl.decode_record, bytes(buf[:50]))
        buf[4] = 0
        self.assertRaises(m.RecordError, self.impl.decode_record, bytes(buf))

    def test_truncated_properties_rejected(self) -> None:
        """A record cut inside its properties, or declaring a negative properties length, is an error."""
        buf = bytes(self.impl.encode_record(self.sample()))
        self.assertRaises(m.RecordError, self.impl.decode_record, buf[:-1])
        self.assertRaises(m.RecordError, self.impl.decode_records, buf + buf[:-3])
        props_at = len(buf) - len(b"TAGS\x01a") - 2
        shrunk = bytearray(buf[:props_at]) + struct.pack(">h", -2)
        struct.pack_into(">i", shrunk, 0, len(shrunk) - 2)  # a size that matches pos after the -2 step
        self.assertRaises(m.RecordError, self.impl.decode_record, bytes(shrunk))

    def test_records_at_offsets_of_a_memoryview(self) -> None:
        """decode_record reads at an offset of a memoryview; decode_records walks back-to-back records."""
        one, two = self.sample(), self.sample()
        two.body, two.topic, two.properties = b"x" * 300, "Other\u00e9", {"KEYS": "a b", "\u00e9": "\U0001F600"}
        a, b = bytes(self.impl.encode_record(one)), bytes(self.impl.encode_record(two))
        view = memoryview(a + b)
        got = self.impl.decode_record(view, offset=len(a), check_crc=True)
        self.assertEqual((got.body, got.topic, got.properties, got.store_size), (two.body, two.topic, two.properties, len(b)))
        self.assertEqual([r.body for r in self.impl.decode_records(view)], [one.body, two.body])

    def test_records_with_extra_properties(self) -> None:
        """decode_records adds ``extra``'s items to every record's properties (a pull's offsets);
        None or empty adds nothing."""
        one, two = self.sample(), self.sample()
        two.properties = {"KEYS": "k", "MAX_OFFSET": "stale"}
        data = bytes(self.impl.encode_record(one)) + bytes(self.impl.encode_record(two))
        extra = {"MIN_OFFSET": "4", "MAX_OFFSET": "9"}
        got = self.impl.decode_records(data, extra)
        self.assertEqual([r.properties for r in got],
                         [{**one.properties, **extra}, {"KEYS": "k", "MIN_OFFSET": "4", "MAX_OFFSET": "9"}])
        self.assertEqual(extra, {"MIN_OFFSET": "4", "MAX_OFFSET": "9"})
        nothing: tuple[dict[str, str] | None, ...] = (None, {})
        for none in nothing:
            self.assertEqual([r.properties for r in self.impl.decode_records(data, none)],
                             [one.properties, two.properties])

    def test_unusual_input_handled_like_python(self) -> None:
        """IPv4-mapped and unparsable hosts, and a list host, encode as the reference does."""
        msg = self.sample()
        msg.born_host, msg.store_host = ("::ffff:10.1.2.3", 1), ["nonsense", 2]  # type: ignore[assignment]
        out = self.impl.decode_record(bytes(self.impl.encode_record(msg)))
        self.assertEqual((out.born_host, out.store_host), (("10.1.2.3", 1), ("0.0.0.0", 2)))
        msg.flag = 1 << 31  # over Java's int
        self.assertRaises(struct.error, self.impl.encode_record, msg)

    def test_topic_too_long(self) -> None:
        """Topics over 127 bytes cannot be encoded in the v1 layout."""
        msg = self.sample()
        msg.topic = "x" * 128
        self.assertRaises(ValueError, self.impl.encode_record, msg)


class MessageIdTests(SynchronousTestCase):
    def test_offset_msg_id_round_trip(self) -> None:
        """An offset message id decodes back to its store host and offset."""
        mid = m.offset_msg_id(("192.168.1.2", 10911), 123456789)
        self.assertEqual(len(mid), 32)
        self.assertEqual(m.decode_offset_msg_id(mid), (("192.168.1.2", 10911), 123456789))
        self.assertRaises(ValueError, m.decode_offset_msg_id, "ABCD")


class BatchTests(ImplementationTestCase):
    def test_batch_round_trip(self) -> None:
        """A batch body splits back into its messages with flags and properties."""
        msgs = [m.Message("T", b"a", 1, {"UNIQ_KEY": "X"}), m.Message("T", b"", 0, {})]
        out = [m.Message("T", body, flag, self.impl.string_to_properties(props))
               for flag, body, props in self.impl.batch_entries(self.impl.encode_batch(msgs))]
        self.assertEqual(out, msgs)

    def test_malformed_batch(self) -> None:
        """A truncated batch body is rejected, not half-read."""
        body = m.encode_batch([m.Message("T", b"abc", 0, {"K": "v"})])
        self.assertRaises(m.RecordError, self.impl.batch_entries, body[:-2])

    def test_negative_properties_length(self) -> None:
        """A negative properties length is rejected (it once made the entry size 0: an endless loop)."""
        entry = struct.pack(">iiiiih", 0, 0, 0, 0, 0, -22)
        self.assertRaises(m.RecordError, self.impl.batch_entries, entry)
        entry = struct.pack(">iiiii", 26, 0, 0, 0, 4) + b"abcd" + struct.pack(">h", -2) + b"xy"
        self.assertRaises(m.RecordError, self.impl.batch_entries, entry)


class JavaHashLengthTests(ImplementationTestCase):
    def test_long_text_matches_reference(self) -> None:
        """Texts longer than the precomputed power table hash like the plain Horner loop."""
        text = "k\u00e9y" * 20000
        h = 0
        for ch in text:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        self.assertEqual(self.impl.java_hash(text), h - (1 << 32) if h & 0x80000000 else h)


# The same tests against rocketpy._speedups (skipped when it is not built).
CJavaHashTests = compiled_variant(JavaHashTests)
CPropertiesTests = compiled_variant(PropertiesTests)
CRecordTests = compiled_variant(RecordTests)
CBatchTests = compiled_variant(BatchTests)
CJavaHashLengthTests = compiled_variant(JavaHashLengthTests)
