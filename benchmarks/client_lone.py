"""The client's side of one send at a time: CPU, p50 and Python calls per ``Producer.send``.

Usage::

    python benchmarks/client_lone.py [--rounds 3] [--seconds 2] [--flush async] [--profile] [--path]
                                     [--namesrv HOST:PORT] [--stub]

Starts ``python -m twisted rocketpy`` (as ``benchmarks/broker.py`` does; or uses the name server
given with ``--namesrv``, so that two source trees can be measured in turn against one broker),
then awaits ``Producer.send`` of 1 KiB bodies one at a time, as ``benchmarks/peers.py``'s
``send/1`` shape does. Per round: sends/s, the p50 latency, and this process's CPU µs per send
(user + system, all threads). With ``--profile``, one more round under cProfile counts the
Python function calls per send (Python-level, and with builtins) and lists the most frequent,
so a change to the client's per-request path can be checked call by call. With ``--path``, one more
round times the client's share of the round trip: from the channel's ``dataReceived`` getting an
answer's bytes to the ``socket.send`` of the next request (the caller resumed, its next send made
and written), median and p90 (both wrapped in Python for that round: ~1 µs more than unwrapped).

With ``--stub`` no broker and no socket: the producer's own RemotingClient sends over a channel
on an in-memory transport, and each request is answered at once with a prepared response frame
(read by the channel as a socket's bytes would be). It prints the client's CPU µs per send (the
median of 5 runs of 20,000 sends): the Python of the producer, the remoting layer and the
Deferred the caller gets, without the reactor, the kernel and the wake-ups, and steady on a busy
machine.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

import broker as broker_bench  # noqa: E402  (benchmarks/broker.py: the rocketpy process)
import client as client_bench  # noqa: E402  (benchmarks/client.py: its name server port)

from rocketpy.client import Message, Producer, SendResult  # noqa: E402
from rocketpy.remoting.protocol import RemotingProtocol  # noqa: E402

PROPERTIES = {"KEYS": "k", "TAGS": "TagA"}


async def one_round(producer: Producer, seconds: float, profile: cProfile.Profile | None = None) -> tuple[int, float]:
    """Sends one at a time for ``seconds``: how many, and the p50 latency in ms."""
    latencies: list[float] = []
    end = time.perf_counter() + seconds
    if profile is not None:
        profile.enable()
    while (began := time.perf_counter()) < end:
        await producer.send(Message(broker_bench.TOPIC, broker_bench.BODY, 0, dict(PROPERTIES)))
        latencies.append(time.perf_counter() - began)
    if profile is not None:
        profile.disable()
    return len(latencies), statistics.median(latencies) * 1e3


async def timed_path(producer: Producer, seconds: float) -> list[float]:
    """One round with ``RemotingProtocol.dataReceived`` and ``socket.socket.send`` wrapped: the µs from a
    read's start to the next send of a request (see ``--path``)."""
    entered: list[float] = []
    gaps: list[float] = []
    read, send = RemotingProtocol.dataReceived, socket.socket.send

    def timed_read(channel: RemotingProtocol, data: bytes) -> None:
        entered.append(time.perf_counter())
        read(channel, data)

    def timed_send(sock: socket.socket, data: Any, *flags: int) -> int:
        if entered:
            gaps.append((time.perf_counter() - entered.pop()) * 1e6)
            entered.clear()
        return send(sock, data, *flags)

    RemotingProtocol.dataReceived = timed_read  # type: ignore[method-assign,assignment]
    socket.socket.send = timed_send  # type: ignore[method-assign,assignment]
    try:
        await one_round(producer, seconds)
    finally:
        RemotingProtocol.dataReceived = read  # type: ignore[method-assign]
        socket.socket.send = send  # type: ignore[method-assign]
    return sorted(gaps)


def report_calls(profile: cProfile.Profile, sends: int, lines: int) -> None:
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    python = sum(row[1] for key, row in stats.items() if key[0] != "~")
    print(f"Python function calls per send: {python / sends:.1f} ({sum(row[1] for row in stats.values()) / sends:.1f}"
          " with builtins)")
    for (path, line, name), row in sorted(stats.items(), key=lambda item: -item[1][1])[:lines]:
        where = "builtin" if path == "~" else f"{os.path.basename(path)}:{line}"
        print(f"  {row[1] / sends:6.2f}  {where} {name}")


def cpu_per_send_on_stub(sends: int = 20_000, runs: int = 5) -> float:
    """See the module docstring (``--stub``): the median CPU µs per send of ``runs`` runs."""
    clock = task.Clock()
    stub = client_bench.ChannelStub(clock, sends * (runs + 1))
    producer = client_bench.stub_producer(stub.remoting, clock, queues=1)  # every answer names its queue
    results: list[Any] = []

    def run() -> float:
        start = time.process_time()
        for _ in range(sends):
            d = producer.send(Message(client_bench.TOPIC, broker_bench.BODY, 0, dict(PROPERTIES)))
            stub.answer()
            d.addBoth(results.append)
        return (time.process_time() - start) / sends * 1e6

    run()
    if type(results[-1]) is not SendResult:
        raise SystemExit(f"the stub's sends failed: {results[-1]}")
    return statistics.median(run() for _ in range(runs))


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    process = workdir = None
    namesrv = options.namesrv
    if namesrv is None:
        workdir = tempfile.mkdtemp(prefix="rocketpy-client-lone-")
        process, _ = broker_bench.start_rocketpy(workdir, f"{options.flush.upper()}_FLUSH")
        namesrv = f"127.0.0.1:{client_bench._namesrv_port(process)}"
    producer = Producer("PID_CLIENT_LONE", namesrv, reactor)
    try:
        await producer.start()
        await one_round(producer, 0.5)  # warm up; the first send creates the topic
        for number in range(options.rounds):
            cpu = time.process_time()
            sends, p50 = await one_round(producer, options.seconds)
            print(f"round {number + 1}: {sends / options.seconds:,.0f} sends/s, p50 {p50:.3f} ms, "
                  f"client CPU {(time.process_time() - cpu) / sends * 1e6:.1f} µs per send", flush=True)
        if options.path:
            gaps = await timed_path(producer, options.seconds)
            print(f"answer read -> next request sent: median {statistics.median(gaps):.1f} µs, "
                  f"p90 {gaps[int(len(gaps) * 0.9)]:.1f} µs ({len(gaps)} sends)", flush=True)
        if options.profile:
            profile = cProfile.Profile()
            sends, _ = await one_round(producer, options.seconds, profile)
            report_calls(profile, sends, options.lines)
    finally:
        await producer.shutdown()
        if process is not None:
            process.terminate()
            process.wait(30)
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--flush", default="async", help="async or sync (the broker started)")
    parser.add_argument("--namesrv", help="use this name server (and its broker) instead of starting one")
    parser.add_argument("--profile", action="store_true", help="count the Python calls per send")
    parser.add_argument("--path", action="store_true", help="time an answer's read to the next request's send")
    parser.add_argument("--lines", type=int, default=40, help="functions listed with --profile")
    parser.add_argument("--stub", action="store_true", help="no broker, no socket: see above")
    broker_bench.add_reactor_option(parser)
    options = parser.parse_args()
    if options.stub:
        print(f"client CPU {cpu_per_send_on_stub():.2f} µs per send on the stub")
        return
    broker_bench.use_reactor(options.reactor)
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
