"""Send and receive rates through the 5.x gRPC endpoint, beside 4.x sends, same broker process.

Usage::

    python benchmarks/grpc_endpoint.py [--seconds 3] [--in-flight 32] [--tls]

Starts ``python -m twisted rocketpy`` with its gRPC endpoint on a free port, then measures with
1 KiB bodies, each with the CPU µs per message of the broker process:

- ``grpc send/1``: SendMessage from the generated stub, one at a time;
- ``grpc send/N``: N SendMessage calls in flight (``stub.SendMessage.future``);
- ``grpc receive+ack``: ReceiveMessage of 32, then one AckMessage of the 32 handles;
- ``4.x send/1``: ``rocketpy.blocking.Producer.send`` (SEND_MESSAGE_V2), one at a time.

With ``--tls`` the broker runs ``--tls-mode enforcing`` with a throwaway self-signed certificate and
the gRPC rows go over TLS (the 4.x row is left out).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import client as client_bench  # noqa: E402
import grpc  # noqa: E402
from broker import free_port, process_cpu, start_rocketpy  # noqa: E402

from rocketpy.grpc.v2 import definition_pb2 as pb  # noqa: E402
from rocketpy.grpc.v2 import service_pb2 as rpc  # noqa: E402
from rocketpy.grpc.v2.service_pb2_grpc import MessagingServiceStub  # noqa: E402

BODY = b"x" * 1024
TOPIC = "BenchGrpc"
METADATA = [("x-mq-client-id", "bench@1")]


def message() -> rpc.SendMessageRequest:
    sysp = pb.SystemProperties(message_id=uuid.uuid4().hex.upper(), message_type=pb.MessageType.NORMAL, tag="T")
    return rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=TOPIC), body=BODY,
                                                       system_properties=sysp)])


def sends_one_at_a_time(stub: MessagingServiceStub, seconds: float) -> int:
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        assert stub.SendMessage(message(), metadata=METADATA).status.code == pb.Code.OK
        n += 1
    return n


def sends_in_flight(stub: MessagingServiceStub, seconds: float, in_flight: int) -> int:
    n, end = 0, time.monotonic() + seconds
    window: collections.deque[Any] = collections.deque()
    while time.monotonic() < end:
        while len(window) < in_flight:
            window.append(stub.SendMessage.future(message(), metadata=METADATA))
        assert window.popleft().result().status.code == pb.Code.OK
        n += 1
    for future in window:
        future.result()
    return n + len(window)


def receives(stub: MessagingServiceStub, seconds: float, available: int) -> int:
    """Receive and ack until ``available`` messages were taken (no empty long poll) or time is up."""
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="BenchGroup"), batch_size=32,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
        filter_expression=pb.FilterExpression(type=pb.FilterType.TAG, expression="*"))
    request.invisible_duration.seconds = 60
    request.long_polling_timeout.seconds = 5
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end and n < available:
        got = [r.message for r in stub.ReceiveMessage(request, timeout=30, metadata=METADATA)
               if r.HasField("message")]
        entries = [rpc.AckMessageEntry(message_id=m.system_properties.message_id,
                                       receipt_handle=m.system_properties.receipt_handle) for m in got]
        ack = stub.AckMessage(rpc.AckMessageRequest(group=request.group, topic=pb.Resource(name=TOPIC),
                                                    entries=entries), metadata=METADATA)
        assert ack.status.code == pb.Code.OK, ack.status
        n += len(got)
    return n


def sends_4x(namesrv: str, seconds: float) -> int:
    from rocketpy.blocking import Message, Producer

    producer = Producer("BenchPG", namesrv, auto_batch=False).start()
    try:
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            producer.send(Message("Bench4x", BODY))
            n += 1
        return n
    finally:
        producer.shutdown()


def measured(name: str, pid: int, run: Callable[[], int]) -> int:
    cpu0, t0 = process_cpu(pid), time.monotonic()
    n = run()
    elapsed, cpu1 = time.monotonic() - t0, process_cpu(pid)
    cpu = "" if cpu0 is None or cpu1 is None or not n else f"  broker CPU {(cpu1 - cpu0) / n * 1e6:7.1f} µs/msg"
    print(f"{name:18s} {n / elapsed:9.0f} msg/s{cpu}", flush=True)
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--tls", action="store_true", help="the gRPC endpoint with --tls-mode enforcing")
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="rocketpy-bench-grpc-")
    grpc_port = free_port()
    extra: tuple[str, ...] = ()
    target = f"127.0.0.1:{grpc_port}"
    if options.tls:
        from tests.remoting.certs import CertificateSet

        certs = CertificateSet(os.path.join(workdir, "certs"))
        extra = ("--tls-cert", certs.self_signed, "--tls-key", certs.self_signed_key, "--tls-mode", "enforcing")
        with open(certs.self_signed, "rb") as f:
            trust = f.read()
    process, _ = start_rocketpy(workdir, "ASYNC_FLUSH", grpc_port, extra)
    try:
        namesrv_port = client_bench._namesrv_port(process)
        channel = (grpc.secure_channel(target, grpc.ssl_channel_credentials(trust)) if options.tls
                   else grpc.insecure_channel(target))
        with channel:
            stub = MessagingServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            sent = sends_one_at_a_time(stub, 0.5)  # warm up: topic creation, connections
            sent += measured("grpc send/1", process.pid, lambda: sends_one_at_a_time(stub, options.seconds))
            sent += measured(f"grpc send/{options.in_flight}", process.pid,
                             lambda: sends_in_flight(stub, options.seconds, options.in_flight))
            measured("grpc receive+ack", process.pid, lambda: receives(stub, options.seconds, sent))
        if not options.tls:
            measured("4.x send/1", process.pid, lambda: sends_4x(f"127.0.0.1:{namesrv_port}", options.seconds))
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
