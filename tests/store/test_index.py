"""The message index: byte layout, hash chains, file rolls, queries, crash rule, retention."""

from __future__ import annotations

import os
import struct
from typing import Callable

from twisted.logger import LogLevel
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.message import java_hash
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.dispatch import DispatchRequest
from rocketpy.store.index import (
    COMPILED_KEY_HASH,
    PYTHON_KEY_HASH,
    IndexFile,
    IndexService,
    KeyHasher,
    file_name_for,
    key_hash,
)
from tests.common.implementations import C_SKIP
from tests.logs import assert_logs

SLOTS = 64
ENTRIES = 128
BASE_MS = 1_700_000_000_000


def request(phy: int, keys: str | None = None, uniq: str | None = None, ts: int = BASE_MS,
            topic: str = "T", sys_flag: int = 0) -> DispatchRequest:
    """A dispatch request for a record at ``phy`` with the given keys."""
    return DispatchRequest(
        topic=topic, queue_id=0, commit_log_offset=phy, msg_size=100, tags_code=0, store_timestamp=ts,
        consume_queue_offset=0, keys=keys, uniq_key=uniq, sys_flag=sys_flag, prepared_transaction_offset=0,
    )


def colliding_keys(count: int, slots: int = SLOTS) -> list[str]:
    """``count`` different keys whose ``T#key`` falls into the same slot."""
    target = key_hash("T#k0") % slots
    found: list[str] = []
    i = 0
    while len(found) < count:
        if key_hash(f"T#k{i}") % slots == target:
            found.append(f"k{i}")
        i += 1
    return found


PYTHON_HASH: Callable[[str], int] = PYTHON_KEY_HASH
C_HASH: Callable[[str], int] = COMPILED_KEY_HASH or PYTHON_KEY_HASH


class KeyHashTests(SynchronousTestCase):
    key_hash = staticmethod(PYTHON_HASH)  # CKeyHashTests: the compiled one

    def test_key_hash(self) -> None:
        """|String.hashCode()|, with Integer.MIN_VALUE mapped to 0 as Java's Math.abs leaves it negative."""
        self.assertEqual(self.key_hash("T#a"), abs(java_hash("T#a")))
        negative = next(k for k in (f"some-longer-key-{i}" for i in range(100)) if java_hash(k) < 0)
        self.assertEqual(self.key_hash(negative), -java_hash(negative))
        self.assertEqual(java_hash("polygenelubricants"), -(2 ** 31))
        self.assertEqual(self.key_hash("polygenelubricants"), 0)
        self.assertEqual(self.key_hash("T#\U0001F600\u00e9"), abs(java_hash("T#\U0001F600\u00e9")))
        self.assertRaises(UnicodeEncodeError, self.key_hash, "T#\ud800")  # a lone surrogate: no UTF-16

    def test_cached_key_hash(self) -> None:
        """KeyHasher (cached heads, hashed tails) gives key_hash's value for every shape of key."""
        hasher = KeyHasher()
        keys = ["", "k", "T#k", "T#" + "0A0000010000ABCDEF01" + "%012X" % 7, "T#" + "0A0000010000ABCDEF01" + "%012X" % 8,
                "\0" * 5 + "polygenelubricants",  # Integer.MIN_VALUE through the composed path
                "topic#caf\u00e9-and-more-text", "topic#" + "\U0001F600" * 3 + "-a-tail-of-ascii",
                "topic#tail-not-ascii-\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"]
        keys += [f"some-longer-key-{i}" for i in range(200)]
        for key in keys + keys:  # the second pass hits the cache
            self.assertEqual(hasher(key), self.key_hash(key), key)


class CKeyHashTests(KeyHashTests):
    key_hash = staticmethod(C_HASH)
    skip = C_SKIP

    def test_file_name(self) -> None:
        """Index files are named by local time as yyyyMMddHHmmssSSS."""
        name = file_name_for(BASE_MS + 45)
        self.assertEqual(len(name), 17)
        self.assertTrue(name.endswith("045"))


class IndexServiceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.now = BASE_MS
        self.config = MessageStoreConfig(
            store_path_root_dir=self.mktemp(), max_hash_slot_num=SLOTS, max_index_num=ENTRIES
        )
        self.index = self.open()

    def open(self) -> IndexService:
        index = IndexService(self.config, now_ms=lambda: self.now)
        self.addCleanup(index.close)
        return index

    def reopen(self, last_exit_ok: bool, checkpoint_ts: int = 0) -> IndexService:
        self.index.flush()
        self.index.close()
        index = self.open()
        self.assertTrue(index.load(last_exit_ok, checkpoint_ts))
        return index

    def file_bytes(self, name: str) -> bytes:
        with open(os.path.join(self.config.index_dir, name), "rb") as f:
            return f.read()

    def test_layout(self) -> None:
        """Header, slot and entry bytes sit where RocketMQ puts them."""
        self.index.dispatch(request(1000, keys="a", ts=BASE_MS + 500))
        self.index.dispatch(request(2000, uniq="U1", ts=BASE_MS + 3700))
        [name] = os.listdir(self.config.index_dir)
        self.assertEqual(name, file_name_for(BASE_MS))
        data = self.file_bytes(name)
        self.assertEqual(len(data), IndexFile.size_for(SLOTS, ENTRIES))
        self.assertEqual(
            struct.unpack_from(">qqqqii", data, 0), (BASE_MS + 500, BASE_MS + 3700, 1000, 2000, 2, 3)
        )
        entries_at = 40 + 4 * SLOTS
        ha, hu = key_hash("T#a"), key_hash("T#U1")
        self.assertEqual(struct.unpack_from(">iqii", data, entries_at + 20), (ha, 1000, 0, 0))
        self.assertEqual(struct.unpack_from(">iqii", data, entries_at + 40), (hu, 2000, 3, 0))
        self.assertEqual(struct.unpack_from(">i", data, 40 + 4 * (ha % SLOTS))[0], 1)
        self.assertEqual(struct.unpack_from(">i", data, 40 + 4 * (hu % SLOTS))[0], 2)
        self.assertEqual(data[entries_at : entries_at + 20], bytes(20))

    def test_keys_and_uniq_key(self) -> None:
        """UNIQ_KEY and each space-separated KEYS token are indexed under topic#key."""
        self.index.dispatch(request(100, keys="order-1  order-2", uniq="ID9"))
        for key in ("order-1", "order-2", "ID9"):
            self.assertEqual(self.index.query("T", key, 10, 0, 2 * BASE_MS).phy_offsets, [100])
        self.assertEqual(self.index.query("T", "order-1 order-2", 10, 0, 2 * BASE_MS).phy_offsets, [])
        self.assertEqual(self.index.query("Other", "ID9", 10, 0, 2 * BASE_MS).phy_offsets, [])

    def test_collisions_resolved_through_chain(self) -> None:
        """Keys sharing a slot are told apart by hash while walking the chain, newest first."""
        a, b, c = colliding_keys(3)
        self.index.dispatch(request(100, keys=a))
        self.index.dispatch(request(200, keys=b))
        self.index.dispatch(request(300, keys=a))
        self.index.dispatch(request(400, keys=c))
        result = self.index.query("T", a, 10, 0, 2 * BASE_MS)
        self.assertEqual(result.phy_offsets, [300, 100])
        self.assertEqual(self.index.query("T", b, 10, 0, 2 * BASE_MS).phy_offsets, [200])
        self.assertEqual((result.index_last_update_timestamp, result.index_last_update_phyoffset), (BASE_MS, 400))

    def test_roll_and_query_newest_first(self) -> None:
        """A full file rolls to a new one; queries walk files newest first and stop at max_num."""
        for i in range(200):
            self.index.dispatch(request(i * 100, keys="k", ts=BASE_MS + i * 1000))
        names = sorted(os.listdir(self.config.index_dir))
        self.assertEqual(len(names), 2)
        self.assertEqual(len(self.index.files), 2)
        self.assertEqual(self.index.files[1].begin_phy_offset, 127 * 100)
        found = self.index.query("T", "k", 1000, 0, 2 * BASE_MS).phy_offsets
        self.assertEqual(found, [i * 100 for i in range(199, 199 - 64, -1)])
        self.assertEqual(self.index.query("T", "k", 3, 0, 2 * BASE_MS).phy_offsets, [19900, 19800, 19700])

    def test_time_filter(self) -> None:
        """Only entries stored within [begin, end] (second resolution) are returned."""
        for i in range(10):
            self.index.dispatch(request(i * 100, keys="k", ts=BASE_MS + i * 1000))
        found = self.index.query("T", "k", 64, BASE_MS + 3000, BASE_MS + 5000).phy_offsets
        self.assertEqual(found, [500, 400, 300])
        self.assertEqual(self.index.query("T", "k", 64, BASE_MS + 20_000, BASE_MS + 30_000).phy_offsets, [])

    def test_duplicates_and_rollback_skipped(self) -> None:
        """Re-dispatched records and rollback records are not indexed."""
        self.index.dispatch(request(0, keys="k"))
        self.index.dispatch(request(100, keys="k"))
        self.index.dispatch(request(100, keys="k"))
        self.index.dispatch(request(50, keys="k"))
        self.index.dispatch(request(200, keys="k", sys_flag=0xC))
        self.index.dispatch(request(300, keys="k", sys_flag=0x4))
        self.assertEqual(self.index.query("T", "k", 64, 0, 2 * BASE_MS).phy_offsets, [300, 100, 0])

    def test_reload_after_clean_exit(self) -> None:
        """After a clean exit every file is loaded and keeps answering."""
        self.index.dispatch(request(100, keys="k"))
        index = self.reopen(last_exit_ok=True)
        self.assertEqual(index.query("T", "k", 64, 0, 2 * BASE_MS).phy_offsets, [100])
        index.dispatch(request(100, keys="k"))
        index.dispatch(request(200, keys="k"))
        self.assertEqual(index.query("T", "k", 64, 0, 2 * BASE_MS).phy_offsets, [200, 100])

    def test_crash_deletes_files_after_checkpoint(self) -> None:
        """After a crash, files whose end time is past the checkpoint's index time are deleted."""
        for i in range(130):
            self.index.dispatch(request(i * 100, keys="k", ts=BASE_MS + i))
        self.assertEqual(self.index.flush(), BASE_MS + 126)
        self.assertEqual(self.index.flush(), 0)
        index = self.reopen(last_exit_ok=False, checkpoint_ts=BASE_MS + 126)
        self.assertEqual(len(os.listdir(self.config.index_dir)), 1)
        self.assertEqual(index.query("T", "k", 1, 0, 2 * BASE_MS).phy_offsets, [12600])
        index.dispatch(request(12700, keys="k", ts=BASE_MS + 127))
        self.assertEqual(index.query("T", "k", 2, 0, 2 * BASE_MS).phy_offsets, [12700, 12600])

    def test_delete_expired(self) -> None:
        """Files whose last offset is below the log minimum go, oldest first, never the newest, and are
        no longer flushed."""
        for i in range(400):
            self.now += 1
            self.index.dispatch(request(i * 100, keys="k"))
        self.assertEqual(len(self.index.files), 4)
        self.assertEqual(self.index.delete_expired(12600), 0)
        self.assertEqual(self.index.delete_expired(12601), 1)
        self.assertEqual(self.index.delete_expired(10 ** 9), 2)
        self.assertEqual(len(os.listdir(self.config.index_dir)), 1)
        self.assertEqual(self.index.flush(), 0)  # deleted full files are not synced any more

    def test_same_millisecond_rolls_get_ordered_names(self) -> None:
        """Files created within one millisecond still get distinct names in creation order."""
        for i in range(300):
            self.index.dispatch(request(i * 100, keys="k"))
        names = [f.name for f in self.index.files]
        self.assertEqual(names, sorted(set(names)))
        self.assertEqual(len(names), 3)

    def test_load_rejects_wrong_size(self) -> None:
        """An index file of another size makes load fail."""
        os.makedirs(self.config.index_dir)
        with open(os.path.join(self.config.index_dir, file_name_for(BASE_MS)), "wb") as f:
            f.write(b"\0" * 100)
        with assert_logs(self, "rocketpy.store.index", LogLevel.error):
            self.assertFalse(self.open().load(True, 0))
