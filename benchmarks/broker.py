"""End-to-end broker throughput through rocketpy's RemotingClient, beside a bare Twisted echo.

Usage::

    python benchmarks/broker.py [--rounds 3] [--seconds 2] [--flush async,sync]

For each flush mode it starts ``python -m twisted rocketpy`` (name server + broker, free
loopback ports, a temporary store) in another process, and measures with 1 KiB bodies:
SEND_MESSAGE_V2 with 1 and with 1000 requests in flight, SEND_BATCH_MESSAGE of 32
messages (100 batches in flight), and PULL_MESSAGE of 32 (one pull in flight per queue)
over what was sent. The bare ``Int32StringReceiver`` echo of ``benchmarks/remoting.py``
(1 and 1000 in flight; Twisted's own reactor and ``write``) and the raw echo of
``benchmarks/reactor_turn.py`` (``turn/1``: one reactor turn per request on each side, on the
``--reactor`` of the broker, ``write_now`` as rocketpy's channels write) are measured in the same
run. Prints per-round figures and medians, and for each run the server process's CPU per message
(all threads, from ``/proc``): the broker's, and the echo server's for the echo runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol  # noqa: E402

import reactor_turn  # noqa: E402  (benchmarks/reactor_turn.py: the raw echo on --reactor)
import remoting as echo_bench  # noqa: E402  (benchmarks/remoting.py: the bare echo)
from rocketpy.common.message import Message, encode_batch  # noqa: E402
from rocketpy.remoting.client import RemotingClient  # noqa: E402
from rocketpy.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402

BODY = b"x" * 1024
#: the reactor of the rocketpy processes started here and of this process (``--reactor``; use_reactor)
REACTOR = "rocketpy"
REACTORS = ("rocketpy", "epoll")
TOPIC = "BenchBroker"
QUEUES = 8
BATCH = 32
BATCH_IN_FLIGHT = 100
PULL_BATCH = 32
TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def use_reactor(name: str) -> None:
    """Run this process and the rocketpy processes it starts on reactor ``name`` (REACTORS: rocketpy's
    lean epoll reactor, rocketpy/remoting/reactor.py, or Twisted's); call before the reactor is imported."""
    global REACTOR
    REACTOR = name
    if name == "rocketpy":
        from rocketpy.remoting.reactor import install

        install()


def add_reactor_option(parser: argparse.ArgumentParser) -> None:
    """``--reactor``: see :func:`use_reactor`."""
    parser.add_argument("--reactor", choices=REACTORS, default="rocketpy",
                        help="the reactor of this process and of rocketpy's (rocketpy: its lean epoll reactor)")


def start_rocketpy(workdir: str, flush: str, grpc_port: int | None = None,
                   extra: tuple[str, ...] = (), wrapper: tuple[str, ...] = (),
                   wait: float = 30) -> tuple[subprocess.Popen[bytes], int]:
    """A rocketpy process with the given flush mode (its 5.x gRPC endpoint on ``grpc_port``, or
    none; ``extra`` options; run by ``wrapper``, e.g. valgrind); returns it and the broker port once
    it accepts (within ``wait`` seconds)."""
    namesrv, broker = free_port(), free_port()
    args = [
        *wrapper, sys.executable, "-m", "twisted", "--reactor", REACTOR, "rocketpy",
        "--namesrv-listen", f"tcp:{namesrv}:interface=127.0.0.1",
        "--listen", f"tcp:{broker}:interface=127.0.0.1",
        "--store-dir", os.path.join(workdir, "store"),
        "--namesrv-config-dir", os.path.join(workdir, "namesrv"),
        "--flush-disk-type", flush, "--http", "none",
        "--grpc-listen", "none" if grpc_port is None else f"tcp:{grpc_port}:interface=127.0.0.1",
        "--ha-listen", f"tcp:{free_port()}:interface=127.0.0.1",  # listen port + 1 may be taken
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    log = open(os.path.join(workdir, "rocketpy.log"), "ab")
    process = subprocess.Popen(args, cwd=os.path.dirname(HERE), env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"rocketpy exited with {process.returncode}, see {log.name}")
        try:
            socket.create_connection(("127.0.0.1", broker), timeout=1).close()
            return process, broker
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"rocketpy did not start listening in {wait:.0f} s")


def process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def send_header(queue_id: int, batch: bool) -> dict[str, str]:
    """A SEND_MESSAGE_V2 header (one-letter names) as the Java client sends it."""
    fields = {"a": "PID_BENCH", "b": TOPIC, "c": "TBW102", "d": str(QUEUES), "e": str(queue_id), "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": "KEYS\x01k\x02TAGS\x01TagA", "j": "0", "k": "false"}
    if batch:
        fields["m"] = "true"
    return fields


class Errors:
    """Counts responses that are not SUCCESS (a benchmark of failures would be meaningless)."""

    def __init__(self) -> None:
        self.count = 0
        self.codes: set[int] = set()

    def check(self, response: RemotingCommand, ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        if response.code not in ok:
            self.count += 1
            self.codes.add(response.code)
        return response

    def error(self, error: BaseException | None) -> None:
        """Count a failed call (its code when it has one, else -1)."""
        self.count += 1
        self.codes.add(getattr(error, "code", -1))

    def failed(self, failure: Any) -> None:
        """An errback: count the Failure's error, swallow it."""
        self.error(failure.value)


def measure_sends(client: RemotingClient, address: str, in_flight: int, seconds: float, errors: Errors,
                  batch: int = 0) -> Deferred[float]:
    """Messages/s with ``in_flight`` send requests outstanding (batches of ``batch`` when > 0)."""
    body = encode_batch([Message(TOPIC, BODY, 0, {"KEYS": f"k{i}"}) for i in range(batch)]) if batch else BODY
    code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
    sent = [0]

    def send() -> None:
        sent[0] += 1
        request = RemotingCommand.request(code, send_header(sent[0] % QUEUES, bool(batch)), body)
        client.invoke_sync(address, request, TIMEOUT).addCallback(errors.check).addCallback(loop.completed)

    loop = echo_bench._Loop(send, in_flight, seconds)
    return loop.run().addCallback(lambda rate: rate * (batch or 1))


def count_records(body: bytes) -> int:
    """How many stored records a PULL body holds (walks TOTALSIZE fields)."""
    n = pos = 0
    while pos + 4 <= len(body):
        pos += struct.unpack_from(">i", body, pos)[0]
        n += 1
    return n


def measure_pulls(client: RemotingClient, address: str, seconds: float, errors: Errors) -> Deferred[float]:
    """Messages/s pulled with one PULL_MESSAGE in flight per queue, each queue read from 0 on."""
    offsets = [0] * QUEUES
    received = [0]
    done: Deferred[float] = Deferred()
    start, deadline = time.perf_counter(), time.perf_counter() + seconds
    running = [QUEUES]

    def pull(queue_id: int) -> None:
        fields = {"consumerGroup": "CID_BENCH", "topic": TOPIC, "queueId": str(queue_id),
                  "queueOffset": str(offsets[queue_id]), "maxMsgNums": str(PULL_BATCH), "sysFlag": "4",
                  "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
        d = client.invoke_sync(address, request, TIMEOUT)
        d.addCallback(errors.check, (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND))
        d.addCallback(pulled, queue_id)

    def pulled(response: RemotingCommand, queue_id: int) -> None:
        if response.code == ResponseCode.SUCCESS:
            received[0] += count_records(response.body)
            offsets[queue_id] = int(response.ext_fields["nextBeginOffset"])
        else:
            offsets[queue_id] = 0  # read the queue again from the start
        if time.perf_counter() < deadline:
            pull(queue_id)
            return
        running[0] -= 1
        if running[0] == 0:
            done.callback(received[0] / (time.perf_counter() - start))

    for queue_id in range(QUEUES):
        pull(queue_id)
    return done


async def bench_mode(reactor: Any, flush: str, options: argparse.Namespace, bare: Any, echo_pid: int,
                     results: dict[str, list[float]], turn: Any, turn_pid: int) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-bench-")
    process, port = start_rocketpy(workdir, flush)
    client = RemotingClient(reactor)
    address = f"127.0.0.1:{port}"
    errors = Errors()
    tag = flush.split("_")[0].lower()
    runs: dict[str, Callable[[float], Deferred[float]]] = {
        "echo/1": lambda s: bare.measure(1, s),
        "turn/1": lambda s: turn.run(s).addCallback(lambda count: count / s),
        f"{tag} send/1": lambda s: measure_sends(client, address, 1, s, errors),
        "echo/1000": lambda s: bare.measure(1000, s),
        f"{tag} send/1000": lambda s: measure_sends(client, address, 1000, s, errors),
        f"{tag} batch32/{BATCH_IN_FLIGHT}": lambda s: measure_sends(client, address, BATCH_IN_FLIGHT, s, errors, BATCH),
        f"{tag} pull": lambda s: measure_pulls(client, address, s, errors),
    }
    try:
        for run in runs.values():  # warm up (and auto-create the topic)
            await run(0.3)
        for round_number in range(options.rounds):
            figures = []
            for name, run in runs.items():
                server = echo_pid if name.startswith("echo") else turn_pid if name == "turn/1" else process.pid
                cpu, began = process_cpu(server), time.perf_counter()
                rate = await run(options.seconds)
                results.setdefault(name, []).append(rate)
                figures.append(f"{name}={rate:,.0f}")
                if cpu is not None:
                    # the server process's CPU (all threads, user + system) per message: the
                    # broker's, or the echo server's for the echo runs
                    used = (process_cpu(server) or cpu) - cpu
                    per_message = used / max(1.0, rate * (time.perf_counter() - began)) * 1e6
                    results.setdefault(f"{name} server CPU µs/msg", []).append(per_message)
                    figures[-1] += f" ({per_message:.1f} µs)"
            print(f"{flush} round {round_number + 1}: " + ", ".join(figures), flush=True)
        if errors.count:
            print(f"{flush}: {errors.count} responses with codes {sorted(errors.codes)}", flush=True)
    finally:
        await client.close()
        process.terminate()
        process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    echo = subprocess.Popen([sys.executable, os.path.join(HERE, "remoting.py"), "--serve"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    turn_echo = subprocess.Popen([sys.executable, os.path.join(HERE, "reactor_turn.py"), "--serve", "--reactor", REACTOR],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert echo.stdout is not None and turn_echo.stdout is not None
        port = int(json.loads(echo.stdout.readline())["bare"])
        bare = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), echo_bench.BareClient())
        port = int(json.loads(turn_echo.stdout.readline())["port"])
        turn = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), reactor_turn.Pinger())
        results: dict[str, list[float]] = {}
        for flush in options.flush.split(","):
            await bench_mode(reactor, f"{flush.upper()}_FLUSH", options, bare, echo.pid, results, turn, turn_echo.pid)
        bare.transport.loseConnection()
        turn.transport.loseConnection()
        report(results, options)
    finally:
        for server in (echo, turn_echo):
            assert server.stdin is not None
            server.stdin.close()
            server.wait(10)


def report(results: dict[str, list[float]], options: argparse.Namespace) -> None:
    print(f"\nmedians of {options.rounds} rounds x {options.seconds} s, 1 KiB bodies, python {sys.version.split()[0]}")
    echo_1 = statistics.median(results["echo/1"])
    for name, rates in results.items():
        median = statistics.median(rates)
        if name.endswith("µs/msg"):
            print(f"{name:<40}{median:>8,.1f}")
            continue
        ratio = f"  ({median / echo_1:.0%} of echo/1)" if name.endswith("send/1") else ""
        print(f"{name:<26}{median:>12,.0f} /s{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--flush", default="async,sync", help="comma-separated: async, sync")
    add_reactor_option(parser)
    options = parser.parse_args()
    use_reactor(options.reactor)
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
