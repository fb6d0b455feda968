"""Java's ``MQClientAPIImpl``: one method per remoting call a client makes.

Each method builds the request (header fields as strings, JSON bodies),
sends it through the remoting client, and turns the response into a value or
an :class:`~rocketpy.client.errors.MQBrokerError`. Timeouts are seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from rocketpy.client.errors import MQBrokerError
from rocketpy.client.results import PullResult, PullStatus, SendResult, SendStatus
from rocketpy.client.route import decode_topic_route
from rocketpy.common import speedups
from rocketpy.common.fastjson import BodyError, dump_json
from rocketpy.common.headers import get_int, to_fields
from rocketpy.common.message import Message, MessageConst, MessageExt, RecordError, decode_records, properties_to_string
from rocketpy.common.route import MessageQueue, TopicRouteData
from rocketpy.common.topic import TBW102
from rocketpy.remoting.codes import ROCKETPY_VERSION, LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketpy.remoting.command import RemotingCommand
from rocketpy.remoting.pending import Then, call_then


class Mode(Enum):
    """Communication mode of a send."""

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"

    __hash__ = object.__hash__  # members are singletons: hashed in C, not by Enum's Python __hash__


class IRemotingClient(Protocol):
    """What the client layer needs from :class:`rocketpy.remoting.client.RemotingClient`."""

    def invoke_sync(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]: ...

    def invoke_async(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[Any]: ...

    def invoke_oneway(self, address: str, request: RemotingCommand, timeout: float) -> Deferred[None]: ...

    def register_processor(self, code: int, processor: Any) -> None: ...

    def close(self) -> Deferred[None]: ...


_SEND_STATUS: dict[int, SendStatus] = {int(s.value): s for s in SendStatus}
_PULL_STATUS: dict[int, PullStatus] = {int(s.value): s for s in PullStatus}


def _check(response: RemotingCommand, addr: str, *ok: int) -> RemotingCommand:
    if response.code not in (ok or (ResponseCode.SUCCESS,)):
        raise MQBrokerError(response.code, response.remark, addr)
    return response


def _nothing(_: object) -> None:
    return None


def _json_body(response: RemotingCommand, addr: str) -> Any:
    try:
        return json.loads(response.body or b"{}")
    except ValueError as e:
        raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"unreadable response body: {e}", addr) from None


class MQClientAPI:
    """The requests of producers and consumers, over one remoting client."""

    def __init__(self, remoting: IRemotingClient) -> None:
        self.remoting = remoting
        #: :meth:`RemotingClient.invoke_then` (a remoting client without it: the Deferred calls)
        self._invoke_then: Callable[..., None] | None = getattr(remoting, "invoke_then", None)

    async def _call(self, addr: str, code: int, fields: dict[str, str], timeout: float, body: bytes = b"") -> RemotingCommand:
        return await self.remoting.invoke_sync(addr, RemotingCommand.request(code, fields, body), timeout)

    # name server

    async def get_topic_route(self, addr: str, topic: str, timeout: float) -> TopicRouteData | None:
        """The topic's route from the name server at ``addr``; None if it has none (code 17)."""
        response = await self._call(addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, to_fields(topic=topic), timeout)
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        _check(response, addr)
        try:
            return decode_topic_route(response.body)
        except BodyError as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, str(e), addr) from None

    # producer

    def send_message(
        self,
        addr: str,
        mq: MessageQueue,
        msg: Message,
        fields: dict[str, str],
        mode: Mode,
        timeout: float,
        msg_id: str,
        batch: bool = False,
        v2: bool = True,
    ) -> Deferred[SendResult | None]:
        """Send one message (or a batch body).

        :param msg: topic, body (already compressed if it is to be) and properties as sent.
        :param fields: the header from :func:`send_header`, one-letter keys for V2 and batches.
        :param msg_id: the UNIQ_KEY(s) to report in the result.
        :param v2: SEND_MESSAGE_V2 (310) rather than SEND_MESSAGE (10); batches are always 320.
        :return: fires with the result, None for a oneway send.
        """
        request = send_request(msg, fields, batch, v2)
        if mode is Mode.ONEWAY:
            return self.remoting.invoke_oneway(addr, request, timeout).addCallback(_nothing)
        invoke = self.remoting.invoke_async if mode is Mode.ASYNC else self.remoting.invoke_sync
        return invoke(addr, request, timeout).addCallback(self._send_result, addr, mq, msg_id)

    def send_message_then(
        self, addr: str, mq: MessageQueue, msg: Message, fields: dict[str, str], mode: Mode, timeout: float,
        msg_id: str, v2: bool, then: Then, args: tuple[Any, ...],
    ) -> None:
        """:meth:`send_message` of one message, SYNC or ASYNC, without a Deferred:
        ``then(result_or_failure, *args)`` is called exactly once (at once if it fails before it is
        sent). For the producer's lone sends: no Deferred to make, fire and unwind per request."""
        request = send_request(msg, fields, False, v2)
        outcome = (addr, mq, msg_id, then, args)
        if self._invoke_then is not None:
            self._invoke_then(addr, request, timeout, _send_result_then, outcome, mode is Mode.ASYNC)
            return
        invoke = self.remoting.invoke_async if mode is Mode.ASYNC else self.remoting.invoke_sync
        invoke(addr, request, timeout).addBoth(call_then, _send_result_then, outcome)  # a remoting client without it

    @staticmethod
    def _send_result(response: RemotingCommand, addr: str, mq: MessageQueue, msg_id: str) -> SendResult:
        """The result of a send to ``mq`` (the broker may have picked another queue id)."""
        status = _SEND_STATUS.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr)
        ext = response.ext_fields
        try:
            queue_id = int(ext["queueId"])
            queue = mq if queue_id == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, queue_id)
            return SendResult(
                status, msg_id, ext["msgId"], queue, int(ext["queueOffset"]), ext.get("transactionId"),
                ext.get("MSG_REGION", "DefaultRegion"),
            )
        except (KeyError, ValueError) as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad send response: {e}", addr) from None

    async def heartbeat(self, addr: str, data: dict[str, Any], timeout: float) -> int:
        """HEART_BEAT with a HeartbeatData body; returns the broker's version."""
        response = await self._call(addr, RequestCode.HEART_BEAT, {}, timeout, dump_json(data))
        return _check(response, addr).version

    async def unregister_client(
        self, addr: str, client_id: str, producer_group: str | None, consumer_group: str | None, timeout: float
    ) -> None:
        fields = to_fields(clientID=client_id, producerGroup=producer_group, consumerGroup=consumer_group)
        _check(await self._call(addr, RequestCode.UNREGISTER_CLIENT, fields, timeout), addr)

    async def check_client_config(
        self, addr: str, client_id: str, group: str, subscription: dict[str, Any], timeout: float
    ) -> None:
        """CHECK_CLIENT_CONFIG: can the broker serve this (SQL92) subscription? Raises MQBrokerError if not."""
        body = dump_json({"clientId": client_id, "group": group, "subscriptionData": subscription})
        _check(await self._call(addr, RequestCode.CHECK_CLIENT_CONFIG, {}, timeout, body), addr)

    # consumer

    async def pull_message(self, addr: str, fields: dict[str, str], mode: Mode, timeout: float) -> PullResult:
        """PULL_MESSAGE; the result holds every decoded record, bodies as stored."""
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
        if mode is Mode.ASYNC:
            response = await self.remoting.invoke_async(addr, request, timeout)
        else:
            response = await self.remoting.invoke_sync(addr, request, timeout)
        return self._pull_result(response, addr)

    def pull_message_deferred(self, addr: str, fields: dict[str, str], timeout: float) -> Deferred[PullResult]:
        """:meth:`pull_message` in ASYNC mode, with no coroutine."""
        request = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
        return self.remoting.invoke_async(addr, request, timeout).addCallback(self._pull_result, addr)

    @staticmethod
    def _pull_result(response: RemotingCommand, addr: str) -> PullResult:
        status = _PULL_STATUS.get(response.code)
        if status is None:
            raise MQBrokerError(response.code, response.remark, addr)
        ext = response.ext_fields
        try:
            min_offset, max_offset = get_int(ext, "minOffset"), get_int(ext, "maxOffset")
            # Java's processPullResult: each message carries its queue's offsets
            messages: list[MessageExt] = decode_records(response.body, {
                MessageConst.MIN_OFFSET: str(min_offset), MessageConst.MAX_OFFSET: str(max_offset),
            }) if status is PullStatus.FOUND else []
            return PullResult(
                status,
                get_int(ext, "nextBeginOffset"),
                min_offset,
                max_offset,
                messages,
                get_int(ext, "suggestWhichBrokerId", 0),
            )
        except (ValueError, RecordError) as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad pull response: {e}", addr) from None

    async def _queue_offset(self, addr: str, code: int, fields: dict[str, str], timeout: float, *ok: int) -> int:
        response = _check(await self._call(addr, code, fields, timeout), addr, *ok)
        if response.code != ResponseCode.SUCCESS:
            return -1
        try:
            return get_int(response.ext_fields, "offset")
        except ValueError as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, str(e), addr) from None

    def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue, timeout: float) -> Deferred[int]:
        """The group's stored offset of ``mq``; -1 when the broker has none (code 22)."""
        fields = to_fields(consumerGroup=group, topic=mq.topic, queueId=mq.queue_id)
        return Deferred.fromCoroutine(
            self._queue_offset(addr, RequestCode.QUERY_CONSUMER_OFFSET, fields, timeout, 0, ResponseCode.QUERY_NOT_FOUND)
        )

    def get_max_offset(self, addr: str, mq: MessageQueue, timeout: float) -> Deferred[int]:
        fields = to_fields(topic=mq.topic, queueId=mq.queue_id)
        return Deferred.fromCoroutine(self._queue_offset(addr, RequestCode.GET_MAX_OFFSET, fields, timeout))

    def get_min_offset(self, addr: str, mq: MessageQueue, timeout: float) -> Deferred[int]:
        fields = to_fields(topic=mq.topic, queueId=mq.queue_id)
        return Deferred.fromCoroutine(self._queue_offset(addr, RequestCode.GET_MIN_OFFSET, fields, timeout))

    def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout: float) -> Deferred[int]:
        fields = to_fields(topic=mq.topic, queueId=mq.queue_id, timestamp=timestamp_ms)
        return Deferred.fromCoroutine(self._queue_offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields, timeout))

    async def update_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, offset: int, timeout: float, oneway: bool = False
    ) -> None:
        """UPDATE_CONSUMER_OFFSET; a oneway update fires once written."""
        fields = to_fields(consumerGroup=group, topic=mq.topic, queueId=mq.queue_id, commitOffset=offset)
        request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
        if oneway:
            await self.remoting.invoke_oneway(addr, request, timeout)
        else:
            _check(await self.remoting.invoke_sync(addr, request, timeout), addr)

    async def get_consumer_id_list(self, addr: str, group: str, timeout: float) -> list[str]:
        response = await self._call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, to_fields(consumerGroup=group), timeout)
        ids = _json_body(_check(response, addr), addr).get("consumerIdList") or []
        return [str(i) for i in ids]

    def _lock_body(self, group: str, client_id: str, mqs: Iterable[MessageQueue]) -> bytes:
        return dump_json({"clientId": client_id, "consumerGroup": group, "mqSet": [mq.to_json() for mq in mqs]})

    async def lock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue], timeout: float
    ) -> set[MessageQueue]:
        """LOCK_BATCH_MQ; returns the queues this client now holds."""
        response = await self._call(addr, RequestCode.LOCK_BATCH_MQ, {}, timeout, self._lock_body(group, client_id, mqs))
        locked = _json_body(_check(response, addr), addr).get("lockOKMQSet") or []
        try:
            return {MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])) for q in locked}
        except (KeyError, TypeError, ValueError) as e:
            raise MQBrokerError(ResponseCode.SYSTEM_ERROR, f"bad lock response: {e!r}", addr) from None

    async def unlock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue], timeout: float
    ) -> None:
        body = self._lock_body(group, client_id, mqs)
        _check(await self._call(addr, RequestCode.UNLOCK_BATCH_MQ, {}, timeout, body), addr)

    async def consumer_send_message_back(
        self, addr: str, msg: MessageExt, group: str, delay_level: int, origin_msg_id: str,
        max_reconsume_times: int, timeout: float,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker re-puts the stored message on ``%RETRY%group`` (or the DLQ)."""
        fields = to_fields(
            offset=msg.commit_log_offset, group=group, delayLevel=delay_level, originMsgId=origin_msg_id,
            originTopic=msg.topic, unitMode=False, maxReconsumeTimes=max_reconsume_times,
        )
        _check(await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, fields, timeout), addr)


def send_result_then(
    response: RemotingCommand | Failure, addr: str, mq: MessageQueue, msg_id: str, then: Then, args: tuple[Any, ...],
) -> None:
    """``then(outcome, *args)``: the :class:`SendResult` of a send's ``response`` (as :meth:`send_message`
    fires with), or the failure (the request's, or an :class:`MQBrokerError`). ``rocketpy._speedups``
    has it for the usual answer (``send_result_then``, rocketpy/_speedups_table.h); this is the reference."""
    if not isinstance(response, Failure):
        try:
            result: SendResult | Failure = MQClientAPI._send_result(response, addr, mq, msg_id)
        except Exception:
            result = Failure()
        then(result, *args)
    else:
        then(response, *args)


#: what :meth:`MQClientAPI.send_message_then` answers with: C when built, else :func:`send_result_then`
_send_result_then: Callable[..., None] = send_result_then
if hasattr(speedups.compiled, "set_send_result"):  # a module built before it had it: Python
    speedups.compiled.set_send_result(SendResult, _SEND_STATUS, send_result_then)  # type: ignore[union-attr]
    _send_result_then = speedups.compiled.send_result_then  # type: ignore[union-attr]


def send_request(msg: Message, fields: dict[str, str], batch: bool, v2: bool) -> RemotingCommand:
    """The send request of ``msg`` (or of a batch body) with the header ``fields``: SEND_BATCH_MESSAGE,
    SEND_REPLY_MESSAGE(_V2) for a reply (``MixAll.REPLY_MESSAGE_FLAG``), else SEND_MESSAGE(_V2)."""
    if batch:
        code = _SEND_BATCH
    elif msg.properties.get(MessageConst.MESSAGE_TYPE) == "reply":
        code = _SEND_REPLY_V2 if v2 else _SEND_REPLY
    else:
        code = _SEND_V2 if v2 else _SEND
    # RemotingCommand.request's, without its call
    return RemotingCommand(code, _PYTHON, ROCKETPY_VERSION, 0, 0, None, fields, msg.body, _JSON)


_SEND_BATCH, _SEND_REPLY_V2, _SEND_REPLY, _SEND_V2, _SEND = (int(code) for code in (
    RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2, RequestCode.SEND_REPLY_MESSAGE,
    RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE))
_PYTHON, _JSON = LanguageCode.PYTHON.name, SerializeType.JSON


_SEND_NAMES = (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "unitMode", "batch",
)


def send_header(
    group: str, msg: Message, queue_id: int, sys_flag: int, born_ms: int, default_queue_nums: int,
    reconsume_times: int | None = None, max_reconsume_times: int | None = None, batch: bool = False,
    v2: bool = True,
) -> dict[str, str]:
    """The send header for ``msg`` as it goes on the wire: SEND_MESSAGE_V2's one-letter keys
    (``SEND_V2_NAMES``, in ``_SEND_NAMES``' order) or long names."""
    fields = {
        "a": group, "b": msg.topic, "c": TBW102, "d": str(default_queue_nums), "e": str(queue_id),
        "f": str(sys_flag), "g": str(born_ms), "h": str(msg.flag), "i": properties_to_string(msg.properties),
        "j": str(reconsume_times or 0), "k": "false", "m": "true" if batch else "false",
    }
    if not v2:
        fields = dict(zip(_SEND_NAMES, fields.values()))
    if max_reconsume_times is not None:
        fields["l" if v2 else "maxReconsumeTimes"] = str(max_reconsume_times)
    return fields
