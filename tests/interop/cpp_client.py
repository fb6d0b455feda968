"""Drive the official RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4) from a child process.

Its ctypes calls block and its threads outlive calls, so the tests never import it in the
trial process: they run ``python cpp_client.py produce|consume ...`` and read one JSON
object per line from stdout. Bodies are sent as UTF-8 text; the wrapper cuts received
bodies at the first NUL byte, so tests avoid NULs.

``produce`` prints ``{"event": "sent", "i": n, "status": ..., "msg_id": ..., "offset": ...}``
per message (oneway sends report ``status: null``) and ``{"event": "done"}``.
``consume`` prints ``{"event": "message", ...}`` per delivery and
``{"event": "done", "count": n}`` after ``--expect`` messages (then ``--linger`` seconds
so offsets get committed) or at ``--timeout``.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
from typing import Any

_print_lock = threading.Lock()


def emit(**event: Any) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def body_of(prefix: str, i: int, size: int) -> str:
    """A text body: ``<prefix>-<i>`` padded with a repeating pattern to ``size`` characters."""
    head = f"{prefix}-{i}"
    if size <= len(head):
        return head
    return head + "|" + ("abcdefghij" * (size // 10 + 1))[: size - len(head) - 1]


def produce(args: argparse.Namespace) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer(args.group, timeout=10_000, max_message_size=4 * 1024 * 1024)
    producer.set_namesrv_addr(args.namesrv)
    if args.access_key:
        producer.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")
    producer.start()
    try:
        batch = []
        for i in range(args.count):
            msg = Message(args.topic)
            if args.tag:
                msg.set_tags(args.tag)
            msg.set_keys(f"{args.keys}-{i}")
            for prop in args.prop:
                name, _, value = prop.partition("=")
                msg.set_property(name, value)
            msg.set_body(body_of(args.body_prefix, i, args.size))
            if args.delay_level:
                msg.set_delay_time_level(args.delay_level)
            if args.mode == "batch":
                batch.append(msg)
                continue
            if args.mode == "sync" and args.report_errors:
                try:
                    result = producer.send_sync(msg)
                except Exception as e:  # the broker refused it: report instead of failing
                    emit(event="error", i=i, message=str(e))
                    continue
            elif args.mode == "sync":
                result = producer.send_sync(msg)
            elif args.mode == "orderly":
                result = producer.send_orderly(msg, args.order_key)
            elif args.mode == "oneway":
                producer.send_oneway(msg)
                emit(event="sent", i=i, status=None, msg_id=None, offset=None)
                continue
            else:
                raise SystemExit(f"unknown mode {args.mode}")
            emit(event="sent", i=i, status=int(result.status), msg_id=result.msg_id, offset=result.offset)
        if batch:
            result = producer.send_batch(batch)
            emit(event="sent", i=0, status=int(result.status), msg_id=result.msg_id, offset=result.offset)
        time.sleep(args.linger)  # oneway frames are written by the client's own threads
        emit(event="done")
    finally:
        producer.shutdown()
    emit(event="stopped")


def consume(args: argparse.Namespace) -> None:
    from rocketmq.client import PushConsumer, RecvMessage
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

    received = 0
    enough = threading.Event()
    count_lock = threading.Lock()

    def on_message(_consumer: Any, handle: Any) -> int:
        # A raw MSG_CALLBACK_FUNC: the wrapper's subscribe() callback cannot return RECONSUME_LATER.
        nonlocal received
        msg = RecvMessage(handle)
        props = {name: _text(msg.get_property(name)) for name in args.show_prop}
        body = msg.body or b""
        emit(
            event="message", topic=msg.topic, tags=_text(msg.tags), keys=_text(msg.keys),
            body=base64.b64encode(body).decode(), queue_id=msg.queue_id, queue_offset=msg.queue_offset,
            reconsume_times=msg.reconsume_times, msg_id=msg.id, props=props,
            born_timestamp=msg.born_timestamp, store_timestamp=msg.store_timestamp,
        )
        with count_lock:
            received += 1
            if received >= args.expect:
                enough.set()
        if msg.reconsume_times < args.fail_times:
            return 1  # RECONSUME_LATER: the client sends the message back (CONSUMER_SEND_MSG_BACK)
        return 0  # CONSUME_SUCCESS

    consumer = PushConsumer(args.group, orderly=args.orderly)
    consumer.set_namesrv_addr(args.namesrv)
    if args.access_key:
        consumer.set_session_credentials(args.access_key, args.secret_key, "ALIYUN")
    consumer.set_thread_count(1)
    callback = MSG_CALLBACK_FUNC(on_message)
    ffi_check = _ffi_check()
    ffi_check(dll.Subscribe(consumer._handle, args.topic.encode(), args.expression.encode()))
    register = dll.RegisterMessageCallbackOrderly if args.orderly else dll.RegisterMessageCallback
    ffi_check(register(consumer._handle, callback))
    consumer.start()
    emit(event="started")
    try:
        enough.wait(args.timeout)
        time.sleep(args.linger)
        emit(event="done", count=received)
    finally:
        consumer.shutdown()
    del callback  # only now may ctypes free the trampoline
    emit(event="stopped")


def _ffi_check() -> Any:
    from rocketmq.exceptions import ffi_check

    return ffi_check


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="PID_INTEROP")
    p.add_argument("--mode", choices=["sync", "oneway", "orderly", "batch"], default="sync")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--tag", default="")
    p.add_argument("--keys", default="key")
    p.add_argument("--prop", action="append", default=[], help="name=value, repeatable")
    p.add_argument("--body-prefix", default="body")
    p.add_argument("--size", type=int, default=0, help="pad bodies to this many characters")
    p.add_argument("--order-key", type=int, default=0)
    p.add_argument("--linger", type=float, default=0.5)
    p.add_argument("--delay-level", type=int, default=0, help="DELAY level of every message (0: none)")
    c = sub.add_parser("consume")
    c.add_argument("--namesrv", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", required=True)
    c.add_argument("--expression", default="*")
    c.add_argument("--expect", type=int, required=True)
    c.add_argument("--timeout", type=float, default=60.0)
    c.add_argument("--linger", type=float, default=1.0)
    c.add_argument("--orderly", action="store_true")
    c.add_argument("--fail-times", type=int, default=0, help="answer RECONSUME_LATER while reconsumeTimes < this")
    c.add_argument("--show-prop", action="append", default=[], help="property to report, repeatable")
    for command in (p, c):
        command.add_argument("--access-key", default="", help="sign requests (ACL) with this key …")
        command.add_argument("--secret-key", default="", help="… and this secret")
    p.add_argument("--report-errors", action="store_true", help="a failed sync send is an error event, not a crash")
    args = parser.parse_args(argv)
    {"produce": produce, "consume": consume}[args.command](args)


if __name__ == "__main__":
    main(sys.argv[1:])
