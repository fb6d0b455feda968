"""Send throughput and latency of a master with a slave: SYNC_MASTER against ASYNC_MASTER.

Usage::

    python benchmarks/replication.py [--rounds 3] [--seconds 2] [--modes async,sync]

For each mode it starts two ``python -m twisted rocketpy`` processes on loopback, as
doc/ha.md describes: a name server with the master (``--broker-role ASYNC_MASTER`` or
``SYNC_MASTER``) and a slave (``--broker-role SLAVE --broker-id 1``). Through
``RemotingClient.invoke_sync`` it sends SEND_MESSAGE_V2 with 1 KiB bodies, 1 and 256 in flight,
and records every send's latency. A SYNC_MASTER answers only once the slave acknowledged the
record. After the rounds it waits until the slave's commit log reaches the master's end
(``commitLogMaxOffset`` of GET_BROKER_RUNTIME_INFO on both) and prints that catch-up time.
Prints per-round figures, then medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

from broker import BODY, QUEUES, TIMEOUT, Errors, free_port, send_header  # noqa: E402
from rocketpy.remoting.client import RemotingClient  # noqa: E402
from rocketpy.remoting.codes import RequestCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402


def start(workdir: str, name: str, args: list[str], port: int) -> subprocess.Popen[bytes]:
    """``python -m twisted rocketpy <args>`` logging to ``<workdir>/<name>.log``, once ``port`` accepts."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    log = open(os.path.join(workdir, f"{name}.log"), "ab")
    process = subprocess.Popen([sys.executable, "-m", "twisted", "rocketpy", *args], cwd=os.path.dirname(HERE),
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{name} exited with {process.returncode}, see {log.name}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"{name} did not start listening in 30 s")


def start_pair(workdir: str, role: str) -> tuple[list[subprocess.Popen[bytes]], int, int]:
    """A name server + master process and a slave process; the processes and both broker ports."""
    namesrv, master, ha, slave = free_port(), free_port(), free_port(), free_port()
    common = ["--namesrv-addr", f"127.0.0.1:{namesrv}", "--commit-log-file-size", str(64 * 1024 * 1024),
              "--http", "none"]
    first = start(workdir, "master", [
        "--namesrv-listen", f"tcp:{namesrv}:interface=127.0.0.1", "--listen", f"tcp:{master}:interface=127.0.0.1",
        "--ha-listen", f"tcp:{ha}:interface=127.0.0.1", "--broker-role", role,
        "--store-dir", os.path.join(workdir, "master"), "--namesrv-config-dir", os.path.join(workdir, "ns"),
        *common], master)
    second = start(workdir, "slave", [
        "--role", "broker", "--listen", f"tcp:{slave}:interface=127.0.0.1", "--broker-role", "SLAVE",
        "--broker-id", "1", "--ha-master-address", f"127.0.0.1:{ha}", "--store-dir", os.path.join(workdir, "slave"),
        *common], slave)
    return [first, second], master, slave


class Sender:
    """Keeps ``in_flight`` sends outstanding for ``seconds``; collects each one's latency."""

    def __init__(self, client: RemotingClient, address: str, errors: Errors) -> None:
        self.client, self.address, self.errors = client, address, errors
        self.sent = 0

    def run(self, in_flight: int, seconds: float) -> Deferred[tuple[float, list[float]]]:
        done: Deferred[tuple[float, list[float]]] = Deferred()
        latencies: list[float] = []
        start = time.perf_counter()
        deadline = start + seconds
        outstanding = [0]

        def send() -> None:
            self.sent += 1
            outstanding[0] += 1
            request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(self.sent % QUEUES, False), BODY)
            began = time.perf_counter()
            d = self.client.invoke_sync(self.address, request, TIMEOUT).addCallback(self.errors.check)
            d.addCallback(answered, began)

        def answered(_: object, began: float) -> None:
            now = time.perf_counter()
            latencies.append(now - began)
            outstanding[0] -= 1
            if now < deadline:
                send()
            elif outstanding[0] == 0:
                done.callback((len(latencies) / (now - start), latencies))

        for _ in range(in_flight):
            send()
        return done


async def commit_log_end(client: RemotingClient, address: str) -> int:
    """``commitLogMaxOffset`` of GET_BROKER_RUNTIME_INFO."""
    request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {})
    response = await client.invoke_sync(address, request, TIMEOUT)
    return int(json.loads(response.body)["table"]["commitLogMaxOffset"])


async def bench_mode(reactor: Any, role: str, options: argparse.Namespace, results: dict[str, list[float]]) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-ha-bench-")
    processes, master_port, slave_port = start_pair(workdir, role)
    client = RemotingClient(reactor)
    master, slave = f"127.0.0.1:{master_port}", f"127.0.0.1:{slave_port}"
    tag = role.split("_")[0].lower()
    try:
        for _ in range(300):  # until the slave is linked (SYNC: sends stop failing) and the topic exists
            warm = Errors()
            await Sender(client, master, warm).run(1, 0.05)
            if not warm.count:
                break
            await task.deferLater(reactor, 0.1, lambda: None)
        errors = Errors()
        sender = Sender(client, master, errors)
        for round_number in range(options.rounds):
            figures = []
            for in_flight in (1, 256):
                rate, latencies = await sender.run(in_flight, options.seconds)
                latencies.sort()
                figures_of = {f"{tag} send/{in_flight}": rate,
                              f"{tag} p50 ms/{in_flight}": 1000 * latencies[len(latencies) // 2],
                              f"{tag} p99 ms/{in_flight}": 1000 * latencies[int(len(latencies) * 0.99)]}
                for name, value in figures_of.items():
                    results.setdefault(name, []).append(value)
                    figures.append(f"{name}={value:,.2f}")
            print(f"{role} round {round_number + 1}: " + ", ".join(figures), flush=True)
        began = time.perf_counter()
        target = await commit_log_end(client, master)
        while await commit_log_end(client, slave) < target:
            await task.deferLater(reactor, 0.01, lambda: None)
        results.setdefault(f"{tag} slave catch-up ms", []).append(1000 * (time.perf_counter() - began))
        if errors.count:
            print(f"{role}: {errors.count} responses with codes {sorted(errors.codes)}", flush=True)
    finally:
        await client.close()
        for process in reversed(processes):
            process.terminate()
            process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    results: dict[str, list[float]] = {}
    for mode in options.modes.split(","):
        await bench_mode(reactor, f"{mode.upper()}_MASTER", options, results)
    print(f"\nmedians of {options.rounds} rounds x {options.seconds} s, 1 KiB bodies, python {sys.version.split()[0]}")
    for name, values in results.items():
        print(f"{name:<28}{statistics.median(values):>12,.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--modes", default="async,sync", help="comma-separated: async, sync")
    options = parser.parse_args()
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
