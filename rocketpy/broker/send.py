"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

Follows Java 4.9 ``SendMessageProcessor`` (doc/wire.md §3) with
the twists of real clients (§14): the C++ client sends code 10 with long names and
numeric fields, and batches as ``"batch":"1"``; the batch flag alone decides
batch-vs-single. Messages go straight to :class:`StoreService` (which groups
puts itself), so the send path has no per-message thread hop.
"""

from __future__ import annotations

import random
import zlib
from functools import partial
from typing import Any, Callable, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from rocketpy.broker.processors import Rejected
from rocketpy.broker.sendback import (
    DEFAULT_MAX_RECONSUME_TIMES,
    dead_letter_topic,
    max_reconsume_times,
)
from rocketpy.broker import sendheader
from rocketpy.broker.sendheader import SendHeader
from rocketpy.broker.subscription import SubscriptionGroupManager
from rocketpy.broker.topicconfig import TopicConfigManager
from rocketpy.broker.transaction import half_message
from rocketpy.common import speedups
from rocketpy.common.headers import HeaderError
from rocketpy.common.message import (
    MAX_PROPERTIES_LENGTH,
    MessageConst,
    MessageExt,
    MessageSysFlag,
    RecordError,
    batch_entries,
    parse_address,
    properties_length_bound,
    properties_to_string,
    string_to_properties,
)
from rocketpy.common.topic import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_MAX_LENGTH,
    TopicConfig,
    is_writeable,
    send_topic_problem,
)
from rocketpy.interfaces import IBatchRequestProcessor, IStoreService
from rocketpy.remoting import codec  # noqa: F401  (registers RemotingCommand with the C functions below)
from rocketpy.remoting.codes import ResponseCode
from rocketpy.remoting.command import RemotingCommand
from rocketpy.store.status import PutMessageResult, PutMessageStatus
from rocketpy.util.ratelimit import EveryFewSeconds

DEFAULT_REGION = "DefaultRegion"

#: PutMessageStatus → (response code, remark, whether the message was stored).
_PUT_RESPONSES: dict[PutMessageStatus, tuple[int, str | None, bool]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None, True),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, None, True),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, None, True),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, None, True),
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: (
        ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken.", False),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched.", False),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal, maybe msg body or properties length not matched.", False),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now: the disk may be full, the store shut down, or this is a slave.", False),
    PutMessageStatus.OS_PAGECACHE_BUSY: (
        ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while", False),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR", False),
    # the remark with the limit comes with the result (rocketpy.store.timer)
    PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "timer message illegal", False),
    PutMessageStatus.WHEEL_TIMER_NOT_ENABLE: (ResponseCode.SYSTEM_ERROR, "accurate timer message is not enabled", False),
}

#: The stored statuses answered without a remark, by their plain int code (for the C responses).
_STORED_CODES = {status: int(code) for status, (code, remark, stored) in _PUT_RESPONSES.items()
                 if stored and remark is None}


@implementer(IBatchRequestProcessor)
class SendMessageProcessor:
    """Stores what producers send.

    :param store: the ``StoreService`` (``put_message``/``put_messages`` → Deferred[PutMessageResult],
        ``put_many``).
    :param topics: the broker's topic table, for lookup and auto-creation.
    :param store_host: the broker's advertised ``(ip, port)``, written into every record.
    :param cluster_name: added to every message as the ``CLUSTER`` property.
    :param max_message_size: largest accepted body in bytes.
    :param region: the ``MSG_REGION`` returned with every response.
    :param trace_on: the ``TRACE_ON`` returned with every response.
    :param groups: consumer group settings (``retry_max_times`` of ``%RETRY%`` sends);
        None uses the default of 16 retries for every group.
    :param rng: picks a queue when the producer asks for queue -1 (injectable for tests).
    """

    log = Logger()

    def __init__(
        self,
        store: IStoreService,
        topics: TopicConfigManager,
        store_host: tuple[str, int],
        cluster_name: str = "DefaultCluster",
        max_message_size: int = 4 * 1024 * 1024,
        region: str = DEFAULT_REGION,
        trace_on: bool = True,
        groups: SubscriptionGroupManager | None = None,
        rng: random.Random | None = None,
        clock: IReactorTime | None = None,
    ) -> None:
        self._groups = groups
        self._refusals_logged = EveryFewSeconds(clock)
        self._store = store
        #: the store's put_many_now (StoreService): a run's results without a Deferred when it can
        self._put_many_now: Callable[[Sequence[Sequence[MessageExt]]], list[PutMessageResult] | None] | None = getattr(
            store, "put_many_now", None)
        self._topics = topics
        #: the topic table itself for the compiled checks of topics checked before (send_run); a
        #: TopicConfigManager's, else an empty dict (then _check checks each run's first of a topic)
        self._topic_table = topics.live_table() if isinstance(topics, TopicConfigManager) else {}
        self._store_host = store_host
        self._cluster = cluster_name
        self._max_size = max_message_size
        self._trace_fields = {
            MessageConst.MSG_REGION: region,
            MessageConst.TRACE_SWITCH: "true" if trace_on else "false",
        }
        self._region = region
        self._trace_on = "true" if trace_on else "false"
        self._rng = rng or random.Random()
        # Per-name and per-peer results that do not change: a send checks a dict instead of a
        # regex, and reuses the parsed peer address (cleared when they grow past _CACHE_MAX).
        self._topic_problems: dict[str, str | None] = {}
        self._peer_hosts: dict[str, tuple[str, int]] = {}
        # A properties string this short cannot exceed MAX_PROPERTIES_LENGTH once CLUSTER is
        # added (≤ 4 UTF-8 bytes per character), so its size check needs no re-serialisation.
        self._short_properties = (MAX_PROPERTIES_LENGTH - len(cluster_name.encode()) - 16) // 4
        #: :meth:`process_request` for a lone usual send in one C call (``lone_send``), None when not
        #: built: ``lone_request(channel, request)`` gives True once it wrote the answer (the store's
        #: ``put_lone_now`` stored it at once: ``channel.answer_now``, then the store's
        #: ``lone_answered``), the answer's frame when the put completed inline, else what
        #: ``process_request`` gives; None, having done nothing, for any other request (then
        #: ``process_request`` answers it). The remoting node calls it for a request that came alone,
        #: when no RPC hook runs. Not for subclasses (their process_request differs).
        self.lone_request: Callable[
            [Any, RemotingCommand], bool | bytes | RemotingCommand | Deferred[RemotingCommand] | None] | None = None
        if _lone_send is not None and type(self) is SendMessageProcessor and isinstance(topics, TopicConfigManager):
            # with put_lone_now and lone_answered (StoreService): the answer first, put_lone_now asks is_busy
            put_now, answered = getattr(store, "put_lone_now", None), getattr(store, "lone_answered", None)
            if put_now is None or answered is None:
                put_now, answered = None, None
            self.lone_request = partial(_lone_send, (
                topics.live_table(), self._topic_problems, self._peer_hosts, store.is_busy if put_now is None else None,
                store.put_message if put_now is None else put_now, self._lone_put_response,
                self._put_response, PutMessageResult, store_host, cluster_name, self._short_properties,
                max_message_size, _STORED_CODES, self._trace_fields, answered))

    def reject_request(self) -> bool:
        """True while the store is busy (puts queue up or its writer is stuck): SYSTEM_BUSY."""
        return self._store.is_busy()

    def process_request(self, channel: Any, request: RemotingCommand) -> Deferred[RemotingCommand] | RemotingCommand:
        """Check the request, build the message(s) and store them; never raises."""
        prepared: RemotingCommand | tuple[Sequence[MessageExt], int, bool] | None = None
        if _send_prepared is not None:  # _prepare in one call for the usual request (a lone batch)
            prepared = _send_prepared(request, channel, self._topic_table, self._topic_problems, self._peer_hosts,
                                      self._peer_host, self._store_host, self._cluster, self._short_properties,
                                      self._max_size)
        if prepared is None:
            prepared = self._prepare(request, channel)
        if type(prepared) is RemotingCommand:
            return prepared
        msgs, queue_id, batch = prepared  # type: ignore[misc]
        if batch and self._put_many_now is not None:
            results = self._put_many_now((msgs,))
            if results is not None:  # stored at once: no Deferred
                return self._lone_put_response(results[0], request, queue_id)
        d = self._store.put_messages(msgs) if batch else self._store.put_message(msgs[0])
        if d.called and not d.paused and type(d.result) is PutMessageResult:
            # stored inline (ASYNC_FLUSH, writer idle): the response now, no callback chain
            return self._lone_put_response(d.result, request, queue_id)
        return d.addCallback(self._lone_put_response, request, queue_id)

    def process_requests(self, channel: Any, requests: list[RemotingCommand]
                         ) -> list[RemotingCommand] | Deferred[list[RemotingCommand]]:
        """The send requests of one read: every message stored with one ``put_many`` (one
        store Deferred instead of one per request); one response per request, in order: the list
        itself when the store completed the puts at once (its ``put_many_now``)."""
        responses: list[RemotingCommand] = []
        puts: list[Sequence[MessageExt]] = []
        stored: list[tuple[int, RemotingCommand, int]] = []  # response index, request, queue id
        checked: dict[str, TopicConfig] = {}  # the run's topics whose checks passed
        if _send_run is not None:  # the loop below in C for the usual requests, _prepare for the others
            _send_run(requests, channel, checked, self._peer_hosts, self._store_host, self._cluster,
                      self._short_properties, self._max_size, self._prepare, puts, stored, responses, self._topic_table,
                      self._topic_problems, self._peer_host)
            return self._stored_run(puts, responses, stored)
        prepare, born_host = self._prepare, self._peer_host(channel)  # one peer for the whole run
        for request in requests:
            prepared = prepare(request, channel, born_host, checked)
            if type(prepared) is not RemotingCommand:
                msgs, queue_id, _batch = prepared  # type: ignore[misc]
                puts.append(msgs)
                stored.append((len(responses), request, queue_id))
            responses.append(prepared)  # type: ignore[arg-type]  # replaced once stored
        return self._stored_run(puts, responses, stored)

    def _stored_run(self, puts: list[Sequence[MessageExt]], responses: list[RemotingCommand],
                    stored: list[tuple[int, RemotingCommand, int]]
                    ) -> list[RemotingCommand] | Deferred[list[RemotingCommand]]:
        """A run's puts stored (at once when the store can: no Deferred), then its responses."""
        results = self._put_many_now(puts) if self._put_many_now is not None else None
        if results is not None:
            return self._put_responses(results, responses, stored)
        return self._store.put_many(puts).addCallback(self._put_responses, responses, stored)

    def _put_responses(self, results: list[PutMessageResult], responses: list[RemotingCommand],
                       stored: list[tuple[int, RemotingCommand, int]]) -> list[RemotingCommand]:
        if _put_responses_c is not None:  # the stored ones in C, the others through _put_response
            _put_responses_c(results, stored, responses, self._put_response, _STORED_CODES, self._trace_fields)
            return responses
        put_response = self._put_response
        for (index, request, queue_id), result in zip(stored, results):
            responses[index] = put_response(result, request, queue_id)
        return responses

    def _prepare(self, request: RemotingCommand, channel: Any, born_host: tuple[str, int] | None = None,
                 checked: dict[str, TopicConfig] | None = None,
                 ) -> RemotingCommand | tuple[Sequence[MessageExt], int, bool]:
        """The messages to store, their queue id and whether they are a batch; or the error response.

        ``born_host``: the channel's peer, when the caller has it already. ``checked``: the configs
        of topics whose checks passed earlier in the same run (nothing changes them meanwhile: the
        run is processed in one go); filled here."""
        try:
            header = sendheader._parse_fields(request.ext_fields)  # SendHeader.parse, one call less
            config = checked.get(header.topic) if checked is not None else None
            if config is None or header.queue_id >= max(config.read_queue_nums, config.write_queue_nums):
                config = self._check(header, channel)  # the first of its topic in the run, or an error
                if checked is not None:
                    checked[header.topic] = config
            queue_id = header.queue_id
            if queue_id < 0:
                queue_id = self._queue_id(header, config)
            if header.batch:
                return self._batch_messages(header, request.body, queue_id, channel), queue_id, True
            if _single_message_c is not None:  # the usual message in one C call
                fast = _single_message_c(header, request.body, queue_id, born_host or self._peer_host(channel),
                                         self._store_host, self._cluster, self._short_properties, self._max_size)
                if fast is not None:
                    return (fast,), queue_id, False
            msg = self._single_message(header, request.body, queue_id, channel, request.version)
            queue_id = msg.queue_id  # what the producer is told, not the half topic's queue
            return (half_message(msg),), queue_id, False  # a PREPARED send waits on the half topic
        except HeaderError as e:
            return self._response(request, ResponseCode.SYSTEM_ERROR, str(e))
        except Rejected as e:
            return self._response(request, e.code, e.remark)

    # -- checks -------------------------------------------------------------

    def _check(self, header: SendHeader, channel: Any) -> TopicConfig:
        """Topic validity, existence (auto-creating it) and queue id; the topic's config."""
        topic = header.topic
        try:
            problem = self._topic_problems[topic]
        except KeyError:
            problem = send_topic_problem(topic)
            if len(self._topic_problems) >= _CACHE_MAX:
                self._topic_problems.clear()
            self._topic_problems[topic] = problem
        if problem is not None:
            raise Rejected(ResponseCode.SYSTEM_ERROR, problem)
        config = self._topics.select_topic_config(topic)
        if config is None:
            config = self._topics.create_topic_in_send_message_method(
                header.topic, header.default_topic, _peer(channel), header.default_topic_queue_nums
            )
            if config is None and header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                config = self._topics.create_topic_in_send_message_back_method(header.topic, 1)
            if config is None:
                raise Rejected(
                    ResponseCode.TOPIC_NOT_EXIST, f"topic[{header.topic}] not exist, apply first please!"
                )
        if not is_writeable(config.perm):
            raise Rejected(ResponseCode.NO_PERMISSION, f"the topic[{header.topic}] sending message is forbidden")
        valid = max(config.read_queue_nums, config.write_queue_nums)
        if header.queue_id >= valid:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{header.queue_id}] is illegal, topic:{header.topic} "
                f"read/write queue nums:{valid}",
            )
        return config

    def _queue_id(self, header: SendHeader, config: TopicConfig) -> int:
        """The requested queue, or a random writable one for a negative id."""
        if header.queue_id >= 0:
            return header.queue_id
        if config.write_queue_nums <= 0:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"topic[{header.topic}] has no writable queue")
        return self._rng.randrange(0x7FFFFFFF) % config.write_queue_nums

    def _check_body(self, body: bytes) -> None:
        if len(body) > self._max_size:
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {len(body)} is over the limit {self._max_size}",
            )

    def _stored_properties(self, props: dict[str, str], raw_length: int | None = None) -> dict[str, str]:
        """Add CLUSTER, drop WAIT (the store still learns a WAIT=false), check the size.

        ``raw_length``: the length of the string ``props`` was parsed from, which bounds theirs.
        """
        wait = props.pop(MessageConst.WAIT_STORE_MSG_OK, None)
        props[MessageConst.CLUSTER] = self._cluster
        if (raw_length is None or raw_length > self._short_properties) and properties_length_bound(
            props
        ) > self._short_properties and len(properties_to_string(props).encode()) > MAX_PROPERTIES_LENGTH:
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL, f"the message properties are over the limit {MAX_PROPERTIES_LENGTH}"
            )
        if wait is not None and wait.lower() == "false":
            props[MessageConst.WAIT_STORE_MSG_OK] = "false"
        return props

    # -- building messages --------------------------------------------------

    def _peer_host(self, channel: Any) -> tuple[str, int]:
        """The connection's peer as ``(ip, port)`` (the message's born host), parsed once per peer."""
        peer = _peer(channel)
        host = self._peer_hosts.get(peer)
        if host is None:
            host = _peer_host(channel)
            if len(self._peer_hosts) >= _CACHE_MAX:
                self._peer_hosts.clear()
            self._peer_hosts[peer] = host
        return host

    def _single_message(
        self, header: SendHeader, body: bytes, queue_id: int, channel: Any, version: int
    ) -> MessageExt:
        if len(body) > self._max_size:
            self._check_body(body)
        raw = header.properties
        props = self._stored_properties(string_to_properties(raw), len(raw))
        topic = header.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            group_limit = self._group_max_reconsume_times(topic[len(RETRY_GROUP_TOPIC_PREFIX):])
            maximum = max_reconsume_times(group_limit, header.max_reconsume_times, version)
            if header.reconsume_times >= maximum:
                topic, queue_id = self._dead_letter(topic)
                props.pop(MessageConst.DELAY_TIME_LEVEL, None)
        return MessageExt(
            topic, body, header.flag, props, queue_id, header.sys_flag, header.born_timestamp,
            self._peer_host(channel), 0, self._store_host, header.reconsume_times,
        )

    def _group_max_reconsume_times(self, group: str) -> int:
        """The group's retry limit (26 SUBSCRIPTION_GROUP_NOT_EXIST for an unknown group)."""
        if self._groups is None:
            return DEFAULT_MAX_RECONSUME_TIMES
        config = self._groups.find_subscription_group_config(group)
        if config is None:
            raise Rejected(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        return config.retry_max_times

    def _dead_letter(self, retry: str) -> tuple[str, int]:
        """``%DLQ%<group>`` (created on demand, readable as in 4.9) and a queue in it."""
        config = dead_letter_topic(self._topics, retry[len(RETRY_GROUP_TOPIC_PREFIX):])
        dlq = config.topic_name
        self.log.info("message of {retry} exceeded its retries: to {dlq}", retry=retry, dlq=dlq)
        return dlq, self._rng.randrange(99999999) % max(1, config.write_queue_nums)

    def _batch_messages(self, header: SendHeader, body: bytes, queue_id: int, channel: Any) -> list[MessageExt]:
        """Split a batch body; each inner message gets the header's properties and CLUSTER."""
        if len(header.topic) > TOPIC_MAX_LENGTH:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(header.topic)}")
        if header.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, "batch request does not support retry group")
        sys_flag = header.sys_flag
        if sys_flag & MessageSysFlag.COMPRESSED:
            # The C++ client zlib-compresses a batch body of ≥ 4 KiB as a whole.
            body = self._inflate(body)
            sys_flag &= ~MessageSysFlag.COMPRESSED
        self._check_body(body)  # the whole batch is stored under one limit, as in Java
        shared = string_to_properties(header.properties)
        topic, born, born_host = header.topic, header.born_timestamp, self._peer_host(channel)
        store_host, reconsume, stored_properties = self._store_host, header.reconsume_times, self._stored_properties
        if _stored_batch is not None:  # the loop below in C, for the common case
            fast: list[MessageExt] | None = _stored_batch(
                body, topic, shared, self._cluster, self._short_properties - len(header.properties), queue_id,
                sys_flag, born, born_host, store_host, reconsume)
            if fast is not None:
                return fast
        try:
            entries = batch_entries(body)
        except RecordError as e:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}") from None
        if not entries:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, "the batch is empty")
        msgs = []
        for flag, inner_body, text in entries:
            props = string_to_properties(text)
            if shared:
                props.update(shared)
            msgs.append(MessageExt(
                topic, inner_body, flag, stored_properties(props, len(text) + len(header.properties)), queue_id,
                sys_flag, born, born_host, 0, store_host, reconsume,
            ))
        return msgs

    def _inflate(self, body: bytes) -> bytes:
        """A compressed batch body, inflated up to the maximum message size."""
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(body, self._max_size + 1)
        except zlib.error as e:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"bad compressed batch body: {e}") from None
        if len(data) > self._max_size or inflater.unconsumed_tail:
            raise Rejected(ResponseCode.MESSAGE_ILLEGAL, f"the batch is over the limit {self._max_size}")
        return data

    # -- responses ----------------------------------------------------------

    def _response(
        self, request: RemotingCommand, code: int, remark: str | None, fields: dict[str, str] | None = None
    ) -> RemotingCommand:
        ext = dict(self._trace_fields)
        if fields:
            ext.update(fields)
        return request.make_response(code, remark, ext)

    def _lone_put_response(self, result: PutMessageResult, request: RemotingCommand, queue_id: int) -> RemotingCommand:
        """:meth:`_put_response`, the stored case in C when built."""
        if _put_response_c is not None:
            response = _put_response_c(result, request, queue_id, _STORED_CODES, self._trace_fields)
            if response is not None:
                return response
        return self._put_response(result, request, queue_id)

    def _put_response(self, result: PutMessageResult, request: RemotingCommand, queue_id: int) -> RemotingCommand:
        """Map a PutMessageStatus to the response (doc/wire.md §3)."""
        code, remark, stored = _PUT_RESPONSES.get(
            result.status, (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR DEFAULT", False)
        )
        if not stored:
            remark = result.remark or remark
            held = self._refusals_logged.admit(result.status)
            if held is not None:
                self.log.warn("put to topic {topic} refused: {status} ({remark}); {held} more refused since the "
                              "last such line", topic=_topic_of(request), status=result.status.name, remark=remark,
                              held=held)
            return self._response(request, code, remark)
        append = result.append
        if append is None:
            msg_id, queue_offset = "", "0"
        else:
            ids = append.msg_ids
            msg_id = ids[0] if len(ids) == 1 else ",".join(ids)
            queue_offset = str(append.queue_offset)
        fields = {
            MessageConst.MSG_REGION: self._region,
            MessageConst.TRACE_SWITCH: self._trace_on,
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": queue_offset,
        }
        return request.make_response(code, remark, fields)


_CACHE_MAX = 4096

#: ``_batch_messages``' loop in C (rocketpy/_speedups.c ``stored_batch``), None when not built: it
#: returns None for the cases the loop answers itself (malformed, empty, long properties).
_stored_batch: Callable[..., list[MessageExt] | None] | None = None
#: ``_put_response`` (``put_response``) and ``_put_responses`` (``put_responses``) for stored puts in
#: C (rocketpy/_speedups_remoting.h), None when not built; the others go to ``_put_response``.
_put_response_c: Callable[..., RemotingCommand | None] | None = None
_put_responses_c: Callable[..., None] | None = None
#: ``_single_message`` + ``half_message`` in C for the usual message (``single_message``), None when
#: not built: it answers None for a retry topic, a transaction, long or non-ASCII properties.
_single_message_c: Callable[..., MessageExt | None] | None = None
#: ``process_requests``' loop in C (``send_run``), None when not built: a request whose topic was
#: checked earlier in the run and that ``single_message`` takes is built there, the others by ``_prepare``.
_send_run: Callable[..., None] | None = None
#: ``_prepare`` in C for a usual request whose topic was checked earlier (``send_prepared``), None when not
#: built: it answers None, having done nothing, for any other request.
_send_prepared: Callable[..., tuple[Sequence[MessageExt], int, bool] | None] | None = None
#: ``lone_request``'s C function (rocketpy/_speedups_request.h ``lone_send``), None when not built.
_lone_send: Callable[..., bytes | RemotingCommand | Deferred[RemotingCommand] | None] | None = None
if speedups.compiled is not None:
    _lone_send = speedups.compiled.lone_send
    _send_run = speedups.compiled.send_run
    _send_prepared = speedups.compiled.send_prepared
    _single_message_c = speedups.compiled.single_message
    _stored_batch = speedups.compiled.stored_batch
    _put_response_c = speedups.compiled.put_response
    _put_responses_c = speedups.compiled.put_responses


def _topic_of(request: RemotingCommand) -> str:
    try:
        return SendHeader.parse(request).topic
    except Exception:  # only for a log line
        return "?"


def _peer(channel: Any) -> str:
    return str(getattr(channel, "remote_address", "") or "")


def _peer_host(channel: Any) -> tuple[str, int]:
    """The connection's peer as ``(ip, port)`` (the message's born host)."""
    try:
        return parse_address(_peer(channel))
    except ValueError:
        return ("0.0.0.0", 0)
