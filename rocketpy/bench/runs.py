"""The produce and consume loops of ``rocketpy-bench`` on rocketpy's Deferred client."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import LoopingCall

from rocketpy.bench.stats import RunStats
from rocketpy.client import Message, Producer, PushConsumer, new_message
from rocketpy.client.process import ConsumeContext
from rocketpy.client.results import ConsumeResult
from rocketpy.common.message import MessageExt

SEND_MODES = ("sync", "async", "oneway", "batch")


@dataclass
class Limits:
    """When a run ends: after ``count`` messages, after ``duration`` seconds, or when ``stopped`` fires."""

    count: int | None = None
    duration: float | None = None


class BenchError(Exception):
    """A run cannot go on (no route, name server unreachable); the message says why."""


class Run:
    """What both loops share: the stats, the progress line every second, and the end of the run.

    :param report: called with each second's figures and the total so far.
    """

    def __init__(self, reactor: Any, limits: Limits, report: Callable[[dict[str, Any], int], None]) -> None:
        self.reactor = reactor
        self.limits = limits
        self.stats = RunStats(reactor.seconds())
        self.finished: Deferred[None] = Deferred()
        self._report = report
        self._progress = LoopingCall(self._tick)
        self._progress.clock = reactor
        self._timer: Any = None

    def start(self) -> None:
        self.stats = RunStats(self.reactor.seconds())
        if self.limits.duration is not None:
            self._timer = self.reactor.callLater(self.limits.duration, self.stop)
        self._progress.start(1.0, now=False)

    def _tick(self) -> None:
        self._report(self.stats.progress(self.reactor.seconds()), self.stats.ok)

    def more(self) -> bool:
        """Whether the run goes on."""
        return not self.finished.called

    def stop(self) -> None:
        """End the run (the loops see it at their next message)."""
        if self._progress.running:
            self._progress.stop()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        if not self.finished.called:
            self.finished.callback(None)

    def summary(self) -> dict[str, Any]:
        return self.stats.summary(self.reactor.seconds())


async def produce(run: Run, producer: Producer, topic: str, size: int, window: int, mode: str,
                  batch: int = 32, tags: str | None = None) -> None:
    """Send ``size``-byte messages with ``window`` requests in flight until the run ends.

    The first message goes alone (its RT includes the route lookup): when it fails (no route,
    name server unreachable) the run ends with a :class:`BenchError` naming the reason.
    """
    body = os.urandom(size)  # incompressible, as the client compresses bodies over 4 KiB

    def message() -> Message:
        return new_message(topic, body, tags=tags)

    run.start()
    began = run.reactor.seconds()
    try:
        await producer.send(message())
    except Exception as e:
        run.stop()
        raise BenchError(f"cannot send to topic {topic!r}: {e}") from None
    run.stats.record(run.reactor.seconds() - began)
    per_request = batch if mode == "batch" else 1
    send = _sender(producer, mode)
    left = [None if run.limits.count is None else run.limits.count - 1]

    def claim() -> int:
        """How many messages the next request carries (0: the run is over)."""
        if not run.more():
            return 0
        if left[0] is None:
            return per_request
        n = min(per_request, left[0])
        left[0] -= n
        return n

    async def sender() -> None:
        while (n := claim()) > 0:
            began = run.reactor.seconds()
            try:
                await send([message() for _ in range(n)])
            except Exception:
                run.stats.fail(n)
            else:
                run.stats.record(run.reactor.seconds() - began, n)
        if left[0] == 0:
            run.stop()

    await gatherResults([Deferred.fromCoroutine(sender()) for _ in range(window)])
    run.stop()


def _sender(producer: Producer, mode: str) -> Callable[[list[Message]], Deferred[Any]]:
    """One request of ``mode`` carrying the given messages (one, or a batch)."""
    if mode == "batch":
        return producer.send_batch
    if mode == "async":
        return lambda msgs: producer.send_async(msgs[0])
    if mode == "oneway":
        return lambda msgs: producer.send_oneway(msgs[0])
    return lambda msgs: producer.send(msgs[0])


async def consume(run: Run, consumer: PushConsumer, topic: str, expression: str = "*") -> None:
    """Consume ``topic`` until the run ends; a message's RT is from its birth (the producer's
    clock) to its arrival here, RocketMQ's "B2C" figure."""
    def listener(msgs: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        now = run.reactor.seconds()
        for msg in msgs:
            if run.more():
                run.stats.record(max(0.0, now - msg.born_timestamp / 1000))
        if run.limits.count is not None and run.stats.ok >= run.limits.count:
            run.reactor.callLater(0, run.stop)  # once this message's offset is updated: shutdown commits it
        return ConsumeResult.CONSUME_SUCCESS

    consumer.subscribe(topic, expression)
    consumer.register_listener(listener)
    try:
        route = await consumer.instance.fetch_route(topic)
    except Exception as e:
        raise BenchError(f"cannot consume topic {topic!r}: {e}") from None
    if route is None:
        raise BenchError(f"topic {topic!r} does not exist")
    run.start()
    await consumer.start()
    await run.finished

