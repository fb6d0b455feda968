"""The blocking facade's own cost: ``rocketpy.blocking.Producer`` beside the Deferred producer it wraps.

Usage::

    python benchmarks/blocking.py [--rounds 3] [--seconds 2]

Starts ``python -m twisted rocketpy`` (free loopback ports, a temporary store, ASYNC_FLUSH) in
another process, then, 1 KiB bodies, round by round in one process:

- ``deferred send/1``: the Deferred ``Producer.send``, one at a time, driven on the reactor thread;
- ``blocking send/1``: ``rocketpy.blocking.Producer.send`` from the main thread, one at a time;
- ``deferred async/1000`` and ``blocking async/1000``: ``send_async`` with 1000 outstanding
  (Deferreds on the reactor thread; Futures from the main thread).

Prints rates, p50 latency of one-at-a-time sends and CPU µs per send of this process (all threads);
the difference per send between a blocking run and its Deferred run is the facade's cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet.defer import Deferred  # noqa: E402

import broker as broker_bench  # noqa: E402
import client as client_bench  # noqa: E402
from rocketpy import blocking  # noqa: E402
from rocketpy.client import Message, Producer  # noqa: E402

BODY, TOPIC = broker_bench.BODY, broker_bench.TOPIC


def message() -> Message:
    return Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"})


def blocking_one_at_a_time(producer: blocking.Producer, seconds: float) -> tuple[int, list[float]]:
    latencies = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        producer.send(message())
        latencies.append(time.perf_counter() - began)
    return len(latencies), latencies


def blocking_in_flight(producer: blocking.Producer, in_flight: int, seconds: float) -> tuple[int, list[float]]:
    window = threading.Semaphore(in_flight)
    done = [0]
    deadline = time.perf_counter() + seconds

    def finished(future: Future[Any]) -> None:
        done[0] += 1
        window.release()

    sent = 0
    while time.perf_counter() < deadline:
        window.acquire()
        producer.send_async(message()).add_done_callback(finished)
        sent += 1
    for _ in range(in_flight):
        window.acquire()
    return sent, []


def deferred_one_at_a_time(producer: Producer, seconds: float) -> Deferred[tuple[int, list[float]]]:
    async def loop() -> tuple[int, list[float]]:
        latencies = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            await producer.send(message())
            latencies.append(time.perf_counter() - began)
        return len(latencies), latencies

    return Deferred.fromCoroutine(loop())


def deferred_in_flight(producer: Producer, in_flight: int, seconds: float) -> Deferred[tuple[int, list[float]]]:
    errors = broker_bench.Errors()
    loop_began = time.perf_counter()
    return client_bench.client_sends(producer, "send_async", in_flight, seconds, errors).addCallback(
        lambda rate: (int(rate * (time.perf_counter() - loop_began)), [])
    )


def measure(run: Callable[[], tuple[int, list[float]]]) -> tuple[float, float | None, float]:
    """Rate, p50 latency (ms, when measured) and CPU µs per send of this process."""
    began, cpu = time.perf_counter(), time.process_time()
    count, latencies = run()
    elapsed, used = time.perf_counter() - began, time.process_time() - cpu
    p50 = statistics.median(latencies) * 1000 if latencies else None
    return count / elapsed, p50, used / max(count, 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="rocketpy-blocking-bench-")
    process, _ = broker_bench.start_rocketpy(workdir, "ASYNC_FLUSH")
    namesrv = f"127.0.0.1:{client_bench._namesrv_port(process)}"
    runner = blocking.reactor_thread()
    facade = blocking.Producer("PID_BLOCKING_BENCH", namesrv).start()
    deferred = runner.call(lambda reactor: Producer("PID_DEFERRED_BENCH", namesrv, reactor), runner.reactor)
    runner.call(deferred.start)
    seconds = options.seconds
    runs: dict[str, Callable[[], tuple[int, list[float]]]] = {
        "deferred send/1": lambda: runner.call(deferred_one_at_a_time, deferred, seconds),
        "blocking send/1": lambda: blocking_one_at_a_time(facade, seconds),
        "deferred async/1000": lambda: runner.call(deferred_in_flight, deferred, 1000, seconds),
        "blocking async/1000": lambda: blocking_in_flight(facade, 1000, seconds),
    }
    results: dict[str, list[tuple[float, float | None, float]]] = {}
    try:
        facade.send(message())  # creates the topic
        for number in range(options.rounds):
            for name, run in runs.items():
                results.setdefault(name, []).append(measure(run))
            print(f"round {number + 1}: " + ", ".join(f"{n}={r[-1][0]:,.0f}/s" for n, r in results.items()),
                  flush=True)
        print(f"\nmedians of {options.rounds} rounds x {seconds} s, 1 KiB bodies, ASYNC_FLUSH, "
              f"python {sys.version.split()[0]}; CPU per send of this process (all threads)")
        medians = {}
        for name, figures in results.items():
            rate = statistics.median(f[0] for f in figures)
            p50s = [f[1] for f in figures if f[1] is not None]
            cpu = statistics.median(f[2] for f in figures)
            medians[name] = cpu
            p50 = f"  p50 {statistics.median(p50s):.3f} ms" if p50s else ""
            print(f"{name:<22}{rate:>10,.0f} /s  cpu {cpu:6.1f} us{p50}")
        for shape in ("send/1", "async/1000"):
            extra = medians[f"blocking {shape}"] - medians[f"deferred {shape}"]
            print(f"facade cost, {shape}: {extra:+.1f} us CPU per send")
    finally:
        runner.call(deferred.shutdown)
        facade.shutdown()
        process.terminate()
        process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
