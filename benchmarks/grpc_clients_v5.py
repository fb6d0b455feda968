"""The 5.x side of ``benchmarks/grpc_clients.py``: the official client, run in its own venv.

Run by the interpreter of ``tests/interop/v5venv.py``'s virtual environment (its ``rocketmq``
package is ``rocketmq-python-client``). One mode per run; it prints JSON lines: ``{"event":
"start"}`` once warmed up (the parent samples the broker's CPU then), and ``{"event": "end",
"count", "elapsed"}`` when done (sampled again).

- ``send``: ``Producer.send`` one at a time, for ``--seconds``;
- ``send-async``: ``Producer.send_async`` with ``--in-flight`` futures outstanding;
- ``receive``: ``SimpleConsumer.receive(32, 60 s)`` then ``ack`` of each message, until
  ``--expect`` messages or ``--seconds``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from typing import Any

BODY = b"x" * 1024


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def message(topic: str) -> Any:
    from rocketmq import Message

    msg = Message()
    msg.topic = topic
    msg.body = BODY
    msg.tag = "TagA"
    return msg


def send(args: argparse.Namespace) -> None:
    from rocketmq import ClientConfiguration, Credentials, Producer

    producer = Producer(ClientConfiguration(args.endpoint, Credentials()), (args.topic,), tls_enable=args.tls)
    producer.startup()
    try:
        for _ in range(20):  # warm up: route, connection, settings
            producer.send(message(args.topic))
        emit(event="start", warmed=20)
        n, began = 0, time.monotonic()
        end = began + args.seconds
        if args.mode == "send":
            while time.monotonic() < end:
                producer.send(message(args.topic))
                n += 1
        else:
            window: collections.deque[Any] = collections.deque()
            while time.monotonic() < end:
                while len(window) < args.in_flight:
                    window.append(producer.send_async(message(args.topic)))
                window.popleft().result(timeout=30)
                n += 1
            for future in window:
                future.result(timeout=30)
            n += len(window)
        emit(event="end", count=n, elapsed=time.monotonic() - began)
    finally:
        producer.shutdown()


def receive(args: argparse.Namespace) -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(ClientConfiguration(args.endpoint, Credentials()), args.group,
                              {args.topic: FilterExpression()}, await_duration=5, tls_enable=args.tls)
    consumer.startup()
    try:
        emit(event="start")
        n, began = 0, time.monotonic()
        end = began + args.seconds
        while n < args.expect and time.monotonic() < end:
            for msg in consumer.receive(32, 60) or []:
                consumer.ack(msg)
                n += 1
        emit(event="end", count=n, elapsed=time.monotonic() - began)
    finally:
        consumer.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["send", "send-async", "receive"])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--group", default="BenchV5")
    parser.add_argument("--expect", type=int, default=1 << 62)
    parser.add_argument("--tls", action="store_true", help="tls_enable (trusting $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)")
    args = parser.parse_args()
    (receive if args.mode == "receive" else send)(args)


if __name__ == "__main__":
    main()
