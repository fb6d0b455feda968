"""How a gRPC server can share a process with the Twisted reactor: cost of one trivial RPC.

Usage::

    python benchmarks/grpc_threads.py [--seconds 3] [--rounds 2]

Each round starts four server processes in turn, each answering ``Heartbeat`` with a constant,
and measures calls/s (1 and 32 in flight, from the generated stub in this process) and the
server's CPU µs per call:

- ``aio``: grpc.aio alone, the handler answers in the loop (the floor);
- ``aio+hop``: grpc.aio on its own thread, the answer made on an epoll reactor thread through
  ``rocketpy.grpc.server.ReactorHop`` (what rocketpy does without uvloop);
- ``uvloop+hop``: the same with uvloop's loop on the gRPC thread (what rocketpy does with the
  ``grpc`` extra; skipped when uvloop is not installed);
- ``sync+blocking``: grpcio's thread-pool server (16 threads), ``blockingCallFromThread``;
- ``asyncio-reactor``: grpc.aio on the loop of Twisted's asyncio reactor, no hop.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import grpc  # noqa: E402
from broker import free_port, process_cpu  # noqa: E402

from rocketpy.grpc.v2 import definition_pb2 as pb  # noqa: E402
from rocketpy.grpc.v2 import service_pb2 as rpc  # noqa: E402
from rocketpy.grpc.v2 import service_pb2_grpc  # noqa: E402

MODES = ("aio", "aio+hop", "uvloop+hop", "sync+blocking", "asyncio-reactor")


def answer(*_: Any) -> rpc.HeartbeatResponse:
    return rpc.HeartbeatResponse(status=pb.Status(code=pb.Code.OK, message="OK"))


async def serve_aio(port: int, handler: Any) -> None:
    class Servicer(service_pb2_grpc.MessagingServiceServicer):
        async def Heartbeat(self, request: Any, context: Any) -> Any:
            return await handler()

    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(Servicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def server(mode: str, port: int) -> None:
    """Run one server until killed."""
    if mode == "aio":
        async def direct() -> Any:
            return answer()
        asyncio.run(serve_aio(port, direct))
    elif mode in ("aio+hop", "uvloop+hop"):
        from twisted.internet import reactor

        from rocketpy.grpc.server import ReactorHop
        hop = ReactorHop(reactor)  # type: ignore[arg-type]

        async def hopped() -> Any:
            return await hop(answer)
        if mode == "aio+hop":
            loop = asyncio.new_event_loop()
        else:
            import uvloop
            loop = uvloop.new_event_loop()
        threading.Thread(target=lambda: loop.run_until_complete(serve_aio(port, hopped)), daemon=True).start()
        reactor.run()  # type: ignore[attr-defined]
    elif mode == "sync+blocking":
        from twisted.internet import reactor
        from twisted.internet.threads import blockingCallFromThread

        class Sync(service_pb2_grpc.MessagingServiceServicer):
            def Heartbeat(self, request: Any, context: Any) -> Any:
                return blockingCallFromThread(reactor, answer)  # type: ignore[arg-type]
        sync = grpc.server(futures.ThreadPoolExecutor(16))
        service_pb2_grpc.add_MessagingServiceServicer_to_server(Sync(), sync)
        sync.add_insecure_port(f"127.0.0.1:{port}")
        sync.start()
        reactor.run()  # type: ignore[attr-defined]
    else:
        from twisted.internet import asyncioreactor
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        asyncioreactor.install(loop)
        from twisted.internet import reactor
        from twisted.internet.defer import Deferred, maybeDeferred

        async def same_thread() -> Any:
            return await maybeDeferred(answer).asFuture(loop)
        reactor.callWhenRunning(  # type: ignore[attr-defined]
            lambda: Deferred.fromFuture(asyncio.ensure_future(serve_aio(port, same_thread))))
        reactor.run()  # type: ignore[attr-defined]


def measure(port: int, pid: int, seconds: float) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        out = []
        for in_flight in (1, 32):
            n, t0, cpu0 = 0, time.monotonic(), process_cpu(pid) or 0.0
            window: collections.deque[Any] = collections.deque()
            while time.monotonic() < t0 + seconds:
                while len(window) < in_flight:
                    window.append(stub.Heartbeat.future(rpc.HeartbeatRequest()))
                window.popleft().result()
                n += 1
            for f in window:
                f.result()
            elapsed, cpu = time.monotonic() - t0, (process_cpu(pid) or 0.0) - cpu0
            out.append(f"{in_flight:2d} in flight: {n / elapsed:6.0f}/s {cpu / n * 1e6:5.0f} µs")
        return "   ".join(out)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        server(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    try:
        import uvloop  # noqa: F401
        modes = MODES
    except ImportError:
        modes = tuple(m for m in MODES if m != "uvloop+hop")
    for _ in range(options.rounds):
        for mode in modes:
            port = free_port()
            child = subprocess.Popen([sys.executable, __file__, "--serve", mode, str(port)], env=env)
            try:
                print(f"{mode:16s} {measure(port, child.pid, options.seconds)}", flush=True)
            finally:
                child.kill()
                child.wait()


if __name__ == "__main__":
    main()
