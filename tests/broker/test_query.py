"""QUERY_MESSAGE by key / UNIQ_KEY and time range, VIEW_MESSAGE_BY_ID by commit-log offset."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase
from zope.interface.verify import verifyObject

from rocketpy.broker.query import QueryMessageProcessor
from rocketpy.common.message import MessageConst, MessageExt, decode_records
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from tests.fakes import FakeChannel
from tests.broker.featurestore import new_clock, open_store, put


class QueryTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = new_clock()
        self.store = open_store(self, self.clock)
        self.processor = QueryMessageProcessor(self.store)
        self.offsets = []
        for i in range(5):
            props = {MessageConst.KEYS: f"order-{i % 2} shared", MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"U{i}"}
            result = put(self, self.store, MessageExt(topic="Orders", body=b"m%d" % i, properties=props))
            self.offsets.append(result.append.wrote_offset)  # type: ignore[union-attr]
            self.clock.advance(1)
        self.now_ms = int(self.clock.seconds() * 1000)

    def call(self, code: int, **fields: str) -> RemotingCommand:
        request = RemotingCommand.request(code, fields)
        response: RemotingCommand = self.successResultOf(self.processor.process_request(FakeChannel(), request))
        return response

    def query(self, key: str, max_num: int = 32, begin: int = 0, unique: bool = False) -> RemotingCommand:
        extra = {"_UNIQUE_KEY_QUERY": "true"} if unique else {}
        return self.call(RequestCode.QUERY_MESSAGE, topic="Orders", key=key, maxNum=str(max_num),
                         beginTimestamp=str(begin), endTimestamp=str(self.now_ms), **extra)

    def bodies(self, response: RemotingCommand) -> list[bytes]:
        self.assertEqual(response.code, ResponseCode.SUCCESS, response.remark)
        return sorted(m.body for m in decode_records(response.body))

    def test_interface(self) -> None:
        """The processor provides IRequestProcessor for codes 12 and 33."""
        self.assertTrue(verifyObject(IRequestProcessor, self.processor))
        self.assertEqual(set(self.processor.codes), {RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID})

    def test_query_by_key(self) -> None:
        """Each KEYS word finds its messages; the index position comes back in the ext fields."""
        response = self.query("order-1")
        self.assertEqual(self.bodies(response), [b"m1", b"m3"])
        self.assertEqual(self.bodies(self.query("shared")), [b"m0", b"m1", b"m2", b"m3", b"m4"])
        self.assertGreater(int(response.ext_fields["indexLastUpdatePhyoffset"]), 0)
        self.assertGreater(int(response.ext_fields["indexLastUpdateTimestamp"]), 0)

    def test_max_num_and_time_range(self) -> None:
        """maxNum bounds the result; beginTimestamp excludes older messages."""
        self.assertEqual(len(self.bodies(self.query("shared", max_num=2))), 2)
        self.assertEqual(self.bodies(self.query("shared", begin=self.now_ms - 1500)), [b"m4"])

    def test_unique_key_query(self) -> None:
        """_UNIQUE_KEY_QUERY finds the message by UNIQ_KEY, maxNum forced to 32 (maxNum 0 is ignored)."""
        self.assertEqual(self.bodies(self.query("U3", max_num=0, unique=True)), [b"m3"])

    def test_not_found(self) -> None:
        """No match is QUERY_NOT_FOUND (22), still with the index ext fields."""
        response = self.query("nothing")
        self.assertEqual(response.code, ResponseCode.QUERY_NOT_FOUND)
        self.assertIn("indexLastUpdateTimestamp", response.ext_fields)

    def test_view_by_offset(self) -> None:
        """VIEW_MESSAGE_BY_ID returns the one record at the offset; elsewhere SYSTEM_ERROR."""
        response = self.call(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(self.offsets[2]))
        [msg] = decode_records(response.body)
        self.assertEqual((response.code, msg.body, msg.commit_log_offset),
                         (ResponseCode.SUCCESS, b"m2", self.offsets[2]))
        missing = self.call(RequestCode.VIEW_MESSAGE_BY_ID, offset=str(self.offsets[-1] + 10_000))
        self.assertEqual(missing.code, ResponseCode.SYSTEM_ERROR)

    def test_bad_header(self) -> None:
        """A missing field is SYSTEM_ERROR naming it."""
        response = self.call(RequestCode.QUERY_MESSAGE, topic="Orders")
        self.assertEqual(response.code, ResponseCode.SYSTEM_ERROR)
        self.assertIn("key", response.remark or "")
