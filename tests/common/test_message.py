import socket
import struct
import zlib

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common import message as m


class JavaHashTests(SynchronousTestCase):
    def test_known_values(self) -> None:
        """java_hash matches Java's String.hashCode for ASCII, negative wrap and non-BMP text."""
        self.assertEqual(m.java_hash("TagA"), 2598919)
        self.assertEqual(m.java_hash("TagB"), 2598920)
        self.assertEqual(m.java_hash(""), 0)
        self.assertEqual(m.java_hash("polygenelubricants"), -2147483648)
        self.assertEqual(m.java_hash("\U0001F600"), 0xD83D * 31 + 0xDE00)  # a UTF-16 surrogate pair

    def test_tags_code_empty(self) -> None:
        """No tag means tag code 0."""
        self.assertEqual(m.tags_code(None), 0)
        self.assertEqual(m.tags_code(""), 0)


class PropertiesTests(SynchronousTestCase):
    def test_round_trip(self) -> None:
        """Properties survive encode/decode, with Java's no-trailing-separator form."""
        props = {"TAGS": "TagA", "KEYS": "k1 k2"}
        text = m.properties_to_string(props)
        self.assertEqual(text, "TAGS\x01TagA\x02KEYS\x01k1 k2")
        self.assertEqual(m.string_to_properties(text), props)

    def test_trailing_separator_and_junk(self) -> None:
        """The C++ client's trailing separator and empty values are tolerated."""
        self.assertEqual(
            m.string_to_properties("A\x011\x02B\x01\x02\x02C\x013\x02"), {"A": "1", "C": "3"}
        )


class RecordTests(SynchronousTestCase):
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
        buf = bytes(m.encode_record(self.sample()))
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
        buf = m.encode_record(self.sample())
        m.patch_record(buf, 42, 8192, 1234)
        out = m.decode_record(bytes(buf), check_crc=True)
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
        out = m.decode_record(head + hosts + tail, check_crc=True)
        self.assertEqual((out.born_host, out.store_host), (("fe80::1", 5555), ("::1", 10911)))
        self.assertEqual((out.topic, out.body, out.tags, out.queue_id, out.flag), ("T", b"hello", "a", 3, 7))
        self.assertEqual((out.store_timestamp, out.reconsume_times, out.prepared_transaction_offset), (1700000000001, 2, 9))
        self.assertEqual(out.store_size, size)

    def test_corruption_detected(self) -> None:
        """A flipped body byte fails the CRC check; a bad magic or truncation fails decoding."""
        buf = m.encode_record(self.sample())
        buf[88] ^= 0xFF
        self.assertRaises(m.RecordError, m.decode_record, bytes(buf), 0, True)
        self.assertRaises(m.RecordError, m.decode_record, bytes(buf[:50]))
        buf[4] = 0
        self.assertRaises(m.RecordError, m.decode_record, bytes(buf))

    def test_topic_too_long(self) -> None:
        """Topics over 127 bytes cannot be encoded in the v1 layout."""
        msg = self.sample()
        msg.topic = "x" * 128
        self.assertRaises(ValueError, m.encode_record, msg)


class MessageIdTests(SynchronousTestCase):
    def test_offset_msg_id_round_trip(self) -> None:
        """An offset message id decodes back to its store host and offset."""
        mid = m.offset_msg_id(("192.168.1.2", 10911), 123456789)
        self.assertEqual(len(mid), 32)
        self.assertEqual(m.decode_offset_msg_id(mid), (("192.168.1.2", 10911), 123456789))
        self.assertRaises(ValueError, m.decode_offset_msg_id, "ABCD")


class BatchTests(SynchronousTestCase):
    def test_batch_round_trip(self) -> None:
        """A batch body splits back into its messages with flags and properties."""
        msgs = [m.Message("T", b"a", 1, {"UNIQ_KEY": "X"}), m.Message("T", b"", 0, {})]
        out = m.decode_batch(m.encode_batch(msgs), "T")
        self.assertEqual(out, msgs)

    def test_malformed_batch(self) -> None:
        """A truncated batch body is rejected, not half-read."""
        body = m.encode_batch([m.Message("T", b"abc", 0, {"K": "v"})])
        self.assertRaises(m.RecordError, m.decode_batch, body[:-2], "T")


class JavaHashLengthTests(SynchronousTestCase):
    def test_long_text_matches_reference(self) -> None:
        """Texts longer than the precomputed power table hash like the plain Horner loop."""
        text = "k\u00e9y" * 20000
        h = 0
        for ch in text:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        self.assertEqual(m.java_hash(text), h - (1 << 32) if h & 0x80000000 else h)
