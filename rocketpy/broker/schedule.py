"""Delayed delivery: ``ScheduleMessageService`` and GET_ALL_DELAY_OFFSET (45).

The store parks a message with ``DELAY`` = L on ``SCHEDULE_TOPIC_XXXX`` queue L−1
(:meth:`rocketpy.store.delay.DelayLevels.divert`, the one place every
put passes). Here one reactor-timed task per level reads its queue from the level's
delay offset and re-puts each due message to ``REAL_TOPIC``/``REAL_QID`` (doc/wire.md
§6). The offset advances only after the re-put was stored, and the
table is kept in ``config/delayOffset.json`` every 10 s and on stop, so a clean restart
neither loses nor repeats a delivery.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from zope.interface import implementer

from rocketpy.common.message import MessageConst, MessageExt, RecordError, decode_record
from rocketpy.common.topic import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from rocketpy.interfaces import IChannel, IRequestProcessor, IStoreService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import GetMessageStatus, PutMessageStatus
from rocketpy.util.configfile import JsonConfigFile

FIRST_DELAY = 1.0
#: Re-check interval of a level whose head message is not due, or after a failed re-put.
RECHECK = 0.1
PERSIST_INTERVAL = 10.0
BATCH = 32
_GROUP = "SCHEDULE_SERVICE"
_log = Logger()
#: Statuses meaning the message was stored (only flushing or replication lagged).
STORED = frozenset({
    PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE,
})
#: Statuses a retry cannot fix: the message is skipped (logged).
_HOPELESS = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})


class DelayOffsetTable(JsonConfigFile):
    """Next consume-queue offset of each delay level: ``{"offsetTable":{"<level>":offset}}``."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.offsets: dict[int, int] = {}

    def to_json(self) -> dict[str, Any]:
        return {"offsetTable": {str(level): offset for level, offset in sorted(self.offsets.items())}}

    def apply_json(self, obj: dict[str, Any]) -> None:
        for level, offset in (obj.get("offsetTable") or {}).items():
            self.offsets[int(level)] = int(offset)

    def positions(self, levels: int) -> list[tuple[str, str, int, int]]:
        """The delivery progress of ``levels`` levels as consumer positions (retention keeps undelivered ones)."""
        return [(DELAYED_MESSAGES, SCHEDULE_TOPIC, level - 1, self.offsets.get(level, 0)) for level in range(1, levels + 1)]


#: The name retention's log gives to delayed messages not yet delivered.
DELAYED_MESSAGES = "(delayed messages)"


def delivered_message(parked: MessageExt) -> MessageExt:
    """The message a parked one becomes when due: its real topic and queue, no DELAY, WAIT false."""
    props = dict(parked.properties)
    props.pop(MessageConst.DELAY_TIME_LEVEL, None)
    props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return MessageExt(
        topic=props[MessageConst.REAL_TOPIC],
        body=parked.body,
        flag=parked.flag,
        properties=props,
        queue_id=int(props.get(MessageConst.REAL_QUEUE_ID, "0")),
        sys_flag=parked.sys_flag,
        born_timestamp=parked.born_timestamp,
        born_host=parked.born_host,
        store_host=parked.store_host,
        reconsume_times=parked.reconsume_times,
    )


class ScheduleMessageService(Service):
    """One timed delivery task per delay level.

    :param store: the ``StoreService`` (``get_message``, ``put_message``, queue offsets).
    :param clock: times the tasks and tells when a message is due.
    :param levels: delay of each level in seconds (``MessageStoreConfig.delay_level_table()`` / 1000).
    :param offsets: the persisted offset table (loaded by :meth:`startService`).
    """

    log = Logger()

    def __init__(self, store: IStoreService, clock: IReactorTime, levels: list[float], offsets: DelayOffsetTable) -> None:
        self._store = store
        self._clock = clock
        self._levels = levels
        self.offsets = offsets
        self._timers: dict[int, IDelayedCall] = {}
        self._running_tasks: dict[int, Deferred[float]] = {}
        self._heads: dict[int, tuple[int, MessageExt]] = {}
        self._persist = LoopingCall(self.offsets.persist)
        self._persist.clock = clock
        self._persisting: Deferred[Any] | None = None

    def startService(self) -> None:
        """Load the offsets, then run each level's first task after 1 s."""
        super().startService()
        self.offsets.load()
        for level in range(1, len(self._levels) + 1):
            self._schedule(level, FIRST_DELAY)
        self._persisting = self._persist.start(PERSIST_INTERVAL, now=False)

    def stopService(self) -> Deferred[None]:
        """Cancel the timers, let running tasks finish, then persist the offsets."""
        super().stopService()
        for timer in self._timers.values():
            if timer.active():
                timer.cancel()
        self._timers.clear()
        if self._persist.running:
            self._persist.stop()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        for task in list(self._running_tasks.values()):
            await task
        if self._persisting is not None:
            await self._persisting
            self._persisting = None
        await self.offsets.persist()

    def backlogs(self) -> dict[int, int]:
        """Per delay level, the messages parked and not yet delivered."""
        store, out = self._store, {}
        for level in range(1, len(self._levels) + 1):
            end = store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            start = max(self.offsets.offsets.get(level, 0), store.get_min_offset_in_queue(SCHEDULE_TOPIC, level - 1))
            out[level] = max(0, end - start)
        return out

    def _schedule(self, level: int, delay: float) -> None:
        if self.running:
            self._timers[level] = self._clock.callLater(delay, self._run, level)

    def _run(self, level: int) -> None:
        self._timers.pop(level, None)
        offset = self.offsets.offsets.get(level, 0)
        if offset >= self._store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1):
            self.offsets.offsets[level] = offset  # nothing parked: what _deliver would do, without a task
            self._schedule(level, RECHECK)
            return
        task = Deferred.fromCoroutine(self._deliver(level))
        self._running_tasks[level] = task

        def done(delay: float | Failure) -> None:
            del self._running_tasks[level]
            if isinstance(delay, Failure):
                self.log.failure("delay level {delay_level} task failed", delay, LogLevel.error, delay_level=level)
                delay = RECHECK
            self._schedule(level, delay)

        task.addBoth(done)

    async def _deliver(self, level: int) -> float:
        """Re-put every due message of ``level``; the delay until this level's next run."""
        queue_id = level - 1
        offset = max(self.offsets.offsets.get(level, 0),
                     self._store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id))
        self.offsets.offsets[level] = offset
        while self.running and offset < self._store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id):
            parked: list[MessageExt | None]
            head = self._heads.get(level)
            if head is not None and head[0] == offset:
                parked = [head[1]]  # not due at the last check: no need to read it again
            else:
                found = await self._store.get_message(_GROUP, SCHEDULE_TOPIC, queue_id, offset, BATCH)
                if found.status is not GetMessageStatus.FOUND:
                    if found.next_begin_offset <= offset:
                        return RECHECK
                    offset = self.offsets.offsets[level] = found.next_begin_offset  # skip a gap
                    continue
                parked = [_decode(r) for r in found.records]
            for msg in parked:
                if msg is not None and not await self._deliver_one(level, msg):
                    self._heads[level] = (offset, msg)
                    return RECHECK
                offset = self.offsets.offsets[level] = offset + 1
        return RECHECK

    async def _deliver_one(self, level: int, parked: MessageExt) -> bool:
        """Re-put one parked message if due; False while it is not due or the put must be retried."""
        now_ms = int(self._clock.seconds() * 1000)
        delay_ms = int(self._levels[level - 1] * 1000)
        deliver_ms = parked.store_timestamp + delay_ms
        if deliver_ms > now_ms + delay_ms:  # stored "in the future" (clock jump): due now
            deliver_ms = now_ms
        if deliver_ms > now_ms:
            return False
        real_topic = parked.properties.get(MessageConst.REAL_TOPIC)
        if real_topic is None or real_topic == TRANS_HALF_TOPIC:
            self.log.warn("delayed message {id} has no deliverable real topic: dropped", id=parked.msg_id)
            return True
        result = await self._store.put_message(delivered_message(parked))
        if result.status in STORED:
            return True
        if result.status in _HOPELESS:
            self.log.error("delayed message {id} cannot be stored ({status}): dropped",
                           id=parked.msg_id, status=result.status.name)
            return True
        self.log.warn("delayed message {id} not stored ({status}): retrying",
                      id=parked.msg_id, status=result.status.name)
        return False


def _decode(record: bytes) -> MessageExt | None:
    try:
        return decode_record(record)
    except RecordError:
        _log.error("unreadable record on SCHEDULE_TOPIC_XXXX: skipped")
        return None


@implementer(IRequestProcessor)
class DelayOffsetProcessor:
    """GET_ALL_DELAY_OFFSET (45): the delay offset table as ``delayOffset.json`` holds it."""

    codes = (RequestCode.GET_ALL_DELAY_OFFSET,)

    def __init__(self, offsets: DelayOffsetTable) -> None:
        self._offsets = offsets

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, None, {}, self._offsets.encode())
