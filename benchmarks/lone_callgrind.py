"""Instructions per lone send on the broker (callgrind), as the Thirty-fourth and Thirty-seventh passes counted them.

Usage::

    python benchmarks/lone_callgrind.py [--messages 1000] [--out /tmp/lone.cg]
    callgrind_annotate --inclusive=yes /tmp/lone.cg.1 | grep -E "turn_once \\[|:lone_put"

Starts ``python -m twisted rocketpy`` (ASYNC_FLUSH) under ``valgrind --tool=callgrind --instr-atstart=no``,
sends 300 1 KiB messages with ``Producer.send`` one at a time (the topic, the route, warm caches), turns the
instrumentation on (``callgrind_control -i on``), sends ``--messages`` more, turns it off and dumps
(``OUT.1``). Divide ``turn_once``'s inclusive count (the broker's reactor turn) by the messages. Run it from a
tree's root; counts repeat within ~1 % from run to run, under any load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import broker as broker_bench  # noqa: E402  (benchmarks/broker.py)
import client as client_bench  # noqa: E402  (benchmarks/client.py)


def start(workdir: str, out: str) -> tuple[subprocess.Popen[bytes], int]:
    """The broker under callgrind, instrumentation off; it and its name server's port once it accepts."""
    os.environ["PYTHONHASHSEED"] = "0"
    process, _port = broker_bench.start_rocketpy(
        workdir, "ASYNC_FLUSH", wrapper=("valgrind", "--tool=callgrind", "--instr-atstart=no",
                                         f"--callgrind-out-file={out}"), wait=300)  # slow under valgrind
    return process, client_bench._namesrv_port(process)


async def drive(reactor: Any, options: argparse.Namespace) -> None:
    from twisted.internet.defer import Deferred

    from rocketpy.client import Message, Producer

    workdir = tempfile.mkdtemp(prefix="rocketpy-callgrind-")
    process, namesrv = start(workdir, options.out)
    producer = Producer("PID_CALLGRIND", f"127.0.0.1:{namesrv}", reactor)
    body = b"x" * 1024

    async def sleep(seconds: float) -> None:
        pause: Deferred[None] = Deferred()
        reactor.callLater(seconds, pause.callback, None)
        await pause

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(process.pid)], capture_output=True, check=False)

    try:
        await producer.start()
        for _ in range(300):
            await producer.send(Message("BenchCalls", body, 0, {"KEYS": "key", "TAGS": "TagA"}))
        control("-i", "on")
        await sleep(0.5)
        for _ in range(options.messages):
            await producer.send(Message("BenchCalls", body, 0, {"KEYS": "key", "TAGS": "TagA"}))
        control("-i", "off")
        control("-d")
        await sleep(2)
    finally:
        await producer.shutdown()
        process.terminate()
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)  # the broker's store
    print(f"{options.messages} sends counted: {options.out}.1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--out", default="/tmp/rocketpy-lone.cg")
    options = parser.parse_args()
    broker_bench.use_reactor("rocketpy")
    from twisted.internet import task
    from twisted.internet.defer import Deferred

    task.react(lambda reactor: Deferred.fromCoroutine(drive(reactor, options)))


if __name__ == "__main__":
    main()
