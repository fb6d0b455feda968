"""The reactor's turn alone: CPU per round trip of a raw 1 KiB echo, one request at a time.

Usage::

    python benchmarks/reactor_turn.py [--rounds 5] [--seconds 2] [--reactor rocketpy|epoll] [--profile]

Starts ``python benchmarks/reactor_turn.py --serve`` (an echo server on the same reactor), then
sends 1 KiB and waits for it to come back, over and over. Both ends write with
``rocketpy.remoting.writenow.write_now`` (``socket.send`` at once, as rocketpy's channels do), so a
round trip is one reactor turn on each side (``epoll_wait``, ``recv``, ``dataReceived``, ``send``)
and nothing else: what the broker's and the client's lone requests pay below their own code. Prints
round trips/s, and the CPU µs per round trip (user + system) of this process and of the server's.
With ``--profile``, the server profiles its reactor thread for one more round and reports its
Python function calls per round trip (Python-level, and with builtins).

With ``--local`` both ends run in this process on one reactor: the process never sleeps, so the CPU
per round trip (two turns, two ``recv``, two ``send``) has no wake-ups in it and hardly moves with
the machine's load; it prints the best of the rounds. ``--local --count N`` makes exactly N round
trips and nothing else, for an instruction count (two counts' difference, divided by theirs)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python3.11 benchmarks/reactor_turn.py --local --count 2000     # and 7000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import protocol, stdio, task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol  # noqa: E402

import broker as broker_bench  # noqa: E402  (benchmarks/broker.py: --reactor, process_cpu)
from rocketpy.remoting.writenow import write_now  # noqa: E402

BODY = b"x" * 1024


class Echo(protocol.Protocol):
    """Sends every read straight back."""

    def dataReceived(self, data: bytes) -> None:
        write_now(self.transport, data)  # type: ignore[arg-type]


class Control(protocol.Protocol):
    """The server's stdin: ``profile`` / ``stop`` lines toggle cProfile; EOF stops the server."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.profile = cProfile.Profile()

    def dataReceived(self, data: bytes) -> None:
        for line in data.decode().split():
            if line == "profile":
                self.profile.enable()
            elif line == "stop":
                self.profile.disable()
                self.profile.dump_stats(os.environ["TURN_PROFILE"])
                print("{}", flush=True)

    def connectionLost(self, reason: Any = None) -> None:
        self.reactor.stop()


async def serve(reactor: Any) -> None:
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(protocol.Factory.forProtocol(Echo))
    print(json.dumps({"port": port.getHost().port}), flush=True)
    stdio.StandardIO(Control(reactor), reactor=reactor)
    await Deferred()


class Pinger(protocol.Protocol):
    """Sends BODY, waits for all of it to come back, sends again until the deadline (or ``count`` round trips)."""

    done: Deferred[int]

    def run(self, seconds: float, count: int = 0) -> Deferred[int]:
        self.done, self.count, self.pending, self.limit = Deferred(), 0, 0, count
        self.deadline = time.perf_counter() + seconds
        self._send()
        return self.done

    def _send(self) -> None:
        self.pending = len(BODY)
        write_now(self.transport, BODY)  # type: ignore[arg-type]

    def dataReceived(self, data: bytes) -> None:
        self.pending -= len(data)
        if self.pending:
            return
        self.count += 1
        if self.count != self.limit and (self.limit or time.perf_counter() < self.deadline):
            self._send()
        else:
            self.done.callback(self.count)


async def bench_local(reactor: Any, options: argparse.Namespace) -> None:
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(protocol.Factory.forProtocol(Echo))
    pinger = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port.getHost().port), Pinger())
    if options.count:
        await pinger.run(0, options.count)
        pinger.transport.loseConnection()  # type: ignore[union-attr]
        await port.stopListening()
        return
    await pinger.run(0.3)  # warm up
    cpu = []
    for _ in range(options.rounds):
        began = time.process_time()
        count = await pinger.run(options.seconds)
        cpu.append((time.process_time() - began) / count * 1e6)
    print(f"{options.reactor} reactor, both ends in one process, best of {options.rounds} x {options.seconds} s: "
          f"CPU per round trip (two turns) {min(cpu):.2f} µs (median {statistics.median(cpu):.2f})")
    pinger.transport.loseConnection()  # type: ignore[union-attr]
    await port.stopListening()


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    profile_path = os.path.abspath(f"reactor_turn.{os.getpid()}.prof")
    server = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve", "--reactor", options.reactor],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, TURN_PROFILE=profile_path))
    assert server.stdin is not None and server.stdout is not None
    try:
        port = json.loads(server.stdout.readline())["port"]
        pinger = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), Pinger())
        await pinger.run(0.3)  # warm up
        rates, client_cpu, server_cpu = [], [], []
        for round_number in range(options.rounds):
            began, client, served = time.perf_counter(), time.process_time(), broker_bench.process_cpu(server.pid)
            count = await pinger.run(options.seconds)
            rates.append(count / (time.perf_counter() - began))
            client_cpu.append((time.process_time() - client) / count * 1e6)
            server_cpu.append(((broker_bench.process_cpu(server.pid) or 0.0) - (served or 0.0)) / count * 1e6)
            print(f"round {round_number + 1}: {rates[-1]:,.0f} round trips/s, CPU client {client_cpu[-1]:.1f} + "
                  f"server {server_cpu[-1]:.1f} µs", flush=True)
        print(f"{options.reactor} reactor, medians of {options.rounds} x {options.seconds} s: "
              f"{statistics.median(rates):,.0f} round trips/s, CPU per round trip client "
              f"{statistics.median(client_cpu):.1f} + server {statistics.median(server_cpu):.1f} µs")
        if options.profile:
            server.stdin.write(b"profile\n")
            server.stdin.flush()
            count = await pinger.run(options.seconds)
            server.stdin.write(b"stop\n")
            server.stdin.flush()
            server.stdout.readline()
            stats: Any = pstats.Stats(profile_path).stats  # type: ignore[attr-defined]
            os.unlink(profile_path)
            python = sum(row[1] for key, row in stats.items() if key[0] != "~")
            print(f"server: {python / count:.2f} Python function calls per round trip "
                  f"({sum(row[1] for row in stats.values()) / count:.2f} with builtins)")
            for (path, line, name), row in sorted(stats.items(), key=lambda item: -item[1][1])[:12]:
                where = "builtin" if path == "~" else f"{os.path.basename(path)}:{line}"
                print(f"  {row[1] / count:6.2f}  {where} {name}")
        pinger.transport.loseConnection()  # type: ignore[union-attr]
    finally:
        server.stdin.close()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--serve", action="store_true", help="run the echo server (used by the benchmark)")
    parser.add_argument("--profile", action="store_true", help="count the server's Python calls per round trip")
    parser.add_argument("--local", action="store_true", help="both ends in this process (no wake-ups)")
    parser.add_argument("--count", type=int, default=0, help="with --local: exactly this many round trips, no report")
    broker_bench.add_reactor_option(parser)
    options = parser.parse_args()
    broker_bench.use_reactor(options.reactor)
    if options.serve:
        task.react(lambda reactor: Deferred.fromCoroutine(serve(reactor)))
    elif options.local:
        task.react(lambda reactor: Deferred.fromCoroutine(bench_local(reactor, options)))
    else:
        task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
