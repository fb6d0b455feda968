"""A reference-leak loop over the compiled put path (``rocketpy/_speedups_store.h``): the Python
heap's allocated blocks per round must stay flat.

Usage::

    python benchmarks/store_refleaks.py [--rounds 300] [--python]

Each round puts batches and single messages through a ``MessageStore`` (common records, a new
queue, a delay level, the schedule topic, a PREPARED record, a ``MessageExt`` subclass) and
calls ``place_chunk`` and ``dispatch_chunk`` on their refused inputs and error paths, and puts
messages through ``MessageStore.put_lone`` (``rocketpy/_speedups_storeput.h``: common ones, one the
Python dispatch takes, refused ones), and through ``put_encoded``, ``inline_room`` and
``queue_max_offset`` (``rocketpy/_speedups_chunkput.h``). The files
are large enough that no file is created after the warm-up (a new file adds blocks of its own).
Prints ``sys.getallocatedblocks()`` after each of six runs of ``--rounds`` rounds; ``--python``
does the same with the Python put path, for comparison. Run it under an ASan build too
(doc/benchmarks.md, "Eighth pass").
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocketpy.common.message import MessageExt  # noqa: E402
from rocketpy.common.topic import SCHEDULE_TOPIC  # noqa: E402
from rocketpy.store import commitlog  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.store.messagestore import MessageStore  # noqa: E402


class Marked(MessageExt):
    """A subclass: the compiled functions hand it to Python."""


def messages(n: int, topic: str = "T", queue_id: int = 0, **properties: str) -> list[MessageExt]:
    return [MessageExt(topic=topic, body=b"x" * 100, queue_id=queue_id, born_host=("1.2.3.4", 5),
                       properties=dict(properties, KEYS="a b\u4e2d \U0001F600", UNIQ_KEY=f"U{i}", TAGS="t"))
            for i in range(n)]


def one_round(store: MessageStore, compiled: Any) -> None:
    store.put_many([messages(8), messages(1, queue_id=1), messages(3, queue_id=9), messages(2, DELAY="2"),
                    messages(1, topic=SCHEDULE_TOPIC), [Marked(topic="T", body=b"m", born_host=("1.2.3.4", 5))],
                    messages(1, queue_id=2)])
    prepared = messages(1)[0]
    prepared.sys_flag = 0x4
    store.put_many([[prepared], messages(2, queue_id=3)])
    if compiled is None:
        return
    store.populate_ahead()
    store.put_many([messages(8), messages(2, queue_id=1)])  # put_encoded (rocketpy/_speedups_chunkput.h)
    assert compiled.put_encoded(store.commit_log, [], 1) is None
    assert store.can_append_inline([messages(8), messages(1, queue_id=1)])  # inline_room
    assert not store.can_append_inline([messages(1, DELAY="2")])
    assert not store.can_append_inline([messages(1, queue_id=77)])
    assert store.get_max_offset_in_queue("T", 0) > 0 and store.get_max_offset_in_queue("Nope", 0) == 0
    lone = [store.put_lone(msg) for msg in messages(3) + messages(1, topic=SCHEDULE_TOPIC) + messages(1, DELAY="2")
            + [Marked(topic="T", body=b"m", born_host=("1.2.3.4", 5))]]
    assert lone[0] is not None and lone[3] is not None and lone[3][1] is None and lone[4] is None and lone[5] is None
    assert compiled.place_chunk([(0, [object()], [bytearray(100)], 100)], {}, 0, 0, "H") is None
    assert compiled.place_chunk("x", {}, 0, 0, "H") is None
    assert compiled.encode_puts([[object()]], ("1.2.3.4", 1), 100, 0, 100) is None
    try:
        compiled.dispatch_chunk([(0, messages(2, queue_id=4), [], 0)], store.consume_queues, store.index,
                                lambda msg: 1 / 0)
    except ZeroDivisionError:
        pass
    try:
        compiled.dispatch_chunk([(0,)], store.consume_queues, store.index, print)
    except TypeError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--python", action="store_true", help="the Python put path instead")
    options = parser.parse_args()
    compiled = None if options.python else commitlog.COMPILED
    if compiled is None and not options.python:
        sys.exit("rocketpy._speedups is not built (or ROCKETPY_NO_SPEEDUPS is set)")
    root = tempfile.mkdtemp(prefix="rocketpy-refleaks-")
    store = MessageStore(MessageStoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=1 << 26, mapped_file_size_consume_queue=20 * 300_000,
        max_hash_slot_num=64, max_index_num=200_000, commit_log_write_path="mmap"))
    try:
        store.load()
        store.start()
        store.commit_log.speedups = compiled
        for _ in range(50):  # warm-up: queues, index file, caches
            one_round(store, compiled)
        blocks = []
        for _ in range(6):
            for _ in range(options.rounds):
                one_round(store, compiled)
            gc.collect()
            blocks.append(sys.getallocatedblocks())
        print(f"allocated blocks after each {options.rounds} rounds ({'Python' if compiled is None else 'C'}):",
              blocks)
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
