"""Timer messages: ``TimerMessageService`` delivers what the store parked on ``rmq_sys_wheel_timer``.

The store parks a message asking for a delivery time (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` /
``TIMER_DELAY_MS``, RocketMQ 5) on queue 0 of the timer topic, the time it is due as that consume
queue's tags code (:mod:`rocketpy.store.timer`). This service reads the queue's 20-byte entries
(never the commit log) into a pending set ordered by due time, and when an entry is due reads its
message and re-puts it to its real topic and queue, in due-time order, on the reactor clock.

Durability (doc/features.md, "Timer messages"): ``config/timerCheckpoint.json`` holds the lowest
pending queue offset, how far the queue was read, and the smallest (due time, offset) still
pending. A restart reads the queue from the lowest pending offset and skips what the checkpoint
proves delivered, so nothing pending is lost; what was delivered after the last checkpoint write
(1 s) is delivered again (at least once). Entries that pin old queue files while everything above
them is delivered are re-parked at the queue's end ("rolled", as Java's timer rolls long delays),
so a restart reads about as many entries as are pending, not the delivered history.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger, LogLevel

from rocketpy.broker.schedule import STORED
from rocketpy.common.message import MessageConst, MessageExt, RecordError, decode_record
from rocketpy.common.topic import TIMER_TOPIC
from rocketpy.interfaces import IStoreService
from rocketpy.store.consumequeue import PREFILL_SIZE
from rocketpy.store.status import AppendMessageResult, GetMessageStatus, PutMessageStatus
from rocketpy.store.timer import delete_key
from rocketpy.util.configfile import JsonConfigFile

#: Consume-queue entries read per store hop.
SCAN_BATCH = 4096
#: Messages delivered per round (all those due at the same time as the last go with it).
DELIVER_BATCH = 256
#: Messages one store read returns at most (``max_transfer_count_on_message_in_memory``).
READ_RUN = 32
#: Checkpoint interval, and re-check after a refused put.
PERSIST_INTERVAL = 1.0
RECHECK = 0.1
#: Roll pending entries once the read range is this long and mostly delivered.
ROLL_SPAN = 100_000
_GROUP = "TIMER_SERVICE"
#: The name retention's log gives to timer messages not yet delivered.
TIMER_MESSAGES = "(timer messages)"
_HOPELESS = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                       PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, PutMessageStatus.WHEEL_TIMER_NOT_ENABLE})
_NONE_PENDING = (1 << 63, 0)


def _runs(offsets: list[int], longest: int) -> list[tuple[int, int]]:
    """Sorted offsets as (start, count) runs of consecutive ones, each at most ``longest`` long."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and runs[-1][0] + runs[-1][1] == offset and runs[-1][1] < longest:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((offset, 1))
    return runs


class TimerCheckpoint(JsonConfigFile):
    """Where the timer queue's delivery stands: ``{"lowOffset", "scanOffset", "pendingFromMs",
    "pendingFromOffset"}``. Entries below ``lowOffset``, and entries below ``scanOffset`` whose
    (due time, offset) is below the pending-from pair, are delivered."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.low_offset = 0
        self.scan_offset = 0
        self.pending_from: tuple[int, int] = _NONE_PENDING

    def to_json(self) -> dict[str, Any]:
        return {"lowOffset": self.low_offset, "scanOffset": self.scan_offset,
                "pendingFromMs": self.pending_from[0], "pendingFromOffset": self.pending_from[1]}

    def apply_json(self, obj: dict[str, Any]) -> None:
        """A missing field reads as "nothing known": more is delivered again, nothing is lost."""
        self.low_offset = int(obj.get("lowOffset", 0))
        self.scan_offset = int(obj.get("scanOffset", 0))
        self.pending_from = (int(obj.get("pendingFromMs", 0)), int(obj.get("pendingFromOffset", 0)))

    def positions(self) -> list[tuple[str, str, int, int]]:
        """Retention keeps the files of undelivered timer messages."""
        return [(TIMER_MESSAGES, TIMER_TOPIC, 0, self.low_offset)]


def delivered_message(parked: MessageExt, now_ms: int) -> MessageExt:
    """The message a parked one becomes when due (Java ``TimerMessageStore.convert``): its real
    topic and queue, ``REAL_*`` removed, ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` added, WAIT false;
    ``TIMER_OUT_MS`` stays, so the store does not park it again."""
    props = dict(parked.properties)
    topic = props.pop(MessageConst.REAL_TOPIC)
    queue_id = int(props.pop(MessageConst.REAL_QUEUE_ID, "0"))
    props[MessageConst.TIMER_ENQUEUE_MS] = str(parked.store_timestamp)
    props[MessageConst.TIMER_DEQUEUE_MS] = str(now_ms)
    props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return _copy(parked, topic, queue_id, props)


def rolled_message(parked: MessageExt) -> MessageExt:
    """A parked message parked again at the queue's end, ``TIMER_ROLL_TIMES`` + 1."""
    props = dict(parked.properties)
    props[MessageConst.TIMER_ROLL_TIMES] = str(int(props.get(MessageConst.TIMER_ROLL_TIMES, "0") or 0) + 1)
    props[MessageConst.WAIT_STORE_MSG_OK] = "false"
    return _copy(parked, TIMER_TOPIC, 0, props)


def _copy(parked: MessageExt, topic: str, queue_id: int, props: dict[str, str]) -> MessageExt:
    return MessageExt(topic=topic, body=parked.body, flag=parked.flag, properties=props, queue_id=queue_id,
                      sys_flag=parked.sys_flag, born_timestamp=parked.born_timestamp, born_host=parked.born_host,
                      store_host=parked.store_host, reconsume_times=parked.reconsume_times)


class TimerMessageService(Service):
    """Delivers parked timer messages when due.

    :param store: the ``StoreService``.
    :param clock: the reactor; its ``seconds()`` tells what is due (the store's clock stamps them).
    :param checkpoint: the persisted progress (loaded by :meth:`startService`).
    :param roll_span: see :data:`ROLL_SPAN`.
    """

    log = Logger()

    def __init__(self, store: IStoreService, clock: IReactorTime, checkpoint: TimerCheckpoint,
                 roll_span: int = ROLL_SPAN) -> None:
        self._store = store
        self._clock = clock
        self.checkpoint = checkpoint
        self._roll_span = roll_span
        #: queue offset → due time (ms) of every entry read and not yet delivered, in offset order
        self._pending: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []  # (due, offset); entries no longer pending are skipped
        self._in_flight: dict[int, int] = {}  # popped for delivery or roll, still pending
        #: delivered (or rolled) but the copy is not flushed yet: still pending for the checkpoint
        self._unflushed: dict[int, int] = {}
        self._flush_marks: deque[tuple[int, int]] = deque()  # (copy's commit-log end, queue offset)
        self._scanned = 0
        self._delivered_below: tuple[int, int] = (0, 0)  # from the checkpoint: skipped below its scan offset
        self._recovered_until = 0
        self._working: Deferred[Any] | None = None
        self._busy = False
        self._again = False
        self._timer: IDelayedCall | None = None
        self._loop = LoopingCall(self._tick)
        self._loop.clock = clock
        self._looping: Deferred[Any] | None = None
        self._persisted: dict[str, Any] | None = None
        #: (first queue offset read, when) until the first read after a start reaches the queue's end
        self._recovery: tuple[int, float] | None = None
        self.delivered = 0
        self.cancelled = 0
        self.rolled = 0

    # -- lifecycle ------------------------------------------------------------

    def startService(self) -> None:
        """Load the checkpoint and read the queue from its lowest pending offset."""
        super().startService()
        cp = self.checkpoint
        cp.load()
        end = self._store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        if cp.scan_offset > end:  # the store was emptied but the config directory kept: start over
            self.log.warn("timer checkpoint is at queue offset {offset}, beyond the timer queue's end {end}: "
                          "reading the queue from its start", offset=cp.scan_offset, end=end)
            cp.low_offset, cp.scan_offset, cp.pending_from = 0, 0, _NONE_PENDING
        self._scanned = cp.low_offset
        self._recovered_until, self._delivered_below = cp.scan_offset, cp.pending_from
        self._recovery = (cp.low_offset, self._clock.seconds())
        self._store.add_arrival_listener(self._arrived, TIMER_TOPIC)
        self._looping = self._loop.start(PERSIST_INTERVAL, now=False)
        self._kick()

    def stopService(self) -> Deferred[None]:
        """Stop timing, let a running round finish, write the checkpoint."""
        super().stopService()
        self._cancel_timer()
        if self._loop.running:
            self._loop.stop()
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        if self._working is not None:
            await self._working
        if self._looping is not None:
            await self._looping
            self._looping = None
        self._flush_marks.append((-1, -1))  # the store flushes everything when it stops, right after us
        await self._persist()

    # -- figures --------------------------------------------------------------

    def backlog(self) -> int:
        """Timer messages parked and not yet delivered (read or not yet read)."""
        end = self._store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        return len(self._pending) - len(self._unflushed) + max(0, end - self._scanned)

    def runtime_figures(self) -> dict[str, str]:
        """RocketMQ 5's GET_BROKER_RUNTIME_INFO timer keys: seconds the earliest pending message is
        overdue, queue entries not read yet, messages pending."""
        due = self.next_due_ms()
        end = self._store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        return {"timerReadBehind": str(max(0, self._now_ms() - due) // 1000 if due is not None else 0),
                "timerOffsetBehind": str(max(0, end - self._scanned)),
                "timerCongestNum": str(len(self._pending) - len(self._unflushed))}

    def next_due_ms(self) -> int | None:
        """When the earliest pending message is due (ms), None when none is pending."""
        due = self._pending_from(delivered=False)[0]
        return None if due == _NONE_PENDING[0] else due

    # -- scheduling -----------------------------------------------------------

    def _arrived(self, topic: str, queue_id: int, _max_offset: int) -> None:
        if topic == TIMER_TOPIC and self.running:
            self._kick()

    def _tick(self) -> Deferred[None]:
        self._kick()
        return Deferred.fromCoroutine(self._persist())

    def _kick(self) -> None:
        """Run a round now, or once the running one ends."""
        if not self.running:
            return
        if self._busy:
            self._again = True
            return
        self._cancel_timer()
        self._busy = True  # before the round starts: it may end, or kick again, synchronously
        working = Deferred.fromCoroutine(self._round())
        working.addErrback(lambda f: self.log.failure("timer round failed", f, LogLevel.error))
        if not working.called:
            self._working = working
        working.addBoth(self._round_done)

    def _round_done(self, retry: object) -> None:
        self._working = None
        self._busy = False
        if not self.running:
            return
        if self._again:
            self._again = False
            self._kick()
        elif retry is True or retry is None:  # None: the round failed (logged)
            self._arm(RECHECK)
        elif self._heap:
            self._arm(max(0.0, (self._heap[0][0] - self._now_ms()) / 1000))

    def _arm(self, delay: float) -> None:
        self._cancel_timer()
        self._timer = self._clock.callLater(delay, self._kick)

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    # -- a round: read new entries, deliver what is due -------------------------

    async def _round(self) -> bool:
        """Read every new entry, then deliver due messages; True when a put must be retried."""
        while self.running:
            if self._scanned < self._store.get_max_offset_in_queue(TIMER_TOPIC, 0):
                if not await self._scan():
                    return True
                continue
            if self._recovery is not None:
                self._recovered()
            due = self._pop_due()
            if not due:
                return False
            if not await self._deliver(due):
                return True
        return False

    def _recovered(self) -> None:
        assert self._recovery is not None
        start, began = self._recovery
        self._recovery = None
        self.log.info("timer messages: {pending} pending, read from queue offset {start} to {end} in {seconds:.3f} s",
                      pending=len(self._pending), start=start, end=self._scanned,
                      seconds=self._clock.seconds() - began)

    async def _scan(self) -> bool:
        """Read the next entries into the pending set; False when the queue cannot be read now."""
        found = await self._store.query_consume_queue(TIMER_TOPIC, 0, self._scanned, SCAN_BATCH)
        if found is None:
            return False
        min_offset, _max, entries = found
        if entries is None:
            if self._scanned < min_offset:  # the files were deleted (forced clean): those messages are gone
                self.log.error("timer queue offsets {start}..{end} were deleted before delivery",
                               start=self._scanned, end=min_offset)
                self._scanned = min_offset
                return True
            return False
        if not entries:
            return False
        offset = self._scanned
        skip_until, delivered_below = self._recovered_until, self._delivered_below
        pending, heap = self._pending, self._heap
        for phy, size, due in entries:
            if not (phy == 0 and size == PREFILL_SIZE) and not (offset < skip_until and (due, offset) < delivered_below):
                pending[offset] = due
                heapq.heappush(heap, (due, offset))
            offset += 1
        self._scanned = offset
        return True

    def _pop_due(self) -> list[tuple[int, int]]:
        """Up to a batch of due entries in (due, offset) order, with every entry due at the same
        time as the last (a cancel comes due with the message it cancels)."""
        now, heap, pending = self._now_ms(), self._heap, self._pending
        due: list[tuple[int, int]] = []
        while heap and heap[0][0] <= now:
            entry = heap[0]
            if pending.get(entry[1]) != entry[0] or entry[1] in self._in_flight or entry[1] in self._unflushed:
                heapq.heappop(heap)  # rolled or delivered
                continue
            if len(due) >= DELIVER_BATCH and entry[0] != due[-1][0]:
                break
            heapq.heappop(heap)
            due.append(entry)
        return due

    async def _deliver(self, due: list[tuple[int, int]]) -> bool:
        """Put the due messages to their real queues; False when some must be retried (back in the set)."""
        for entry in due:
            self._in_flight[entry[1]] = entry[0]
        try:
            parked = await self._read([offset for _due, offset in due])
            now = self._now_ms()
            cancels = {m.properties[MessageConst.TIMER_DEL_UNIQKEY] for m in parked.values()
                       if MessageConst.TIMER_DEL_UNIQKEY in m.properties}
            puts: list[tuple[int, MessageExt]] = []
            for _due, offset in due:
                msg = parked.get(offset)
                if msg is None or self._dropped(msg, cancels):
                    self._done(offset)
                else:
                    puts.append((offset, delivered_message(msg, now)))
            results = await self._store.put_many([(m,) for _offset, m in puts]) if puts else []
            retry = False
            for (offset, msg), result in zip(puts, results):
                if result.status in STORED:
                    self.delivered += 1
                    self._stored(offset, result.append)
                    continue
                if result.status in _HOPELESS:
                    self.log.error("timer message {id} cannot be stored on {topic} ({status}): dropped",
                                   id=msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX), topic=msg.topic,
                                   status=result.status.name)
                else:
                    retry = True
                    continue
                self._done(offset)
            return not retry
        finally:
            for due_ms, offset in due:
                if self._in_flight.pop(offset, None) is not None and offset in self._pending:
                    heapq.heappush(self._heap, (due_ms, offset))  # not delivered: again later

    def _dropped(self, msg: MessageExt, cancels: set[str]) -> bool:
        """A cancel, a cancelled message, or one without a real topic: not delivered."""
        props = msg.properties
        if MessageConst.TIMER_DEL_UNIQKEY in props:
            return True
        real = props.get(MessageConst.REAL_TOPIC)
        if real is None:
            self.log.warn("timer message at {offset} has no real topic: dropped", offset=msg.queue_offset)
            return True
        uniq = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq is not None and delete_key(real, uniq) in cancels:
            self.cancelled += 1
            return True
        return False

    def _done(self, offset: int) -> None:
        self._pending.pop(offset, None)
        self._in_flight.pop(offset, None)

    def _stored(self, offset: int, append: AppendMessageResult | None) -> None:
        """The copy of ``offset`` is stored: done once the commit log is durable past it (until then
        the checkpoint still counts it pending, so a machine crash cannot lose it)."""
        due = self._in_flight.pop(offset)
        if append is None or append.next_offset <= self._store.flushed_offset:
            self._pending.pop(offset, None)
            return
        self._unflushed[offset] = due
        self._flush_marks.append((append.next_offset, offset))

    def _release_flushed(self) -> None:
        flushed, marks = self._store.flushed_offset, self._flush_marks
        if marks and marks[-1][0] == -1:  # stopping: all of them
            flushed = 1 << 62
            marks.pop()
        while marks and marks[0][0] <= flushed:
            offset = marks.popleft()[1]
            self._unflushed.pop(offset, None)
            self._pending.pop(offset, None)

    async def _read(self, offsets: list[int]) -> dict[int, MessageExt]:
        """The parked messages at these queue offsets (missing or unreadable ones left out, logged):
        one store read per run of consecutive offsets (up to a read's message limit), then one per
        offset still missing."""
        wanted = set(offsets)
        out: dict[int, MessageExt] = {}
        await self._read_runs(_runs(sorted(wanted), READ_RUN), wanted, out)
        missing = sorted(wanted - out.keys())
        if missing:
            await self._read_runs([(o, 1) for o in missing], wanted, out)
        for offset in sorted(wanted - out.keys()):
            self.log.error("timer message at queue offset {offset} is gone or unreadable: skipped", offset=offset)
        return out

    async def _read_runs(self, runs: list[tuple[int, int]], wanted: set[int], out: dict[int, MessageExt]) -> None:
        found = await gatherResults([self._store.get_message(_GROUP, TIMER_TOPIC, 0, start, count)
                                     for start, count in runs], consumeErrors=True)
        for result in found:
            if result.status is not GetMessageStatus.FOUND:
                continue
            for record in result.records:
                try:
                    msg = decode_record(record)
                except RecordError:
                    continue
                if msg.queue_offset in wanted:  # the record knows its own queue offset
                    out[msg.queue_offset] = msg

    # -- checkpoint and roll ----------------------------------------------------

    def _pending_from(self, delivered: bool = True) -> tuple[int, int]:
        """The smallest (due, offset) still pending, ``_NONE_PENDING`` when none is; with ``delivered``,
        delivered ones not yet flushed count as pending (the checkpoint's view)."""
        heap, pending, in_flight, unflushed = self._heap, self._pending, self._in_flight, self._unflushed
        while heap and (pending.get(heap[0][1]) != heap[0][0] or heap[0][1] in in_flight or heap[0][1] in unflushed):
            heapq.heappop(heap)
        least = heap[0] if heap else _NONE_PENDING
        for held in (in_flight, unflushed) if delivered else (in_flight,):
            for offset, due in held.items():
                least = min(least, (due, offset))
        return least

    async def _persist(self) -> None:
        """Write the checkpoint when it changed; roll old pending entries first if they pin a long range."""
        if self.running:
            await self._maybe_roll()
        self._release_flushed()
        cp = self.checkpoint
        cp.low_offset = next(iter(self._pending), self._scanned)
        cp.scan_offset = self._scanned
        cp.pending_from = self._pending_from()
        state = cp.to_json()
        if state != self._persisted:
            self._persisted = state
            await cp.persist()

    async def _maybe_roll(self) -> None:
        """Re-park the oldest half of a long read range at the queue's end when few of its entries are pending."""
        low = next(iter(self._pending), self._scanned)
        span = self._scanned - low
        if span <= self._roll_span or len(self._pending) * 4 >= span:
            return  # (a round may run meanwhile: each takes only entries the other has not in flight)
        cut = low + span // 2
        batch: list[tuple[int, int]] = []
        for offset, due in self._pending.items():
            if offset >= cut or len(batch) >= SCAN_BATCH:
                break
            if offset not in self._in_flight and offset not in self._unflushed:
                batch.append((due, offset))
        for due, offset in batch:
            self._in_flight[offset] = due
        try:
            parked = await self._read([offset for _due, offset in batch])
            for _due, offset in batch:
                if offset not in parked:  # gone: nothing to deliver (logged by _read)
                    self._done(offset)
            moved = [(offset, rolled_message(msg)) for offset, msg in parked.items()]
            results = await self._store.put_many([(m,) for _offset, m in moved]) if moved else []
            for (offset, _msg), result in zip(moved, results):
                if result.status in STORED:
                    self._stored(offset, result.append)
                    self.rolled += 1
            self.log.info("timer: re-parked {count} long-pending messages at the queue end", count=len(moved))
        finally:
            for due, offset in batch:
                if self._in_flight.pop(offset, None) is not None and offset in self._pending:
                    heapq.heappush(self._heap, (due, offset))
