"""The compiled accelerator's functions beside their Python references: µs per call, same process.

Usage::

    python benchmarks/speedups.py

Prints a Markdown table (best of 5 repeats of 2,000 calls each; CPU-bound, one thread), 1 KiB
bodies, the properties a Java producer sends. Needs ``rocketpy._speedups`` built
(``python setup.py build_ext --inplace``); doc/store.md, "Compiled accelerator".
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import timeit
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocketpy.common import message as m  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.store.index import COMPILED_KEY_HASH, KeyHasher  # noqa: E402
from rocketpy.store.messagestore import MessageStore  # noqa: E402

PROPS = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "0A0000010000ABCDEF0100000000002A", "WAIT": "true",
         "CLUSTER": "DefaultCluster"}


def best(f: Callable[[], Any], n: int = 2000) -> float:
    """µs per call, best of 5."""
    return min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6


def main() -> None:
    if m.COMPILED is None:
        sys.exit("rocketpy._speedups is not built (or ROCKETPY_NO_SPEEDUPS is set)")
    text = m.PYTHON.properties_to_string(PROPS)
    msg = m.MessageExt("TopicTest", b"x" * 1024, 0, PROPS, 3, 0, 1700000000000, ("10.0.0.9", 5555), 1700000000001,
                       ("127.0.0.1", 10911))
    record = bytes(m.PYTHON.encode_record(msg))
    pulled = record * 32
    batch_msgs = [m.Message("TopicTest", b"x" * 1024, 0, {"UNIQ_KEY": PROPS["UNIQ_KEY"], "TAGS": "a"})] * 32
    batch = m.PYTHON.encode_batch(batch_msgs)
    cases: list[tuple[str, Callable[[m.Implementation], Any], int]] = [
        ("string_to_properties", lambda i: i.string_to_properties(text), 1),
        ("properties_to_string", lambda i: i.properties_to_string(PROPS), 1),
        ("tags_code", lambda i: i.tags_code("TagA"), 1),
        ("encode_record (1 KiB)", lambda i: i.encode_record(msg), 1),
        ("patch_record (with a bytearray copy)", lambda i: i.patch_record(bytearray(record), 1, 2, 3), 1),
        ("decode_record (1 KiB)", lambda i: i.decode_record(record), 1),
        ("decode_records, per record", lambda i: i.decode_records(pulled), 32),
        ("batch_entries, per entry", lambda i: i.batch_entries(batch), 32),
        ("encode_batch, per message", lambda i: i.encode_batch(batch_msgs), 32),
    ]
    print("| function | Python µs | C µs | ratio |\n|---|---|---|---|")
    for name, call, per in cases:
        py = best(lambda: call(m.PYTHON)) / per
        c = best(lambda: call(m.COMPILED)) / per  # type: ignore[arg-type]  # checked above
        print(f"| {name} | {py:.2f} | {c:.2f} | {py / c:.1f}× |")
    key = "TopicTest#" + PROPS["UNIQ_KEY"]
    hasher, compiled = KeyHasher(), COMPILED_KEY_HASH
    assert compiled is not None
    py, c = best(lambda: hasher(key)), best(lambda: compiled(key))
    print(f"| index key hash (Python KeyHasher, C key_hash) | {py:.2f} | {c:.2f} | {py / c:.1f}× |")
    py, c = min(put_path(False) for _ in range(3)), min(put_path(True) for _ in range(3))
    print(f"| MessageStore.put_many of 2 × 32, per record (store/commitlog.py put path) | {py:.2f} | {c:.2f} "
          f"| {py / c:.1f}× |")


def put_path(compiled: bool, hops: int = 300) -> float:
    """CPU µs per record of ``MessageStore.put_many`` of two batches of 32 (1 KiB, mmap path):
    encode, place, copy, consume-queue entry and two index keys; the compiled put path or not."""
    root = tempfile.mkdtemp(prefix="rocketpy-speedups-")
    try:
        store = MessageStore(MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=1 << 30,
                                                commit_log_write_path="mmap"))
        store.load()
        store.start()
        if not compiled:
            store.commit_log.speedups = None
        puts = [[m.MessageExt("TopicTest", b"x" * 1024, 0, dict(PROPS, UNIQ_KEY=f"{PROPS['UNIQ_KEY'][:-6]}{i:06d}"),
                              h % 4, 0, 1700000000000, ("10.0.0.9", 5555)) for i in range(32)] for h in range(2 * hops)]
        store.put_many(puts[:2])  # the queues and the index file
        start = time.process_time()
        for h in range(2, len(puts), 2):
            store.put_many(puts[h:h + 2])
        cpu = time.process_time() - start
        store.shutdown()
        return cpu / ((len(puts) - 2) * 32) * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
