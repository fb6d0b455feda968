"""POP consumption for 5.x consumers: receive with invisibility, ack, change invisibility.

Per (group, topic, queue) a *cursor* is the next queue offset never handed out; received
messages are leased in a :class:`~rocketpy.grpc.receipts.ReceiptTable`. The group's consumer
offset (what ``mqadmin consumerProgress`` shows, shared with 4.x pull) is the lowest offset
still in flight, or the cursor. As RocketMQ 5's broker (``PopReviveService``), a lease past its
expiry is *revived*: its message is copied to the group's POP retry topic ``%RETRY%<group>_<topic>``
with one more reconsume time, and the lease ends, so the original queue's progress moves on.
Receives read that retry topic too (first, one time in five; else when the queues left room), and
a message read ``max_attempts`` times goes to the group's DLQ instead of to the consumer. A FIFO
group's leases are not revived: they come back in place, in order.
A new group starts at offset 0 when the queue still holds its first message, else at its end
(RocketMQ's ``ConsumeInitMode.MAX`` with ``initPopOffsetByCheckMsgInMem``); on a retry topic at
its first message.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from rocketpy.broker.filter import TagFilter
from rocketpy.broker.offsets import ConsumerOffsetManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.common.message import MessageExt, decode_record
from rocketpy.common.topic import PERM_READ, PERM_WRITE, RETRY_GROUP_TOPIC_PREFIX, TOPIC_MAX_LENGTH
from rocketpy.grpc.receipts import AckOutcome, Lease, ReceiptTable, pop_retry_topic
from rocketpy.grpc.revive import revived_copy
from rocketpy.interfaces import IStoreService

#: ProxyConfig defaults of the Java proxy's receipt-handle renewal (PushConsumer receives).
DEFAULT_INVISIBLE_MS = 60_000
RENEW_PERIOD_S = 5.0
RENEW_AHEAD_MS = 10_000
RENEW_MAX_MS = 3 * 3600 * 1000
#: How often expired leases of groups nobody receives for are revived (RocketMQ revives within about a second).
REVIVE_PERIOD_S = 1.0
#: BrokerConfig.popFromRetryProbability: the percentage of receives that read the retry topic first.
RETRY_FIRST_PERCENT = 20

Received = list[tuple[MessageExt, Lease]]
#: ``(group, lease) -> Deferred[bool]``: move the leased message to the group's DLQ; True once stored.
DeadLetter = Callable[[str, Lease], "Deferred[bool]"]


class PopService:
    """Receive, ack and change-invisibility over the broker's store and offsets."""

    log = Logger()

    def __init__(self, clock: IReactorTime, store: IStoreService, topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, dead_letter: DeadLetter | None = None,
                 client_host: str = "grpc", rng: random.Random | None = None) -> None:
        self._clock = clock
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._host = client_host
        self.dead_letter = dead_letter
        self.receipts = ReceiptTable()
        self._cursors: dict[tuple[str, str, int], int] = {}
        self._reading: set[tuple[str, str, int]] = set()
        #: topic → waiting receives, woken by an arrival or a lease expiry.
        self._waiters: dict[str, list[Deferred[None]]] = {}
        self._arrival: Any = None  # listen_to's: wanted while a receive waits
        self._renewer = LoopingCall(self.renew_due)
        self._renewer.clock = clock
        self._reviver = LoopingCall(lambda: Deferred.fromCoroutine(self.revive_due()))
        self._reviver.clock = clock
        self._rng = rng or random.Random()

    def now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def listen_to(self, store: Any) -> None:
        """Be ``store``'s arrival listener (:meth:`message_arrived`), called only while a receive waits: else
        a put calls nothing here."""
        self._arrival = store.add_arrival_listener(self.message_arrived)
        self._arrival.wanted = bool(self._waiters)

    def message_arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arrival listener: wake the receives long-polling ``topic``."""
        self._wake(topic)

    def _wake(self, topic: str) -> None:
        waiting = self._waiters.pop(topic, [])
        if not self._waiters and self._arrival is not None:
            self._arrival.wanted = False
        for d in waiting:
            if not d.called:
                d.callback(None)

    # -- receive ------------------------------------------------------------------

    async def receive(self, group: str, topic: str, batch: int, invisible_ms: int, poll_ms: int,
                      tag_filter: TagFilter, max_attempts: int = 0, renew_for: str | None = None,
                      fifo: bool = False) -> Received:
        """Up to ``batch`` messages, waiting up to ``poll_ms`` for the first.

        :param max_attempts: a message not acked after this many deliveries goes to the
            group's dead-letter queue instead of coming back (0: no limit).
        :param renew_for: the client id whose leases this endpoint keeps renewing until they
            are acked or their invisibility changed (up to three hours), or None.
        :param fifo: a FIFO group: a queue with a message in flight gives nothing more until that
            one is acked (or comes back, then in order with the rest of its batch).
        """
        deadline = self.now_ms() + poll_ms
        while True:
            found = await self._take(group, topic, batch, invisible_ms, tag_filter, max_attempts, fifo)
            for _, lease in found:
                lease.renewed_for = renew_for
            left = deadline - self.now_ms()
            if found or left <= 0:
                return found
            await self._wait(group, topic, left)

    def _wait(self, group: str, topic: str, left_ms: int) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if not self._waiters and self._arrival is not None:
            self._arrival.wanted = True
        self._waiters.setdefault(topic, []).append(d)
        expiry = self.receipts.next_expiry(group, topic)
        until_expiry = None if expiry is None else expiry - self.now_ms() + 1
        # a lease already past its expiry here is a FIFO one that another kind of receive handles
        wait_ms = left_ms if until_expiry is None or until_expiry <= 0 else min(left_ms, until_expiry)
        def timed_out() -> None:
            if not d.called:
                d.callback(None)

        def settled(result: object) -> object:
            if timer.active():
                timer.cancel()
            return result

        timer = self._clock.callLater(wait_ms / 1000, timed_out)
        d.addBoth(settled)
        return d

    async def _take(self, group: str, topic: str, batch: int, invisible_ms: int, tag_filter: TagFilter,
                    max_attempts: int, fifo: bool) -> Received:
        if fifo:
            return await self._take_in_order(group, topic, batch, invisible_ms, tag_filter, max_attempts)
        due = self.receipts.take_due(self.now_ms(), (group, topic))
        retry = pop_retry_topic(group, topic)
        found: Received = []
        if len(retry) > TOPIC_MAX_LENGTH:  # no retry topic can have that name: back from their place
            for lease in due[batch:]:
                lease.reviving = False
            for lease in due[:batch]:
                self.receipts.remove(lease)
            found.extend(await self._redeliver(group, due[:batch], invisible_ms, max_attempts))
        else:
            await self._revive(due)
        retry_first = self._rng.randrange(100) < RETRY_FIRST_PERCENT  # PopMessageProcessor's randomQ
        for name in ([retry, topic] if retry_first else [topic, retry]):
            config = self._topics.select_topic_config(name)
            for queue_id in range(config.read_queue_nums if config is not None else 0):
                if len(found) >= batch:
                    return found
                found.extend(await self._read_queue(group, topic, name, queue_id, batch - len(found), invisible_ms,
                                                    tag_filter, max_attempts))
        return found

    async def _take_in_order(self, group: str, topic: str, batch: int, invisible_ms: int, tag_filter: TagFilter,
                             max_attempts: int) -> Received:
        """FIFO: per queue, the expired batch again in order, else the next messages once nothing is in flight."""
        found: Received = []
        config = self._topics.select_topic_config(topic)
        for queue_id in range(config.read_queue_nums if config is not None else 0):
            if len(found) >= batch:
                break
            if self.receipts.queue_busy(group, topic, queue_id, self.now_ms()):
                continue  # one batch in flight per queue: order within each message group
            expired = self.receipts.take_queue(group, topic, queue_id)
            if expired:
                found.extend(await self._redeliver(group, expired, invisible_ms, max_attempts))
                continue
            found.extend(await self._read_queue(group, topic, topic, queue_id, batch - len(found), invisible_ms,
                                                tag_filter, 0, orderly=True))
        return found

    async def _redeliver(self, group: str, expired: list[Lease], invisible_ms: int, max_attempts: int) -> Received:
        """Expired leases (out of the table) leased again from their place in order, attempt + 1, or to
        the DLQ: a FIFO queue's, or those of a group and topic whose retry topic name is too long."""
        found: Received = []
        for lease in expired:
            if max_attempts and lease.attempt >= max_attempts and await self._to_dead_letter(group, lease):
                continue
            ext = await self._store.look_message_by_offset(lease.commit_log_offset)
            if ext is None:  # deleted by retention meanwhile
                self._commit(group, lease.queue_topic, lease.queue_id)
                continue
            renewed = self.receipts.lease(group, lease.topic, lease.queue_id, lease.offset, lease.commit_log_offset,
                                          lease.attempt + 1, self.now_ms(), invisible_ms, lease.retry, lease.orderly)
            found.append((ext, renewed))
        return found

    # -- revive ---------------------------------------------------------------------

    async def revive_due(self) -> None:
        """Revive every expired lease (not FIFO ones) into its group's retry topic."""
        await self._revive(self.receipts.take_due(self.now_ms()))

    async def _revive(self, due: list[Lease]) -> None:
        if due:
            await gatherResults([Deferred.fromCoroutine(self._revive_one(lease)) for lease in due])

    async def _revive_one(self, lease: Lease) -> None:
        """Copy the lease's message to the retry topic, then end the lease; on failure it stays
        (expired) in the table and is tried again at the next revive."""
        retry_name = pop_retry_topic(lease.group, lease.topic)
        if len(retry_name) > TOPIC_MAX_LENGTH:  # the group's receives give it back in place
            lease.reviving = False
            return
        try:
            original = await self._store.look_message_by_offset(lease.commit_log_offset)
            if original is not None:  # else deleted by retention meanwhile: nothing to revive
                retry = self._topics.create_topic_in_send_message_back_method(retry_name, 1, PERM_READ | PERM_WRITE)
                result = await self._store.put_message(revived_copy(original, retry.topic_name, lease.leased_ms))
                if not result.ok:
                    raise RuntimeError(f"the store refused it: {result.status.name}")
        except Exception:
            self.log.failure("reviving {topic}:{queue}:{offset} of {group} to its retry topic failed",
                             topic=lease.queue_topic, queue=lease.queue_id, offset=lease.offset, group=lease.group)
            lease.reviving = False
            return
        self.receipts.remove(lease)
        self._commit(lease.group, lease.queue_topic, lease.queue_id)
        self._wake(lease.topic)

    async def _read_queue(self, group: str, topic: str, name: str, queue_id: int, wanted: int, invisible_ms: int,
                          tag_filter: TagFilter, max_attempts: int, orderly: bool = False) -> Received:
        """Up to ``wanted`` messages of queue ``queue_id`` of ``name`` (``topic`` or its retry topic), leased."""
        key = (group, name, queue_id)
        if key in self._reading:  # another receive of the group reads this queue now
            return []
        self._reading.add(key)
        try:
            cursor = self._cursor(key)
            if cursor >= self._store.get_max_offset_in_queue(name, queue_id):
                return []
            result = await self._store.get_message(group, name, queue_id, cursor, wanted,
                                                   None if tag_filter.matches_all else tag_filter)
            now = self.now_ms()
            retry = name != topic
            found: Received = []
            for record in result.records:
                ext = decode_record(record)
                if not tag_filter.matches_tag(ext.tags):
                    continue
                lease = self.receipts.lease(group, topic, queue_id, ext.queue_offset, ext.commit_log_offset,
                                            ext.reconsume_times + 1, now, invisible_ms, retry=retry, orderly=orderly)
                if max_attempts and ext.reconsume_times >= max_attempts and await self._to_dead_letter(group, lease):
                    continue  # PopMessageResultFilterImpl: read once too often, to the DLQ
                ext.topic = topic  # a retry topic's copy shows its real topic, as the Java proxy does
                found.append((ext, lease))
            self._cursors[key] = max(cursor, result.next_begin_offset)
            self._commit(group, name, queue_id)
            return found
        finally:
            self._reading.discard(key)

    def _cursor(self, key: tuple[str, str, int]) -> int:
        cursor = self._cursors.get(key)
        if cursor is None:
            group, topic, queue_id = key
            cursor = self._offsets.query_offset(group, topic, queue_id)
            if cursor < 0:
                first = self._store.get_min_offset_in_queue(topic, queue_id)
                if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or first == 0:
                    cursor = first
                else:
                    cursor = self._store.get_max_offset_in_queue(topic, queue_id)
            self._cursors[key] = cursor
        return cursor

    def _commit(self, group: str, topic: str, queue_id: int) -> None:
        """The group's consumer offset on ``topic`` (its retry topic too): the lowest offset in flight,
        or the cursor."""
        cursor = self._cursors.get((group, topic, queue_id))
        if cursor is None:
            return
        lowest = self.receipts.lowest_offset(group, topic, queue_id)
        self._offsets.commit_offset(self._host, group, topic, queue_id, cursor if lowest is None else lowest)

    async def _to_dead_letter(self, group: str, lease: Lease) -> bool:
        """Move a lease's message to the DLQ and end the lease; False (it is delivered) when that failed."""
        if self.dead_letter is None:
            return False
        try:
            moved = await self.dead_letter(group, lease)
        except Exception:
            self.log.failure("moving {topic}:{queue}:{offset} of {group} to its DLQ failed",
                             topic=lease.topic, queue=lease.queue_id, offset=lease.offset, group=group)
            moved = False
        if moved:
            self.receipts.remove(lease)
            self._commit(group, lease.queue_topic, lease.queue_id)
        return moved

    # -- ack and invisibility -------------------------------------------------------

    def ack(self, group: str, topic: str, handle: str) -> AckOutcome:
        outcome, lease = self.receipts.ack(group, topic, handle, self.now_ms())
        if lease is not None:
            self._commit(group, lease.queue_topic, lease.queue_id)
            if self.receipts.lowest_offset(group, lease.queue_topic, lease.queue_id) is None:
                self._wake(topic)  # the queue is free: a FIFO receive waiting on it can go on
        return outcome

    async def forward_to_dead_letter(self, group: str, topic: str, handle: str) -> AckOutcome:
        """ForwardMessageToDeadLetterQueue: a live lease's message to the DLQ, then the lease ends."""
        found = self.receipts.live(group, topic, handle, self.now_ms())
        if not isinstance(found, Lease):
            return AckOutcome.INVALID if found is AckOutcome.OK else found
        if self.dead_letter is None or not await self.dead_letter(group, found):
            raise RuntimeError("the dead-letter queue did not take the message")
        self.ack(group, topic, handle)
        return AckOutcome.OK

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> tuple[AckOutcome, str]:
        """A new handle for a live lease, invisible for ``invisible_ms`` from now."""
        outcome, lease = self.receipts.renew(group, topic, handle, self.now_ms(), invisible_ms)
        if lease is not None and invisible_ms == 0:
            self._wake(topic)
        return outcome, "" if lease is None else lease.handle

    # -- checkpoint -----------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Cursors and leases as JSON (auto-renewal is not kept: its clients reconnect anyway)."""
        return {
            "cursors": [[g, t, q, c] for (g, t, q), c in self._cursors.items()],
            "leases": [[x.group, x.topic, x.queue_id, x.offset, x.commit_log_offset, x.attempt, x.expires_ms,
                        x.handle, x.leased_ms, int(x.retry), int(x.orderly)] for x in self.receipts.leases()],
        }

    def restore(self, obj: dict[str, Any]) -> None:
        """Merge a :meth:`snapshot`. :raises ValueError: or ``TypeError`` when it is malformed."""
        for group, topic, queue_id, cursor in obj.get("cursors", []):
            self._cursors[(str(group), str(topic), int(queue_id))] = int(cursor)
        for row in obj.get("leases", []):
            group, topic, queue_id, offset, clo, attempt, expires, handle, leased, retry, orderly = (
                row if len(row) != 9 else [*row, False, False])  # 9 fields: a file from before retry topics
            self.receipts.restore(Lease(str(group), str(topic), int(queue_id), int(offset), int(clo), int(attempt),
                                        int(expires), str(handle), leased_ms=int(leased), retry=bool(retry),
                                        orderly=bool(orderly)))

    # -- auto-renewal -----------------------------------------------------------------

    def renew_due(self) -> None:
        """Extend the auto-renewed leases that expire within RENEW_AHEAD_MS."""
        now = self.now_ms()
        for lease in self.receipts.due_for_renewal(now + RENEW_AHEAD_MS):
            if now - lease.leased_ms >= RENEW_MAX_MS:
                lease.renewed_for = None  # renewed long enough: let it come back
            else:
                self.receipts.extend(lease, now + DEFAULT_INVISIBLE_MS)

    def client_gone(self, client_id: str) -> None:
        """Stop renewing a client's leases: they come back once their invisibility runs out."""
        self.receipts.stop_renewing(client_id)

    def start(self) -> None:
        self._renewer.start(RENEW_PERIOD_S, now=False)
        self._reviver.start(REVIVE_PERIOD_S, now=False)

    def stop(self) -> None:
        """Stop renewing and reviving, and answer every waiting receive now (the endpoint is closing)."""
        for loop in (self._renewer, self._reviver):
            if loop.running:
                loop.stop()
        for topic in list(self._waiters):
            self._wake(topic)

