"""The broker's batch path in C (``stored_batch``) against its Python loop: the same messages, in
the same property order, or the same refusal, for random and damaged batches (doc/store.md)."""

from __future__ import annotations

import random
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.broker import send
from rocketpy.broker.send import SendMessageProcessor
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import properties_to_string
from rocketpy.common.topic import TopicConfig
from rocketpy.remoting.codes import RequestCode
from rocketpy.remoting.command import RemotingCommand
from tests.broker.test_send import CPP_V1, send_request
from tests.common.implementations import C_SKIP
from tests.fakes import FakeChannel, FakeStoreService

NAME = st.sampled_from(["WAIT", "CLUSTER", "TAGS", "KEYS", "UNIQ_KEY", "k", "\u00e9"]) | st.text(max_size=4)
VALUE = st.sampled_from(["false", "FALSE", "true", "x", "\u00e9\U0001F600", "", "a\x01b"]) | st.text(max_size=6)
PROPS = st.dictionaries(NAME, VALUE, max_size=4)


def body_of(entries: list[tuple[bytes, int, dict[str, str]]], long: int) -> bytes:
    parts = []
    for i, (body, flag, props) in enumerate(entries):
        raw = properties_to_string(props).encode("utf-8", "surrogatepass")
        if i == 0 and long:
            raw += b"\x02L\x01" + b"v" * long  # near the size check's bound
        parts.append(struct.pack(">iiiii", 22 + len(body) + len(raw), 0, 0, flag, len(body)) + body
                     + struct.pack(">h", len(raw)) + raw)
    return b"".join(parts)


class StoredBatchTests(SynchronousTestCase):
    skip = C_SKIP or (None if send._stored_batch is not None else "no stored_batch")

    def outcome(self, c: bool, header_props: str, body: bytes) -> Any:
        """What the processor stores for the batch (messages and their property order), or its refusal."""
        store = FakeStoreService()
        topics = TopicConfigManager(Clock())
        topics.update_topic_config(TopicConfig("T", 4, 4))
        processor = SendMessageProcessor(store, topics, ("192.0.2.10", 10911), cluster_name="TestCluster",
                                         max_message_size=1 << 20, rng=random.Random(7))
        request = send_request(RequestCode.SEND_MESSAGE, dict(CPP_V1, topic="T", batch="1", properties=header_props),
                               body)
        compiled = send._stored_batch
        send._stored_batch = compiled if c else None
        try:
            result = processor.process_request(FakeChannel("10.0.0.9:53211"), request)
        finally:
            send._stored_batch = compiled
        response = result if isinstance(result, RemotingCommand) else self.successResultOf(result)
        stored = [(m, list(m.properties.items())) for _batch, msgs in store.puts for m in msgs]
        return response.code, response.remark, stored

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.binary(max_size=20), st.integers(-(2**31), 2**31 - 1), PROPS), max_size=4),
           PROPS, st.sampled_from([0, 0, 8100, 8200, 32000]), st.data())
    def test_same_messages_or_refusal(self, entries: list[tuple[bytes, int, dict[str, str]]],
                                      header: dict[str, str], long: int, data: st.DataObject) -> None:
        body = bytearray(body_of(entries, long))
        if body and data.draw(st.booleans()):
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.sampled_from([0, 0xFF, 0x80, 1, 2]))
        header_props = properties_to_string(header)
        fast = self.outcome(True, header_props, bytes(body))
        self.assertEqual(fast, self.outcome(False, header_props, bytes(body)))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(NAME, max_size=4), st.lists(st.tuples(st.lists(VALUE, min_size=4, max_size=4),
                                                          st.sampled_from(["same", "same", "reversed", "fewer",
                                                                           "more", "repeated"])), max_size=6),
           st.sampled_from(["", "", "WAIT\x01false", "K\x01h"]))
    def test_entries_of_one_shape(self, names: list[str], entries: list[tuple[list[str], str]], header: str) -> None:
        """Entries with the same names in the same order (an earlier entry's dict copied, the values that
        differ set), among entries with other names, fewer, more, repeated, in another order: the same
        messages, in the same property order, as the Python loop."""
        parts = []
        for values, how in entries:
            use = {"same": names, "reversed": names[::-1], "fewer": names[:-1], "more": names + ["M"],
                   "repeated": names + names[:1]}[how]
            text = "\x02".join(f"{n}\x01{v}" for n, v in zip(use, values + ["m"]))
            raw = text.encode("utf-8", "surrogatepass")
            parts.append(struct.pack(">iiiii", 23 + len(raw), 0, 0, 0, 1) + b"b" + struct.pack(">h", len(raw)) + raw)
        body = b"".join(parts)
        self.assertEqual(self.outcome(True, header, body), self.outcome(False, header, body))

    def test_shaped_entries(self) -> None:
        """A batch as rocketpy's producer sends it: later entries share the first one's names; values
        that repeat, differ, and are long."""
        raw = [f"KEYS\x01k\x02TAGS\x01{tags}\x02UNIQ_KEY\x01{'7F00000100002A9F' * 2}{i:04X}".encode()
               for i, tags in enumerate(["TagA", "TagA", "TagB", "TagA" * 8])]
        body = b"".join(struct.pack(">iiiii", 23 + len(r), 0, 0, i, 1) + b"b" + struct.pack(">h", len(r)) + r
                        for i, r in enumerate(raw))
        fast = self.outcome(True, "", body)
        self.assertEqual(fast, self.outcome(False, "", body))
        self.assertEqual([items for _m, items in fast[2]][3],
                         [("KEYS", "k"), ("TAGS", "TagA" * 8), ("UNIQ_KEY", "7F00000100002A9F" * 2 + "0003"),
                          ("CLUSTER", "TestCluster")])

    def test_common_case_in_c(self) -> None:
        """A well-formed batch is built in C; malformed, empty and long-properties bodies go to Python."""
        assert send._stored_batch is not None
        args = ("T", {"WAIT": "False"}, "TestCluster", 100, 1, 0, 5, ("10.0.0.9", 1), ("192.0.2.10", 10911), 0)
        got = send._stored_batch(body_of([(b"a", 7, {"TAGS": "x", "CLUSTER": "other"})], 0), *args)
        assert got is not None
        self.assertEqual([(m.body, m.flag, list(m.properties.items())) for m in got],
                         [(b"a", 7, [("TAGS", "x"), ("CLUSTER", "TestCluster"), ("WAIT", "false")])])
        for body in (b"", body_of([(b"a", 0, {})], 0)[:-1], body_of([(b"a", 0, {})], 200)):
            self.assertIsNone(send._stored_batch(body, *args))

    def test_one_pass_properties(self) -> None:
        """An ASCII entry's properties are built in one pass (WAIT dropped as it is read, the header's added):
        the same messages, in the same property order, as the Python loop for WAIT first, last, repeated,
        empty, in any case, in the header or not, and CLUSTER or the entry's names in the header."""
        raw = [b"WAIT\x01false\x02TAGS\x01x", b"TAGS\x01x\x02WAIT\x01FaLsE", b"WAIT\x01false\x02WAIT\x01true",
               b"WAIT\x01true\x02WAIT\x01FALSE\x02CLUSTER\x01c", b"WAIT\x01\x02K\x01v", b"WAIT\x01fals", b"WAIT\x01falsee",
               b"CLUSTER\x01c\x02WAIT\x01false\x02UNIQ_KEY\x01u", b"\x01v\x02K\x01\x02\x02K\x011\x02K\x012", b""]
        body = b"".join(struct.pack(">iiiii", 23 + len(r), 0, 0, i, 1) + b"b" + struct.pack(">h", len(r)) + r
                        for i, r in enumerate(raw))
        fast = self.outcome(True, "", body)
        self.assertEqual(fast, self.outcome(False, "", body))
        for header in ("WAIT\x01true", "WAIT\x01False", "WAIT\x01", "K\x01h\x02WAIT\x01no\x02CLUSTER\x01c\x02N\x01n",
                       "N\x01n\x02K\x01h", "WAIT\x01\u00e9", "K\x01\u00e9\x02\u00e9\x01v"):
            self.assertEqual(self.outcome(True, header, body), self.outcome(False, header, body))
        self.assertEqual([items for _m, items in self.outcome(True, "WAIT\x01False", body)[2]][2],
                         [("CLUSTER", "TestCluster"), ("WAIT", "false")])
        self.assertEqual([items for _m, items in fast[2]][:4],
                         [[("TAGS", "x"), ("CLUSTER", "TestCluster"), ("WAIT", "false")],
                          [("TAGS", "x"), ("CLUSTER", "TestCluster"), ("WAIT", "false")],
                          [("CLUSTER", "TestCluster")],
                          [("CLUSTER", "TestCluster"), ("WAIT", "false")]])
