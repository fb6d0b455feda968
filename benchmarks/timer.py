"""Timer messages on a real store (its own thread pools, the epoll reactor): how fast due messages
are delivered, and how long a restart takes to rebuild the pending set from the timer queue.

Parks ``--count`` messages due 2 s later (100 B bodies), times their delivery, then parks as many
due in an hour, stops the service and starts a new one on the same store: the restart reads the
pending entries (20-byte consume-queue entries, no commit-log read) from the checkpoint.

Usage::

    PYTHONPATH=. python benchmarks/timer.py --count 20000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from twisted.internet import defer, task

from rocketpy.broker.timer import TimerCheckpoint, TimerMessageService
from rocketpy.common.message import MessageConst, MessageExt
from rocketpy.common.topic import TIMER_TOPIC
from rocketpy.store.config import MessageStoreConfig
from rocketpy.store.messagestore import MessageStore
from rocketpy.store.service import StoreService


def timed(i: int, deliver_ms: int) -> MessageExt:
    return MessageExt(topic="Bench", body=b"x" * 100, queue_id=i % 4,
                      properties={MessageConst.TIMER_DELIVER_MS: str(deliver_ms), MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"{i:032X}"})


async def park(store: StoreService, count: int, deliver_ms: int) -> None:
    for start in range(0, count, 256):
        await store.put_many([(timed(i, deliver_ms),) for i in range(start, min(count, start + 256))])


async def run(reactor: Any, count: int) -> None:
    root = tempfile.mkdtemp(prefix="rocketpy-timer-bench-")
    config = MessageStoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024 * 1024)
    store = StoreService(MessageStore(config), reactor)
    await store.startService()
    path = os.path.join(root, "timerCheckpoint.json")
    service = TimerMessageService(store, reactor, TimerCheckpoint(path))
    service.startService()
    due_ms = int(time.time() * 1000) // 1000 * 1000 + 3000 + count // 2  # after the parking ends
    began = time.perf_counter()
    await park(store, count, due_ms)
    parked = time.perf_counter() - began
    print(f"parked {count} timer messages in {parked:.2f} s ({count / parked:.0f} msg/s, 256 a put_many)")
    assert time.time() * 1000 < due_ms, "parking took longer than planned"
    while service.delivered < count:
        await task.deferLater(reactor, 0.01, lambda: None)
    took = time.time() - due_ms / 1000
    print(f"{count} messages due at once: all delivered {took:.2f} s after their time ({count / took:.0f} msg/s)")
    await park(store, count, int(time.time() * 1000) + 3_600_000)
    while service.backlog() and service.runtime_figures()["timerOffsetBehind"] != "0":
        await task.deferLater(reactor, 0.01, lambda: None)
    await service.stopService()
    began = time.perf_counter()
    again = TimerMessageService(store, reactor, TimerCheckpoint(path))
    again.startService()
    while again.runtime_figures()["timerOffsetBehind"] != "0":
        await task.deferLater(reactor, 0.001, lambda: None)
    print(f"restart: {again.backlog()} pending rebuilt from {store.get_max_offset_in_queue(TIMER_TOPIC, 0)} "
          f"queue entries (the checkpoint skips the {count} delivered) in {time.perf_counter() - began:.3f} s")
    await again.stopService()
    await store.stopService()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=20000)
    args = parser.parse_args()
    task.react(lambda reactor: defer.Deferred.fromCoroutine(run(reactor, args.count)))


if __name__ == "__main__":
    main()
