"""rocketpy beside Redis Streams, side by side in one run: the six shapes of issue 12.

Usage::

    python benchmarks/peers.py [--rounds 3] [--seconds 2] [--redis-server redis-server]
                               [--redis-parser hiredis|python] [--shapes pull]
                               [--sync-completion native|uring|thread]

Starts, on free loopback ports with temporary directories, two ``python -m twisted rocketpy``
processes (ASYNC_FLUSH and SYNC_FLUSH, as ``benchmarks/broker.py`` does) and two ``redis-server``
processes (``appendonly yes`` with ``appendfsync everysec`` and with ``always``; RDB snapshots
and AOF rewrites off, so Redis, like the commit log, only appends). Then, 1 KiB bodies with the
same ``KEYS`` and ``TAGS`` (as properties, as stream entry fields), round by round, each shape
on rocketpy (its own ``Producer`` / ``PullConsumer``) and at once on Redis (redis-py):

1. ``send/1``: ``Producer.send`` awaited one at a time, ASYNC_FLUSH, against single ``XADD``
   round trips (everysec); rate and p50 latency;
2. ``pipelined``: ``send_async`` with 1000 in flight against ``XADD`` in redis-py pipelines of
   1000 (everysec);
3. ``batch``: ``send_batch`` of 32 with 32 batches in flight, messages/s, against the Redis
   pipelined figure of shape 2 (Redis has no batch command: a pipeline is its batch);
4. and 5.: shapes 1 and 2 with SYNC_FLUSH against ``appendfsync always``;
6. ``pull``: ``PullConsumer.pull`` of 32, one pull in flight per queue, reading the topic from
   0 again at its end, against ``XREAD COUNT 32`` over one stream per queue (one read in flight
   per stream), from the start again at their end.

Redis gets one stream per queue of the rocketpy topic and ``XADD`` goes round robin over
them, as the producer does over queues. For every run it also prints the CPU per message
(user + system, all threads, from ``/proc``) of this client process and of the server process,
and the machine's steal time meanwhile (the CPU a VM's hypervisor gave others: runs with steal
are not comparable with quiet ones).

Fairness choices:

- Both clients run in this one process, one after the other, never at the same time: each
  side gets one client process and one server process on the machine's cores, the same
  interpreter and the same load. redis-py is synchronous, so its runs block the reactor; no
  rocketpy request is in flight then (only idle timers such as heartbeats wait). A Redis
  client in a subprocess would add a process start or IPC per run and change nothing else.
- redis-py's plain client for one at a time and its pipeline (``transaction=False``) for
  pipelined runs; its asyncio client is slower. Replies are parsed by hiredis, redis-py's C
  parser (``--redis-parser hiredis``, the default; in the ``bench`` extra): redis-py
  recommends it, and it makes Redis the tougher peer. It barely changes sends but reads
  ~4x faster than redis-py's Python parser (``--redis-parser python``).
- The peer of 1000 sends in flight is a redis-py pipeline of 1000: that is how redis-py users
  pipeline. Keeping 1000 commands outstanding at all times needs a hand-written client on
  redis-py's connection internals, and was measured no faster here: 108k XADD/s with a window
  of 500-1000 outstanding against 105k/s with pipelines of 1000 (110k/s with 100, 70k/s with
  5000). Redis answers while the client builds the next pipeline.

Prints per-round figures, the medians as a Markdown table, and each of the issue's targets
met or missed. Without ``redis-server`` or redis-py (``pip install -e '.[bench]'``) it says
so and prints rocketpy's figures alone. Every process and temporary directory it made is
removed at the end, on failure, and on Ctrl-C (which stops at the end of the current run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from twisted.internet import task  # noqa: E402
from twisted.internet.defer import Deferred  # noqa: E402

import broker as broker_bench  # noqa: E402  (benchmarks/broker.py: rocketpy process, /proc CPU)
import client as client_bench  # noqa: E402  (benchmarks/client.py: client send and pull loops)
import remoting as echo_bench  # noqa: E402  (benchmarks/remoting.py: the in-flight loop)
from rocketpy.client import Message, Producer, PullConsumer  # noqa: E402

try:
    import redis
except ImportError:  # the Redis side is skipped, with a message
    redis = None  # type: ignore[assignment]

BODY = broker_bench.BODY
TOPIC = broker_bench.TOPIC
PROPERTIES = {"KEYS": "k", "TAGS": "TagA"}
FIELDS = {"body": BODY, **PROPERTIES}
IN_FLIGHT = 1000
BATCH = 32
BATCHES_IN_FLIGHT = 32
PULL_BATCH = client_bench.PULL_BATCH
FILL_SECONDS = 2.0  # sends before a run of pull shapes alone (--shapes)
WARM_UP = 0.3


@dataclass
class Sample:
    """One run: messages/s, the p50 latency (one at a time only), CPU µs per message."""

    rate: float
    p50_ms: float | None = None
    client_us: float | None = None
    server_us: float | None = None
    server_faults: float | None = None  # the server's minor page faults per message
    server_main_faults: float | None = None  # those of its main thread (rocketpy's reactor)
    steal: float | None = None  # the share of the machine's CPU time the hypervisor took meanwhile
    server_disk_reads: float | None = None  # bytes the server read from the disk per message


@dataclass
class Goal:
    """One of the issue's targets: ``kind`` is ratio, rate, p50, client_us or server_us."""

    kind: str
    bound: float
    text: str


@dataclass
class Shape:
    """A rocketpy run and its Redis peer: a blocking run and redis-server's pid (run None: ``peer``'s)."""

    name: str
    rocketpy: Callable[[float], Deferred[Sample]]
    broker_pid: int
    redis: tuple[Callable[[float], Sample] | None, int]
    peer: str = ""
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {"rocketpy": [], "redis": []})

    @property
    def goals(self) -> list[Goal]:
        return GOALS[self.name]


# servers


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate a server we started, killing it if it does not exit in 30 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def temp_dir(stack: contextlib.ExitStack, prefix: str) -> str:
    workdir = tempfile.mkdtemp(prefix=prefix)
    stack.callback(shutil.rmtree, workdir, ignore_errors=True)
    return workdir


def start_rocketpy(stack: contextlib.ExitStack, flush: str,
                   extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """A rocketpy process (name server + broker) with ``flush`` (and ``extra`` options); returns it and
    its name server address."""
    workdir = temp_dir(stack, "rocketpy-peers-")
    try:
        process, _ = broker_bench.start_rocketpy(workdir, flush, extra=extra)
    except SystemExit:  # its log goes with the directory: show it first
        show_log(os.path.join(workdir, "rocketpy.log"))
        raise
    stack.callback(stop, process)
    return process, f"127.0.0.1:{client_bench._namesrv_port(process)}"


def start_redis(stack: contextlib.ExitStack, options: argparse.Namespace,
                fsync: str) -> tuple[subprocess.Popen[bytes], Any]:
    """A redis-server appending every write to its AOF, fsynced ``fsync``; returns it and a client."""
    workdir, executable = temp_dir(stack, "redis-peers-"), options.redis_server
    port = broker_bench.free_port()
    args = [executable, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir, "--save", "",
            "--appendonly", "yes", "--appendfsync", fsync, "--auto-aof-rewrite-percentage", "0",
            "--logfile", os.path.join(workdir, "redis.log")]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    stack.callback(stop, process)
    client = redis.Redis(connection_pool=redis.ConnectionPool(
        host="127.0.0.1", port=port, parser_class=PARSERS[options.redis_parser]()))
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline:
        try:
            client.ping()
            return process, client
        except redis.ConnectionError:
            time.sleep(0.1)
    show_log(os.path.join(workdir, "redis.log"))
    raise SystemExit(f"redis-server did not start on port {port}: {shlex.join(args)}")


def show_log(path: str) -> None:
    """The end of a server's log, on stderr (its directory is removed on exit)."""
    with contextlib.suppress(OSError), open(path, errors="replace") as log:
        print(log.read()[-3000:], file=sys.stderr)


def redis_missing(options: argparse.Namespace) -> str | None:
    """Why the Redis side cannot run, or None."""
    if shutil.which(options.redis_server) is None:
        return f"{options.redis_server} not found (Debian: apt-get install redis-server)"
    if redis is None:
        return "redis-py is not installed (pip install -e '.[bench]')"
    if options.redis_parser == "hiredis" and not redis.utils.HIREDIS_AVAILABLE:
        return "hiredis is not installed (pip install -e '.[bench]', or --redis-parser python)"
    return None


PARSERS = {  # redis-py's reply parsers: its C one (hiredis) and its own Python one
    "hiredis": lambda: redis._parsers._HiredisParser,
    "python": lambda: redis._parsers._RESP2Parser,
}


# the rocketpy side: its own client, on the reactor


def message() -> Message:
    return Message(TOPIC, BODY, 0, dict(PROPERTIES))


class Latencies:
    """Times one-at-a-time calls until ``seconds`` pass."""

    def __init__(self, seconds: float) -> None:
        self.start = time.perf_counter()
        self.deadline = self.start + seconds
        self.times: list[float] = []

    def running(self) -> bool:
        return time.perf_counter() < self.deadline

    def add(self, began: float) -> None:
        self.times.append(time.perf_counter() - began)

    def sample(self) -> Sample:
        return Sample(len(self.times) / (time.perf_counter() - self.start), statistics.median(self.times) * 1e3)


def rocketpy_one_at_a_time(producer: Producer, seconds: float, errors: broker_bench.Errors) -> Deferred[Sample]:
    """``Producer.send`` awaited one at a time: rate and p50 latency."""

    async def run() -> Sample:
        latencies = Latencies(seconds)
        while latencies.running():
            began = time.perf_counter()
            try:
                await producer.send(message())
            except Exception as error:
                errors.error(error)
            latencies.add(began)
        return latencies.sample()

    return Deferred.fromCoroutine(run())


def rocketpy_pipelined(producer: Producer, seconds: float, errors: broker_bench.Errors) -> Deferred[Sample]:
    return client_bench.client_sends(producer, "send_async", IN_FLIGHT, seconds, errors).addCallback(Sample)


def rocketpy_batches(producer: Producer, seconds: float, errors: broker_bench.Errors) -> Deferred[Sample]:
    """Messages/s through ``send_batch`` of ``BATCH``, ``BATCHES_IN_FLIGHT`` outstanding."""

    def one() -> None:
        producer.send_batch([message() for _ in range(BATCH)]).addErrback(errors.failed).addCallback(loop.completed)

    loop = echo_bench._Loop(one, BATCHES_IN_FLIGHT, seconds)
    return loop.run().addCallback(lambda rate: Sample(rate * BATCH))


def rocketpy_pull(consumer: PullConsumer, seconds: float) -> Deferred[Sample]:
    return Deferred.fromCoroutine(client_bench.client_pulls(consumer, seconds)).addCallback(Sample)


# the Redis side: redis-py, blocking


class RedisStreams:
    """Redis's shapes on one stream per queue of the rocketpy topic."""

    def __init__(self, client: Any, streams: int) -> None:
        self.client = client
        self.keys = [f"{TOPIC}:{i}" for i in range(streams)]

    def one_at_a_time(self, seconds: float) -> Sample:
        latencies, keys, n = Latencies(seconds), self.keys, 0
        while latencies.running():
            began = time.perf_counter()
            self.client.xadd(keys[n % len(keys)], FIELDS)
            latencies.add(began)
            n += 1
        return latencies.sample()

    def pipelined(self, seconds: float) -> Sample:
        pipe, keys, sent = self.client.pipeline(transaction=False), self.keys, 0
        start = time.perf_counter()
        while time.perf_counter() < start + seconds:
            for n in range(IN_FLIGHT):
                pipe.xadd(keys[n % len(keys)], FIELDS)
            pipe.execute()
            sent += IN_FLIGHT
        return Sample(sent / (time.perf_counter() - start))

    def read_back(self, seconds: float) -> Sample:
        """XREAD of ``PULL_BATCH`` per stream, each stream from its start again at its end."""
        positions = dict.fromkeys(self.keys, b"0-0")
        received, start = 0, time.perf_counter()
        while time.perf_counter() < start + seconds:
            reply = self.client.xread(positions, count=PULL_BATCH)
            read = dict(reply.items() if isinstance(reply, dict) else reply)  # RESP3 or RESP2
            for key in self.keys:
                entries = read.get(key.encode())
                received += len(entries) if entries else 0
                positions[key] = entries[-1][0] if entries else b"0-0"
        return Sample(received / (time.perf_counter() - start))


# measuring


async def measure(run: Callable[[float], Any], seconds: float, server_pid: int) -> Sample:
    """``run(seconds)`` (a Deferred, or blocking), with the client's and the server's CPU per message."""
    client_cpu, server_cpu = broker_bench.process_cpu(os.getpid()), broker_bench.process_cpu(server_pid)
    server_faults, main_faults = minor_faults(server_pid), minor_faults(server_pid, server_pid)
    times, disk_reads = steal_and_total(), read_bytes(server_pid)
    began = time.perf_counter()
    sample = run(seconds)
    if isinstance(sample, Deferred):
        sample = await sample
    messages = max(1.0, sample.rate * (time.perf_counter() - began))
    sample.client_us = cpu_per_message(os.getpid(), client_cpu, messages)
    sample.server_us = cpu_per_message(server_pid, server_cpu, messages)
    faults, main = minor_faults(server_pid), minor_faults(server_pid, server_pid)
    if faults is not None and server_faults is not None and main is not None and main_faults is not None:
        sample.server_faults = (faults - server_faults) / messages
        sample.server_main_faults = (main - main_faults) / messages
    after, disk_after = steal_and_total(), read_bytes(server_pid)
    if disk_reads is not None and disk_after is not None:
        sample.server_disk_reads = (disk_after - disk_reads) / messages
    if times is not None and after is not None and after[1] > times[1]:
        sample.steal = (after[0] - times[0]) / (after[1] - times[1])
    return sample


def steal_and_total() -> tuple[int, int] | None:
    """The machine's steal and total CPU time so far (``/proc/stat`` ticks; None elsewhere): a VM
    whose host is busy shows steal, and its figures are not comparable with a quiet run's."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (ticks[7], sum(ticks[:8])) if len(ticks) >= 8 else None


def read_bytes(pid: int) -> int | None:
    """Bytes process ``pid`` had the disk read for it so far (``/proc/PID/io``; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))
    except (OSError, StopIteration, ValueError):
        return None


def minor_faults(pid: int, thread: int | None = None) -> int | None:
    """Minor page faults so far of process ``pid``, all threads, or of its ``thread`` (``/proc``:
    field 10, which counts a pool thread's ``madvise(MADV_POPULATE_WRITE)`` too; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except OSError:
        return None


def cpu_per_message(pid: int, before: float | None, messages: float) -> float | None:
    after = broker_bench.process_cpu(pid)
    return None if before is None or after is None else (after - before) / messages * 1e6


def describe(sample: Sample) -> str:
    text = f"{sample.rate:,.0f}/s"
    if sample.p50_ms is not None:
        text += f" p50 {sample.p50_ms:.2f} ms"
    if sample.client_us is not None and sample.server_us is not None:
        text += f" (cpu {sample.client_us:.1f}+{sample.server_us:.1f} µs)"
    if sample.server_faults is not None:
        text += f" {sample.server_faults:.3f} faults/msg ({sample.server_main_faults:.3f} main thread)"
    if sample.server_disk_reads is not None and sample.server_disk_reads >= 0.5:
        text += f" disk reads {sample.server_disk_reads:,.0f} B/msg"
    if sample.steal is not None:
        text += f" steal {sample.steal:.0%}"
    return text


async def run_rounds(shapes: list[Shape], options: argparse.Namespace) -> None:
    """A warm-up, then ``options.rounds`` rounds of every shape, rocketpy then Redis."""
    for shape in shapes:
        redis_run, redis_pid = shape.redis
        await measure(shape.rocketpy, WARM_UP, shape.broker_pid)
        if redis_run is not None:
            await measure(redis_run, WARM_UP, redis_pid)
    for round_number in range(1, options.rounds + 1):
        for shape in shapes:
            redis_run, redis_pid = shape.redis
            rocketpy = await measure(shape.rocketpy, options.seconds, shape.broker_pid)
            shape.samples["rocketpy"].append(rocketpy)
            line = f"round {round_number} {shape.name}: rocketpy {describe(rocketpy)}"
            if redis_run is not None:
                peer = await measure(redis_run, options.seconds, redis_pid)
                shape.samples["redis"].append(peer)
                line += f" | redis {describe(peer)}"
            print(line, flush=True)


# reporting


def median(samples: list[Sample], name: str) -> float | None:
    values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
    return statistics.median(values) if values else None


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    return f"{value:,.2f} {unit}" if unit == "ms" else f"{value:,.0f}{unit}"


def judge(goal: Goal, mine: list[Sample], peer: list[Sample]) -> str:
    """``goal`` met or missed, with its figure, on the medians."""
    if goal.kind in ("rate", "client_us", "server_us"):
        value = median(mine, goal.kind)
        met = value is not None and (value >= goal.bound if goal.kind == "rate" else value <= goal.bound)
        shown = figure(value, "/s" if goal.kind == "rate" else " µs")
    else:
        name = "rate" if goal.kind == "ratio" else "p50_ms"
        mine_value, peer_value = median(mine, name), median(peer, name)
        if mine_value is None or peer_value is None:
            return f"{goal.text}: no Redis figure"
        value = mine_value / peer_value
        met = value >= goal.bound if goal.kind == "ratio" else value <= goal.bound
        shown = f"{value:.2f}×" if goal.kind == "ratio" else f"{mine_value:.2f} vs {peer_value:.2f} ms"
    return f"{goal.text}: {shown} **{'met' if met else 'missed'}**"


def report(shapes: list[Shape], options: argparse.Namespace) -> None:
    by_name = {shape.name: shape for shape in shapes}
    steal = [s.steal for shape in shapes for who in shape.samples.values() for s in who if s.steal is not None]
    stolen = f", steal median {statistics.median(steal):.0%} max {max(steal):.0%}" if steal else ""
    print(f"\nmedians of {options.rounds} rounds x {options.seconds} s, 1 KiB bodies, python "
          f"{sys.version.split()[0]}, {redis_description(options)}{stolen}\n")
    print("| shape | rocketpy | Redis | ratio (per-round median) "
          "| CPU µs/msg rocketpy: client + broker | CPU µs/msg Redis: client + server | targets |")
    print("|---|---|---|---|---|---|---|")
    for shape in shapes:
        mine = shape.samples["rocketpy"]
        peer = (by_name[shape.peer].samples["redis"] if shape.peer in by_name else []) if shape.peer \
            else shape.samples["redis"]
        print(f"| {shape.name} | {rate_and_p50(mine)} | {rate_and_p50(peer)} | {ratio(mine, peer)} "
              f"| {cpu(mine)} | {cpu(peer)} | {'; '.join(judge(goal, mine, peer) for goal in shape.goals)} |")


def rate_and_p50(samples: list[Sample]) -> str:
    if not samples:
        return "–"
    p50 = median(samples, "p50_ms")
    return figure(median(samples, "rate"), "/s") + (f", p50 {p50:.2f} ms" if p50 is not None else "")


def ratio(mine: list[Sample], peer: list[Sample]) -> str:
    mine_rate, peer_rate = median(mine, "rate"), median(peer, "rate")
    if not peer or mine_rate is None or peer_rate is None:
        return "–"
    rounds = statistics.median(m.rate / p.rate for m, p in zip(mine, peer))
    return f"{mine_rate / peer_rate:.2f}× ({rounds:.2f}×)"


def cpu(samples: list[Sample]) -> str:
    client, server = median(samples, "client_us"), median(samples, "server_us")
    return "–" if client is None or server is None else f"{client:.1f} + {server:.1f}"


def redis_description(options: argparse.Namespace) -> str:
    if redis_missing(options):
        return "no Redis"
    return f"redis-py {redis.__version__} ({options.redis_parser} parser)"


# wiring


GOALS = {
    "send/1 async vs everysec": [Goal("ratio", 1.0, "≥ 1.0× Redis"), Goal("p50", 1.0, "p50 ≤ Redis")],
    "pipelined async vs everysec": [Goal("ratio", 1.2, "≥ 1.2× Redis"), Goal("client_us", 20, "producer ≤ 20 µs"),
                                    Goal("server_us", 20, "broker ≤ 20 µs")],
    "send_batch 32 async": [Goal("rate", 100_000, "≥ 100k msgs/s")],
    "send/1 sync vs always": [Goal("ratio", 1.0, "≥ 1.0× Redis"), Goal("p50", 1.0, "p50 ≤ Redis")],
    "pipelined sync vs always": [Goal("ratio", 2.0, "≥ 2× Redis")],
    "pull vs XREAD": [Goal("ratio", 1.2, "≥ 1.2× Redis")],
}


async def bench(reactor: Any, options: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    extra = tuple(shlex.split(options.broker_options))
    async_broker, async_namesrv = start_rocketpy(stack, "ASYNC_FLUSH", extra)
    sync_broker, sync_namesrv = start_rocketpy(stack, "SYNC_FLUSH",
                                               ("--sync-flush-completion", options.sync_completion, *extra))
    producer = Producer("PID_PEERS", async_namesrv, reactor)
    sync_producer = Producer("PID_PEERS", sync_namesrv, reactor)
    puller = PullConsumer("CID_PEERS", async_namesrv, reactor)
    errors = broker_bench.Errors()
    try:
        for member in (producer, sync_producer, puller):
            await member.start()
        await producer.send(message())  # creates the topic: Redis gets one stream per queue
        queues = len(await puller.fetch_subscribe_queues(TOPIC))
        redis_side = start_redis_pair(stack, options, queues)

        def redis_run(fsync: str, method: str) -> tuple[Callable[[float], Sample] | None, int]:
            if fsync not in redis_side:
                return None, 0
            streams, pid = redis_side[fsync]
            return getattr(streams, method), pid

        shapes = [
            Shape("send/1 async vs everysec", lambda s: rocketpy_one_at_a_time(producer, s, errors),
                  async_broker.pid, redis_run("everysec", "one_at_a_time")),
            Shape("pipelined async vs everysec", lambda s: rocketpy_pipelined(producer, s, errors),
                  async_broker.pid, redis_run("everysec", "pipelined")),
            Shape("send_batch 32 async", lambda s: rocketpy_batches(producer, s, errors), async_broker.pid,
                  (None, 0), peer="pipelined async vs everysec"),
            Shape("send/1 sync vs always", lambda s: rocketpy_one_at_a_time(sync_producer, s, errors),
                  sync_broker.pid, redis_run("always", "one_at_a_time")),
            Shape("pipelined sync vs always", lambda s: rocketpy_pipelined(sync_producer, s, errors),
                  sync_broker.pid, redis_run("always", "pipelined")),
            Shape("pull vs XREAD", lambda s: rocketpy_pull(puller, s), async_broker.pid,
                  redis_run("everysec", "read_back")),
        ]
        if options.shapes:
            shapes = await selected(shapes, options.shapes, producer, redis_run("everysec", "pipelined")[0], errors)
        await run_rounds(shapes, options)
        if errors.count:
            print(f"rocketpy: {errors.count} failed sends, codes {sorted(errors.codes)}", flush=True)
        report(shapes, options)
    finally:
        for member in (producer, sync_producer, puller):
            await member.shutdown()


async def selected(shapes: list[Shape], names: str, producer: Producer, redis_fill: Callable[[float], Sample] | None,
                   errors: broker_bench.Errors) -> list[Shape]:
    """The shapes whose names contain one of the comma-separated ``names``; when no send shape is
    among them, 2 s of ``send_batch`` first, and when none writes to Redis (``send_batch`` has no
    Redis run of its own), 2 s of pipelined ``XADD``, so that pulls find messages."""
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    chosen = [shape for shape in shapes if any(name in shape.name for name in wanted)]
    if not chosen:
        raise SystemExit(f"--shapes {names!r} selects none of: {', '.join(shape.name for shape in shapes)}")
    if not any(shape.name.startswith(("send", "pipelined")) for shape in chosen):
        await rocketpy_batches(producer, FILL_SECONDS, errors)
    if redis_fill is not None and not any(shape.name.startswith(("send/1", "pipelined")) for shape in chosen):
        redis_fill(FILL_SECONDS)
    return chosen


def start_redis_pair(stack: contextlib.ExitStack, options: argparse.Namespace,
                     streams: int) -> dict[str, tuple[RedisStreams, int]]:
    """``everysec`` and ``always``: a RedisStreams on its own redis-server, and that server's pid."""
    missing = redis_missing(options)
    if missing:
        print(f"Redis side skipped: {missing}", flush=True)
        return {}
    servers = {}
    for fsync in ("everysec", "always"):
        process, client = start_redis(stack, options, fsync)
        servers[fsync] = RedisStreams(client, streams), process.pid
    return servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--redis-server", default="redis-server", help="the redis-server executable")
    parser.add_argument("--redis-parser", choices=sorted(PARSERS), default="hiredis",
                        help="redis-py's reply parser (hiredis: its C parser, the default when installed)")
    parser.add_argument("--broker-options", default="",
                        help="more command-line options for both rocketpy brokers (e.g. '--commit-log-page-cache-keep 67108864')")
    parser.add_argument("--shapes", default="",
                        help="comma-separated parts of shape names to run (e.g. pull); all by default")
    parser.add_argument("--sync-completion", default="native", choices=("native", "uring", "thread"),
                        help="the SYNC_FLUSH broker's --sync-flush-completion")
    broker_bench.add_reactor_option(parser)
    options = parser.parse_args()
    if options.rounds < 1 or options.seconds <= 0:
        parser.error("--rounds must be at least 1 and --seconds positive")
    broker_bench.use_reactor(options.reactor)
    completed: list[None] = []
    with contextlib.ExitStack() as stack:  # stops the servers and removes their directories, always
        try:
            task.react(lambda reactor: Deferred.fromCoroutine(bench(reactor, options, stack)).addCallback(
                completed.append))
        except SystemExit as exit:
            if exit.code == 0 and not completed:  # the reactor was stopped: Ctrl-C or SIGTERM
                raise SystemExit("interrupted: servers stopped, temporary directories removed") from None
            raise


if __name__ == "__main__":
    main()
