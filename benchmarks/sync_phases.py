"""Where a lone SYNC_FLUSH send's time goes in the broker, from system-call tracepoints.

Usage::

    python benchmarks/sync_phases.py [--seconds 4] [--sync-completion native|uring|thread]

Starts a SYNC_FLUSH rocketpy (``benchmarks/broker.py``'s process, free loopback ports, a temporary
store), sends 1 KiB messages one at a time with ``Producer.send`` (as ``peers.py``'s ``send/1
sync`` shape), and for ``--seconds`` of it traces the broker with ``perf record`` on the
tracepoints of ``recvfrom``, ``sendto``, ``epoll_wait``, ``fdatasync`` (the ``native`` and
``thread`` syncs) and io_uring's ``io_uring_queue_async_work`` / ``io_uring_complete`` (``uring``).
Then, per put (request read to response written), the medians of:

- ``request → sync``: the broker's Python before the sync starts (decode, processor, append, the
  hand-off; with ``uring``, until the fsync is queued to the io-wq worker); where the reactor submits
  before it goes back to ``epoll_wait`` and the sync starts after, its parts: request → submitted
  (the reactor's futex wake of the sync thread, or its ``io_uring_enter``), submitted → reactor
  asleep, reactor asleep → sync (native only; how many puts that is is printed),
- ``sync``: the ``fdatasync`` (``uring``: queued to completed, the worker's wake-up included),
- ``sync → response (sync thread)``: the answer written by the sync thread itself, right after its
  ``fdatasync`` (the lean reactor asleep; rocketpy/_speedups_syncwrite.h), for the puts it wrote;
- ``sync → reactor awake``: the completion's way back (eventfd, the reactor's wake-up),
- ``reactor awake → response``: the broker's Python after the sync (the put's completion, the
  response),
- ``response → next request``: the client's round trip (its Python, two wake-ups),
- ``request → response − sync``: the broker's own part of the round trip (the sync left out), and
  ``request → next request − sync`` the whole round trip without the sync,

with the share of puts whose sync ran on the reactor's CPU (the sync then starts only once the
reactor has gone back to ``epoll_wait``). Tracing adds a few µs per traced call. Needs ``perf``
and the right to trace (root, or ``kernel.perf_event_paranoid`` ≤ -1): says so and exits otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.threads import deferToThread  # noqa: E402

import broker as broker_bench  # noqa: E402
import client as client_bench  # noqa: E402
from rocketpy.client import Message, Producer  # noqa: E402

EVENTS = ("syscalls:sys_enter_recvfrom", "syscalls:sys_enter_sendto", "syscalls:sys_enter_epoll_wait",
          "syscalls:sys_enter_futex", "syscalls:sys_enter_io_uring_enter",
          "syscalls:sys_exit_epoll_wait", "syscalls:sys_enter_fdatasync", "syscalls:sys_exit_fdatasync",
          "io_uring:io_uring_queue_async_work", "io_uring:io_uring_complete")
PHASES = ("request → sync", "sync", "sync → reactor awake", "reactor awake → response", "response → next request")
#: the answer written by the sync thread itself (rocketpy/_speedups_syncwrite.h), instead of the two phases after the sync
THREAD = "sync → response (sync thread)"
#: the broker's own part of a put's round trip, whoever wrote the answer: request → response without the sync;
#: and the whole round trip (this request to the next one) without the sync
OWN = "request → response − sync"
TRIP = "request → next request − sync"
#: the first phase's parts, where the reactor's submission is seen (a futex wake: native; io_uring_enter: uring)
PARTS = ("request → submitted", "submitted → reactor asleep", "reactor asleep → sync")
_SUBMIT = ("sys_enter_futex", "sys_enter_io_uring_enter")
_LINE = re.compile(r"\s*\S+\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+\w+:(\w+):")
_SYNC_START = ("sys_enter_fdatasync", "io_uring_queue_async_work")
_SYNC_END = ("sys_exit_fdatasync", "io_uring_complete")


def cannot_trace() -> str | None:
    """Why ``perf`` cannot trace here, or None."""
    if shutil.which("perf") is None:
        return "perf is not installed"
    probe = subprocess.run(["perf", "record", "-q", "-o", os.devnull, "-e", EVENTS[0], "--", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return f"perf cannot record tracepoints here: {probe.stderr.strip()[:200]}"
    return None


def phases(script: str) -> tuple[dict[str, list[float]], float]:
    """Each put's phases (µs) from ``perf script`` output, and the share whose sync ran on the reactor's CPU."""
    events = []
    for line in script.splitlines():
        m = _LINE.match(line)
        if m:
            events.append((float(m[3]) * 1e6, int(m[1]), int(m[2]), m[4]))
    readers = Counter(tid for _, tid, _, name in events if name == "sys_enter_recvfrom")
    out: dict[str, list[float]] = {name: [] for name in PHASES + PARTS + (THREAD, OWN, TRIP)}
    if not readers:
        return out, 0.0
    reactor = readers.most_common(1)[0][0]
    put: dict[str, Any] | None = None
    last_response: float | None = None
    last: tuple[float, float] | None = None  # the last answered put's request time and sync duration
    same_cpu = 0
    for when, tid, cpu, name in events:
        if name == "sys_enter_recvfrom" and tid == reactor:
            if last_response is not None and put is None:
                out["response → next request"].append(when - last_response)
                if last is not None:
                    out[TRIP].append(when - last[0] - last[1])
            put, last_response = {"request": when, "cpu": cpu}, None
        elif put is None:
            continue
        elif name in _SUBMIT and tid == reactor and "submitted" not in put and "sync" not in put:
            put["submitted"] = when
        elif name == "sys_enter_epoll_wait" and tid == reactor and "asleep" not in put:
            put["asleep"] = when
        elif name in _SYNC_START and "sync" not in put:
            put["sync"], put["sync_cpu"] = when, cpu
        elif name in _SYNC_END and "sync" in put and "synced" not in put:
            put["synced"] = when
        elif name == "sys_exit_epoll_wait" and tid == reactor and "synced" in put and "awake" not in put:
            put["awake"] = when
        elif name == "sys_enter_sendto" and ((tid == reactor and "awake" in put) or (tid != reactor and "synced" in put)):
            if tid == reactor:
                for phase, start, end in zip(PHASES, ("request", "sync", "synced", "awake"),
                                             ("sync", "synced", "awake", None)):
                    out[phase].append((put[end] if end else when) - put[start])
            else:  # the sync thread's own write
                out[PHASES[0]].append(put["sync"] - put["request"])
                out[PHASES[1]].append(put["synced"] - put["sync"])
                out[THREAD].append(when - put["synced"])
            out[OWN].append(when - put["request"] - (put["synced"] - put["sync"]))
            last = (put["request"], put["synced"] - put["sync"])
            same_cpu += put["sync_cpu"] == put["cpu"]
            if put.get("submitted", when) <= put.get("asleep", 0) <= put["sync"]:
                for part, start, end in zip(PARTS, ("request", "submitted", "asleep"), ("submitted", "asleep", "sync")):
                    out[part].append(put[end] - put[start])
            put, last_response = None, when
    done = len(out["sync"])
    return out, same_cpu / done if done else 0.0


async def run(reactor: Any, options: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-phases-")
    process, _ = broker_bench.start_rocketpy(workdir, "SYNC_FLUSH",
                                             extra=("--sync-flush-completion", options.sync_completion))
    producer = Producer("PID_PHASES", f"127.0.0.1:{client_bench._namesrv_port(process)}", reactor)
    data = os.path.join(workdir, "perf.data")
    try:
        await producer.start()
        message = Message("PhasesTopic", b"x" * 1024, 0, {"KEYS": "k"})
        await producer.send(message)
        warm = time.perf_counter() + 1.0
        while time.perf_counter() < warm:  # past the topic's creation and the first files' zeros
            await producer.send(message)
        recorder = deferToThread(subprocess.run, [
            "perf", "record", "-q", "-m", "1024", "-o", data, "-e", ",".join(EVENTS), "-p", str(process.pid),
            "--", "sleep", str(options.seconds)], capture_output=True)
        while not recorder.called:
            await producer.send(message)
        await recorder
        script = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True).stdout
        found, same_cpu = phases(script)
        count = len(found["sync"])
        print(f"{options.sync_completion}: {count} puts traced in {options.seconds:g} s; "
              f"sync on the reactor's CPU for {same_cpu:.0%}, started after the reactor went back to epoll_wait "
              f"for {len(found[PARTS[0]]) / max(count, 1):.0%}; answered by the sync thread "
              f"{len(found[THREAD]) / max(count, 1):.0%}; load {os.getloadavg()[0]:.1f}")
        for phase in PHASES[:1] + PARTS + PHASES[1:2] + (THREAD,) + PHASES[2:] + (OWN, TRIP):
            values = found[phase]
            if values:
                phase = f"  {phase}" if phase in PARTS else phase
                low, _, high = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
                print(f"  {phase:28s} p50 {statistics.median(values):7.1f} µs  (p25 {low:.1f}, p75 {high:.1f})")
    finally:
        await producer.shutdown()
        process.terminate()
        process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0, help="how long to trace")
    parser.add_argument("--sync-completion", default="native", choices=("native", "uring", "thread"),
                        help="the broker's --sync-flush-completion")
    options = parser.parse_args()
    why = cannot_trace()
    if why is not None:
        raise SystemExit(f"sync_phases: {why}")
    task.react(lambda reactor: Deferred.fromCoroutine(run(reactor, options)))


if __name__ == "__main__":
    main()
