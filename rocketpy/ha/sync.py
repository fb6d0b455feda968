"""``SlaveSynchronize``: a slave copies its master's config tables (RocketMQ's ``SlaveSynchronize``).

Every ``sync_interval`` seconds the slave asks its master (remoting, not the HA link) for
GET_ALL_TOPIC_CONFIG (21), GET_ALL_CONSUMER_OFFSET (43), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201), GET_ALL_DELAY_OFFSET (45) and GET_TIMER_CHECK_POINT (60), and merges the answers into its
own tables. Topics and groups are taken only when their data version changed, and then replace the
slave's (what the master lacks is deleted, as Java 5 does). The topic, group
and delay-offset files are then written through each table's writer (the broker's config pool);
the broker's own timer writes consumer offsets; the timer checkpoint's taker writes its own file.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel

from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.errors import RemotingError
from rocketpy.util.configfile import JsonConfigFile

#: Takes a master's answer body into a table and writes it; raises ValueError on a malformed body.
Taker = Callable[[bytes], Awaitable[None]]


class Invoker(Protocol):
    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]: ...


class SlaveSynchronize:
    """Keeps a slave's topics, consumer offsets and subscription groups in step with its master.

    :param clock: runs the timer.
    :param client: asks the master.
    :param topics: the slave's ``TopicConfigManager``.
    :param offsets: the slave's ``ConsumerOffsetManager`` (the broker writes its file).
    :param groups: the slave's ``SubscriptionGroupManager``.
    :param delay_offsets: the slave's ``DelayOffsetTable``.
    :param timer_checkpoint: takes the master's GET_TIMER_CHECK_POINT body; None asks nothing.
    :param timeout: seconds per request.
    :ivar master_address: the master's remoting ``host:port``; nothing is asked while None.
    """

    log = Logger()

    def __init__(self, clock: IReactorTime, client: Invoker, topics: JsonConfigFile, offsets: JsonConfigFile,
                 groups: JsonConfigFile, delay_offsets: JsonConfigFile, timer_checkpoint: Taker | None = None,
                 timeout: float = 3.0) -> None:
        self._client = client
        self._rounds: list[tuple[str, int, Taker]] = [
            ("topics", RequestCode.GET_ALL_TOPIC_CONFIG, partial(take_table, topics, True)),
            ("consumer offsets", RequestCode.GET_ALL_CONSUMER_OFFSET, partial(take_table, offsets, False)),
            ("subscription groups", RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
             partial(take_table, groups, True)),
            ("delay offsets", RequestCode.GET_ALL_DELAY_OFFSET, partial(take_table, delay_offsets, True)),
        ]
        if timer_checkpoint is not None:
            self._rounds.append(("the timer checkpoint", RequestCode.GET_TIMER_CHECK_POINT, timer_checkpoint))
        self._timeout = timeout
        self.master_address: str | None = None
        self._loops = [LoopingCall(self.sync_all)]
        if timer_checkpoint is not None:  # Java 5: "latency-sensitive, so sync it more frequently"
            self._loops.append(LoopingCall(self._sync_rounds, self._rounds[-1:]))
        for loop in self._loops:
            loop.clock = clock
        self._loops_done: list[Deferred[Any]] = []
        self._extra: set[Deferred[None]] = set()  # rounds outside the timer (sync_now)

    def start(self, interval: float, checkpoint_interval: float | None = None) -> None:
        """Sync now and then every ``interval`` seconds; the timer checkpoint also every
        ``checkpoint_interval`` seconds when given."""
        self._loops_done = [self._loops[0].start(interval, now=True)]
        if checkpoint_interval is not None and len(self._loops) > 1:
            self._loops_done.append(self._loops[1].start(checkpoint_interval, now=False))

    async def stop(self) -> None:
        """Stop the timers and let running rounds end (the timers' and :meth:`sync_now`'s)."""
        for loop in self._loops:
            if loop.running:
                loop.stop()
        done, self._loops_done = self._loops_done, []
        for d in done:
            await d
        while self._extra:
            await next(iter(self._extra))

    def sync_now(self) -> None:
        """A round now, besides the timer's (a new master address); :meth:`stop` waits for it."""
        d = self.sync_all()
        if not d.called:
            self._extra.add(d)
            d.addBoth(lambda _: self._extra.discard(d))

    def sync_all(self) -> Deferred[None]:
        """One round: topics, consumer offsets, subscription groups, delay offsets, the timer
        checkpoint; failures are logged."""
        return self._sync_rounds(self._rounds)

    def _sync_rounds(self, rounds: list[tuple[str, int, Taker]]) -> Deferred[None]:
        return Deferred.fromCoroutine(self._sync(rounds))

    async def _sync(self, rounds: list[tuple[str, int, Taker]]) -> None:
        master = self.master_address
        if not master:
            return
        for what, code, take in rounds:
            try:
                await self._sync_one(master, code, take)
            except (RemotingError, ValueError) as e:
                self.log.warn("copying {what} from master {addr} failed: {error}", what=what, addr=master, error=e)
            except Exception:  # an escaping exception would end the LoopingCall
                self.log.failure("copying {what} from master failed", level=LogLevel.error, what=what)

    async def _sync_one(self, master: str, code: int, take: Taker) -> None:
        response = await self._client.invoke_sync(master, RemotingCommand.request(code, {}), self._timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ValueError(f"code {response.code} {response.remark}")
        await take(response.body)


async def take_table(table: JsonConfigFile, write: bool, body: bytes) -> None:
    """Take a JSON table from the master (``JsonConfigFile.replace_json``) unless its data version
    is the one held; write it if ``write``."""
    obj = json.loads(body)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    version = table.data_version
    if version is not None and obj.get("dataVersion") == version.to_json():
        return  # unchanged since the last copy
    table.replace_json(obj)
    if write:
        await table.persist()
