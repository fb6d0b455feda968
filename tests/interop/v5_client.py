"""Drive the official RocketMQ 5.x Python client (PyPI ``rocketmq-python-client``) from a child process.

Run by the interpreter of the virtual environment that :mod:`tests.interop.v5venv` makes (its
``rocketmq`` package is not the C++ wrapper's). Prints one JSON object per line:

``produce --endpoint E --topic T --count N [--delivery-at MS]`` prints ``{"event": "sent", "i", "message_id"}`` per
message, then ``{"event": "done"}``.
``consume --endpoint E --topic T --group G --expect N`` receives (invisible ``--invisible`` s),
acks unless ``--no-ack``, prints ``{"event": "message", "body", "tag", "message_id",
"delivery_attempt", "properties", "delivery_timestamp", "received_ms"}`` per message and ``{"event": "done", "count"}`` once it has
``--expect`` messages or at ``--timeout``. The 5.x client 5.1.2 receives from a queue picked at random
for every receive (a new ``QueueSelector`` each time), so with several brokers a receive may long-poll
one already drained: ``--seed`` makes its picks reproducible.
Every command signs its requests with ``--access-key`` / ``--secret-key`` when given; ``produce`` and
``consume`` connect with TLS with ``--tls`` (trusting ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, else grpcio's roots).
``push --endpoint E --topic T --group G --expect N [--fail-times K]`` runs a PushConsumer whose
listener answers FAILURE while a message's delivery attempt is at most K; it prints every
delivery as ``consume`` does and ``{"event": "done", "count"}`` after N successes or ``--timeout``.
``transaction --endpoint E --topic T --bodies B...`` sends one transactional message per body and
commits it (a body starting ``commit``), rolls it back (``rollback``) or leaves it undecided; its
TransactionChecker answers ROLLBACK for ``rollback`` bodies, else COMMIT, printing
``{"event": "checked", "body", "transaction_id"}``. Prints ``{"event": "sent", "body", "message_id",
"transaction_id"}`` per message and ``{"event": "done", "unchecked"}`` once every undecided one was
checked, or at ``--timeout``.
``simple --endpoint E --topic T --scenario GROUP INVISIBLE STEPS [--scenario ...]`` runs one SimpleConsumer
per scenario, all at once (a thread each), receiving one message at a time, invisible INVISIBLE s, and
following STEPS (comma-separated): ``ack`` / ``leave`` / ``change:S`` receive the next delivery, then
ack it, do nothing, or change its invisible duration to S s (``change:S+ack``: then ack it);
``refuse:S`` receives invisible S s, which must fail; ``quiet:S`` keeps receiving for S s (whatever
comes is printed and acked). Prints ``{"event": "message", "group", "step", "topic", "body",
"message_id", "delivery_attempt", "properties", "keys", "tag", "asked_ms", "received_ms"}`` per
delivery (``asked_ms``: before the receive that got it; ``received_ms``: after it, before the step's
call), ``{"event": "refused", "group", "code", "error"}`` per refusal, then ``{"event": "done"}``; a
scenario's error (a step without its delivery within ``--timeout`` s, an exception) exits 1 once all
are over.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def produce(args: argparse.Namespace) -> None:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key)), (args.topic,),
                        tls_enable=args.tls)
    producer.startup()
    try:
        for i in range(args.count):
            msg = Message()
            msg.topic = args.topic
            msg.body = f"{args.body_prefix}-{i}".encode()
            msg.tag = args.tag
            msg.keys = f"key-{i}"
            msg.add_property("index", str(i))
            if args.message_group:
                msg.message_group = args.message_group
            if args.delivery_at:
                msg.delivery_timestamp = args.delivery_at  # ms, as its docstring says (doc/grpc.md)
            receipt = producer.send(msg)
            emit(event="sent", i=i, message_id=receipt.message_id, recall_handle=receipt.recall_handle)
            if i < args.recall:  # cancel the timer message at once
                emit(event="recalled", i=i, message_id=producer.recall_message(args.topic, receipt.recall_handle))
    finally:
        producer.shutdown()
    emit(event="done")


def consume(args: argparse.Namespace) -> None:
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )

    consumer = SimpleConsumer(ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key)), args.group,
                              {args.topic: FilterExpression(args.filter)}, await_duration=args.await_duration,
                              tls_enable=args.tls)
    consumer.startup()
    count = 0
    deadline = time.monotonic() + args.timeout
    try:
        while count < args.expect and time.monotonic() < deadline:
            for msg in consumer.receive(16, args.invisible) or []:
                count += 1
                emit(event="message", body=msg.body.decode(errors="replace"), tag=msg.tag,
                     message_id=msg.message_id, delivery_attempt=msg.delivery_attempt,
                     properties=dict(msg.properties or {}), delivery_timestamp=msg.delivery_timestamp,
                     received_ms=int(time.time() * 1000))
                if not args.no_ack:
                    consumer.ack(msg)
    finally:
        consumer.shutdown()
    emit(event="done", count=count)


def push(args: argparse.Namespace) -> None:
    import threading

    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    lock, done = threading.Lock(), threading.Event()
    delivered: list[Any] = []

    class Listener(MessageListener):
        def consume(self, msg: Any) -> Any:
            with lock:
                emit(event="message", body=msg.body.decode(errors="replace"), tag=msg.tag,
                     message_id=msg.message_id, delivery_attempt=msg.delivery_attempt,
                     properties=dict(msg.properties or {}))
                if msg.delivery_attempt <= args.fail_times:
                    return ConsumeResult.FAILURE
                delivered.append(msg.message_id)
                if len(delivered) >= args.expect:
                    done.set()
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key)), args.group, Listener(),
                            {args.topic: FilterExpression(args.filter)})
    consumer.startup()
    try:
        done.wait(args.timeout)
    finally:
        consumer.shutdown()
    emit(event="done", count=len(delivered))


def transaction(args: argparse.Namespace) -> None:
    import threading

    from rocketmq import (
        ClientConfiguration,
        Credentials,
        Message,
        Producer,
        TransactionChecker,
        TransactionResolution,
    )

    undecided = {body for body in args.bodies if not body.startswith(("commit", "rollback"))}
    lock, all_checked = threading.Lock(), threading.Event()

    class Checker(TransactionChecker):
        def check(self, message: Any) -> Any:
            body = message.body.decode(errors="replace")
            with lock:
                emit(event="checked", body=body, message_id=message.message_id)
                undecided.discard(body)
                if not undecided:
                    all_checked.set()
            return TransactionResolution.ROLLBACK if body.startswith("rollback") else TransactionResolution.COMMIT

    config = ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key))
    producer = Producer(config, (args.topic,), Checker())
    producer.startup()
    try:
        for body in args.bodies:
            msg = Message()
            msg.topic = args.topic
            msg.body = body.encode()
            msg.tag = "TagT"
            txn = producer.begin_transaction()
            receipt = producer.send(msg, txn)
            emit(event="sent", body=body, message_id=receipt.message_id, transaction_id=receipt.transaction_id)
            if body.startswith("commit"):
                txn.commit()
            elif body.startswith("rollback"):
                txn.rollback()
        if undecided:
            all_checked.wait(args.timeout)
            time.sleep(1.0)  # the checker's EndTransaction is sent asynchronously: let it land
    finally:
        producer.shutdown()
    emit(event="done", unchecked=sorted(undecided))


def simple(args: argparse.Namespace) -> None:
    import threading

    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

    config = ClientConfiguration(args.endpoint, Credentials(args.access_key, args.secret_key))
    failures: list[str] = []

    def now_ms() -> int:
        return int(time.time() * 1000)

    def run(group: str, invisible: int, steps: str) -> None:
        consumer = SimpleConsumer(config, group, {args.topic: FilterExpression()}, await_duration=5)

        def deliveries(step: str, until: float) -> Any:
            while time.monotonic() < until:
                asked = now_ms()
                for msg in consumer.receive(1, invisible) or []:
                    emit(event="message", group=group, step=step, topic=msg.topic,
                         body=msg.body.decode(errors="replace"), message_id=msg.message_id,
                         delivery_attempt=msg.delivery_attempt, properties=dict(msg.properties or {}),
                         keys=sorted(msg.keys or []), tag=msg.tag, asked_ms=asked, received_ms=now_ms())
                    yield msg

        try:
            consumer.startup()
            for step in steps.split(","):
                action, _, then = step.partition("+")
                name, _, seconds = action.partition(":")
                if name == "refuse":
                    try:
                        got = consumer.receive(1, int(seconds))
                    except Exception as e:
                        emit(event="refused", group=group, code=getattr(e, "code", None), error=str(e))
                    else:
                        failures.append(f"{group}: {step} received {got!r}")
                elif name == "quiet":
                    for msg in deliveries(step, time.monotonic() + float(seconds)):
                        consumer.ack(msg)
                else:
                    msg = next(deliveries(step, time.monotonic() + args.timeout), None)
                    if msg is None:
                        failures.append(f"{group}: nothing to {step} within {args.timeout} s")
                        return
                    if name == "ack":
                        consumer.ack(msg)
                    elif name == "change":
                        consumer.change_invisible_duration(msg, int(seconds))
                    if then == "ack":
                        consumer.ack(msg)  # under the handle the change gave
        except Exception as e:
            failures.append(f"{group}: {e!r}")
        finally:
            if consumer.is_running:
                consumer.shutdown()

    threads = [threading.Thread(target=run, args=(group, int(invisible), steps))
               for group, invisible, steps in args.scenario]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit("\n".join(failures))
    emit(event="done")


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--tag", default="TagA")
    p.add_argument("--body-prefix", default="v5")
    p.add_argument("--message-group", default="", help="send FIFO messages of this group")
    p.add_argument("--delivery-at", type=int, default=0, help="delivery timestamp (epoch ms) of every message")
    p.add_argument("--recall", type=int, default=0, help="recall the first N (timer) messages once sent")
    c = sub.add_parser("consume")
    c.add_argument("--group", required=True)
    c.add_argument("--expect", type=int, required=True)
    c.add_argument("--invisible", type=int, default=15)
    c.add_argument("--await-duration", type=int, default=5)
    c.add_argument("--filter", default="*")
    c.add_argument("--timeout", type=float, default=60)
    c.add_argument("--no-ack", action="store_true")
    c.add_argument("--seed", type=int, help="seed the client's queue choice (5.1.2 picks a random queue per receive)")
    for command in (p, c):
        command.add_argument("--tls", action="store_true", help="connect with TLS")
    u = sub.add_parser("push")
    u.add_argument("--group", required=True)
    u.add_argument("--expect", type=int, required=True)
    u.add_argument("--filter", default="*")
    u.add_argument("--timeout", type=float, default=60)
    u.add_argument("--fail-times", type=int, default=0, help="answer FAILURE while delivery_attempt <= this")
    t = sub.add_parser("transaction")
    t.add_argument("--bodies", nargs="+", required=True)
    t.add_argument("--timeout", type=float, default=40)
    s = sub.add_parser("simple")
    s.add_argument("--scenario", nargs=3, action="append", required=True, metavar=("GROUP", "INVISIBLE", "STEPS"))
    s.add_argument("--timeout", type=float, default=30)
    for command in (p, c, u, t, s):
        command.add_argument("--endpoint", required=True)
        command.add_argument("--topic", required=True)
        command.add_argument("--access-key", default="", help="SessionCredentials for a broker with --acl-enable")
        command.add_argument("--secret-key", default="")
    args = parser.parse_args()
    if getattr(args, "seed", None) is not None:
        import random

        random.seed(args.seed)
    {"produce": produce, "consume": consume, "push": push, "transaction": transaction,
     "simple": simple}[args.command](args)


if __name__ == "__main__":
    main()
