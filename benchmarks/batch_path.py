"""The broker's compiled path of a SEND_BATCH_MESSAGE on one thread, per message, best of repeats.

Usage::

    python benchmarks/batch_path.py [--batch 32] [--puts 100] [--repeats 15]

Three parts, each timed over ``--puts`` batches of ``--batch`` messages of 1 KiB with the
properties rocketpy's producer gives them (KEYS, TAGS, a UNIQ_KEY each; none in the header):

- build: ``stored_batch``, the messages of a batch body (the previous repeat's messages freed);
- store: ``MessageStore.put_many`` of each batch (encode, queue offsets, the copy into the mapped
  commit log, consume-queue entry and index keys), ASYNC_FLUSH, the commit log's pages faulted in
  before each repeat (untimed: a fresh page's cost is the machine's, doc/benchmarks.md "Thirtieth pass");
- answer: the JSON frame of a batch's answer (its ``msgId`` list of ``--batch`` ids).

Prints the best repeat of each in ns per message: a repeat that another process interrupts only
gets slower, so on a shared machine the best is the figure to compare (run the trees alternately).
Needs the compiled accelerator (``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocketpy.common import speedups  # noqa: E402
from rocketpy.common.message import Message, encode_batch  # noqa: E402
from rocketpy.remoting import codec  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.store.mappedfile import POPULATE_WINDOW  # noqa: E402
from rocketpy.store.messagestore import MessageStore  # noqa: E402
from rocketpy.util.gctuning import DEFAULT_GEN0_THRESHOLD  # noqa: E402

TOPIC = "BenchTopic"
BODY = b"x" * 1024
STORE_HOST = ("10.0.0.7", 10911)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--puts", type=int, default=100, help="batches per repeat (a repeat's records must fit "
                        "the 4 MiB faulted in before it)")
    parser.add_argument("--repeats", type=int, default=15)
    options = parser.parse_args()
    compiled = speedups.compiled
    if compiled is None:
        sys.exit("rocketpy._speedups is not built (or ROCKETPY_NO_SPEEDUPS is set)")
    if options.puts * options.batch * (len(BODY) + 200) > POPULATE_WINDOW:
        parser.error("a repeat's records must fit the window faulted in before it: fewer --puts or a smaller --batch")
    gc.set_threshold(DEFAULT_GEN0_THRESHOLD)  # as twistd rocketpy runs
    bodies = [encode_batch([Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA",
                                                     "UNIQ_KEY": f"7F0000011234ABCD{i:08X}{j:08X}"})
                            for j in range(options.batch)]) for i in range(options.puts)]
    root = tempfile.mkdtemp(prefix="rocketpy-batch-path-")
    store = MessageStore(MessageStoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=1 << 30, mapped_file_size_consume_queue=300_000 * 20,
        max_hash_slot_num=100_000, max_index_num=4_000_000, store_host=STORE_HOST), total_memory=1 << 30)

    def build(body: bytes, queue_id: int) -> list[object]:
        return compiled.stored_batch(body, TOPIC, {}, "DefaultCluster", 20_000, queue_id, 0, 1_700_000_000_000,
                                     ("10.0.0.9", 40000), STORE_HOST, 0)

    answer = RemotingCommand(0, "JAVA", 1, 2, 1, None, {
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "queueId": "1", "queueOffset": "5",
        "msgId": ",".join(["7F00000100002A9F%016X" % i for i in range(options.batch)])}, b"")
    best = {"build": float("inf"), "store": float("inf"), "answer": float("inf")}
    try:
        store.load()
        store.start()
        for i, body in enumerate(bodies):  # queues and index created
            store.put_many([build(body, i % 8)])
        n = options.puts * options.batch
        built: list[list[object]] = []
        for _ in range(options.repeats):
            store.populate_ahead()  # the pages ahead in, untimed: a repeat writes less than the window
            began = time.perf_counter()
            built = [build(body, i % 8) for i, body in enumerate(bodies)]
            built_at = time.perf_counter()
            for msgs in built:
                store.put_many([msgs])
            stored_at = time.perf_counter()
            for _ in range(options.puts):
                codec.encode(answer)
            answered_at = time.perf_counter()
            for part, seconds in (("build", built_at - began), ("store", stored_at - built_at),
                                  ("answer", answered_at - stored_at)):
                best[part] = min(best[part], seconds / n * 1e9)
    finally:
        store.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    print(f"ns per message, best of {options.repeats} repeats of {options.puts} batches of {options.batch}: "
          f"build {best['build']:.0f}, store {best['store']:.0f}, answer {best['answer']:.0f}, "
          f"together {sum(best.values()):.0f}")


if __name__ == "__main__":
    main()
