"""How the broker's puts reach the store while ``benchmarks/client.py`` runs: appended inline on the
reactor thread, or queued for an append hop to the store's writer thread, and why they queued;
and where each thread of the broker and of the client spends its time: on a CPU, waiting for
one (other processes have them), or asleep (waiting for input, the GIL or work) (doc/store.md,
"The put path"; doc/benchmarks.md, "Eighth pass").

Usage::

    python benchmarks/hops.py [client.py's options, e.g. --rounds 2 --seconds 4 --only 'client batch32/32']

It runs ``benchmarks/client.py`` with its broker process started through this file, which wraps
the broker's ``StoreService`` with counters and prints them every 2 s (per 2 s: puts appended
inline and through hops, hops, the seconds spent in each, and for the puts that queued: a hop was
running, the writer pool had other work, or the store refused the inline append, and of those how
many because the commit log's pages ahead were not faulted in yet), and every 2 s the share of
the wall time each thread of both processes spent on a CPU, waiting for a CPU and asleep
(Linux ``/proc/self/task/<tid>/schedstat``), with its user and system CPU.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
AS_BROKER = "--as-broker"
REPORT = "ROCKETPY_HOPS_REPORT"


def _thread_times() -> dict[str, tuple[int, int, int, int]]:
    """Per live thread of this process (by name): ns on a CPU, ns waiting for one, user and
    system clock ticks."""
    out = {}
    for thread in threading.enumerate():
        task = f"/proc/self/task/{thread.native_id}"
        try:
            with open(f"{task}/schedstat") as f:
                on_cpu, waiting = (int(v) for v in f.read().split()[:2])
            with open(f"{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[thread.name] = (on_cpu, waiting, int(fields[11]), int(fields[12]))
    return out


def sample_threads(process: str, out: Any, stop: threading.Event) -> None:
    """Every 2 s, print each busy thread's share of the wall time: on a CPU, waiting for one, asleep."""
    ticks = os.sysconf("SC_CLK_TCK")
    before, start = _thread_times(), time.monotonic()
    while not stop.wait(2):
        after, now = _thread_times(), time.monotonic()
        wall = now - start
        for name, (on_cpu, waiting, user, system) in after.items():
            was = before.get(name, (0, 0, 0, 0))
            share = (on_cpu - was[0]) / 1e9 / wall, (waiting - was[1]) / 1e9 / wall
            if share[0] + share[1] > 0.02:
                print(f"{process} {name}: on a CPU {share[0]:.0%}, waiting for a CPU {share[1]:.0%}, asleep "
                      f"{1 - sum(share):.0%} (user {(user - was[2]) / ticks / wall:.0%}, system "
                      f"{(system - was[3]) / ticks / wall:.0%} of a core)", file=out, flush=True)
        before, start = after, now


def wrapped_broker() -> None:
    """Run ``twisted rocketpy`` (argv after the flag) with the store service counted."""
    from rocketpy.store import service

    counts: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    store_service = service.StoreService
    append_inline, enqueue, append_and_flush = (store_service._append_inline, store_service._enqueue,
                                                service.append_and_flush)

    def counted_inline(self: Any, puts: list[Any]) -> None:
        counts["inline puts"] += sum(len(put.puts) for put in puts)
        start = time.perf_counter()
        append_inline(self, puts)
        seconds["inline"] += time.perf_counter() - start

    def counted_hop(store: Any, puts: list[Any], target: Any) -> Any:
        start = time.perf_counter()
        outcome = append_and_flush(store, puts, target)
        counts["hops"] += 1
        counts["hop puts"] += sum(len(put.puts) for put in puts)
        seconds["hops"] += time.perf_counter() - start
        return outcome

    def counted_enqueue(self: Any, put: Any) -> Any:
        if self._hop_started is not None:
            counts["queued: hop running"] += 1
        elif self._queue:
            counts["queued: others queued"] += 1
        elif self._in_pool.running:
            counts["queued: writer pool busy"] += 1
        elif not self._store.can_append_inline(put.puts):
            counts["queued: not inline"] += 1
            if self._store.populate_due():
                counts["queued: not inline, populate due"] += 1
        return enqueue(self, put)

    store_service._append_inline = counted_inline  # type: ignore[method-assign]
    store_service._enqueue = counted_enqueue  # type: ignore[method-assign]
    service.append_and_flush = counted_hop  # type: ignore[assignment]

    out = open(os.environ[REPORT], "a")

    def report() -> None:
        while True:
            time.sleep(2)
            figures = dict(counts) | {f"{name} s": round(value, 3) for name, value in seconds.items()}
            counts.clear()
            seconds.clear()
            print(figures, file=out, flush=True)

    threading.Thread(target=report, daemon=True).start()
    threading.Thread(target=sample_threads, args=("broker", out, threading.Event()), daemon=True).start()
    sys.argv = ["twisted"] + sys.argv[2:]
    runpy.run_module("twisted", run_name="__main__")


def main() -> None:
    sys.path.insert(0, HERE)
    import broker as broker_bench

    real_popen = subprocess.Popen

    def popen(args: list[str], *rest: Any, **kwargs: Any) -> Any:
        if args[1:3] == ["-m", "twisted"]:  # the broker: through this file
            args = [args[0], os.path.abspath(__file__), AS_BROKER] + args[3:]
        return real_popen(args, *rest, **kwargs)

    with tempfile.NamedTemporaryFile("r", suffix=".txt") as report, open(report.name, "a") as out:
        os.environ[REPORT] = report.name
        broker_bench.subprocess.Popen = popen  # type: ignore[attr-defined]
        sys.argv = [os.path.join(HERE, "client.py")] + sys.argv[1:]
        stop = threading.Event()
        threading.Thread(target=sample_threads, args=("client", out, stop), daemon=True).start()
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        finally:
            stop.set()
            print("\nper 2 s: the broker's puts, and the threads of both processes:")
            print(report.read())


if __name__ == "__main__":
    if sys.argv[1:2] == [AS_BROKER]:
        sys.path.insert(0, os.path.dirname(HERE))
        wrapped_broker()
    else:
        main()
