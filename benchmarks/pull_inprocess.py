"""The broker's pull path without sockets: what PULL_MESSAGE costs per pulled message.

Usage::

    python benchmarks/pull_inprocess.py [--messages 64000] [--rounds 3] [--pulls 4000]
                                        [--queues 4] [--batch 32] [--profile 30]

Starts a real ``BrokerService`` (real ``StoreService`` and ``MessageStore`` in a temporary
directory, ASYNC_FLUSH) on the reactor as ``benchmarks/broker_inprocess.py`` does, stores
``--messages`` 1 KiB messages over the topic's 8 queues (batches of 32), then feeds one broker
protocol the PULL_MESSAGE frames the Java client sends: ``--queues`` queues, one pull of
``--batch`` in flight per queue, each queue read from 0 again at its end (as
``benchmarks/peers.py``'s pull shape). The pulls answered in one reactor turn go back in one read.
Prints the wall time and the process's CPU (all threads) per pulled message, per round and as
medians. ``--profile N`` runs one more round under ``cProfile`` (reactor thread only: the store's
read pool is not in it).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.address import IPv4Address  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.error import ConnectionDone  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402
from twisted.python.failure import Failure  # noqa: E402

from broker import TOPIC  # noqa: E402
from broker_inprocess import Responses, feed_pipelined, send_frames  # noqa: E402
from rocketpy.broker.config import BrokerConfig  # noqa: E402
from rocketpy.broker.controller import BrokerService  # noqa: E402
from rocketpy.remoting.codec import encode  # noqa: E402
from rocketpy.remoting.codes import RequestCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.util.gctuning import DEFAULT_GEN0_THRESHOLD, GCThresholdService  # noqa: E402

_OPAQUE = re.compile(rb'"opaque":(\d+)')
_CODE = re.compile(rb'"code":(\d+)')
#: opaque = queue id * _STRIDE + the frame's index in its queue's cycle
_STRIDE = 1_000_000


def pull_frame(queue_id: int, offset: int, batch: int, opaque: int) -> bytes:
    fields = {"consumerGroup": "CID_BENCH", "topic": TOPIC, "queueId": str(queue_id), "queueOffset": str(offset),
              "maxMsgNums": str(batch), "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
              "subscription": "*", "subVersion": "0"}
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
    request.opaque = opaque
    return encode(request)


class Pulls(StringTransport):
    """Answers each pull response with that queue's next pull, the ones of one reactor turn in one read."""

    def __init__(self, reactor: Any, frames: list[list[bytes]], batch: int, sizes: list[int]) -> None:
        super().__init__()
        self._reactor = reactor
        self._frames = frames
        self._batch = batch
        self._sizes = sizes
        self._next = [0] * len(frames)
        self._ready: list[bytes] = []
        self.protocol: Any = None
        self.pulls = self.messages = self.remaining = 0
        self.done: Deferred[None] | None = None

    def start(self, pulls: int) -> Deferred[None]:
        self.remaining, self.done = pulls, Deferred()
        self._ready = [self._take(queue_id) for queue_id in range(len(self._frames))]
        self._reactor.callLater(0, self._feed)
        return self.done

    def _take(self, queue_id: int) -> bytes:
        index = self._next[queue_id]
        self._next[queue_id] = (index + 1) % len(self._frames[queue_id])
        return self._frames[queue_id][index]

    def write(self, data: bytes) -> None:
        self.writeSequence([data])

    def writeSequence(self, seq: Any) -> None:
        for frame in seq:
            head = bytes(frame[:200])
            code = int(_CODE.search(head).group(1))  # type: ignore[union-attr]
            opaque = int(_OPAQUE.search(head).group(1))  # type: ignore[union-attr]
            if code != 0:
                raise SystemExit(f"pull answered with code {code}")
            queue_id, index = divmod(opaque, _STRIDE)
            self.messages += min(self._batch, self._sizes[queue_id] - index * self._batch)
            self.pulls += 1
            self.remaining -= 1
            if self.remaining >= len(self._frames):
                if not self._ready:
                    self._reactor.callLater(0, self._feed)
                self._ready.append(self._take(queue_id))
        self.clear()
        if self.remaining == 0 and self.done is not None:
            done, self.done = self.done, None
            self._reactor.callLater(0, done.callback, None)

    def _feed(self) -> None:
        ready, self._ready = self._ready, []
        if ready:
            self.protocol.dataReceived(b"".join(ready))


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-pull-bench-")
    store = MessageStoreConfig(
        store_path_root_dir=os.path.join(workdir, "store"), mapped_file_size_commit_log=256 * 1024 * 1024,
        mapped_file_size_consume_queue=300_000 * 20, max_hash_slot_num=100_000, max_index_num=400_000,
    )
    broker = BrokerService(reactor, BrokerConfig(listen="tcp:0:interface=127.0.0.1"), store)
    gc_tuning = GCThresholdService(options.gc_threshold)
    gc_tuning.startService()
    broker.startService()
    try:
        await broker.when_started()
        address = IPv4Address("TCP", "127.0.0.1", 40000)
        sender = broker.server.factory().buildProtocol(address)
        assert sender is not None
        responses = Responses(reactor)
        sender.makeConnection(responses)
        await feed_pipelined(sender, responses, send_frames(options.messages, 32), 32, 2)
        sizes = [broker.store.get_max_offset_in_queue(TOPIC, q) for q in range(options.queues)]
        frames = [[pull_frame(q, offset, options.batch, q * _STRIDE + i)
                   for i, offset in enumerate(range(0, size, options.batch))] for q, size in enumerate(sizes)]
        protocol = broker.server.factory().buildProtocol(address)
        assert protocol is not None
        transport = Pulls(reactor, frames, options.batch, sizes)
        transport.protocol = protocol
        protocol.makeConnection(transport)
        await transport.start(len(frames) * 8)  # warm up
        print(f"{sum(sizes):,} messages in {options.queues} queues of {TOPIC}, pulls of {options.batch}, "
              f"one in flight per queue", flush=True)
        wall, cpu = [], []
        for number in range(options.rounds):
            messages = transport.messages
            cpu_began, began = time.process_time(), time.perf_counter()
            await transport.start(options.pulls)
            count = transport.messages - messages
            wall.append((time.perf_counter() - began) / count * 1e6)
            cpu.append((time.process_time() - cpu_began) / count * 1e6)
            print(f"round {number + 1}: {count:,} messages, {wall[-1]:.2f} µs per message, "
                  f"{cpu[-1]:.2f} µs CPU (all threads)", flush=True)
        print(f"median of {options.rounds} rounds x {options.pulls:,} pulls: {statistics.median(wall):.2f} µs "
              f"per message, {statistics.median(cpu):.2f} µs CPU (python {sys.version.split()[0]})")
        if options.profile:
            profile = cProfile.Profile()
            messages = transport.messages
            profile.enable()
            await transport.start(options.pulls)
            profile.disable()
            stats = pstats.Stats(profile)
            calls: int = stats.total_calls  # type: ignore[attr-defined]
            print(f"\nunder cProfile (reactor thread only): {calls / (transport.messages - messages):.1f} "
                  f"Python-level calls per message, {calls / options.pulls:.0f} per pull")
            stats.sort_stats("tottime").print_stats(options.profile)
        for each in (sender, protocol):
            each.connectionLost(Failure(ConnectionDone()))
    finally:
        await stop(broker, gc_tuning, workdir)


async def stop(broker: BrokerService, gc_tuning: GCThresholdService, workdir: str) -> None:
    """Stop the broker and the collector tuning, remove the store."""
    await broker.stopService()
    gc_tuning.stopService()
    shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=64_000, help="messages stored first (8 queues)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pulls", type=int, default=4000, help="pulls per round")
    parser.add_argument("--queues", type=int, default=4, help="queues pulled, one pull in flight each")
    parser.add_argument("--batch", type=int, default=32, help="maxMsgNums of every pull")
    parser.add_argument("--gc-threshold", type=int, default=DEFAULT_GEN0_THRESHOLD)
    parser.add_argument("--profile", type=int, default=0, metavar="LINES",
                        help="one more round under cProfile, printing this many functions by own time")
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, parser.parse_args())))


if __name__ == "__main__":
    main()
