"""Store benchmark: puts/s and MB/s through StoreService, beside a raw mmap write loop.

Usage::

    python benchmarks/store.py [--dir DIR] [--rounds 3] [--sizes 100,1024,4096]
                               [--paths mmap,pwrite] [--modes async,sync256,sync1]
                               [--restart-gib 2 [--restart-only]]

Modes: ``async`` (ASYNC_FLUSH, 1000 puts in flight), ``sync256`` (SYNC_FLUSH, 256 waiters)
and ``sync1`` (SYNC_FLUSH, one waiter; its p50 latency is reported). Every figure is the
median of ``--rounds`` rounds, each on a fresh store (~0.3 GB of disk) in a scratch
directory under ``--dir`` (use a real disk, not tmpfs). ``--restart-gib N`` also builds a
store of N GiB (it needs N + 1 GiB of disk) and times a clean restart. To see where the
time goes, run it under ``py-spy record --threads`` (cProfile sees only the reactor thread).
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.task import react  # noqa: E402

from rocketpy.common.message import MessageExt, encode_record  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.store.messagestore import MessageStore  # noqa: E402
from rocketpy.store.service import StoreService  # noqa: E402
from rocketpy.store.status import PutMessageResult  # noqa: E402

MODES = {  # name: (flush_disk_type, puts in flight, messages per round)
    "async": ("ASYNC_FLUSH", 1000, 40_000),
    "sync256": ("SYNC_FLUSH", 256, 20_000),
    "sync1": ("SYNC_FLUSH", 1, 1_000),
}


@dataclass
class Round:
    puts_per_s: float
    mb_per_s: float
    p50_ms: float = 0.0
    errors: int = 0
    cpu_us: float = 0.0  # process CPU (all threads) per put: steadier than rates on a shared box
    reactor_us: float = 0.0  # of which the reactor thread
    writer_us: float = 0.0  # of which the store's writer thread (appends)


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of the reactor thread and of the store's writer thread."""
    out = {}
    for thread in threading.enumerate():
        if thread.name == "MainThread" or thread.name.startswith("PoolThread-rocketpy-store-0"):
            assert thread.ident is not None
            out[thread.name[:10]] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return out


def make_messages(size: int, count: int) -> list[MessageExt]:
    body = os.urandom(size)
    return [
        MessageExt(topic="bench", body=body, queue_id=i % 8,
                   properties={"UNIQ_KEY": "%032X" % i, "TAGS": "t"})
        for i in range(count)
    ]


def store_config(root: str, flush_disk_type: str, write_path: str,
                 file_size: int = 256 << 20) -> MessageStoreConfig:
    """Smaller files and index than the defaults (1 GiB, 420 MB): a round needs ~0.3 GB of disk."""
    return MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush_disk_type,
                              commit_log_write_path=write_path, mapped_file_size_commit_log=file_size,
                              max_hash_slot_num=500_000, max_index_num=2_000_000)


def raw_mmap_round(root: str, size: int, count: int) -> Round:
    """Copy pre-encoded records into a fresh mmap'ed file: the in-process ceiling."""
    record = bytes(encode_record(make_messages(size, 1)[0]))
    total = len(record) * count
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "raw")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, total)
        mm = mmap.mmap(fd, total)
        n = len(record)
        start = time.perf_counter()
        pos = 0
        for _ in range(count):
            mm[pos : pos + n] = record
            pos += n
        elapsed = time.perf_counter() - start
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return Round(count / elapsed, total / elapsed / 1e6)


def raw_sync_round(root: str, size: int, count: int = 300) -> Round:
    """``pwrite`` one record then ``fdatasync``, one at a time: the floor of one sync waiter."""
    record = bytes(encode_record(make_messages(size, 1)[0]))
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "rawsync")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, len(record) * count)
        latencies = []
        start = time.perf_counter()
        for i in range(count):
            began = time.perf_counter()
            os.pwrite(fd, record, i * len(record))
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - began)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return Round(count / elapsed, count * len(record) / elapsed / 1e6, statistics.median(latencies) * 1e3)


async def service_round(reactor: Any, root: str, mode: str, write_path: str, size: int) -> Round:
    """Put a round of messages through a fresh StoreService with a window of puts in flight."""
    flush_disk_type, window, count = MODES[mode]
    msgs = make_messages(size, count)
    record_size = len(encode_record(msgs[0]))
    service = StoreService(MessageStore(store_config(root, flush_disk_type, write_path)), reactor)
    await service.startService()
    try:
        latencies: list[float] = []
        errors = 0
        issued = completed = 0
        done: Deferred[None] = Deferred()
        perf = time.perf_counter

        def issue() -> None:
            nonlocal issued
            msg = msgs[issued]
            issued += 1
            service.put_message(msg).addCallback(acked, perf())

        def acked(result: PutMessageResult, began: float) -> None:
            nonlocal completed, errors
            latencies.append(perf() - began)
            completed += 1
            if not result.ok:
                errors += 1
            if issued < count:
                issue()
            elif completed == count:
                done.callback(None)

        start, cpu, threads = perf(), time.process_time(), thread_cpu()
        for _ in range(min(window, count)):
            issue()
        await done
        elapsed, cpu = perf() - start, time.process_time() - cpu
        used = {name: spent - threads.get(name, 0.0) for name, spent in thread_cpu().items()}
    finally:
        await service.stopService()
        shutil.rmtree(root, ignore_errors=True)
    return Round(count / elapsed, count * record_size / elapsed / 1e6,
                 statistics.median(latencies) * 1e3, errors, cpu / count * 1e6,
                 used.get("MainThread", 0.0) / count * 1e6, used.get("PoolThread", 0.0) / count * 1e6)


def median_round(rounds: list[Round]) -> Round:
    return Round(*(statistics.median(getattr(r, f) for r in rounds)
                   for f in ("puts_per_s", "mb_per_s", "p50_ms", "errors", "cpu_us", "reactor_us", "writer_us")))


async def bench(reactor: Any, args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    paths = args.paths.split(",")
    print(f"# store benchmark {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, medians of {args.rounds} rounds")
    print("| body | write path | mode | puts/s | MB/s | p50 ms | vs raw mmap | CPU µs/put (reactor, writer) | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        raw_count = min(200_000, (200 << 20) // (size + 200))  # ≤ 200 MB of file
        raw = median_round([raw_mmap_round(args.dir, size, raw_count) for _ in range(args.rounds)])
        print(f"| {size} B | raw mmap loop | – | {raw.puts_per_s:,.0f} | {raw.mb_per_s:,.0f} | – | 1 | – | – |")
        floor = median_round([raw_sync_round(args.dir, size) for _ in range(args.rounds)])
        print(f"| {size} B | raw pwrite+fdatasync | one at a time | {floor.puts_per_s:,.0f} | "
              f"{floor.mb_per_s:,.1f} | {floor.p50_ms:.3f} | {floor.puts_per_s / raw.puts_per_s:.3f} | – | – |")
        for mode in args.modes.split(","):
            rounds: dict[str, list[Round]] = {path: [] for path in paths}
            for i in range(args.rounds):  # paths alternate within a round: drift hits both alike
                for path in paths:
                    root = os.path.join(args.dir, f"{mode}-{path}-{size}-{i}")
                    rounds[path].append(await service_round(reactor, root, mode, path, size))
            for path in paths:
                m = median_round(rounds[path])
                p50 = f"{m.p50_ms:.3f}" if mode == "sync1" else "–"
                print(f"| {size} B | {path} | {mode} | {m.puts_per_s:,.0f} | {m.mb_per_s:,.1f} | {p50} | "
                      f"{m.puts_per_s / raw.puts_per_s:.3f} | {m.cpu_us:.1f} ({m.reactor_us:.1f}, {m.writer_us:.1f}) | "
                      f"{m.errors:.0f} |", flush=True)
    if args.restart_gib:
        restart_time(args.dir, args.restart_gib)


async def restart_only(reactor: Any, args: argparse.Namespace) -> None:
    restart_time(args.dir, args.restart_gib)


def restart_time(root_dir: str, gib: float, size: int = 1024) -> None:
    """Build a store of ``gib`` GiB through the blocking facade, shut it down, time a clean restart."""
    root = os.path.join(root_dir, "restart")
    shutil.rmtree(root, ignore_errors=True)
    config = store_config(root, "ASYNC_FLUSH", "pwrite", 1 << 30)
    store = MessageStore(config)
    store.load()
    store.start()
    batch = make_messages(size, 64)
    target = int(gib * (1 << 30))
    began = time.perf_counter()
    while store.max_physical_offset < target:
        if not store.put_messages(batch).ok:
            raise SystemExit("put failed while building the restart store")
        store.flush(16)
    built = time.perf_counter() - began
    store.shutdown()
    began = time.perf_counter()
    again = MessageStore(config)
    loaded = again.load()
    again.start()
    elapsed = time.perf_counter() - began
    print(f"\nclean restart of a {store.max_physical_offset / (1 << 30):.2f} GiB store "
          f"({size} B bodies, built in {built:.1f} s): load()+start() {elapsed:.2f} s, loaded={loaded}")
    again.shutdown()
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="where to make the scratch directory: on the disk to measure, not tmpfs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="100,1024,4096")
    parser.add_argument("--paths", default="mmap,pwrite")
    parser.add_argument("--modes", default="async,sync256,sync1")
    parser.add_argument("--restart-gib", type=float, default=0.0)
    parser.add_argument("--restart-only", action="store_true", help="only the clean-restart measurement")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    args.dir = tempfile.mkdtemp(prefix="rocketpy-bench-store-", dir=args.dir)  # only this is removed
    run = restart_only if args.restart_only else bench
    try:
        react(lambda reactor: Deferred.fromCoroutine(run(reactor, args)))
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
