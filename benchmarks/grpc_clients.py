"""The official 5.x Python client's send and receive rates beside rocketpy's 4.x clients, one broker.

Usage::

    python benchmarks/grpc_clients.py [--rounds 3] [--seconds 3] [--in-flight 32] [--tls]

Starts one ``python -m twisted rocketpy`` (name server + broker on listening sockets it hands
over as ``fd:`` endpoints, the gRPC endpoint on port 0, ``--http none``, a temporary store,
ASYNC_FLUSH), then per round, 1 KiB bodies, each generation on a fresh topic of its own:

- ``5.x send/1``: ``rocketmq-python-client``'s ``Producer.send``, one at a time;
- ``5.x send_async/N``: its ``Producer.send_async`` with N futures outstanding;
- ``5.x receive+ack``: ``SimpleConsumer.receive(32, 60 s)``, then ``ack`` of each message
  (the client acks one message per AckMessage call), until the round's 5.x messages are read;
- ``4.x send/1``: ``rocketpy.blocking.Producer.send``, one at a time;
- ``4.x send_async/N``: its ``send_async`` with N outstanding (automatic batching off, so one
  request per message as the 5.x client sends);
- ``4.x pull``: ``rocketpy.blocking.PullConsumer.pull`` of 32 from each queue in turn and
  ``update_consumer_offset``, until the round's 4.x messages are read.

The 5.x client runs in a child process from the virtual environment the interop tests make
(``tests/interop/v5venv.py``; its ``rocketmq`` package would clash with the C++ wrapper), and
reports when its measured loop starts and ends; the 4.x clients run in this process. With
``--tls`` every client speaks TLS: the broker runs with a throwaway self-signed certificate
(``tests/remoting/certs.py``) and ``--tls-mode enforcing``, the 5.x client with ``tls_enable``
trusting it through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, the 4.x clients with ``tls=True,
tls_ca``. Prints
each round, then the medians with the broker process's CPU µs per message (``/proc``, all its
threads: the reactor, the gRPC loop thread and grpcio's C core, the store's pools).
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
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from broker import process_cpu  # noqa: E402

from rocketpy import blocking  # noqa: E402
from rocketpy.client import Message  # noqa: E402
from tests.interop.v5venv import v5_python  # noqa: E402
from tests.remoting.certs import CertificateSet  # noqa: E402

BODY = b"x" * 1024
CHILD = os.path.join(HERE, "grpc_clients_v5.py")
GRPC_LISTENING = "gRPC (RocketMQ 5.x) endpoint listening on"
START_TIMEOUT = 30.0

#: one measurement: messages, seconds, broker CPU seconds
Run = tuple[int, float, float]


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


class Broker:
    """One rocketpy process on sockets of ours (no port to race for) and its gRPC port from its log."""

    def __init__(self, workdir: str, certs: CertificateSet | None = None) -> None:
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "rocketpy.log")
        namesrv, broker = _listening(), _listening()
        self.namesrv = "127.0.0.1:%d" % namesrv.getsockname()[1]
        address = "127.0.0.1:%d" % broker.getsockname()[1]
        args = [
            sys.executable, "-m", "twisted", "rocketpy",
            "--namesrv-listen", f"fd:{namesrv.fileno()}", "--namesrv-addr", self.namesrv,
            "--listen", f"fd:{broker.fileno()}", "--advertised-address", address,
            "--ha-listen", "tcp:0:interface=127.0.0.1", "--grpc-listen", "tcp:0:interface=127.0.0.1",
            "--http", "none", "--flush-disk-type", "ASYNC_FLUSH",
            "--store-dir", os.path.join(workdir, "store"), "--namesrv-config-dir", os.path.join(workdir, "namesrv"),
        ]
        if certs is not None:  # TLS only, everywhere (the broker registers with its name server over TLS too)
            args += ["--tls-cert", certs.self_signed, "--tls-key", certs.self_signed_key, "--tls-mode", "enforcing"]
        env = dict(os.environ, PYTHONPATH=REPO)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            pass_fds=(namesrv.fileno(), broker.fileno()))
        namesrv.close()
        broker.close()
        self.grpc_port = self._grpc_port()

    def _grpc_port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"rocketpy exited with {self.process.returncode}, see {self.log_path}")
            with open(self.log_path, errors="replace") as f:
                for line in f:
                    if GRPC_LISTENING in line and line.endswith("\n"):  # twist logs JSON records to a file
                        return int(json.loads(line.strip("\x1e\n"))["port"])
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"rocketpy's gRPC endpoint did not start in {START_TIMEOUT} s, see {self.log_path}")

    def cpu(self) -> float:
        return process_cpu(self.process.pid) or 0.0

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def v5_run(broker: Broker, python5: str, home: str, mode: str, *args: str, ca: str | None = None) -> Run:
    """One run of the 5.x child (over TLS trusting ``ca`` when given); the broker's CPU between its
    start and end lines."""
    env = dict(os.environ, HOME=home)
    if ca is not None:
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = ca
        args = (*args, "--tls")
    env.pop("PYTHONPATH", None)
    child = subprocess.Popen([python5, CHILD, mode, "--endpoint", f"127.0.0.1:{broker.grpc_port}", *args],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    cpu0 = 0.0
    for line in child.stdout:
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "start":
            cpu0 = broker.cpu()
        elif event.get("event") == "end":
            cpu1 = broker.cpu()
            child.wait(60)
            return event["count"], event["elapsed"], cpu1 - cpu0
    child.wait(60)
    raise SystemExit(f"5.x client {mode} failed ({child.returncode}):\n{child.stderr.read()[-3000:]}")  # type: ignore[union-attr]


def measured(broker: Broker, loop: Callable[[], int]) -> Run:
    cpu0, began = broker.cpu(), time.monotonic()
    n = loop()
    return n, time.monotonic() - began, broker.cpu() - cpu0


def sends_4x(producer: blocking.Producer, topic: str, seconds: float) -> int:
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        producer.send(Message(topic, BODY, 0, {"TAGS": "TagA"}))
        n += 1
    return n


def sends_4x_in_flight(producer: blocking.Producer, topic: str, seconds: float, in_flight: int) -> int:
    window, failed = threading.Semaphore(in_flight), []

    def finished(future: Future[Any]) -> None:
        if future.exception() is not None:
            failed.append(future.exception())
        window.release()

    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        window.acquire()
        producer.send_async(Message(topic, BODY, 0, {"TAGS": "TagA"})).add_done_callback(finished)
        n += 1
    for _ in range(in_flight):
        window.acquire()
    if failed:
        raise SystemExit(f"{len(failed)} 4.x sends failed: {failed[0]!r}")
    return n


def pulls_4x(consumer: blocking.PullConsumer, topic: str, expect: int, seconds: float) -> int:
    queues = consumer.fetch_subscribe_queues(topic)
    offsets = {queue: 0 for queue in queues}
    n, end = 0, time.monotonic() + seconds
    while n < expect and time.monotonic() < end:
        for queue in queues:
            result = consumer.pull(queue, "*", offsets[queue], 32)
            n += len(result.messages)
            if result.messages:
                offsets[queue] = result.next_begin_offset
                consumer.update_consumer_offset(queue, result.next_begin_offset)
    return n


def warm_4x(producer: blocking.Producer, topic: str) -> int:
    """20 sends once the broker's route is at the name server (it registers just after it starts)."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            producer.send(Message(topic, BODY, 0, {"TAGS": "TagA"}))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for _ in range(19):
        producer.send(Message(topic, BODY, 0, {"TAGS": "TagA"}))
    return 20


def one_round(broker: Broker, python5: str, home: str, r: int, options: argparse.Namespace,
              producer: blocking.Producer, consumer: blocking.PullConsumer, ca: str | None) -> dict[str, Run]:
    seconds, n = str(options.seconds), options.in_flight
    v5, v4 = f"BenchV5R{r}", f"BenchV4R{r}"
    runs: dict[str, Run] = {}
    runs["5.x send/1"] = v5_run(broker, python5, home, "send", "--topic", v5, "--seconds", seconds, ca=ca)
    runs[f"5.x send_async/{n}"] = v5_run(broker, python5, home, "send-async", "--topic", v5, "--seconds", seconds,
                                         "--in-flight", str(n), ca=ca)
    sent5 = runs["5.x send/1"][0] + runs[f"5.x send_async/{n}"][0] + 40  # and two warm-ups of 20
    runs["5.x receive+ack"] = v5_run(broker, python5, home, "receive", "--topic", v5, "--group", f"BenchG{r}",
                                     "--expect", str(sent5), "--seconds", str(10 * options.seconds), ca=ca)
    sent4 = warm_4x(producer, v4)
    runs["4.x send/1"] = measured(broker, lambda: sends_4x(producer, v4, options.seconds))
    runs[f"4.x send_async/{n}"] = measured(broker, lambda: sends_4x_in_flight(producer, v4, options.seconds, n))
    sent4 += runs["4.x send/1"][0] + runs[f"4.x send_async/{n}"][0]
    runs["4.x pull"] = measured(broker, lambda: pulls_4x(consumer, v4, sent4, 10 * options.seconds))
    for name, (count, elapsed, cpu) in runs.items():
        print(f"round {r} {name:20s} {count / elapsed:8.0f} msg/s  broker CPU {cpu / max(count, 1) * 1e6:6.0f} µs/msg"
              f"  ({count} in {elapsed:.1f} s)", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--tls", action="store_true", help="every client over TLS")
    options = parser.parse_args()
    python5 = v5_python()
    workdir = tempfile.mkdtemp(prefix="rocketpy-bench-v5-")
    home = os.path.join(workdir, "home")  # the 5.x client logs under ~/logs
    os.makedirs(home)
    certs = CertificateSet(os.path.join(workdir, "certs")) if options.tls else None
    ca = None if certs is None else certs.self_signed
    tls: dict[str, Any] = {} if ca is None else {"tls": True, "tls_ca": ca}
    broker = Broker(workdir, certs)
    try:
        producer = blocking.Producer("BenchPG4", broker.namesrv, auto_batch=False, **tls).start()
        consumer = blocking.PullConsumer("BenchPull4", broker.namesrv, **tls).start()
        try:
            rounds = [one_round(broker, python5, home, r, options, producer, consumer, ca)
                      for r in range(options.rounds)]
        finally:
            producer.shutdown()
            consumer.shutdown()
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nmedians of {options.rounds} rounds x {options.seconds} s, 1 KiB bodies, ASYNC_FLUSH, "
          f"{'TLS, ' if options.tls else ''}"
          f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}")
    print("| client | msg/s | broker CPU µs/msg |\n|---|---|---|")
    for name in rounds[0]:
        rates = [runs[name][0] / runs[name][1] for runs in rounds]
        cpus = [runs[name][2] / max(runs[name][0], 1) * 1e6 for runs in rounds]
        print(f"| {name} | {statistics.median(rates):,.0f} | {statistics.median(cpus):,.0f} |")


if __name__ == "__main__":
    main()
