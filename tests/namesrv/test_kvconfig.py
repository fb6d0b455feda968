"""Tests for rocketpy.namesrv.kvconfig and rocketpy.util.fileio."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.fastjson import BodyError
from rocketpy.namesrv.kvconfig import KVConfigManager
from rocketpy.util.fileio import read_if_exists, write_atomically


class WriteAtomicallyTests(SynchronousTestCase):
    def test_creates_and_replaces(self) -> None:
        """The file is created (with its directory) and then replaced, leaving no temp files."""
        directory = self.mktemp()
        path = os.path.join(directory, "sub", "f.json")
        write_atomically(path, b"one")
        write_atomically(path, b"two")
        self.assertEqual(read_if_exists(path), b"two")
        self.assertEqual(os.listdir(os.path.dirname(path)), ["f.json"])

    def test_failed_write_keeps_old_file(self) -> None:
        """A write that fails leaves the old content and no temp file behind."""
        directory = self.mktemp()
        path = os.path.join(directory, "f")
        write_atomically(path, b"old")
        self.assertRaises(TypeError, write_atomically, path, "not bytes")
        self.assertEqual(read_if_exists(path), b"old")
        self.assertEqual(os.listdir(directory), ["f"])

    def test_read_missing(self) -> None:
        """Reading a missing file gives None."""
        self.assertIsNone(read_if_exists(self.mktemp()))


class KVConfigTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = os.path.join(self.mktemp(), "kvConfig.json")
        self.kv = KVConfigManager(self.path)
        self.kv.load()

    def reloaded(self) -> KVConfigManager:
        kv = KVConfigManager(self.path)
        kv.load()
        return kv

    def test_put_get_survives_restart(self) -> None:
        """A value put is readable, and again from a new manager on the same file."""
        self.kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
        self.assertEqual(self.kv.get("ORDER_TOPIC_CONFIG", "T"), "broker-a:4")
        self.assertEqual(self.reloaded().get("ORDER_TOPIC_CONFIG", "T"), "broker-a:4")

    def test_java_file_shape(self) -> None:
        """The file has Java's kvConfig.json shape."""
        self.kv.put("ns", "k", "v")
        self.assertEqual(read_if_exists(self.path), b'{"configTable":{"ns":{"k":"v"}}}')

    def test_delete_persists(self) -> None:
        """A deleted value (and its emptied namespace) is gone after a restart."""
        self.kv.put("ns", "k", "v")
        self.kv.delete("ns", "k")
        self.kv.delete("ns", "missing")
        self.assertIsNone(self.reloaded().namespace("ns"))

    def test_namespace_copy(self) -> None:
        """namespace() returns a copy of the table, or None when empty."""
        self.kv.put("ns", "a", "1")
        table = self.kv.namespace("ns")
        assert table is not None
        table["b"] = "2"
        self.assertEqual(self.kv.namespace("ns"), {"a": "1"})
        self.assertIsNone(self.kv.namespace("other"))

    def test_unchanged_put_writes_nothing(self) -> None:
        """Putting the value already stored writes nothing; a changed one writes again."""
        writes: list[bytes] = []
        self.kv.writer = lambda path, data: writes.append(data)
        self.kv.put("ns", "k", "v")
        self.kv.put("ns", "k", "v")
        self.kv.put("ns", "k", "w")
        self.assertEqual(writes, [b'{"configTable":{"ns":{"k":"v"}}}', b'{"configTable":{"ns":{"k":"w"}}}'])

    def test_unchanged_put_after_a_failed_write_writes_again(self) -> None:
        """After a failed write the file may lack the value: the same put is written again."""
        outcomes = [False, True]  # the first write fails, the next one works

        def writer(path: str | os.PathLike[str], data: bytes) -> None:
            if not outcomes.pop(0):
                raise OSError(28, "No space left on device")
            write_atomically(path, data)

        self.kv.writer = writer
        self.failureResultOf(self.kv.put("ns", "k", "v"), OSError)
        self.successResultOf(self.kv.put("ns", "k", "v"))
        self.assertEqual(self.reloaded().get("ns", "k"), "v")

    def test_corrupt_file(self) -> None:
        """A file without a configTable object fails to load loudly."""
        write_atomically(self.path, b'{"configTable":[]}')
        self.assertRaises(BodyError, KVConfigManager(self.path).load)
