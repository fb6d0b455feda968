"""The producer's usual send in C (``rocketpy._speedups.plain_send``, rocketpy/_speedups_producer.h) against
its Python reference (``Producer._send_plain``): random runs of sends of every kind, answers and clock
steps give the same requests, results, UNIQ_KEYs and queue choices either way."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from rocketpy.client import autobatch, producer as producer_module
from rocketpy.client.producer import Producer
from rocketpy.client import route
from rocketpy.common.message import Message, MessageExt
from rocketpy.remoting.codes import RequestCode

from .fakes import NAMESRV, FakeCluster, hold_sends

C_SEND = producer_module._plain_send
NO_C = None if C_SEND is not Producer._send_plain else "no compiled accelerator (plain_send)"

KINDS = st.sampled_from(["plain", "plain", "plain", "uniq", "delayed", "empty", "big", "no-wait", "other-topic",
                         "ext", "int-timeout", "tags"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["send_async", "send", "send_oneway"]), KINDS),
        st.tuples(st.just("answer"), st.integers(0, 3)),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.0004, 0.001, 0.5, 4.0])),
    ),
    max_size=40,
)


def message(kind: str, n: int) -> tuple[Message, float | None]:
    props = {"KEYS": f"k{n}"}
    body = f"body{n}".encode()
    if kind == "uniq":
        props["UNIQ_KEY"] = f"U{n}"
    elif kind == "delayed":
        props["DELAY"] = "2"
    elif kind == "no-wait":
        props["WAIT"] = "false"
    elif kind == "tags":
        props["TAGS"] = "TagA"
    if kind == "empty":
        body = b""
    elif kind == "big":
        body = b"x" * 5000  # compressed: the general path
    if kind == "ext":
        return MessageExt(topic="T", body=body, properties=props), None
    return Message("T2" if kind == "other-topic" else "T", body, 0, props), 3 if kind == "int-timeout" else None


class Run:
    """One producer against a fake cluster whose send answers wait until told."""

    def __init__(self, test: SynchronousTestCase, **options: Any) -> None:
        test.patch(route, "random", random.Random(0))  # RoundRobinIndex's start
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.cluster = FakeCluster(self.clock)
        self.cluster.add_broker("broker-a", "10.0.0.1:10911", queues=4)
        self.cluster.add_topic("T")
        self.cluster.add_topic("T2")
        remoting = self.cluster.remoting
        self.held: list[Deferred[Any]] = []
        hold_sends(remoting, self.held)
        self.producer = Producer("PG", NAMESRV, self.clock, remoting, client_id="10.0.0.9@1", rng=random.Random(7),
                                 **options)
        test.successResultOf(self.producer.start())
        for topic in ("T", "T2"):
            warm = self.producer.send(Message(topic, b"warm"))
            self.clock.advance(options.get("linger", 0))
            self.release_all()
            test.successResultOf(warm)
        remoting.requests.clear()
        self.outcomes: list[Any] = []

    def release_all(self) -> None:
        while self.held:
            self.held.pop(0).callback(None)

    def step(self, action: str, arg: Any, n: int) -> None:
        if action == "answer":
            if self.held:
                self.held.pop(arg % len(self.held)).callback(None)
        elif action == "advance":
            self.clock.advance(arg)
        else:
            msg, timeout = message(arg, n)
            method = getattr(self.producer, action)
            d = method(msg) if action == "send_oneway" else method(msg, timeout)
            i = len(self.outcomes)
            self.outcomes.append(None)
            d.addBoth(self.outcome, i, msg)

    def outcome(self, result: Any, i: int, msg: Message) -> None:
        if isinstance(result, Failure):
            self.outcomes[i] = ("failed", type(result.value).__name__)
        elif result is None:
            self.outcomes[i] = ("sent", msg.properties.get("UNIQ_KEY"))
        else:
            self.outcomes[i] = (result.msg_id, result.offset_msg_id, result.queue.queue_id, result.queue_offset,
                                msg.properties.get("UNIQ_KEY"))

    def seen(self) -> Any:
        requests = [(kind, addr, r.code, sorted(r.ext_fields.items()), r.body, timeout)
                    for kind, addr, r, timeout in self.cluster.remoting.requests]
        return requests, self.outcomes, self.producer._publish["T"].index._value, self.producer._publish["T2"].index._value


class PlainSendTests(SynchronousTestCase):
    skip = NO_C

    def both(self, steps: list[tuple[str, Any]], **options: Any) -> tuple[Any, Any]:
        runs = []
        for plain in (C_SEND, Producer._send_plain):
            self.patch(producer_module, "_plain_send", plain)
            run = Run(self, **options)
            for n, (action, arg) in enumerate(steps):
                run.step(action, arg, n)
            run.clock.advance(10)
            run.release_all()
            runs.append(run.seen())
            self.successResultOf(run.producer.shutdown())
        return runs[0], runs[1]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(STEPS)
    def test_same_as_python(self, steps: list[tuple[str, Any]]) -> None:
        c, python = self.both(steps)
        self.maxDiff = None
        self.assertEqual(c, python, steps)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(STEPS)
    def test_lingering_same_as_python(self, steps: list[tuple[str, Any]]) -> None:
        """With ``linger``, sends wait for a flush already scheduled."""
        c, python = self.both(steps, linger=0.001)
        self.maxDiff = None
        self.assertEqual(c, python, steps)

    def test_busy_queue_joins_in_c(self) -> None:
        """Sends to queues with requests in flight join their next batch in C; the first send to each
        queue goes alone through the end of the Python method; nothing calls the whole method."""
        calls: dict[str, int] = {"_send_plain": 0, "_join_or_request": 0}
        for name in calls:
            python = getattr(Producer, name)

            def counting(self: Producer, *args: Any, name: str = name, python: Any = python) -> Any:
                calls[name] += 1
                return python(self, *args)

            self.patch(Producer, name, counting)
        run = Run(self)
        calls.update(_send_plain=0, _join_or_request=0)
        ds = [run.producer.send_async(Message("T", b"m", 0, {})) for _ in range(12)]
        self.assertEqual(calls, {"_send_plain": 0, "_join_or_request": 4})
        run.release_all()
        run.clock.advance(0)
        run.release_all()
        results = [self.successResultOf(d) for d in ds]
        self.assertEqual(len({r.msg_id for r in results}), 12)
        ids = [r.queue.queue_id for r in results]
        self.assertEqual(ids, ids[:4] * 3)  # round robin
        self.assertEqual(sorted(ids[:4]), [0, 1, 2, 3])
        self.assertEqual(len(run.cluster.remoting.sent(RequestCode.SEND_BATCH_MESSAGE)), 4)
        self.successResultOf(run.producer.shutdown())


def members(specs: list[tuple[int, float]]) -> list[autobatch._Waiting]:
    made = []
    for n, (size, deadline) in enumerate(specs):
        member = autobatch._Waiting()
        member.msg, member.size, member.deadline, member.retry = (
            Message("T", b"x", 0, {"UNIQ_KEY": f"U{n}"}), size, deadline, None)
        made.append(member)
    return made


class SplitTests(SynchronousTestCase):
    """A queue's waiting sends into batch requests: C (``split_waiting``, ``batch_of``) against Python."""

    skip = NO_C

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.integers(1, 40), st.sampled_from([0.5, 1.0, 1.5, 2.0]))),
           st.sampled_from([1.0, 1.25]), st.integers(1, 100), st.integers(1, 5))
    def test_same_as_python(self, specs: list[tuple[int, float]], now: float, max_bytes: int, max_count: int) -> None:
        waiting = members(specs)
        c = autobatch._split_waiting(waiting, now, max_bytes, max_count)
        self.assertEqual(c, autobatch.split_waiting(waiting, now, max_bytes, max_count))
        for part in c or []:
            if type(part) is list:
                self.assertEqual(autobatch._batch_of(part), autobatch.batch_of(part))

    def test_unusual_left_to_python(self) -> None:
        waiting = members([(3, 2.0), (4, 2.0)])
        waiting[1].deadline = "soon"  # type: ignore[assignment]
        self.assertIsNone(autobatch._split_waiting(waiting, 1.0, 100, 10))
        self.assertIsNone(autobatch._batch_of(waiting))
        waiting[1].deadline = 2.0
        self.assertIsNotNone(autobatch._batch_of(waiting))
        del waiting[1].msg.properties["UNIQ_KEY"]
        self.assertIsNone(autobatch._batch_of(waiting))
