"""The compiled put path of the store (``rocketpy/_speedups_store.h``: ``place_chunk`` and
``dispatch_chunk``) against the Python reference: the same puts through a store of each kind
leave byte-identical commit-log, consume-queue and index files, the same results and the same
state (doc/store.md, "Compiled accelerator")."""

from __future__ import annotations

import errno
import os
from typing import Any, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from rocketpy.store import commitlog, messagestore, reads
from rocketpy.store.consumequeue import ConsumeQueue
from rocketpy.store.mappedfilequeue import MappedFileQueue
from rocketpy.store.mappedfile import MappedFile
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.status import PutMessageResult
from tests.common.implementations import C_SKIP
from tests.store.test_commitlog import T0, FakeClock, small_config

SKIP = C_SKIP if commitlog.COMPILED is None or C_SKIP else None
EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = st.text(st.sampled_from("ab \u00e9\u4e2d\U0001F600"), max_size=12)
PROPERTIES = st.fixed_dictionaries({}, optional={
    MessageConst.TAGS: WORDS | st.just(""),
    MessageConst.KEYS: WORDS | st.just("  k1  k2 ") | st.just(""),
    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: st.text("0123456789ABCDEF", min_size=0, max_size=32),
    MessageConst.DELAY_TIME_LEVEL: st.sampled_from(["1", "3"]),
    MessageConst.TIMER_DELAY_SEC: st.sampled_from(["5", "0", "x", str(10 ** 9)]),
    "P": st.text(max_size=5).filter(lambda s: "\x01" not in s and "\x02" not in s),
})
MESSAGE = st.builds(
    lambda topic, queue_id, sys_flag, body, properties: (topic, queue_id, sys_flag, body, properties),
    st.sampled_from(["T", "T\u4e2d", SCHEDULE_TOPIC, TIMER_TOPIC, "U"]), st.integers(0, 3), st.sampled_from([0, 0x4, 0x8, 0xC, 0x1]),
    st.binary(max_size=400), PROPERTIES,
)
# hops of puts (each put: one message or a batch of one topic and queue)
HOPS = st.lists(st.lists(st.lists(MESSAGE, min_size=1, max_size=6), min_size=1, max_size=8), min_size=1, max_size=14)

Spec = tuple[str, int, int, bytes, dict[str, str]]


def build(spec: Spec, batch_head: Spec) -> MessageExt:
    """The message of ``spec``, in the topic and queue of its batch's first message."""
    topic, queue_id = batch_head[0], batch_head[1]
    _t, _q, sys_flag, body, properties = spec
    return MessageExt(topic=topic, body=body, queue_id=queue_id, sys_flag=sys_flag, properties=dict(properties),
                      born_timestamp=T0 - 5, born_host=("192.168.1.2", 50000))


def files_under(root: str) -> dict[str, bytes]:
    """Every file's bytes under ``root`` by relative path (the lock file aside)."""
    out = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if name != "lock":
                with open(path, "rb") as f:
                    out[os.path.relpath(path, root)] = f.read()
    return out


def result_fields(result: PutMessageResult) -> Any:
    append = result.append
    return result.status, None if append is None else (
        append.wrote_offset, append.wrote_bytes, append.msg_ids, append.queue_offset, append.msg_num,
        append.store_timestamp)


def message_fields(msg: MessageExt) -> tuple[Any, ...]:
    return (msg.topic, msg.queue_id, msg.queue_offset, msg.commit_log_offset, msg.store_timestamp, msg.store_size,
            msg.properties)


class StorePair:
    """Two stores in sibling directories with one clock: compiled put path and Python."""

    def __init__(self, test: SynchronousTestCase, **config: Any) -> None:
        self.clock = FakeClock()
        root = test.mktemp()
        self.roots = [os.path.join(root, "c"), os.path.join(root, "python")]
        config.setdefault("commit_log_write_path", "mmap")
        self.stores = [MessageStore(small_config(r, **config), self.clock, total_memory=1 << 30) for r in self.roots]
        self.stores[1].commit_log.speedups = None
        for store in self.stores:
            test.addCleanup(store.shutdown)
            test.assertTrue(store.load())
            store.start()
        self.fallbacks = 0
        python_dispatch = self.stores[0].commit_log.dispatch

        def counted(msg: MessageExt) -> None:
            self.fallbacks += 1
            python_dispatch(msg)

        self.stores[0].commit_log.dispatch = counted  # type: ignore[method-assign]

    def put_many(self, test: SynchronousTestCase, puts: Sequence[Sequence[Spec]]) -> None:
        outcomes = []
        for store in self.stores:
            batches = [[build(spec, specs[0]) for spec in specs] for specs in puts]
            results = store.put_many(batches)
            outcomes.append(([result_fields(r) for r in results], [[message_fields(m) for m in b] for b in batches]))
        test.assertEqual(outcomes[0], outcomes[1])

    def assert_same(self, test: SynchronousTestCase) -> None:
        c, python = self.stores
        test.assertEqual(files_under(self.roots[0]), files_under(self.roots[1]))
        test.assertEqual(c.commit_log.topic_queue_table, python.commit_log.topic_queue_table)
        test.assertEqual(c.commit_log.dispatch_failed, python.commit_log.dispatch_failed)
        test.assertEqual(c.consume_queues.logics_msg_timestamp, python.consume_queues.logics_msg_timestamp)
        test.assertEqual([(q.topic, q.queue_id, q.max_physic_offset, q.max_offset) for q in c.consume_queues.queues],
                         [(q.topic, q.queue_id, q.max_physic_offset, q.max_offset)
                          for q in python.consume_queues.queues])
        fields = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
                  "index_count")
        test.assertEqual([[getattr(f, name) for name in fields] for f in c.index.files],
                         [[getattr(f, name) for name in fields] for f in python.index.files])


class CompiledPutPathTests(SynchronousTestCase):
    skip = SKIP

    @EXAMPLES
    @given(HOPS, st.lists(st.integers(0, 3000), min_size=14, max_size=14))
    def test_same_files(self, hops: list[list[list[Spec]]], steps: list[int]) -> None:
        """Random hops (batches, transactions, delays, timers, the schedule and timer topics, keys
        with spaces and astral characters, new queue and index files, full commit-log files) write
        the same bytes."""
        pair = StorePair(self)
        for hop, step in zip(hops, steps):
            pair.clock.now += step
            pair.put_many(self, hop)
        pair.assert_same(self)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(HOPS)
    def test_same_refusals(self, hops: list[list[list[Spec]]]) -> None:
        """With a 300-byte body limit some puts are refused, with the same status, in both."""
        pair = StorePair(self, max_message_size=300)
        for hop in hops:
            pair.put_many(self, hop)
        pair.assert_same(self)

    def test_put_larger_than_a_file(self) -> None:
        pair = StorePair(self)
        pair.put_many(self, [[("T", 0, 0, b"b" * 30000, {})] * 3, [("T", 0, 0, b"s", {})]])
        pair.assert_same(self)

    def test_common_records_are_compiled(self) -> None:
        """Past a queue's first record, plain records and batches never reach the Python dispatch."""
        pair = StorePair(self)
        plain: Spec = ("T", 0, 0, b"x" * 100, {"KEYS": "a b", "TAGS": "t", "UNIQ_KEY": "ABC"})
        pair.put_many(self, [[plain]])
        self.assertEqual(pair.fallbacks, 1, "the queue and the index file are created by Python")
        pair.put_many(self, [[plain] * 5, [plain], [plain] * 3])
        self.assertEqual(pair.fallbacks, 1)
        pair.assert_same(self)

    def test_pwrite_path(self) -> None:
        pair = StorePair(self, commit_log_write_path="pwrite")
        for n in range(40):
            pair.put_many(self, [[("T", n % 3, 0, b"p" * 900, {"KEYS": f"k{n}", "UNIQ_KEY": f"U{n}"})] * 4,
                                 [("U", 0, 0x8, b"q", {"TAGS": "t"})]])
        self.assertEqual(pair.fallbacks, 5, "four new queues and a second index file: Python creates them")
        pair.assert_same(self)

    def test_index_disabled(self) -> None:
        pair = StorePair(self, message_index_enable=False)
        plain: Spec = ("T", 1, 0, b"y" * 50, {"KEYS": "a", "UNIQ_KEY": "U"})
        for _ in range(30):
            pair.put_many(self, [[plain] * 4, [plain]])
        self.assertEqual(pair.fallbacks, 2, "the queue's first and second files are created by Python")
        pair.assert_same(self)

    def test_failed_write_restores_queue_offsets(self) -> None:
        """A write that fails gives back the queue offsets it took, in both (on the pwrite path, whose
        writes can fail: on the mmap path put_encoded copies into pages faulted in before)."""
        pair = StorePair(self, commit_log_write_path="pwrite")
        plain: Spec = ("T", 0, 0, b"z" * 10, {})
        pair.put_many(self, [[plain], [("T", 1, 0, b"z", {})]])

        def fail(*args: Any) -> int:
            raise OSError(errno.ENOSPC, "full")

        self.patch(MappedFile, "append_many", fail)
        self.patch(MappedFile, "append", fail)
        pair.put_many(self, [[plain] * 3, [("T", 1, 0, b"z", {})], [("T", 2, 0, b"z", {})], [plain]])
        self.assertEqual(pair.stores[0].commit_log.topic_queue_table, {"T-0": 1, "T-1": 1, "T-2": 0})
        pair.assert_same(self)

    def test_batch_records_in_one_buffer(self) -> None:
        """encode_puts gives a batch one buffer holding its records (a lone message and a batch with a
        message the Python encoder takes, here an IPv6 born host, one per message); the files are the same."""
        compiled = commitlog.COMPILED
        assert compiled is not None
        host = ("10.0.0.1", 10911)
        batch = [MessageExt(topic="T", body=b"x" * n, properties={"KEYS": "k"}, born_host=("1.2.3.4", 5))
                 for n in (1, 100, 7)]
        lone = [MessageExt(topic="T", body=b"y")]
        mixed = [MessageExt(topic="T", body=b"z"), MessageExt(topic="T", body=b"z", born_host=("::1", 5))]
        encoded = compiled.encode_puts([batch, lone, mixed], host, 1000, 0, 1 << 20)
        assert encoded is not None
        self.assertEqual([len(put[2]) for put in encoded], [1, 1, 2])
        self.assertEqual(bytes(encoded[0][2][0]), b"".join(commitlog.encode_record(m) for m in batch))
        pair = StorePair(self)
        pair.put_many(self, [[("T", 0, 0, b"x" * n, {"KEYS": f"k{n}"}) for n in range(5)], [("T", 0, 0, b"x", {})]])
        pair.assert_same(self)

    def test_put_many_in_one_call(self) -> None:
        """Puts that fit the current file's faulted-in pages (mmap) take put_encoded, no _write_chunk; a hop
        reaching into the next file, or the pwrite path, goes the Python way; the same files and results."""
        for path in ("mmap", "pwrite"):
            pair = StorePair(self, commit_log_write_path=path)
            log = pair.stores[0].commit_log
            written: list[int] = []
            write_chunk = log._write_chunk

            def counted(mf: MappedFile, chunk: list[Any], *args: Any) -> None:
                written.append(len(chunk))
                write_chunk(mf, chunk, *args)

            log._write_chunk = counted  # type: ignore[method-assign,assignment]
            in_lock: list[int] = []
            dispatch = log.dispatch

            def noted(msg: MessageExt) -> None:  # the Python dispatch of a record put_encoded hands on
                in_lock.append(log.begin_time_in_lock)
                dispatch(msg)

            log.dispatch = noted  # type: ignore[method-assign]
            plain: Spec = ("T", 0, 0, b"w" * 200, {"KEYS": "k1 k2", "TAGS": "t", "UNIQ_KEY": "U"})
            other: Spec = ("T", 1, 0, b"v" * 30, {"UNIQ_KEY": "V"})
            for _ in range(60):  # ~2.4 KiB a hop, 64 KiB files: into the third file
                pair.put_many(self, [[plain] * 5, [other], [plain] * 2])
            pair.assert_same(self)
            c, python = [(store.stats.puts, store.stats.records, store.stats.bytes, store.stats.topic_bytes,
                          store.stats.latency_buckets, store.commit_log.reput_offset) for store in pair.stores]
            self.assertEqual(c, python)
            self.assertEqual(len(pair.stores[0].commit_log.queue.mapped_files), 3)
            self.assertEqual(log.begin_time_in_lock, 0)
            self.assertTrue(in_lock and all(in_lock), "set while the lock is held, as in put_many")
            if path == "mmap":
                self.assertLess(len(written), 6, "only where a hop reaches into a new file")
            else:
                self.assertEqual(len(written), 60)

    def test_inline_room(self) -> None:
        """MessageStore.can_append_inline in one call (inline_room) answers as its Python code, hop after hop
        into new commit-log, consume-queue and index files, on both write paths, with and without the index."""
        room = messagestore.COMPILED_INLINE_ROOM
        assert room is not None
        decided = 0
        for path, indexed in (("mmap", True), ("pwrite", True), ("mmap", False)):
            pair = StorePair(self, commit_log_write_path=path, message_index_enable=indexed)
            store = pair.stores[0]
            plain: Spec = ("T", 0, 0, b"w" * 200, {"KEYS": "k1 k2", "TAGS": "t", "UNIQ_KEY": "U"})
            candidates: list[list[list[Spec]]] = [
                [[plain]], [[plain] * 8, [("T", 1, 0, b"v", {})]], [[("New", 0, 0, b"n", {})]], [[plain] * 60],
                [[("T", 0, 0, b"d", {"DELAY": "3"})]], [[("T", 0, 0, b"x" * 9000, {})]]]
            answers: list[bool] = []
            for _ in range(45):
                for candidate in candidates:
                    puts = [[build(spec, specs[0]) for spec in specs] for specs in candidate]
                    compiled = store.can_append_inline(puts)
                    direct = room(store, puts, messagestore.INLINE_MAX_BODY, messagestore.INLINE_RECORD_FIXED)
                    self.assertIn(direct, (None, compiled))
                    decided += direct is not None
                    self.patch(messagestore, "COMPILED_INLINE_ROOM", None)
                    self.assertEqual(compiled, store.can_append_inline(puts))
                    self.patch(messagestore, "COMPILED_INLINE_ROOM", room)
                    answers.append(compiled)
                pair.put_many(self, [[plain] * 5, [("T", 1, 0, b"v" * 30, {"UNIQ_KEY": "V"})]])
                self.assert_max_offsets(store, [("T", 0), ("T", 1), ("T", 7), ("Unknown", 0)])
            self.assertEqual(set(answers), {True, False})
            self.assertEqual(decided, len(answers), "every one decided in C")
            decided = 0
            store.running = False
            self.assertIs(store.can_append_inline([[build(plain, plain)]]), False)
            store.running = True

    def assert_max_offsets(self, store: MessageStore, queues: list[tuple[str, int]]) -> None:
        """get_max_offset_in_queue in one call (queue_max_offset) answers as its Python code."""
        compiled = reads._queue_max_offset
        assert compiled is not None
        for topic, queue_id in queues:
            found = compiled(store.consume_queues, ConsumeQueue, MappedFileQueue, topic, queue_id)
            self.patch(reads, "_queue_max_offset", None)
            self.assertEqual(found, store.get_max_offset_in_queue(topic, queue_id))
            self.patch(reads, "_queue_max_offset", compiled)

    def test_batch_buffer_placed_by_python(self) -> None:
        """When place_chunk leaves a chunk to the Python reference, a batch's one buffer is split into
        its records there: the same files."""
        compiled = commitlog.COMPILED

        class NoPlace:
            def __getattr__(self, name: str) -> Any:
                return getattr(compiled, name)

            def place_chunk(self, *args: Any) -> None:
                return None

        pair = StorePair(self)
        pair.stores[0].commit_log.speedups = NoPlace()
        for n in range(3):
            pair.put_many(self, [[("T", n, 0, b"b" * (10 + i), {"UNIQ_KEY": f"U{i}"}) for i in range(4)],
                                 [("T", 0, 0, b"s", {})]])
        pair.assert_same(self)

    def test_unusual_messages_go_the_python_way(self) -> None:
        """A MessageExt subclass is placed and dispatched by the Python code, with the same files."""

        class Marked(MessageExt):
            pass

        pair = StorePair(self)
        for store in pair.stores:
            msg = Marked(topic="T", body=b"m", properties={"KEYS": "k"}, born_timestamp=T0, born_host=("1.2.3.4", 1))
            self.assertEqual(store.put_many([[msg]])[0].status.name, "PUT_OK")
        pair.assert_same(self)
