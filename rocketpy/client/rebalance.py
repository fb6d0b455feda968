"""Which queues this push consumer reads (Java's ``RebalanceImpl``/``RebalancePushImpl``).

Every rebalance asks a broker for the group's client ids, allocates the
sorted queues over them, starts a pull loop for each new queue (from the
stored offset or the consume-from-where rule) and drops queues given away,
persisting their offsets. Orderly consumers lock queues on their brokers
before reading them and unlock them when they let go.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from twisted.logger import Logger

from rocketpy.client.consumer import ConsumeFromWhere, MessageModel
from rocketpy.client.errors import MQError, RemotingError
from rocketpy.client.offsets import NO_OFFSET
from rocketpy.client.process import ProcessQueue
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import RETRY_GROUP_TOPIC_PREFIX

if TYPE_CHECKING:
    from rocketpy.client.push import PushConsumer


class Rebalancer:
    """The process queues of a push consumer and the rules that add and drop them."""

    log = Logger()

    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._running = False
        self._again = False

    async def rebalance(self) -> None:
        """Rebalance every subscribed topic; a call during a rebalance runs it once more after."""
        if self._running:
            self._again = True
            return
        self._running = True
        try:
            self._again = True
            while self._again and self.consumer.running:
                self._again = False
                await self._rebalance_once()
        finally:
            self._running = False

    async def _rebalance_once(self) -> None:
        c = self.consumer
        changed = False
        for topic in list(c.subscriptions):
            try:
                mine = await self._allocate(topic)
            except (RemotingError, MQError) as e:
                self.log.warn("rebalance of {topic} failed: {error}", topic=topic, error=e)
                continue
            if mine is not None:
                changed |= await self._update(topic, mine)
        for mq in [mq for mq in self.process_queues if mq.topic not in c.subscriptions]:
            changed |= await self._drop(mq)
        if changed:
            await c.instance.send_heartbeat()

    async def _allocate(self, topic: str) -> set[MessageQueue] | None:
        c = self.consumer
        queues = c.subscribe_info.get(topic) or await c.fetch_queues(topic)
        if c.message_model is MessageModel.BROADCASTING:
            return set(queues)
        addr = await c.broker_addr(queues[0], only_this=False)
        ids = await c.api.get_consumer_id_list(addr, c.group, c.timeout)
        if not ids:
            self.log.warn("no consumer of group {group} registered at {addr}", group=c.group, addr=addr)
            return None
        return set(c.allocate(sorted(queues), sorted(ids), c.instance.client_id))

    async def _update(self, topic: str, mine: set[MessageQueue]) -> bool:
        c = self.consumer
        changed = False
        for mq in [mq for mq in self.process_queues if mq.topic == topic and mq not in mine]:
            changed |= await self._drop(mq)
        for mq in sorted(mine - set(self.process_queues)):
            pq = ProcessQueue()
            if c.orderly and not await self.lock(mq, pq):
                self.log.info("queue {mq} not added: its lock is held by another client", mq=mq)
                continue
            c.offset_store.remove(mq)
            offset = await self._pull_from_where(mq)
            if offset < 0:
                self.log.warn("queue {mq} not added: no start offset", mq=mq)
                continue
            self.process_queues[mq] = pq
            c.start_pulling(mq, pq, offset)
            changed = True
        return changed

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Drop each held queue of ``topic`` named in ``offsets`` (in-flight pulls and consumption
        are then ignored), commit its new offset, and rebalance to take it again from there."""
        c = self.consumer
        for mq in [mq for mq in self.process_queues if mq.topic == topic and mq in offsets]:
            self.process_queues[mq].dropped = True
            c.offset_store.update(mq, offsets[mq], increase_only=False)
            await self._drop(mq)
        await self.rebalance()

    async def _drop(self, mq: MessageQueue) -> bool:
        pq = self.process_queues.pop(mq)
        pq.dropped = True
        c = self.consumer
        await c.offset_store.persist(mq)
        c.offset_store.remove(mq)
        if c.orderly and c.message_model is MessageModel.CLUSTERING:
            await self.unlock([mq])
        return True

    async def _pull_from_where(self, mq: MessageQueue) -> int:
        """Java's ``computePullFromWhere``: the stored offset, else the consume-from-where rule."""
        c = self.consumer
        last = await c.offset_store.read_store(mq)
        if last >= 0:
            return last
        if last != NO_OFFSET:
            return -1
        retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        try:
            if c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
                return 0 if retry else await c.max_offset(mq)
            if retry:
                return await c.max_offset(mq)
            return await c.search_offset(mq, c.consume_timestamp)
        except (RemotingError, MQError) as e:
            self.log.warn("start offset of {mq} unknown: {error}", mq=mq, error=e)
            return -1

    # orderly locks

    async def lock(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """LOCK_BATCH_MQ for one queue; marks ``pq`` locked on success."""
        c = self.consumer
        try:
            addr = await c.broker_addr(mq)
            locked = await c.api.lock_batch_mq(addr, c.group, c.instance.client_id, [mq], c.timeout)
        except (RemotingError, MQError) as e:
            self.log.info("locking {mq} failed: {error}", mq=mq, error=e)
            return False
        if mq in locked:
            pq.locked, pq.last_lock = True, c.clock.seconds()
            return True
        return False

    async def lock_all(self) -> None:
        """Renew the locks of every held queue, broker by broker (every 20 s)."""
        c = self.consumer
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in self.process_queues:
            by_broker[mq.broker_name].append(mq)
        for mqs in by_broker.values():
            try:
                addr = await c.broker_addr(mqs[0])
                locked = await c.api.lock_batch_mq(addr, c.group, c.instance.client_id, mqs, c.timeout)
            except (RemotingError, MQError) as e:
                self.log.warn("relocking {n} queues failed: {error}", n=len(mqs), error=e)
                continue
            now = c.clock.seconds()
            for mq in mqs:
                pq = self.process_queues.get(mq)
                if pq is not None:
                    pq.locked = mq in locked
                    if pq.locked:
                        pq.last_lock = now

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None:
        """UNLOCK_BATCH_MQ, broker by broker; errors are logged."""
        c = self.consumer
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            by_broker[mq.broker_name].append(mq)
        for group in by_broker.values():
            try:
                addr = await c.broker_addr(group[0])
                await c.api.unlock_batch_mq(addr, c.group, c.instance.client_id, group, c.timeout)
            except (RemotingError, MQError) as e:
                self.log.warn("unlocking {n} queues failed: {error}", n=len(group), error=e)
