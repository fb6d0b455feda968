"""The store's share of a lone send: CPU per ``StoreService.put_message`` of one message while the
writer is idle (the inline append, ASYNC_FLUSH), the message as the broker builds it (1 KiB body,
UNIQ_KEY, KEYS, TAGS, WAIT, CLUSTER), queues 0–7 in turn.

Usage::

    python benchmarks/store_lone.py [--puts 20000] [--rounds 5] [--dir DIR]

Each round puts ``--puts`` messages one after the other on the reactor thread (each completes
inline before the next; a reactor turn after every 100) into a fresh store and prints the
process's CPU µs per put (all threads: the pages faulted in ahead too; the broker's gc threshold);
then the median. With ``--profile`` one more round runs under cProfile and prints the Python-level calls
per put.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, task  # noqa: E402

from rocketpy.common.message import MessageExt  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.store.messagestore import MessageStore  # noqa: E402
from rocketpy.store.service import StoreService  # noqa: E402
from rocketpy.util.gctuning import DEFAULT_GEN0_THRESHOLD  # noqa: E402

BODY = b"x" * 1024


def messages(count: int) -> list[MessageExt]:
    return [MessageExt(topic="BenchTopic", body=BODY, queue_id=i % 8, born_timestamp=1, born_host=("127.0.0.1", 1),
                       properties={"UNIQ_KEY": f"7F0000011234ABCD{i:016X}", "KEYS": f"k{i}", "TAGS": "TagA",
                                   "WAIT": "true", "CLUSTER": "DefaultCluster"})
            for i in range(count)]


async def one_round(reactor: Any, root: str, count: int, profile: cProfile.Profile | None) -> tuple[float, int]:
    """CPU µs per put of ``count`` lone puts into a fresh store under ``root``, and how many of them
    did not complete at once (queued for a hop: the writer was busy)."""
    # the consume-queue flush and retention would take the writer pool meanwhile (then puts hop)
    config = MessageStoreConfig(store_path_root_dir=root, flush_interval_consume_queue=600,
                                clean_resource_interval=600)
    service = StoreService(MessageStore(config), reactor)
    await service.startService()
    try:
        for msg in messages(64):  # the queues' and the index's first files
            await service.put_message(msg)
        await task.deferLater(reactor, 0.05)  # the first pages faulted in
        batch = messages(count)
        gc.collect()
        gc.freeze()  # the prepared messages are not what the collector would scan in a broker
        put = service.put_message
        if profile is not None:
            profile.enable()
        began = time.process_time()
        late = 0
        for start in range(0, count, 100):
            for msg in batch[start:start + 100]:
                late += not put(msg).called
            await task.deferLater(reactor, 0)  # a reactor turn: completions from the threads (pages faulted in)
        cpu = time.process_time() - began
        if profile is not None:
            profile.disable()
        return cpu / count * 1e6, late
    finally:
        gc.unfreeze()
        await service.stopService()


async def main(reactor: Any, options: argparse.Namespace) -> None:
    gc.set_threshold(DEFAULT_GEN0_THRESHOLD, *gc.get_threshold()[1:])  # the broker's (rocketpy.util.gctuning)
    base = tempfile.mkdtemp(dir=options.dir)
    try:
        rounds = []
        for n in range(options.rounds):
            cpu, late = await one_round(reactor, os.path.join(base, str(n)), options.puts, None)
            rounds.append(cpu)
            print(f"round {n + 1}: {cpu:.2f} µs CPU per put, {late} not at once")
        print(f"median of {options.rounds} rounds x {options.puts:,} lone puts: {statistics.median(rounds):.2f} µs CPU per put")
        if options.profile:
            profile = cProfile.Profile()
            await one_round(reactor, os.path.join(base, "profile"), options.puts, profile)
            stats = pstats.Stats(profile)
            print(f"under cProfile: {stats.total_calls / options.puts:.1f} Python-level calls per put (builtins included)")
            stats.sort_stats("ncalls").print_stats(25)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the scratch stores go (default: the system's temp dir)")
    parser.add_argument("--profile", action="store_true", help="one more round under cProfile")
    options = parser.parse_args()
    task.react(lambda reactor: defer.Deferred.fromCoroutine(main(reactor, options)))
