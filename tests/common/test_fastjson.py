"""Tests for :mod:`rocketpy.common.fastjson` (and the test reader in :mod:`tests.common.fastjson`)."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.fastjson import BodyError, dump_json, loads_tolerant, object_key_map, raw_object
from tests.common.fastjson import fastjson_loads, mq_key


class FastjsonTests(SynchronousTestCase):
    def test_dump_json(self) -> None:
        """Compact, keys sorted."""
        self.assertEqual(dump_json({"b": 1, "a": [True, None]}), b'{"a":[true,null],"b":1}')

    def test_object_key_map(self) -> None:
        """Object keys in key position, entries in the order given, each side compact and sorted."""
        text = object_key_map([
            ({"topic": "T", "queueId": 1, "brokerName": "b"}, {"y": 2, "x": 1}),
            ({"topic": "T", "queueId": 0, "brokerName": "b"}, 5),
        ])
        self.assertEqual(text, '{{"brokerName":"b","queueId":1,"topic":"T"}:{"x":1,"y":2},'
                               '{"brokerName":"b","queueId":0,"topic":"T"}:5}')
        self.assertEqual(fastjson_loads(text), {mq_key("T", "b", 1): {"x": 1, "y": 2}, mq_key("T", "b", 0): 5})
        self.assertEqual(object_key_map([]), "{}")

    def test_raw_object(self) -> None:
        """Pre-encoded values under sorted, quoted keys."""
        text = raw_object({"z": "[]", "a": object_key_map([({"k": 1}, "v")])})
        self.assertEqual(text, '{"a":{{"k":1}:"v"},"z":[]}')
        self.assertEqual(fastjson_loads(text), {"a": {(("k", 1),): "v"}, "z": []})

    def test_reader_rejects_garbage(self) -> None:
        """The test reader is strict: truncated or trailing text fails."""
        for bad in ('{{"k":1}', '{"a":1} x', '{"a" 1}', "[1 2]"):
            with self.assertRaises(ValueError, msg=bad):
                fastjson_loads(bad)


class TolerantJSONTests(SynchronousTestCase):
    def test_bare_numeric_keys_quoted(self) -> None:
        """fastjson's unquoted Long keys parse as string keys."""
        self.assertEqual(
            loads_tolerant(b'{"brokerAddrs":{0:"a:1", 12 :"b:1",-1:"c"}}'),
            {"brokerAddrs": {"0": "a:1", "12": "b:1", "-1": "c"}},
        )

    def test_strings_untouched(self) -> None:
        """Text inside strings that looks like a bare key, or escaped quotes, stays as it is."""
        text = r'{"k":"{0:\"x\",1:2}","l":[1, 2,3],"n":{"5":1}}'
        self.assertEqual(loads_tolerant(text), json.loads(text))

    def test_malformed(self) -> None:
        """Text that is not JSON even after quoting raises BodyError."""
        self.assertRaises(BodyError, loads_tolerant, b"{0:")
        self.assertRaises(BodyError, loads_tolerant, b"\xff\xfe")
