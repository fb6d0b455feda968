"""CONSUME_MESSAGE_DIRECTLY (309) on the client side: a broker forwards one stored message
(``mqadmin consumeMessage``) for this client's push consumer of a group to consume now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import implementer

from rocketpy.common.compression import DecompressionError, inflate_body
from rocketpy.common.fastjson import dump_json
from rocketpy.common.headers import get_str
from rocketpy.common.message import MessageExt, RecordError, decode_record
from rocketpy.interfaces import IRequestProcessor
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand

#: ``(group, message, broker name)`` → a Deferred ConsumeMessageDirectlyResult, or None when
#: this client has no push consumer of the group
DirectConsumer = Callable[[str, MessageExt, str], Deferred[dict[str, Any]] | None]


@implementer(IRequestProcessor)
class ConsumeDirectlyProcessor:
    """Decodes the record in the body and has the group's push consumer consume it; answers
    with the ConsumeMessageDirectlyResult JSON (or SYSTEM_ERROR, as the Java client)."""

    def __init__(self, consume: DirectConsumer) -> None:
        self._consume = consume

    def process_request(self, channel: object, request: RemotingCommand) -> RemotingCommand | Deferred[RemotingCommand]:
        ext = request.ext_fields
        group = get_str(ext, "consumerGroup")
        try:
            msg = decode_record(request.body)
            inflate_body(msg)  # as Java's MessageDecoder.decode
        except (RecordError, DecompressionError) as e:
            return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad message record: {e}")
        d = self._consume(group, msg, ext.get("brokerName", ""))
        if d is None:
            return request.make_response(ResponseCode.SYSTEM_ERROR,
                                         f"The Consumer Group <{group}> not exist in this consumer")
        return d.addCallback(lambda result: request.make_response(ResponseCode.SUCCESS, None, None, dump_json(result)))

    def reject_request(self) -> bool:
        return False
