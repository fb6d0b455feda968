"""QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33), Java 4.9 ``QueryMessageProcessor``.

Both answer with stored records (doc/wire.md §10) read through the
store: by commit-log offset (the offset message id's last 8 bytes) or through the
index by key (a ``KEYS`` word or, with ``_UNIQUE_KEY_QUERY``, a ``UNIQ_KEY``).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from rocketpy.common.headers import HeaderError, get_int, get_str
from rocketpy.interfaces import IChannel, IRequestProcessor, IStoreService
from rocketpy.remoting.codes import RequestCode, ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import QueryMessageResult

#: ``MessageStoreConfig.defaultQueryMaxNum``: the result size of a UNIQ_KEY query.
DEFAULT_QUERY_MAX_NUM = 32
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


@implementer(IRequestProcessor)
class QueryMessageProcessor:
    """Looks messages up by offset or by key.

    :param store: the ``StoreService`` (``select_one_message_by_offset``, ``query_message``).
    """

    codes = (RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID)

    def __init__(self, store: IStoreService) -> None:
        self._store = store

    def reject_request(self) -> bool:
        return False

    def process_request(self, channel: IChannel, request: RemotingCommand) -> Deferred[RemotingCommand]:
        try:
            if request.code == RequestCode.VIEW_MESSAGE_BY_ID:
                return self._view(request)
            return self._query(request)
        except HeaderError as e:
            return succeed(request.make_response(ResponseCode.SYSTEM_ERROR, str(e)))

    def _view(self, request: RemotingCommand) -> Deferred[RemotingCommand]:
        offset = get_int(request.ext_fields, "offset")

        def respond(record: bytes | None) -> RemotingCommand:
            if record is None:
                return request.make_response(
                    ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
                )
            return request.make_response(ResponseCode.SUCCESS, None, {}, record)

        d: Deferred[bytes | None] = self._store.select_one_message_by_offset(offset)
        return d.addCallback(respond)

    def _query(self, request: RemotingCommand) -> Deferred[RemotingCommand]:
        f = request.ext_fields
        topic, key = get_str(f, "topic"), get_str(f, "key")
        max_num = get_int(f, "maxNum", bits=32)
        begin, end = get_int(f, "beginTimestamp"), get_int(f, "endTimestamp")
        if f.get(UNIQUE_KEY_QUERY) == "true":
            max_num = DEFAULT_QUERY_MAX_NUM

        def respond(result: QueryMessageResult) -> RemotingCommand:
            ext = {
                "indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
                "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset),
            }
            if not result.records:
                return request.make_response(
                    ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext
                )
            return request.make_response(ResponseCode.SUCCESS, None, ext, b"".join(result.records))

        d: Deferred[QueryMessageResult] = self._store.query_message(topic, key, max_num, begin, end)
        return d.addCallback(respond)
