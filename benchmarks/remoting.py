"""Remoting throughput against a bare Int32StringReceiver echo, on 127.0.0.1 only.

Usage::

    python benchmarks/remoting.py [--rounds 5] [--seconds 2] [--serialize json|msgpack|rocketmq]

Spawns ``python benchmarks/remoting.py --serve`` (a RemotingServer echoing the
body, and a bare Int32StringReceiver echo, in one other process), then measures
requests/s with one request in flight (ping-pong) and with 1000 in flight
(pipelined), 1 KiB body, and prints the median of each and the ratios to the
bare echo. Three runs alternate:

- bare: a bare Int32StringReceiver client sends the bytes of an encoded remoting
  request (same frame size) to the bare echo;
- remoting: ``RemotingClient.invoke_sync`` to the ``RemotingServer`` (both stacks);
- server: the same bare client sends those pre-encoded requests to the
  ``RemotingServer``, so only the server side differs from the bare run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import protocol, stdio, task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint, connectProtocol  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402
from twisted.protocols.basic import Int32StringReceiver  # noqa: E402
from zope.interface import implementer  # noqa: E402

from rocketpy.interfaces import IRequestProcessor  # noqa: E402
from rocketpy.remoting.client import RemotingClient  # noqa: E402
from rocketpy.remoting.codec import MAX_FRAME_LENGTH, encode  # noqa: E402
from rocketpy.remoting.codes import RequestCode, SerializeType  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from rocketpy.remoting.server import RemotingServer  # noqa: E402

BODY = b"x" * 1024
CODE = RequestCode.SEND_MESSAGE_V2
PIPELINE = 1000


class BareEcho(Int32StringReceiver):
    """Server side of the baseline: sends every frame straight back."""

    MAX_LENGTH = MAX_FRAME_LENGTH

    def stringReceived(self, string: bytes) -> None:
        self.sendString(string)


@implementer(IRequestProcessor)
class EchoProcessor:
    """Server side of the remoting run: SUCCESS with the request's body."""

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(0, body=request.body)


class _ExitOnEOF(protocol.Protocol):
    """Stops the server process when the benchmark (its parent) closes our stdin."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    def connectionLost(self, reason: Any = None) -> None:
        self.reactor.stop()


async def serve(reactor: Any) -> None:
    """Run both echo servers; print their ports as one JSON line."""
    server = RemotingServer(reactor)
    server.register_processor(CODE, EchoProcessor())
    remoting = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(server.factory())
    bare = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(protocol.Factory.forProtocol(BareEcho))
    print(json.dumps({"remoting": remoting.getHost().port, "bare": bare.getHost().port}), flush=True)
    stdio.StandardIO(_ExitOnEOF(reactor), reactor=reactor)
    await Deferred()  # until stdin closes


class _Loop:
    """Keeps *in_flight* requests going until *seconds* pass; fires with requests/s."""

    def __init__(self, send: Callable[[], None], in_flight: int, seconds: float) -> None:
        self.send, self.in_flight = send, in_flight
        self.done: Deferred[float] = Deferred()
        self.count = 0
        self.start = time.perf_counter()
        self.deadline = self.start + seconds

    def run(self) -> Deferred[float]:
        for _ in range(self.in_flight):
            self.send()
        return self.done

    def completed(self, _: object = None) -> None:
        self.count += 1
        if time.perf_counter() < self.deadline:
            self.send()
            return
        self.in_flight -= 1
        if self.in_flight == 0:
            self.done.callback(self.count / (time.perf_counter() - self.start))


def request_frame(serialize_type: int) -> bytes:
    """An encoded remoting request with the 1 KiB body, without its length prefix."""
    return encode(RemotingCommand.request(CODE, body=BODY, serialize_type=serialize_type))[4:]


class BareClient(Int32StringReceiver):
    """Client side of the baseline: sends *payload* and counts the frames coming back."""

    MAX_LENGTH = MAX_FRAME_LENGTH
    loop: _Loop

    def __init__(self, payload: bytes = BODY) -> None:
        self.payload = payload

    def stringReceived(self, string: bytes) -> None:
        self.loop.completed()

    def measure(self, in_flight: int, seconds: float) -> Deferred[float]:
        self.loop = _Loop(lambda: self.sendString(self.payload), in_flight, seconds)
        return self.loop.run()


def measure_remoting(client: RemotingClient, address: str, in_flight: int, seconds: float) -> Deferred[float]:
    def send() -> None:
        d = client.invoke_sync(address, RemotingCommand.request(CODE, body=BODY), 30.0)
        d.addCallback(loop.completed)

    loop = _Loop(send, in_flight, seconds)
    return loop.run()


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        ports = json.loads(child.stdout.readline())
        serialize_type = SerializeType[options.serialize.upper()]
        client = RemotingClient(reactor, serialize_type=serialize_type)
        address = f"127.0.0.1:{ports['remoting']}"
        frame = request_frame(serialize_type)
        bare = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", ports["bare"]), BareClient(frame))
        raw = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", ports["remoting"]), BareClient(frame))
        runs: dict[tuple[str, int], Callable[[float], Deferred[float]]] = {}
        for in_flight in (1, PIPELINE):
            runs["bare", in_flight] = partial(bare.measure, in_flight)
            runs["remoting", in_flight] = partial(measure_remoting, client, address, in_flight)
            runs["server", in_flight] = partial(raw.measure, in_flight)
        for run in runs.values():  # warm up
            await run(0.3)
        results: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
        cpu: dict[tuple[str, int], list[tuple[float, float]]] = {key: [] for key in runs}
        for round_number in range(options.rounds):
            for key, run in runs.items():
                before, wall = process_cpu(child.pid), time.perf_counter()
                rate = await run(options.seconds)
                count = rate * (time.perf_counter() - wall)
                after = process_cpu(child.pid)
                results[key].append(rate)
                cpu[key].append(((after[0] - before[0]) / count * 1e6, (after[1] - before[1]) / count * 1e6))
            print(f"round {round_number + 1}: " + ", ".join(
                f"{name}/{n}={results[name, n][-1]:,.0f}" for name, n in runs), flush=True)
        report(results, options)
        report_loopback_cpu(cpu)
        bare.transport.loseConnection()
        raw.transport.loseConnection()
        await client.close()
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)


def process_cpu(child_pid: int) -> tuple[float, float]:
    """CPU seconds used so far by this process and by the server process (Linux ``/proc``)."""
    with open(f"/proc/{child_pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return time.process_time(), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report_loopback_cpu(cpu: dict[tuple[str, int], list[tuple[float, float]]]) -> None:
    """Median CPU microseconds per request of each process during the loopback runs, syscalls included.

    Unlike the rates, these hardly move with the machine's load.
    """
    print("CPU per request on loopback, client process / server process (medians):")
    for in_flight, label in ((1, "ping-pong (1)"), (PIPELINE, f"pipelined ({PIPELINE})")):
        cells = []
        for name, title in (("bare", "bare echo"), ("remoting", "remoting"), ("server", "server-only")):
            samples = cpu[name, in_flight]
            client = statistics.median(c for c, _ in samples)
            server = statistics.median(s for _, s in samples)
            cells.append(f"{title} {client:.1f} / {server:.1f} us")
        print(f"  {label:<18}" + ", ".join(cells))


def _best_cpu(once: Callable[[], None], count: int, per_call: int = 1) -> float:
    """CPU microseconds per request of *once* (*per_call* requests a call), best of three."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(count):
            once()
        best = min(best, (time.process_time() - start) / (count * per_call) * 1e6)
    return best


def cpu_per_request(serialize_type: int, count: int = 20_000) -> dict[str, float]:
    """CPU microseconds per request in this process over StringTransports, best of three.

    No sockets and no other process, so this is steady where the loopback figures
    drift. ``bare`` and ``remoting``: both ends, one request in flight. ``bare
    server`` and ``remoting server``: the serving end alone, fed 64 pre-encoded
    requests per read (as when pipelined). The bare echo gets frames of a remoting
    request's size.
    """
    clock = task.Clock()
    server = RemotingServer(clock)
    server.register_processor(CODE, EchoProcessor())
    client = RemotingClient(clock, serialize_type=serialize_type)
    server_end, client_end = server.build_channel(), client.build_channel()
    frame = request_frame(serialize_type)
    echo, bare = BareEcho(), BareClient(frame)
    for end in (server_end, client_end, echo, bare):
        end.makeConnection(StringTransport())

    def exchange(sender: Any, receiver: Any) -> None:
        data = sender.transport.value()
        sender.transport.clear()
        receiver.dataReceived(data)

    def remoting_once() -> None:
        client_end.invoke_sync(RemotingCommand.request(CODE, body=BODY, serialize_type=serialize_type), 30.0)
        exchange(client_end, server_end)
        exchange(server_end, client_end)

    def bare_once() -> None:
        bare.sendString(frame)
        exchange(bare, echo)
        exchange(echo, bare)

    batch = (len(frame).to_bytes(4, "big") + frame) * 64

    def serve_batch(end: Any) -> Callable[[], None]:
        def once() -> None:
            end.dataReceived(batch)
            end.transport.clear()
        return once

    bare.loop = _Loop(lambda: None, 1, 0.0)
    return {
        "bare": _best_cpu(bare_once, count),
        "remoting": _best_cpu(remoting_once, count),
        "bare server": _best_cpu(serve_batch(echo), count // 64, 64),
        "remoting server": _best_cpu(serve_batch(server_end), count // 64, 64),
    }


def report(results: dict[tuple[str, int], list[float]], options: argparse.Namespace) -> None:
    """Medians of the rates, and the median of the per-round ratios (steadier under load drift)."""
    print(f"\n{options.rounds} rounds x {options.seconds} s, 1 KiB body, {options.serialize} headers, "
          f"python {sys.version.split()[0]}; ratio: of medians (median of per-round ratios)")
    print(f"{'mode':<20}{'bare echo req/s':>17}{'remoting req/s':>16}{'ratio':>14}"
          f"{'server-only req/s':>19}{'ratio':>14}")
    for in_flight, label in ((1, "ping-pong (1)"), (PIPELINE, f"pipelined ({PIPELINE})")):
        bare = statistics.median(results["bare", in_flight])
        line = f"{label:<20}{bare:>17,.0f}"
        for name, width in (("remoting", 16), ("server", 19)):
            rates = results[name, in_flight]
            rate = statistics.median(rates)
            ratio = statistics.median([r / b for r, b in zip(rates, results["bare", in_flight])])
            line += f"{rate:>{width},.0f}" + f"{rate / bare:.0%} ({ratio:.0%})".rjust(14)
        print(line)
    cpu = cpu_per_request(SerializeType[options.serialize.upper()])
    print(f"CPU per request, both ends in one process: bare echo {cpu['bare']:.1f} us, "
          f"remoting {cpu['remoting']:.1f} us ({cpu['bare'] / cpu['remoting']:.0%})")
    print(f"CPU per request, serving end only, 64 per read: bare echo {cpu['bare server']:.2f} us, "
          f"remoting {cpu['remoting server']:.2f} us ({cpu['bare server'] / cpu['remoting server']:.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", action="store_true", help="run the echo servers (used by the benchmark)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--serialize", choices=["json", "msgpack", "rocketmq"], default="json")
    options = parser.parse_args()
    if options.serve:
        task.react(lambda reactor: Deferred.fromCoroutine(serve(reactor)))
    else:
        task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
