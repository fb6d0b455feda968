"""One load level against a fresh rocketpy process: sends/s and the broker's CPU per send.

Usage::

    python benchmarks/broker_load.py [--in-flight 1000] [--seconds 4] [--flush ASYNC_FLUSH]

Starts ``python -m twisted rocketpy`` (free loopback ports, a temporary store) as
``benchmarks/broker.py`` does, warms up for a second, then keeps ``--in-flight`` SEND_MESSAGE_V2
requests of 1 KiB outstanding for ``--seconds`` and prints the rate and the broker process's CPU
(user + system, all threads) per send. Quicker than the full benchmark for side-by-side runs of
two trees (run it alternately from each tree's root: the broker started is that tree's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

import broker as bench  # noqa: E402  (benchmarks/broker.py)
from rocketpy.remoting.client import RemotingClient  # noqa: E402


async def run(reactor: Any, options: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-bench-")
    process, port = bench.start_rocketpy(workdir, options.flush)
    client = RemotingClient(reactor)
    errors = bench.Errors()
    address = f"127.0.0.1:{port}"
    try:
        await bench.measure_sends(client, address, options.in_flight, 1.0, errors)  # warm up, create the topic
        before = bench.process_cpu(process.pid)
        rate = await bench.measure_sends(client, address, options.in_flight, options.seconds, errors)
        after = bench.process_cpu(process.pid)
        cpu = "" if before is None or after is None else \
            f", broker CPU {(after - before) / (rate * options.seconds) * 1e6:.1f} µs per send"
        print(f"{options.flush}, {options.in_flight} in flight: {rate:,.0f} sends/s{cpu}, "
              f"{errors.count} errors", flush=True)
    finally:
        await client.close()
        process.terminate()
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--flush", choices=["ASYNC_FLUSH", "SYNC_FLUSH"], default="ASYNC_FLUSH")
    bench.add_reactor_option(parser)
    options = parser.parse_args()
    bench.use_reactor(options.reactor)
    task.react(lambda reactor: Deferred.fromCoroutine(run(reactor, options)))


if __name__ == "__main__":
    main()
