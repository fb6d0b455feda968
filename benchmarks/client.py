"""Producer and consumer throughput through rocketpy.client, beside the raw RemotingClient, same run.

Usage::

    python benchmarks/client.py [--rounds 3] [--seconds 2] [--flush async]

Starts ``python -m twisted rocketpy`` (name server + broker, free loopback ports, a
temporary store) in another process, then measures with 1 KiB bodies:

- ``raw send/N``: SEND_MESSAGE_V2 requests built by hand on a RemotingClient, N in flight
  (``benchmarks/broker.py``'s loop);
- ``client send/1``: ``Producer.send`` (SYNC: validation, UNIQ_KEY, queue selection,
  hooks, header, result parsing), one at a time;
- ``client async/N``: ``Producer.send_async`` with N in flight, automatic batching off;
- ``client auto-batch/N``: the same with automatic batching (the default);
- ``client batch32/32``: ``Producer.send_batch`` of 32 messages, 32 batches in flight (messages/s);
- ``raw pull`` (counts records), ``raw pull+decode`` (decodes them, the fair baseline) and
  ``client pull`` (``PullConsumer.pull``: decode, inflate check, tag re-filter, offsets):
  PULL_MESSAGE of 32, one in flight per queue, read from 0;
- ``push consume``: a PushConsumer's messages/s from a full topic to the listener;
- ``raw+uniq send/1000``: the raw loop with a ``UNIQ_KEY`` property, which the broker indexes
  (the client always sets one, so this is the fair baseline for ``client async/1000``);
- finally the CPU per send and per pulled message of the client layer alone (independent of
  scheduling on a busy machine): one send at a time on a RemotingClient whose channel is an
  in-memory transport (``ChannelStub``: the real request path, answered at once), and, on a stub
  remoting client, ``send_async`` with 1000 in flight, auto-batched and not, and ``send_batch`` of 32
  with 32 batches in flight.

Prints per-round figures, medians with the CPU µs per message of the client process and of the
broker process, and the client/raw ratios.
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
from twisted.internet.defer import Deferred, gatherResults, succeed  # noqa: E402
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
    SendResult,
)
from rocketpy.client.route import TopicPublishInfo  # noqa: E402
from rocketpy.common.message import decode_records, encode_record  # noqa: E402
from rocketpy.common.route import BrokerData, MessageQueue, QueueData, TopicRouteData  # noqa: E402
from rocketpy.remoting.client import RemotingClient  # noqa: E402
from rocketpy.remoting.codec import decode, encode  # noqa: E402
from rocketpy.remoting.codes import RequestCode  # noqa: E402
from rocketpy.remoting.command import RemotingCommand  # noqa: E402
from rocketpy.remoting.pending import Then, call_then  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402

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


def raw_sends_with_uniq_key(raw: RemotingClient, address: str, in_flight: int, seconds: float,
                            errors: Any) -> Deferred[float]:
    """The raw send loop with a ``UNIQ_KEY`` property per message, as every RocketMQ client sends."""
    send_header = broker_bench.send_header
    counter = iter(range(1 << 62))

    def with_uniq(queue_id: int, batch: bool) -> dict[str, str]:
        fields = send_header(queue_id, batch)
        fields["i"] += "\x02UNIQ_KEY\x01" + f"7F0000011234ABCD{next(counter):016X}"
        return fields

    broker_bench.send_header = with_uniq

    def restore(result: Any) -> Any:
        broker_bench.send_header = send_header
        return result

    return broker_bench.measure_sends(raw, address, in_flight, seconds, errors).addBoth(restore)


class _StubRemoting:
    """Answers every send at once with one prepared response (no sockets)."""

    def __init__(self) -> None:
        self.response = RemotingCommand(code=0, flag=1, ext_fields={
            "msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"})

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        return succeed(self.response)

    invoke_async = invoke_sync

    def invoke_then(self, address: str, request: RemotingCommand, timeout: float, then: Then,
                    args: tuple[Any, ...] = (), bounded: bool = False) -> None:
        """RemotingClient.invoke_then's: the outcome to ``then``, no Deferred (the producer's lone sends)."""
        call_then(self.response, then, args)

    def register_processor(self, code: int, processor: Any) -> None:
        pass


class _HoldingStub(_StubRemoting):
    """Holds every request until :meth:`answer_all`, which answers each with the encoded response
    decoded again (a batch's members share its one store id)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[Then, tuple[Any, ...]]] = []
        self.frame = encode(self.response)[4:]

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        d: Deferred[RemotingCommand] = Deferred()
        self.invoke_then(address, request, timeout, d.callback, ())
        return d

    invoke_async = invoke_sync

    def invoke_then(self, address: str, request: RemotingCommand, timeout: float, then: Then,
                    args: tuple[Any, ...] = (), bounded: bool = False) -> None:
        encode(request)  # as the channel would
        self.held.append((then, args))

    def answer_all(self) -> None:
        held, self.held = self.held, []
        for then, args in held:
            call_then(decode(self.frame), then, args)


class ChannelStub:
    """A :class:`RemotingClient` with one channel connected over an in-memory transport: a request
    takes the real path to its frame (the producer's lone send in C included), and :meth:`answer`
    feeds the channel the next prepared response frame, as a socket's bytes would be read."""

    FIELDS = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "5",
              "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}

    def __init__(self, clock: task.Clock, answers: int, address: str = "127.0.0.1:1") -> None:
        self.remoting = RemotingClient(clock)
        self.channel = self.remoting.build_channel()
        self.transport = StringTransport()
        self.channel.makeConnection(self.transport)
        self.remoting._by_address[address] = self.channel  # connected: what _connect_done records
        self.remoting._address_of[self.channel] = address
        # opaques count up from 0 on a new channel
        self.frames = iter([encode(RemotingCommand(0, "JAVA", 1, opaque, 1, None, self.FIELDS))
                            for opaque in range(answers)])

    def answer(self) -> None:
        """Answer the oldest request not answered yet (one request in flight at a time)."""
        self.transport.clear()
        self.channel.dataReceived(next(self.frames))


def stub_producer(stub: Any, clock: task.Clock, queues: int = 4, **kwargs: Any) -> Producer:
    """A started producer on ``stub`` with a cached route of ``queues`` queues (no name server)."""
    producer = Producer("PG", "ns:9876", clock, stub, **kwargs)
    producer.start()
    producer._publish[TOPIC] = TopicPublishInfo(TOPIC, TopicRouteData(
        [QueueData("b", queues, queues, 6)], [BrokerData("c", "b", {0: "127.0.0.1:1"})]))
    producer.instance.broker_addrs["b"] = {0: "127.0.0.1:1"}
    return producer


def _stub_loop(send: Callable[[], Deferred[Any]], stub: _HoldingStub, clock: task.Clock, in_flight: int, n: int) -> float:
    """CPU seconds of ``n`` calls of ``send``, ``in_flight`` outstanding, each next one made from an answer's
    callback; ``stub`` answers everything held in rounds (no sockets, so it holds on a loaded machine)."""
    sent, done = [0], [0]

    def one(_: object = None) -> None:
        if _ is not None:
            done[0] += 1
        if sent[0] < n:
            sent[0] += 1
            send().addCallback(one)

    start = time.process_time()
    for _ in range(in_flight):
        one()
    while done[0] < n:
        stub.answer_all()
        clock.advance(0)  # the batcher's end-of-turn flush
    return time.process_time() - start


def cpu_per_send_in_flight(auto_batch: bool, in_flight: int = 1000, n: int = 100_000) -> float:
    """CPU µs per ``send_async`` with ``in_flight`` outstanding on a stub: the producer's own cost per send."""
    stub, clock = _HoldingStub(), task.Clock()
    producer = stub_producer(stub, clock, auto_batch=auto_batch)
    return _stub_loop(lambda: producer.send_async(Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"})),
                      stub, clock, in_flight, n) / n * 1e6


def cpu_per_batched_message(size: int = 32, in_flight: int = 32, n: int = 3000) -> float:
    """CPU µs per message of ``send_batch`` of ``size`` messages, ``in_flight`` batches outstanding, on a stub:
    the producer's own cost, with the loop's messages."""
    stub, clock = _HoldingStub(), task.Clock()
    producer = stub_producer(stub, clock)
    return _stub_loop(lambda: producer.send_batch([Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"})
                                                   for _ in range(size)]),
                      stub, clock, in_flight, n) / n / size * 1e6


def cpu_per_send(n: int = 20000) -> tuple[float, float]:
    """CPU µs per send, answered at once on a :class:`ChannelStub`: through ``Producer.send`` (one queue:
    every answer names the queue the send went to), and through the raw ``invoke_sync`` of a request
    built by hand."""
    clock = task.Clock()
    stub = ChannelStub(clock, 2 * n)
    producer = stub_producer(stub.remoting, clock, queues=1)
    results: list[Any] = []
    start = time.process_time()
    for _ in range(n):
        d = producer.send(Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"}))
        stub.answer()
        d.addBoth(results.append)
    client = (time.process_time() - start) / n * 1e6
    if type(results[-1]) is not SendResult:
        raise SystemExit(f"the stub's sends failed: {results[-1]}")
    start = time.process_time()
    for i in range(n):
        request = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, broker_bench.send_header(0, False), BODY)
        d = stub.remoting.invoke_sync("127.0.0.1:1", request, 3.0)
        stub.answer()
        d.addBoth(results.append)
    return client, (time.process_time() - start) / n * 1e6


def cpu_per_pulled_message(n: int = 2000) -> tuple[float, float]:
    """CPU µs per message: ``PullConsumer.pull`` on a stub answering 32 records, and decoding them alone."""
    stored = [MessageExt(topic=TOPIC, body=BODY, properties={"KEYS": "k", "TAGS": "TagA", "UNIQ_KEY": "0" * 32},
                         queue_offset=i) for i in range(PULL_BATCH)]
    body = b"".join(bytes(encode_record(m)) for m in stored)
    stub = _StubRemoting()
    stub.response = RemotingCommand(code=0, flag=1, body=body, ext_fields={
        "nextBeginOffset": str(PULL_BATCH), "minOffset": "0", "maxOffset": str(PULL_BATCH), "suggestWhichBrokerId": "0"})
    consumer = PullConsumer("CG", "ns:9876", task.Clock(), stub)  # type: ignore[arg-type]
    consumer.start()
    consumer.instance.broker_addrs["b"] = {0: "127.0.0.1:1"}
    mq = MessageQueue(TOPIC, "b", 0)
    start = time.process_time()
    for _ in range(n):
        consumer.pull(mq, "*", 0, PULL_BATCH)
    client = (time.process_time() - start) / n / PULL_BATCH * 1e6
    start = time.process_time()
    for _ in range(n):
        decode_records(body)
    return client, (time.process_time() - start) / n / PULL_BATCH * 1e6


def client_sends(producer: Producer, method: str, in_flight: int, seconds: float, errors: Any) -> Deferred[float]:
    """Messages/s through ``producer.<method>`` with ``in_flight`` outstanding; failures are counted."""
    send = getattr(producer, method)

    def one() -> None:
        msg = Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"})
        send(msg).addErrback(errors.failed).addCallback(loop.completed)

    loop = echo_bench._Loop(one, in_flight, seconds)
    return loop.run()


def client_batches(producer: Producer, size: int, in_flight: int, seconds: float, errors: Any) -> Deferred[float]:
    """Messages/s through ``producer.send_batch`` of ``size`` messages, ``in_flight`` batches outstanding."""

    def one() -> None:
        batch = [Message(TOPIC, BODY, 0, {"KEYS": "k", "TAGS": "TagA"}) for _ in range(size)]
        producer.send_batch(batch).addErrback(errors.failed).addCallback(loop.completed)

    loop = echo_bench._Loop(one, in_flight, seconds)
    return loop.run().addCallback(lambda rate: rate * size)


async def with_cpu(run: Callable[[float], Deferred[float]], seconds: float, broker_pid: int) -> tuple[float, float, float]:
    """``run``'s rate, and CPU µs per message of this process and of the broker while it ran."""
    start, own, broker = time.perf_counter(), time.process_time(), broker_bench.process_cpu(broker_pid) or 0.0
    rate = await run(seconds)
    count = max(rate * (time.perf_counter() - start), 1.0)
    broker_cpu = (broker_bench.process_cpu(broker_pid) or 0.0) - broker
    return rate, (time.process_time() - own) / count * 1e6, broker_cpu / count * 1e6


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
    unbatched = Producer("PID_CLIENT_BENCH_SINGLE", namesrv, reactor, auto_batch=False)
    puller = PullConsumer("CID_CLIENT_BENCH", namesrv, reactor)
    errors, client_errors = broker_bench.Errors(), broker_bench.Errors()
    groups = iter(range(1_000_000))
    runs: dict[str, Callable[[float], Deferred[float]]] = {
        "raw send/1": lambda s: broker_bench.measure_sends(raw, address, 1, s, errors),
        "client send/1": lambda s: client_sends(producer, "send", 1, s, client_errors),
        "raw send/1000": lambda s: broker_bench.measure_sends(raw, address, 1000, s, errors),
        "raw+uniq send/1000": lambda s: raw_sends_with_uniq_key(raw, address, 1000, s, errors),
        "client async/1000": lambda s: client_sends(unbatched, "send_async", 1000, s, client_errors),
        "client auto-batch/1000": lambda s: client_sends(producer, "send_async", 1000, s, client_errors),
        "client batch32/32": lambda s: client_batches(producer, 32, 32, s, client_errors),
        "raw pull": lambda s: broker_bench.measure_pulls(raw, address, s, errors),
        "raw pull+decode": lambda s: raw_pulls_decoded(raw, address, s, errors),
        "client pull": lambda s: Deferred.fromCoroutine(client_pulls(puller, s)),
        "push consume": lambda s: Deferred.fromCoroutine(push_consume(reactor, namesrv, f"CID_PUSH_{next(groups)}", s)),
    }
    if options.only:
        runs = {name: run for name, run in runs.items() if name in options.only}
    results: dict[str, list[float]] = {}
    cpu: dict[str, list[tuple[float, float]]] = {}
    try:
        await producer.start()
        await unbatched.start()
        await puller.start()
        for run in runs.values():  # warm up; the first send auto-creates the topic
            await run(0.3)
        for round_number in range(options.rounds):
            figures = []
            for name, run in runs.items():
                rate, own, broker = await with_cpu(run, options.seconds, process.pid)
                results.setdefault(name, []).append(rate)
                cpu.setdefault(name, []).append((own, broker))
                figures.append(f"{name}={rate:,.0f}")
            print(f"round {round_number + 1}: " + ", ".join(figures), flush=True)
        for kind, errs in (("raw", errors), ("client", client_errors)):
            if errs.count:
                print(f"{kind}: {errs.count} failed requests, codes {sorted(errs.codes)}", flush=True)
        report(results, cpu, options, flush)
    finally:
        await producer.shutdown()
        await unbatched.shutdown()
        await puller.shutdown()
        await raw.close()
        process.terminate()
        process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def _namesrv_port(process: Any) -> int:
    """The name server port from the command line ``start_rocketpy`` used."""
    listen = process.args[process.args.index("--namesrv-listen") + 1]
    return int(listen.split(":")[1])


def report(results: dict[str, list[float]], cpu: dict[str, list[tuple[float, float]]], options: argparse.Namespace,
           flush: str) -> None:
    """Medians per run with CPU µs per message (this process, the broker), and for client runs the
    median of the per-round client/raw ratios."""
    medians = {name: statistics.median(rates) for name, rates in results.items()}
    print(f"\nmedians of {options.rounds} rounds x {options.seconds} s, 1 KiB bodies, {flush}, "
          f"python {sys.version.split()[0]}; CPU us per message: this (client) process / broker process")
    pairs = {"client send/1": "raw send/1", "client async/1000": "raw+uniq send/1000",
             "client auto-batch/1000": "raw+uniq send/1000", "client pull": "raw pull+decode"}
    for name, median in medians.items():
        ratio = ""
        if pairs.get(name) in medians:
            rounds = statistics.median(c / r for c, r in zip(results[name], results[pairs[name]]))
            ratio = f"  ({median / medians[pairs[name]]:.0%} of {pairs[name]}; per-round median {rounds:.0%})"
        own = statistics.median(c for c, _ in cpu[name])
        broker = statistics.median(b for _, b in cpu[name])
        print(f"{name:<24}{median:>10,.0f} /s  cpu {own:6.1f} / {broker:6.1f} us{ratio}")
    client_cpu, raw_cpu = cpu_per_send()
    print(f"CPU per send on an in-memory channel: Producer.send {client_cpu:.1f} us, raw request {raw_cpu:.1f} us")
    print(f"CPU per send_async on a stub, 1000 in flight: auto-batched {cpu_per_send_in_flight(True):.1f} us, "
          f"not batched {cpu_per_send_in_flight(False):.1f} us")
    print(f"CPU per message of send_batch of 32 on a stub, 32 in flight: {cpu_per_batched_message():.2f} us")
    client_cpu, raw_cpu = cpu_per_pulled_message()
    print(f"CPU per pulled message on a stub: PullConsumer.pull {client_cpu:.2f} us, decode alone {raw_cpu:.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--flush", default="async", help="async or sync")
    parser.add_argument("--only", action="append", default=[], metavar="RUN",
                        help="only this run (repeatable), e.g. --only 'client batch32/32'")
    broker_bench.add_reactor_option(parser)
    options = parser.parse_args()
    broker_bench.use_reactor(options.reactor)
    task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options)))


if __name__ == "__main__":
    main()
