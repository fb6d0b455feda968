"""The broker's send path without sockets: what a SEND_MESSAGE_V2 costs in Python alone.

Usage::

    python benchmarks/broker_inprocess.py [--messages 20000] [--rounds 3] [--in-flight 1]
                                          [--chunk 60] [--gc-threshold 10000] [--batch 32] [--bare-header]
                                          [--profile] [--acl]

Starts a real ``BrokerService`` (real ``StoreService`` and ``MessageStore`` in a temporary
directory, ASYNC_FLUSH or ``--flush SYNC_FLUSH``, small files) on the reactor, connects one broker protocol to a
``StringTransport`` and feeds it the frames the Java client sends (1 KiB bodies, queues 0–7 in
turn), one at a time, each after the previous response was written; with ``--in-flight N``
in reads of ``--chunk`` frames (a 64 KiB socket read holds ~60), at most N unanswered, as a
loaded broker sees them. Prints µs per send (wall time of the whole loop: decode, processor,
store append and dispatch, completion, response encode), the process's CPU per send (all
threads, and the reactor thread's alone: the flush thread's page work varies from run to run) and
the garbage collector's time per send, per round and as medians.
``--profile`` runs one more round under ``cProfile`` and prints the Python-level calls per
send, per request by area, and the functions called most. ``--acl`` turns the broker's plain ACL on and signs every
frame (doc/security.md), to measure what the check costs.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.address import IPv4Address  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.error import ConnectionDone  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402
from twisted.python.failure import Failure  # noqa: E402

from broker import BODY, TOPIC, send_header  # noqa: E402
from rocketpy.broker.config import BrokerConfig  # noqa: E402
from rocketpy.broker.controller import BrokerService  # noqa: E402
from rocketpy.common.message import Message, encode_batch  # noqa: E402
from rocketpy.remoting.codec import encode  # noqa: E402
from rocketpy.remoting.codes import RequestCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from rocketpy.store.config import MessageStoreConfig  # noqa: E402
from rocketpy.util.gctuning import DEFAULT_GEN0_THRESHOLD, GCThresholdService  # noqa: E402


class Responses(StringTransport):
    """Counts response frames; a waiter fires (on the next reactor turn) when one arrives."""

    def __init__(self, reactor: Any) -> None:
        super().__init__()
        self._reactor = reactor
        self.count = 0
        self.waiter: Deferred[None] | None = None

    def write(self, data: bytes) -> None:
        self.writeSequence([data])

    def writeSequence(self, seq: Any) -> None:
        self.count += len(seq)  # the protocol writes whole frames
        self.clear()
        if self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            # not from inside the store's completion: the next send must find it finished
            self._reactor.callLater(0, waiter.callback, None)


class CollectorTime:
    """Seconds spent in the cyclic garbage collector (all generations) since creation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began

    def stop(self) -> None:
        gc.callbacks.remove(self._callback)


async def feed(reactor: Any, protocol: Any, transport: Responses, frames: list[bytes]) -> float:
    """Seconds to send ``frames`` one after the other, each once the previous one was answered."""
    began = time.perf_counter()
    for frame in frames:
        expected = transport.count + 1
        protocol.dataReceived(frame)
        if transport.count < expected:
            transport.waiter = Deferred()
            await transport.waiter
    return time.perf_counter() - began


async def feed_pipelined(protocol: Any, transport: Responses, frames: list[bytes], window: int,
                         chunk: int) -> float:
    """Seconds to send ``frames`` in reads of ``chunk`` frames, at most ``window`` unanswered."""
    began = time.perf_counter()
    base = transport.count
    reads = [b"".join(frames[i:i + chunk]) for i in range(0, len(frames), chunk)]
    sent = 0
    for data in reads:
        while sent - (transport.count - base) + chunk > window:
            transport.waiter = Deferred()
            await transport.waiter
        protocol.dataReceived(data)
        sent += min(chunk, len(frames) - sent)
    while transport.count - base < len(frames):
        transport.waiter = Deferred()
        await transport.waiter
    return time.perf_counter() - began


def send_frames(messages: int, batch: int, sign: Any = None, java: bool = False, bare: bool = False) -> list[bytes]:
    """SEND_MESSAGE_V2 frames, or SEND_BATCH_MESSAGE frames of ``batch`` messages with their own UNIQ_KEYs
    (with ``java``, as the Java client sends them: ``WAIT=true`` in each message and alone in the
    header's properties; with ``bare``, as rocketpy's ``send_batch`` does: no properties in the
    header); each request first goes through ``sign`` (an RPC hook) if given."""
    if batch <= 1:
        requests = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(i % 8, False), BODY)
                    for i in range(messages)]
        for request in requests if sign is not None else ():
            sign.before_request("", request)
        return [encode(request) for request in requests]
    frames = []
    for i in range(messages // batch):
        msgs = [Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA", "UNIQ_KEY": f"7F0000011234ABCD{i:08X}{j:08X}",
                                         **({"WAIT": "true"} if java else {})})
                for j in range(batch)]
        header = send_header(i % 8, True)
        if java:
            header["i"] = "WAIT\x01true"
        elif bare:
            header["i"] = ""
        frames.append(encode(RemotingCommand.request(
            RequestCode.SEND_BATCH_MESSAGE, header, encode_batch(msgs))))
    return frames


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-bench-")
    store = MessageStoreConfig(
        store_path_root_dir=os.path.join(workdir, "store"), mapped_file_size_commit_log=256 * 1024 * 1024,
        mapped_file_size_consume_queue=300_000 * 20, max_hash_slot_num=100_000, max_index_num=400_000,
        flush_disk_type=options.flush, sync_flush_completion=options.sync_completion,
    )
    config = BrokerConfig(listen="tcp:0:interface=127.0.0.1")
    sign = None
    if options.acl:
        from rocketpy.acl.signing import AclClientHook

        config.acl_enable, config.acl_file = True, os.path.join(workdir, "plain_acl.yml")
        with open(config.acl_file, "w") as f:
            f.write(f"accounts:\n  - accessKey: benchmark\n    secretKey: benchmark\n    topicPerms: [{TOPIC}=PUB]\n")
        sign = AclClientHook("benchmark", "benchmark")
    broker = BrokerService(reactor, config, store)
    gc_tuning = GCThresholdService(options.gc_threshold)  # as twistd rocketpy runs
    gc_tuning.startService()
    broker.startService()
    try:
        await broker.when_started()
        protocol = broker.server.factory().buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        assert protocol is not None
        transport = Responses(reactor)
        protocol.makeConnection(transport)
        n = options.messages
        frames = send_frames(n, options.batch, sign, options.java_batch, options.bare_header)
        await feed(reactor, protocol, transport, frames[: min(len(frames), 2000)])  # warm up, auto-create the topic
        def run() -> Any:
            if options.in_flight > 1:
                return feed_pipelined(protocol, transport, frames, options.in_flight, options.chunk)
            return feed(reactor, protocol, transport, frames)

        rounds, cpu, reactor_cpu, collecting = [], [], [], []
        collector = CollectorTime()
        for number in range(options.rounds):
            cpu_began, thread_began, gc_began = time.process_time(), time.thread_time(), collector.seconds
            per_send = await run() / n * 1e6
            cpu.append((time.process_time() - cpu_began) / n * 1e6)
            reactor_cpu.append((time.thread_time() - thread_began) / n * 1e6)
            collecting.append((collector.seconds - gc_began) / n * 1e6)
            rounds.append(per_send)
            print(f"round {number + 1}: {per_send:.1f} µs per send, {cpu[-1]:.1f} µs CPU (all threads; "
                  f"{reactor_cpu[-1]:.1f} on the reactor thread), {collecting[-1]:.2f} µs in the garbage collector",
                  flush=True)
        collector.stop()
        print(f"median of {options.rounds} rounds x {n:,} sends, {options.in_flight} in flight, gc threshold "
              f"{gc.get_threshold()[0]}: {statistics.median(rounds):.1f} µs per send, "
              f"{statistics.median(cpu):.1f} µs CPU ({statistics.median(reactor_cpu):.1f} on the reactor thread), "
              f"{statistics.median(collecting):.2f} µs gc "
              f"(python {sys.version.split()[0]})")
        if options.profile:
            profile = cProfile.Profile()
            profile.enable()
            await run()
            profile.disable()
            stats = pstats.Stats(profile)
            calls: int = stats.total_calls  # type: ignore[attr-defined]
            print(f"\nunder cProfile (reactor thread only): {calls / n:.0f} Python-level calls per send")
            print_areas(stats, len(frames))
            stats.sort_stats(options.sort).print_stats(options.lines)
        protocol.connectionLost(Failure(ConnectionDone()))  # a StringTransport never reports it
    finally:
        await broker.stopService()
        gc_tuning.stopService()
        shutil.rmtree(workdir, ignore_errors=True)


def print_areas(stats: pstats.Stats, requests: int) -> None:
    """Calls per request (a frame fed) by where they live (``lone_calls.area``), the driver's own functions
    (this file) apart; its waiters' Deferreds and timers count as Twisted's. Deterministic (but for the
    puts a new store file or a populate sends through a hop): two trees compare by running it in each."""
    from lone_calls import area

    by_area: dict[str, int] = {}
    for (filename, _line, _name), (_primitive, calls, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        where = "driver" if os.path.abspath(filename) == os.path.abspath(__file__) else area(filename)
        by_area[where] = by_area.get(where, 0) + calls
    python = sum(calls for where, calls in by_area.items() if where not in ("builtins", "driver"))
    print(f"{python / requests:.1f} Python function calls per request ({sum(by_area.values()) / requests:.1f} "
          "with builtins and the driver's):")
    for where, calls in sorted(by_area.items(), key=lambda item: -item[1]):
        print(f"  {where:20} {calls / requests:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=1,
                        help="more than 1: reads of --chunk frames, at most this many unanswered")
    parser.add_argument("--chunk", type=int, default=60, help="frames per read when pipelined (~64 KiB)")
    parser.add_argument("--gc-threshold", type=int, default=DEFAULT_GEN0_THRESHOLD,
                        help="the collector's first-generation threshold, as twistd rocketpy's option (0: Python's)")
    parser.add_argument("--batch", type=int, default=1,
                        help="more than 1: SEND_BATCH_MESSAGE frames of this many messages (figures per message)")
    parser.add_argument("--java-batch", action="store_true",
                        help="batches as the Java client sends them (WAIT=true in each message and the header)")
    parser.add_argument("--bare-header", action="store_true",
                        help="batches as rocketpy's send_batch sends them (no properties in the header)")
    parser.add_argument("--profile", action="store_true", help="one more round under cProfile")
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=("ASYNC_FLUSH", "SYNC_FLUSH"),
                        help="the store's flush mode (SYNC_FLUSH: each send waits for its fdatasync)")
    parser.add_argument("--sync-completion", default="native", choices=("native", "uring", "thread"),
                        help="SYNC_FLUSH: how the fdatasync ends (the store's sync_flush_completion)")
    parser.add_argument("--acl", action="store_true", help="the broker checks the plain ACL; frames are signed")
    parser.add_argument("--lines", type=int, default=25, help="profile lines to print")
    parser.add_argument("--sort", default="ncalls", help="the profile's order (ncalls, tottime, cumtime)")
    options = parser.parse_args()
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
