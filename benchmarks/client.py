"""Producer and consumer throughput through rocketpy.client, beside the raw RemotingClient, same run.

Usage::

    python benchmarks/client.py [--rounds 3] [--seconds 2] [--flush async]

Starts ``python -m twisted rocketpy`` (name server + broker, free loopback ports, a
temporary store) in another process, then measures with 1 KiB bodies:

- ``raw send/N``: SEND_MESSAGE_V2 requests built by hand on a RemotingClient, N in flight
  (``benchmarks/broker.py``'s loop);
- ``client send/1``: ``Producer.send`` (SYNC: validation, UNIQ_KEY, queue selection,
  hooks, header, result parsing), one at a time;
- ``client async/N``: ``Producer.send_async`` with N in flight;
- ``raw pull`` (counts records), ``raw pull+decode`` (decodes them, the fair baseline) and
  ``client pull`` (``PullConsumer.pull``: decode, inflate check, tag re-filter, offsets):
  PULL_MESSAGE of 32, one in flight per queue, read from 0;
- ``push consume``: a PushConsumer's messages/s from a full topic to the listener.

Prints per-round figures, medians, and the client/raw ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred, gatherResults  # noqa: E402
from twisted.internet.task import deferLater  # noqa: E402

import broker as broker_bench  # noqa: E402  (benchmarks/broker.py: process start, raw loops)
import remoting as echo_bench  # noqa: E402
from rocketpy.client import (  # noqa: E402
    ConsumeContext,
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
)
from rocketpy.common.message import decode_records  # noqa: E402
from rocketpy.remoting.client import RemotingClient  # noqa: E402

BODY = broker_bench.BODY
TOPIC = broker_bench.TOPIC
PULL_BATCH = 32


def raw_pulls_decoded(raw: RemotingClient, address: str, seconds: float, errors: Any) -> Deferred[float]:
    """``benchmarks/broker.py``'s raw pull loop, decoding every record as the client does."""
    count_records = broker_bench.count_records
    broker_bench.count_records = lambda body: len(decode_records(body))

    def restore(result: Any) -> Any:
        broker_bench.count_records = count_records
        return result

    return broker_bench.measure_pulls(raw, address, seconds, errors).addBoth(restore)


def client_sends(producer: Producer, method: str, in_flight: int, seconds: float) -> Deferred[float]:
    """Messages/s through ``producer.<method>`` with ``in_flight`` outstanding."""
    send = getattr(producer, method)

    def one() -> None:
        send(Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"})).addCallback(loop.completed)

    loop = echo_bench._Loop(one, in_flight, seconds)
    return loop.run()


async def client_pulls(consumer: PullConsumer, seconds: float) -> float:
    """Messages/s decoded through ``PullConsumer.pull``, one pull in flight per queue."""
    queues = await consumer.fetch_subscribe_queues(TOPIC)
    received = [0]
    start = time.perf_counter()
    deadline = start + seconds

    async def drain(mq: Any) -> None:
        offset = 0
        while time.perf_counter() < deadline:
            result = await consumer.pull(mq, "*", offset, PULL_BATCH)
            received[0] += len(result.messages)
            offset = result.next_begin_offset if result.messages else 0

    await gatherResults([Deferred.fromCoroutine(drain(mq)) for mq in queues])
    return received[0] / (time.perf_counter() - start)


async def push_consume(reactor: Any, namesrv: str, group: str, seconds: float) -> float:
    """Messages/s a new push consumer group delivers to its listener, reading the topic from 0."""
    count = [0]

    def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        count[0] += len(msgs)
        return ConsumeResult.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, reactor, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listener)
    start = time.perf_counter()
    await consumer.start()
    await deferLater(reactor, seconds, lambda: None)
    rate = count[0] / (time.perf_counter() - start)
    await consumer.shutdown()
    return rate


async def bench(reactor: Any, options: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="rocketpy-client-bench-")
    flush = f"{options.flush.upper()}_FLUSH"
    process, port = broker_bench.start_rocketpy(workdir, flush)
    namesrv = f"127.0.0.1:{_namesrv_port(process)}"
    address = f"127.0.0.1:{port}"
    raw = RemotingClient(reactor)
    producer = Producer("PID_CLIENT_BENCH", namesrv, reactor)
    puller = PullConsumer("CID_CLIENT_BENCH", namesrv, reactor)
    errors = broker_bench.Errors()
    groups = iter(range(1_000_000))
    runs: dict[str, Callable[[float], Deferred[float]]] = {
        "raw send/1": lambda s: broker_bench.measure_sends(raw, address, 1, s, errors),
        "client send/1": lambda s: client_sends(producer, "send", 1, s),
        "raw send/1000": lambda s: broker_bench.measure_sends(raw, address, 1000, s, errors),
        "client async/1000": lambda s: client_sends(producer, "send_async", 1000, s),
        "raw pull": lambda s: broker_bench.measure_pulls(raw, address, s, errors),
        "raw pull+decode": lambda s: raw_pulls_decoded(raw, address, s, errors),
        "client pull": lambda s: Deferred.fromCoroutine(client_pulls(puller, s)),
        "push consume": lambda s: Deferred.fromCoroutine(push_consume(reactor, namesrv, f"CID_PUSH_{next(groups)}", s)),
    }
    results: dict[str, list[float]] = {}
    try:
        await producer.start()
        await puller.start()
        for run in runs.values():  # warm up; the first send auto-creates the topic
            await run(0.3)
        for round_number in range(options.rounds):
            figures = []
            for name, run in runs.items():
                rate = await run(options.seconds)
                results.setdefault(name, []).append(rate)
                figures.append(f"{name}={rate:,.0f}")
            print(f"round {round_number + 1}: " + ", ".join(figures), flush=True)
        if errors.count:
            print(f"{errors.count} raw responses with codes {sorted(errors.codes)}", flush=True)
        report(results, options, flush)
    finally:
        await producer.shutdown()
        await puller.shutdown()
        await raw.close()
        process.terminate()
        process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def _namesrv_port(process: Any) -> int:
    """The name server port from the command line ``start_rocketpy`` used."""
    listen = process.args[process.args.index("--namesrv-listen") + 1]
    return int(listen.split(":")[1])


def report(results: dict[str, list[float]], options: argparse.Namespace, flush: str) -> None:
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    print(f"\nmedians of {options.rounds} rounds x {options.seconds} s, 1 KiB bodies, {flush}, "
          f"python {sys.version.split()[0]}")
    pairs = {"client send/1": "raw send/1", "client async/1000": "raw send/1000", "client pull": "raw pull+decode"}
    for name, median in medians.items():
        ratio = f"  ({median / medians[pairs[name]]:.0%} of {pairs[name]})" if name in pairs else ""
        print(f"{name:<20}{median:>12,.0f} /s{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--flush", default="async", help="async or sync")
    options = parser.parse_args()
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
