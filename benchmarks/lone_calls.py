"""Python function calls per lone send on the broker's reactor thread, by area.

Usage::

    python benchmarks/lone_calls.py [--messages 2000] [--flush ASYNC_FLUSH] [--top 40] [--reactor rocketpy]

Starts ``python -m twisted rocketpy`` (as ``benchmarks/broker.py`` does) through this file, which
lets the broker's main (reactor) thread be profiled with ``cProfile`` from one signal to the next;
sends ``--messages`` 1 KiB messages with ``Producer.send`` awaited one at a time (as the ``send/1``
shape of ``benchmarks/peers.py``) inside that window, and prints the calls per send: Python
functions and C builtins, grouped by where they live (the store, the broker, remoting, Twisted,
the rest), then the ``--top`` functions by calls. Counts are deterministic (no sampling): compare
two trees by running this from each tree's root.

``--service-time`` instead leaves the broker unprofiled and records, with ``perf record`` (root), the
broker's ``recvfrom`` returns and ``sendto`` calls during the sends: the time from a request's read to
its answer's ``sendto`` (the broker's critical path of a lone send, kernel wake-ups excluded), as
percentiles. Timestamps are the kernel's (µs resolution); alternate two trees in the same minutes.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
AS_BROKER = "--as-broker"
STATS = "ROCKETPY_LONE_CALLS_STATS"


def profiled_broker() -> None:
    """The broker, ``python -m twisted ...``, profiled from SIGUSR1 until SIGUSR2 (then dumped)."""
    import runpy

    profile = cProfile.Profile()

    def start(_signum: int, _frame: Any) -> None:
        profile.enable()

    def stop(_signum: int, _frame: Any) -> None:
        profile.disable()
        profile.dump_stats(os.environ[STATS])

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["twisted"] + sys.argv[2:]
    runpy.run_module("twisted", run_name="__main__")


def area(filename: str) -> str:
    """Where a profiled function lives."""
    if filename == "~":
        return "builtins"
    path = filename.replace(os.sep, "/")
    for part in ("rocketpy/store/", "rocketpy/broker/", "rocketpy/remoting/", "twisted/"):
        if part in path:
            return part.rstrip("/")
    return "rocketpy (other)" if "rocketpy/" in path else "other"


def report(path: str, sends: int, top: int) -> None:
    stats = pstats.Stats(path)
    by_area: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    for (filename, line, name), (_primitive, calls, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        by_area[area(filename)] += calls
        short = name if filename == "~" else f"{os.path.relpath(filename)}:{line}({name})"
        functions[short] += calls
    python = sum(calls for where, calls in by_area.items() if where != "builtins")
    print(f"{sends} lone sends: {python / sends:.1f} Python function calls per send on the reactor thread, "
          f"{sum(by_area.values()) / sends:.1f} with builtins")
    for where, calls in by_area.most_common():
        print(f"  {where:20} {calls / sends:6.1f}")
    print(f"the {top} most called, per send:")
    for name, calls in functions.most_common(top):
        print(f"  {calls / sends:6.2f}  {name}")


def report_service_time(traced: str) -> None:
    """Percentiles of a thread's ``recvfrom`` return to its next ``sendto`` in a ``perf record`` file."""
    script = subprocess.run(["perf", "script", "-i", traced, "-F", "tid,time,event"], capture_output=True,
                            text=True, check=True).stdout
    read_at: dict[str, float] = {}
    spans: list[float] = []
    for line in script.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        tid, when, event = fields[0], float(fields[1].rstrip(":")), fields[2]
        if "exit_recvfrom" in event:
            read_at[tid] = when
        elif "enter_sendto" in event and tid in read_at:
            spans.append((when - read_at.pop(tid)) * 1e6)
    if not spans:
        print("no recvfrom -> sendto pair recorded (perf needs root and syscall tracepoints)")
        return
    spans.sort()
    at = [spans[int(len(spans) * q)] for q in (0.25, 0.5, 0.75, 0.9)]
    print(f"{len(spans)} requests, read -> answer sendto on the broker: p25 {at[0]:.0f} µs, p50 {at[1]:.0f} µs, "
          f"p75 {at[2]:.0f} µs, p90 {at[3]:.0f} µs")


async def drive(reactor: Any, options: argparse.Namespace) -> None:
    import broker as broker_bench  # benchmarks/broker.py
    from twisted.internet.defer import Deferred

    from rocketpy.client import Message, Producer

    workdir = tempfile.mkdtemp(prefix="rocketpy-calls-")
    real_popen = subprocess.Popen

    def popen(args: list[str], *rest: Any, **kwargs: Any) -> Any:
        if args[1:3] == ["-m", "twisted"]:  # the broker: through this file
            args = [args[0], os.path.abspath(__file__), AS_BROKER] + args[3:]
        return real_popen(args, *rest, **kwargs)

    stats = os.path.join(workdir, "broker.prof")
    os.environ[STATS] = stats
    setattr(broker_bench.subprocess, "Popen", popen)  # the broker started through this file
    process, port = broker_bench.start_rocketpy(workdir, options.flush)
    setattr(broker_bench.subprocess, "Popen", real_popen)
    sys.path.insert(0, HERE)
    import client as client_bench  # benchmarks/client.py

    producer = Producer("PID_CALLS", f"127.0.0.1:{client_bench._namesrv_port(process)}", reactor)
    body = b"x" * 1024

    def message() -> Message:
        return Message("BenchCalls", body, 0, {"KEYS": "key", "TAGS": "TagA"})

    try:
        await producer.start()
        for _ in range(200):  # the topic, the route, warm caches
            await producer.send(message())
        if options.service_time:
            traced = os.path.join(workdir, "syscalls.perf")
            perf = real_popen(["perf", "record", "-q", "-o", traced, "-e", "syscalls:sys_exit_recvfrom",
                               "-e", "syscalls:sys_enter_sendto", "-p", str(process.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pause: Deferred[None] = Deferred()
            reactor.callLater(1.0, pause.callback, None)  # perf attached
            await pause
            for _ in range(options.messages):
                await producer.send(message())
            perf.send_signal(signal.SIGINT)
            perf.wait()
            report_service_time(traced)
            return
        process.send_signal(signal.SIGUSR1)
        pause = Deferred()
        reactor.callLater(0.5, pause.callback, None)  # the broker handles the signal while idle
        await pause
        for _ in range(options.messages):
            await producer.send(message())
        process.send_signal(signal.SIGUSR2)
        for _ in range(100):
            if os.path.exists(stats):
                break
            pause = Deferred()
            reactor.callLater(0.1, pause.callback, None)
            await pause
        report(stats, options.messages, options.top)
    finally:
        await producer.shutdown()
        process.terminate()
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)  # the broker's store: 1.5 GB preallocated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--flush", default="ASYNC_FLUSH")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--service-time", action="store_true",
                        help="the broker's read -> answer sendto time per request (perf), not its calls")
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.dirname(HERE))
    import broker as broker_bench

    broker_bench.add_reactor_option(parser)
    options = parser.parse_args()
    broker_bench.use_reactor(options.reactor)
    from twisted.internet import task
    from twisted.internet.defer import Deferred

    task.react(lambda reactor: Deferred.fromCoroutine(drive(reactor, options)))


if __name__ == "__main__":
    if sys.argv[1:2] == [AS_BROKER]:
        sys.path.insert(0, os.path.dirname(HERE))
        profiled_broker()
    else:
        main()
