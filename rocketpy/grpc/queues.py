"""PullMessage, UpdateOffset, GetOffset and QueryOffset: a 5.x pull consumer's reads of one queue and its
group's offsets (RocketMQ 5's proxy ``PullMessageActivity``, ``PullMessageResponseStreamWriter`` and
``OffsetActivity``).

As the Java proxy (which sends the broker PULL_MESSAGE, UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET,
GET_MIN_OFFSET, GET_MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP), each RPC is the broker's own request,
run by the broker's own processors here: the same long polling, filters, group checks and offset
table the 4.x clients use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from twisted.internet.defer import Deferred

from rocketpy.common.message import decode_records
from rocketpy.grpc import convert
from rocketpy.grpc.checks import PeerChannel, as_deferred, check_broker, check_group, polling_ms, topic_name
from rocketpy.grpc.status import GrpcError, from_remoting, ok, status
from rocketpy.grpc.v2 import definition_pb2 as pb
from rocketpy.grpc.v2 import service_pb2 as rpc
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand

#: PullSysFlag.buildSysFlag(commitOffset=false, suspend=true, subscription=true, classFilter=false)
PULL_SYS_FLAG = 0x2 | 0x4
#: the broker's offset requests these RPCs send
OFFSET_CODES = (RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.GET_MIN_OFFSET,
                RequestCode.GET_MAX_OFFSET, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP)
#: broker answers of PULL_MESSAGE that are a result, not an error (``PullStatus``)
_NOT_FOUND = (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)
#: QUERY_CONSUMER_OFFSET's "no offset" (the Java proxy: INTERNAL_SERVER_ERROR; the v2 code says what it is)
_OFFSET_CODES: dict[int, int] = {ResponseCode.QUERY_NOT_FOUND: pb.Code.OFFSET_NOT_FOUND,
                 ResponseCode.SUBSCRIPTION_PARSE_FAILED: pb.Code.ILLEGAL_FILTER_EXPRESSION}


class QueueRpcs:
    """The four RPCs over one broker.

    :param pull: the broker's PULL_MESSAGE processor (with its long polling).
    :param offsets: the broker's processors by request code: QUERY_CONSUMER_OFFSET,
        UPDATE_CONSUMER_OFFSET, GET_MIN_OFFSET, GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP.
    """

    def __init__(self, broker_name: str, pull: IRequestProcessor, offsets: Mapping[int, IRequestProcessor],
                 now_ms: Callable[[], int]) -> None:
        self._broker_name = broker_name
        self._pull = pull
        self._offsets = offsets
        self._now_ms = now_ms

    def _queue(self, queue: pb.MessageQueue) -> dict[str, str]:
        name = topic_name(queue.topic)
        check_broker(queue.broker.name, self._broker_name)
        return {"topic": name, "queueId": str(queue.id)}

    async def _call(self, ctx: Any, processors: Mapping[int, IRequestProcessor], code: int,
                    fields: dict[str, str]) -> RemotingCommand | None:
        """The broker's answer to ``code`` with ``fields`` (None: a held pull dropped as the broker stops)."""
        request = RemotingCommand.request(code, fields)
        response = await as_deferred(processors[code].process_request(cast(Any, PeerChannel(ctx.peer)), request))
        return cast("RemotingCommand | None", response)

    async def _offset(self, ctx: Any, code: int, fields: dict[str, str]) -> int:
        """The broker's answer's ``offset``. :raises GrpcError: its refusal, as the Java proxy maps it."""
        response = await self._call(ctx, self._offsets, code, fields)
        if response is None:
            raise GrpcError(pb.Code.INTERNAL_SERVER_ERROR, "no answer")
        if response.code != ResponseCode.SUCCESS:
            mapped = _OFFSET_CODES.get(response.code)
            if mapped is None:
                mapped = from_remoting(response.code, response.remark).code
            raise GrpcError(mapped, response.remark or str(response.code))
        return int(response.ext_fields.get("offset", "0"))

    # -- offsets ----------------------------------------------------------------

    def update_offset(self, ctx: Any, request: rpc.UpdateOffsetRequest) -> Deferred[rpc.UpdateOffsetResponse]:
        return Deferred.fromCoroutine(self._update_offset(ctx, request))

    async def _update_offset(self, ctx: Any, request: rpc.UpdateOffsetRequest) -> rpc.UpdateOffsetResponse:
        check_group(request.group)
        fields = self._queue(request.message_queue)
        if request.offset < 0:
            raise GrpcError(pb.Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        fields.update(consumerGroup=request.group.name, commitOffset=str(request.offset))
        await self._offset(ctx, RequestCode.UPDATE_CONSUMER_OFFSET, fields)
        return rpc.UpdateOffsetResponse(status=ok())

    def get_offset(self, ctx: Any, request: rpc.GetOffsetRequest) -> Deferred[rpc.GetOffsetResponse]:
        return Deferred.fromCoroutine(self._get_offset(ctx, request))

    async def _get_offset(self, ctx: Any, request: rpc.GetOffsetRequest) -> rpc.GetOffsetResponse:
        """The group's committed offset (0 for a new group on a queue never truncated; else OFFSET_NOT_FOUND)."""
        check_group(request.group)
        fields = self._queue(request.message_queue)
        fields["consumerGroup"] = request.group.name
        offset = await self._offset(ctx, RequestCode.QUERY_CONSUMER_OFFSET, fields)
        return rpc.GetOffsetResponse(status=ok(), offset=offset)

    def query_offset(self, ctx: Any, request: rpc.QueryOffsetRequest) -> Deferred[rpc.QueryOffsetResponse]:
        return Deferred.fromCoroutine(self._query_offset(ctx, request))

    async def _query_offset(self, ctx: Any, request: rpc.QueryOffsetRequest) -> rpc.QueryOffsetResponse:
        """BEGINNING: the queue's first offset kept; END: the next to be written; TIMESTAMP: the first
        stored at or after the time (SEARCH_OFFSET_BY_TIMESTAMP)."""
        fields = self._queue(request.message_queue)
        policy = request.query_offset_policy
        if policy == pb.QueryOffsetPolicy.BEGINNING:
            code = RequestCode.GET_MIN_OFFSET
        elif policy == pb.QueryOffsetPolicy.END:
            code = RequestCode.GET_MAX_OFFSET
        elif policy == pb.QueryOffsetPolicy.TIMESTAMP:
            if not request.HasField("timestamp"):
                raise GrpcError(pb.Code.BAD_REQUEST, "timestamp is required for TIMESTAMP query offset policy")
            code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
            fields["timestamp"] = str(convert.millis(request.timestamp))
        else:
            raise GrpcError(pb.Code.BAD_REQUEST, f"unsupported query offset policy: {policy}")
        offset = await self._offset(ctx, code, fields)
        return rpc.QueryOffsetResponse(status=ok(), offset=offset)

    # -- pull -------------------------------------------------------------------

    def pull_message(self, ctx: Any, request: rpc.PullMessageRequest,
                     remaining_ms: int | None) -> Deferred[list[rpc.PullMessageResponse]]:
        """The whole response stream: a status, the messages, then the next offset (a refusal fails with
        :class:`GrpcError`: the stream is then its status alone)."""
        return Deferred.fromCoroutine(self._pulled(ctx, request, remaining_ms))

    async def _pulled(self, ctx: Any, request: rpc.PullMessageRequest,
                      remaining_ms: int | None) -> list[rpc.PullMessageResponse]:
        poll_ms = polling_ms(request, remaining_ms)
        check_group(request.group)
        fields = self._queue(request.message_queue)
        expression = request.filter_expression
        fields.update(consumerGroup=request.group.name, queueOffset=str(request.offset),
                      maxMsgNums=str(max(1, request.batch_size)), sysFlag=str(PULL_SYS_FLAG), commitOffset="0",
                      suspendTimeoutMillis=str(poll_ms), subscription=expression.expression or "*", subVersion="0",
                      expressionType="SQL92" if expression.type == pb.FilterType.SQL else "TAG")
        response = await self._call(ctx, {RequestCode.PULL_MESSAGE: self._pull}, RequestCode.PULL_MESSAGE, fields)
        if response is None:  # the broker stopped while the pull was held
            return pull_stream(pb.Code.MESSAGE_NOT_FOUND, "no new message", [], request.offset)
        next_offset = int(response.ext_fields.get("nextBeginOffset", str(request.offset)))
        if response.code == ResponseCode.SUCCESS:
            now = self._now_ms()
            messages = [convert.to_v2(ext, "", ext.reconsume_times + 1, 0, now) for ext in decode_records(response.body)]
            for message in messages:  # pulled, not leased: no invisibility
                message.system_properties.ClearField("invisible_duration")
            if not messages:
                return pull_stream(pb.Code.MESSAGE_NOT_FOUND, "no match message", [], next_offset)
            return pull_stream(pb.Code.OK, None, messages, next_offset)
        if response.code in _NOT_FOUND:
            return pull_stream(pb.Code.MESSAGE_NOT_FOUND, "no new message", [], next_offset)
        if response.code == ResponseCode.PULL_OFFSET_MOVED:
            return pull_stream(pb.Code.ILLEGAL_OFFSET, None, [], next_offset)
        code = _OFFSET_CODES.get(response.code) or from_remoting(response.code, response.remark).code
        raise GrpcError(code, response.remark or str(response.code))


def pull_stream(code: int, message: str | None, messages: list[pb.Message],
                next_offset: int) -> list[rpc.PullMessageResponse]:
    """A status, the messages, the next offset (``PullMessageResponseStreamWriter.writeAndComplete``)."""
    stream = [rpc.PullMessageResponse(status=status(code, message))]
    stream.extend(rpc.PullMessageResponse(message=m) for m in messages)
    stream.append(rpc.PullMessageResponse(next_offset=next_offset))
    return stream
