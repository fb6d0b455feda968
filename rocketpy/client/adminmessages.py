"""The message calls of :class:`rocketpy.client.admin.AdminClient`: view, query, pull and send."""

from __future__ import annotations

from rocketpy.client.adminbase import AdminBase, NotFoundError, deferred_method, parse_body
from rocketpy.client.admintypes import DirectConsumeResult, parse_direct_result
from rocketpy.client.api import Mode
from rocketpy.client.errors import MQClientError
from rocketpy.client.producer import Producer
from rocketpy.client.results import PullStatus, SendResult
from rocketpy.client.route import master_addresses, subscribe_queues
from rocketpy.client.subscription import build_subscription
from rocketpy.common.compression import inflate_body
from rocketpy.common.headers import to_fields
from rocketpy.common.message import Message, MessageConst, MessageExt, decode_offset_msg_id, decode_records
from rocketpy.common.route import MessageQueue
from rocketpy.common.topic import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rocketpy.remoting.codes import RequestCode, ResponseCode

#: The group admin pulls and sends go out as (Java's ``MixAll.TOOLS_CONSUMER_GROUP``).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
TOOLS_PRODUCER_GROUP = "TOOLS_PRODUCER"
#: PULL_MESSAGE's subscription flag: the request carries its own tag expression.
_PULL_FLAG_SUBSCRIPTION = 0x4
_PULL_BATCH = 32
#: QUERY_MESSAGE's ``maxNum`` for a key query (mqadmin's 64).
_QUERY_MAX_NUM = 64
_END_OF_TIME = 2**63 - 1
#: Properties a broker sets on a stored message: not carried over when a dead letter is resent.
_BROKER_PROPERTIES = frozenset({
    MessageConst.CLUSTER, MessageConst.DELAY_TIME_LEVEL, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID,
    MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET, MessageConst.TRANSACTION_PREPARED, MessageConst.PRODUCER_GROUP,
    MessageConst.WAIT_STORE_MSG_OK, MessageConst.TRANSACTION_CHECK_TIMES, MessageConst.TRAN_PREPARED_QUEUE_OFFSET,
    MessageConst.CONSUME_START_TIME,
})


class MessageAdmin(AdminBase):
    """Looking messages up, reading them without committing, sending one, consuming one directly."""

    @deferred_method
    async def consume_message_directly(self, group: str, client_id: str, msg_id: str,
                                       topic: str | None = None) -> DirectConsumeResult:
        """Have one client of ``group`` consume one stored message now (CONSUME_MESSAGE_DIRECTLY).

        :param msg_id: the offset message id, or with ``topic`` a UNIQ_KEY.
        """
        if topic is not None:
            msg_id = (await self.message_by_id(msg_id, topic)).msg_id
        addr = _store_address(msg_id)
        fields = {"consumerGroup": group, "clientId": client_id, "msgId": msg_id}
        response = await self.call(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, fields)
        return parse_body(parse_direct_result, response.body)

    @deferred_method
    async def view_message(self, msg_id: str) -> MessageExt:
        """The message of an offset message id, from the broker the id names (VIEW_MESSAGE_BY_ID)."""
        host, offset = _decode_msg_id(msg_id)
        response = await self.call(host, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}, b"",
                                   ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR)
        if response.code != ResponseCode.SUCCESS or not response.body:
            raise NotFoundError(f"no message {msg_id} at {host}")
        return _inflated(parse_body(decode_records, response.body))[0]

    @deferred_method
    async def message_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message of an offset message id or, with ``topic``, of a UNIQ_KEY (``mqadmin queryMsgById``).

        Both ids are 32 hex digits: with ``topic`` the UNIQ_KEY is looked up first (decoding one as an
        offset id names a host that does not exist).
        """
        if topic is not None:
            try:
                return await self._by_unique_key(topic, msg_id)
            except NotFoundError:
                if not _is_offset_id(msg_id):
                    raise
        return await self.view_message(msg_id)

    @deferred_method
    async def query_message_by_key(self, topic: str, key: str, begin_ms: int = 0,
                                   end_ms: int = _END_OF_TIME) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS hold ``key`` (QUERY_MESSAGE on every master)."""
        found = await self._query(topic, key, False, begin_ms, end_ms)
        return [m for m in found if key in (m.keys or "").split(" ")]

    @deferred_method
    async def query_message_by_unique_key(self, topic: str, msg_id: str) -> MessageExt:
        """The message of ``topic`` whose UNIQ_KEY (the producer's message id) is ``msg_id``."""
        return await self._by_unique_key(topic, msg_id)

    async def _by_unique_key(self, topic: str, msg_id: str) -> MessageExt:
        found = await self._query(topic, msg_id, True, 0, _END_OF_TIME)
        for m in found:
            if m.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == msg_id:
                return m
        raise NotFoundError(f"no message {msg_id} in topic {topic!r}")

    async def _query(self, topic: str, key: str, unique: bool, begin_ms: int, end_ms: int) -> list[MessageExt]:
        fields = to_fields(topic=topic, key=key, maxNum=_QUERY_MAX_NUM, beginTimestamp=begin_ms, endTimestamp=end_ms)
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = "true"
        found: list[MessageExt] = []
        for addr in (await self._masters(topic)).values():
            response = await self.call(addr, RequestCode.QUERY_MESSAGE, fields, b"",
                                       ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
            if response.code == ResponseCode.SUCCESS:
                found += _inflated(parse_body(decode_records, response.body))
        return sorted(found, key=lambda m: m.store_timestamp)

    @deferred_method
    async def query_message_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageExt:
        """The message at ``offset`` of one queue (``mqadmin queryMsgByOffset``)."""
        addr = await self._master(topic, broker_name)
        found = await self._pull_range(addr, MessageQueue(topic, broker_name, queue_id), offset, offset + 1, "*")
        if not found:
            raise NotFoundError(f"no message at offset {offset} of queue {queue_id} of {topic!r} on {broker_name}")
        return found[0]

    async def _master(self, topic: str, broker_name: str) -> str:
        masters = await self._masters(topic)
        if broker_name not in masters:
            raise NotFoundError(f"broker {broker_name!r} does not serve topic {topic!r}")
        return masters[broker_name]

    @deferred_method
    async def pull_messages(self, topic: str, *, broker_name: str | None = None, queue_id: int | None = None,
                            offset: int | None = None, begin_ms: int | None = None, end_ms: int | None = None,
                            max_count: int | None = None, expression: str = "*") -> list[MessageExt]:
        """Messages of ``topic`` read without committing anything (``mqadmin printMsg``, ``consumeMessage``).

        Every readable queue (or the one of ``broker_name`` and ``queue_id``), from ``offset`` or the
        first message stored at ``begin_ms`` (else the start) to the last stored before ``end_ms``
        (else the end), at most ``max_count`` per queue, filtered by the tag ``expression``.
        """
        route = await self._route(topic)
        masters = master_addresses(route)
        queues = [mq for mq in subscribe_queues(topic, route)
                  if broker_name in (None, mq.broker_name) and queue_id in (None, mq.queue_id)]
        if not queues:
            raise NotFoundError(f"topic {topic!r} has no queue {queue_id} on broker {broker_name!r}")
        found: list[MessageExt] = []
        for mq in queues:
            addr = masters.get(mq.broker_name)
            if addr is None:
                continue
            start = offset if offset is not None else await self._offset_at(addr, mq, begin_ms, False)
            stop = await self._offset_at(addr, mq, end_ms, True)
            if max_count is not None:
                stop = min(stop, start + max_count)
            msgs = await self._pull_range(addr, mq, start, stop, expression)
            found += [m for m in msgs if (begin_ms is None or m.store_timestamp >= begin_ms)
                      and (end_ms is None or m.store_timestamp < end_ms)]
        return found

    async def _offset_at(self, addr: str, mq: MessageQueue, timestamp_ms: int | None, end: bool) -> int:
        if timestamp_ms is None:
            get = self.api.get_max_offset if end else self.api.get_min_offset
            return await get(addr, mq, self.timeout)
        return await self.api.search_offset(addr, mq, timestamp_ms, self.timeout)

    async def _pull_range(self, addr: str, mq: MessageQueue, start: int, stop: int,
                          expression: str) -> list[MessageExt]:
        """The messages of ``mq`` in ``[start, stop)`` matching ``expression``."""
        sub = build_subscription(mq.topic, expression, 0)
        found: list[MessageExt] = []
        offset = start
        while offset < stop:
            fields = to_fields(
                consumerGroup=TOOLS_CONSUMER_GROUP, topic=mq.topic, queueId=mq.queue_id, queueOffset=offset,
                maxMsgNums=min(_PULL_BATCH, stop - offset), sysFlag=_PULL_FLAG_SUBSCRIPTION, commitOffset=0,
                suspendTimeoutMillis=0, subscription=sub.sub_string, subVersion=0, expressionType=sub.expression_type,
            )
            result = await self.api.pull_message(addr, fields, Mode.SYNC, self.timeout)
            if result.status is not PullStatus.FOUND and result.status is not PullStatus.NO_MATCHED_MSG:
                break
            found += [m for m in _inflated(result.messages) if m.queue_offset < stop and sub.matches(m)]
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        return found

    @deferred_method
    async def send_message(self, topic: str, body: bytes, tags: str | None = None, keys: str | None = None,
                           broker_name: str | None = None, queue_id: int | None = None,
                           properties: dict[str, str] | None = None) -> SendResult:
        """Send one message as a short-lived producer of ``TOOLS_PRODUCER`` (``mqadmin sendMessage``);
        to one queue when ``broker_name`` and ``queue_id`` are given; ``properties`` go with it."""
        if (broker_name is None) != (queue_id is None):
            raise MQClientError(-1, "give both the broker name and the queue id, or neither")
        props = dict(properties or {})
        if tags:
            props[MessageConst.TAGS] = tags
        if keys:
            props[MessageConst.KEYS] = keys
        producer = Producer(TOOLS_PRODUCER_GROUP, self.namesrv_addrs, self.reactor, self.remoting,
                            send_timeout=self.timeout)
        await producer.start()
        try:
            msg = Message(topic, body, 0, props)
            if broker_name is not None and queue_id is not None:
                return await producer.send_to_queue(msg, MessageQueue(topic, broker_name, queue_id))
            return await producer.send(msg)
        finally:
            await producer.shutdown()


    @deferred_method
    async def resend_dead_letter(self, group: str, msg_id: str) -> SendResult:
        """Give a message of ``%DLQ%group`` back to ``group`` alone: a copy (body, keys, tags, user
        properties, its UNIQ_KEY, its original topic as RETRY_TOPIC) is sent to ``%RETRY%group``,
        which the group's consumers subscribe to, with a fresh retry count.

        :param msg_id: the offset message id or the UNIQ_KEY of the dead letter.
        """
        msg = await self.message_by_id(msg_id, DLQ_GROUP_TOPIC_PREFIX + group)
        props = {k: v for k, v in msg.properties.items() if k not in _BROKER_PROPERTIES}
        return await self.send_message(RETRY_GROUP_TOPIC_PREFIX + group, msg.body, properties=props)


def _is_offset_id(msg_id: str) -> bool:
    try:
        decode_offset_msg_id(msg_id)
    except ValueError:
        return False
    return True


def _decode_msg_id(msg_id: str) -> tuple[str, int]:
    try:
        (ip, port), offset = decode_offset_msg_id(msg_id)
    except ValueError:
        raise NotFoundError(f"{msg_id!r} is not an offset message id (give the topic to look up a UNIQ_KEY)") from None
    return (f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"), offset


def _store_address(msg_id: str) -> str:
    return _decode_msg_id(msg_id)[0]


def _inflated(msgs: list[MessageExt]) -> list[MessageExt]:
    for m in msgs:
        try:
            inflate_body(m)
        except ValueError:
            pass  # a corrupt body, or LZ4/ZSTD without their libraries, stays as stored
    return msgs
